# cmake -P script of the c_api_isa_copies test: each instruction set's copy of the C API
# (src/CMakeLists.txt) holds no instruction of a wider set: the SSE2 copy no ymm or zmm register,
# the AVX2 copy no zmm register. The build's own copy, compiled with -march=native on an AVX-512
# machine, has thousands of zmm operands: put in the AVX2 copy's place, it fails.
# -D: OBJDUMP, GREP, DIR (where the copies lie), ISAS (comma-separated, as run_consumer.cmake),
# WORK_DIR (for the listings).
cmake_minimum_required(VERSION 3.21)
file(MAKE_DIRECTORY "${WORK_DIR}")
string(REPLACE "," ";" isas "${ISAS}")
foreach(isa IN LISTS isas)
  set(object "${DIR}/specverify_isa_${isa}.o")
  if(isa STREQUAL "sse2")
    set(wider "ymm|zmm")
  elseif(isa STREQUAL "avx2")
    set(wider "zmm")
  else()
    continue()  # AVX-512 is the widest
  endif()
  set(listing "${WORK_DIR}/${isa}.s")
  execute_process(COMMAND "${OBJDUMP}" -d --no-show-raw-insn "${object}" OUTPUT_FILE "${listing}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "objdump -d ${object} failed (${rc})")
  endif()
  execute_process(COMMAND "${GREP}" -cE "^ +[0-9a-f]+:" "${listing}" OUTPUT_VARIABLE total OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND "${GREP}" -m1 -E "%(${wider})[0-9]+" "${listing}" OUTPUT_VARIABLE first OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT total GREATER 1000)
    message(FATAL_ERROR "${object}: ${total} instructions; is it the copy?")
  endif()
  if(NOT first STREQUAL "")
    message(FATAL_ERROR "${object} (the ${isa} copy) holds an instruction of a wider set:\n${first}")
  endif()
  message(STATUS "${isa} copy: ${total} instructions, none wider than ${isa}")
endforeach()
