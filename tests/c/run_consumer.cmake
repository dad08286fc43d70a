# cmake -P script of the c_api_consumer test: builds consumer.c as a C user of the installed
# package would (the compiler in C99 with every warning an error, the flags from pkg-config), runs
# it on the installed shared library, runs consumer_hash (the same inputs through the C++ API), and
# fails unless both exit 0 and print the same `hash <16 hex digits>` line.
# With SPECVERIFY_ISA forced to each instruction set the library holds, the hash is the same; a
# name it does not hold is refused by name.
# -D: C_COMPILER, PKG_CONFIG, PREFIX (the install prefix), LIBDIR (CMAKE_INSTALL_LIBDIR, relative
# to PREFIX), SOURCE (consumer.c), WORK_DIR, CONSUMER_HASH, ISAS (the instruction sets the library
# holds besides the build's own, comma-separated; may be empty).
cmake_minimum_required(VERSION 3.21)
foreach(var C_COMPILER PKG_CONFIG PREFIX LIBDIR SOURCE WORK_DIR CONSUMER_HASH)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()
if(IS_ABSOLUTE "${LIBDIR}")
  set(libdir "${LIBDIR}")
else()
  set(libdir "${PREFIX}/${LIBDIR}")
endif()
if(NOT EXISTS "${libdir}/pkgconfig/specverify.pc")
  message(FATAL_ERROR "run_consumer.cmake: ${libdir}/pkgconfig/specverify.pc is not installed")
endif()

# The package was installed away from the configured prefix (cmake --install --prefix): the .pc
# finds its prefix from where it lies.
set(ENV{PKG_CONFIG_PATH} "${libdir}/pkgconfig")
execute_process(COMMAND "${PKG_CONFIG}" --cflags --libs specverify
                OUTPUT_VARIABLE flags ERROR_VARIABLE pkg_error RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs specverify failed (${rc}): ${pkg_error}")
endif()
message(STATUS "pkg-config specverify: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")

file(MAKE_DIRECTORY "${WORK_DIR}")
set(consumer "${WORK_DIR}/consumer")
execute_process(COMMAND "${C_COMPILER}" -std=c99 -Wall -Wextra -Werror -pedantic "${SOURCE}" -o "${consumer}" ${flags}
                OUTPUT_VARIABLE compile_output ERROR_VARIABLE compile_output RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compiling consumer.c failed (${rc}):\n${compile_output}")
endif()

# The installed library, found the way a user's program finds it without an rpath.
set(ENV{LD_LIBRARY_PATH} "${libdir}")
execute_process(COMMAND "${CONSUMER_HASH}" OUTPUT_VARIABLE cpp_output ERROR_VARIABLE cpp_error RESULT_VARIABLE cpp_rc)
if(NOT cpp_rc EQUAL 0)
  message(FATAL_ERROR "consumer_hash (C++ API) exited with ${cpp_rc}:\n${cpp_output}${cpp_error}")
endif()
string(REGEX MATCH "hash [0-9a-f]+" cpp_hash "${cpp_output}")

# consumer, with SPECVERIFY_ISA=${forced} ("" for the library's own choice): exits 3 and prints
# the library's reason where it cannot run that instruction set; else prints `isa <forced>` and the
# hash of the C++ API.
function(run_consumer forced)
  set(ENV{SPECVERIFY_ISA} "${forced}")
  execute_process(COMMAND "${consumer}" OUTPUT_VARIABLE c_output ERROR_VARIABLE c_error RESULT_VARIABLE c_rc)
  if(c_rc EQUAL 3)
    set(consumer_refused "${c_output}" PARENT_SCOPE)
    return()
  endif()
  if(NOT c_rc EQUAL 0)
    message(FATAL_ERROR "consumer (C API, SPECVERIFY_ISA='${forced}') exited with ${c_rc}:\n${c_output}${c_error}")
  endif()
  string(REGEX MATCH "isa [a-z0-9]+" isa "${c_output}")
  if(NOT forced STREQUAL "" AND NOT isa STREQUAL "isa ${forced}")
    message(FATAL_ERROR "SPECVERIFY_ISA=${forced}, but the library ran '${isa}':\n${c_output}")
  endif()
  string(REGEX MATCH "hash [0-9a-f]+" c_hash "${c_output}")
  if(NOT c_hash MATCHES "^hash [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]$")
    message(FATAL_ERROR "consumer printed no `hash <16 hex digits>` line:\n${c_output}")
  endif()
  if(NOT c_hash STREQUAL cpp_hash)
    message(FATAL_ERROR "the C API (${isa}) and the C++ API disagree: consumer printed '${c_hash}', consumer_hash '${cpp_hash}'")
  endif()
  message(STATUS "C API (${isa}) and C++ API: ${c_hash}")
  set(consumer_refused "" PARENT_SCOPE)
endfunction()

run_consumer("")
if(NOT consumer_refused STREQUAL "")
  message(FATAL_ERROR "with SPECVERIFY_ISA unset the library ran nothing:\n${consumer_refused}")
endif()
# Every instruction set the library holds besides the build's own (ISAS), forced: the same bits.
string(REPLACE "," ";" isas "${ISAS}")
foreach(isa IN LISTS isas)
  run_consumer(${isa})
  if(consumer_refused MATCHES "this CPU does not run")
    message(STATUS "SPECVERIFY_ISA=${isa}: this CPU does not run it, skipped")
  elseif(NOT consumer_refused STREQUAL "")
    message(FATAL_ERROR "SPECVERIFY_ISA=${isa}, which the library should hold:\n${consumer_refused}")
  endif()
endforeach()
# One it cannot hold: refused, naming it.
run_consumer(neon)
if(NOT consumer_refused MATCHES "SPECVERIFY_ISA=neon is not an instruction set this library holds")
  message(FATAL_ERROR "SPECVERIFY_ISA=neon was not refused by name:\n${consumer_refused}")
endif()
