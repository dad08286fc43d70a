# cmake -P script run after one instruction set's copy of the C API is made private (src/CMakeLists.txt):
# the copy must define all of our code and xsimd's that it calls. A symbol of either left undefined
# would bind, in the library, to the build's copy, compiled for another instruction set.
# -D: NM, OBJECT (the copy's relocatable object).
cmake_minimum_required(VERSION 3.21)
execute_process(COMMAND "${NM}" -u -C "${OBJECT}" OUTPUT_VARIABLE listing ERROR_VARIABLE nm_error RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -u ${OBJECT} failed (${rc}): ${nm_error}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(outside "")
foreach(line IN LISTS lines)
  if(line MATCHES "specverify::|xsimd::")
    string(STRIP "${line}" line)
    string(APPEND outside "\n  ${line}")
  endif()
endforeach()
if(NOT outside STREQUAL "")
  message(FATAL_ERROR "${OBJECT} calls code of ours it does not hold (an instantiation its copy does not compile?):${outside}")
endif()
