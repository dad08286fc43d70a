# Looks for a Python 3 interpreter that has numpy and pybind11, for the Python module (python/).
# The first `python3` on PATH may be a pyenv build without numpy, so unless Python_EXECUTABLE is
# given, Debian's /usr/bin/python3 is tried first, then python3 on PATH.
# Sets SPECVERIFY_PYTHON_FOUND, SPECVERIFY_PYTHON_WHY (when not found) and, when found, caches
# Python_EXECUTABLE and pybind11_DIR for find_package in python/CMakeLists.txt.
set(SPECVERIFY_PYTHON_FOUND FALSE)
set(SPECVERIFY_PYTHON_WHY "")
if(Python_EXECUTABLE)
  set(_specverify_python_candidates "${Python_EXECUTABLE}")
else()
  find_program(SPECVERIFY_PATH_PYTHON3 NAMES python3)
  set(_specverify_python_candidates /usr/bin/python3)
  if(SPECVERIFY_PATH_PYTHON3)
    list(APPEND _specverify_python_candidates "${SPECVERIFY_PATH_PYTHON3}")
  endif()
endif()
foreach(_candidate IN LISTS _specverify_python_candidates)
  if(NOT EXISTS "${_candidate}")
    string(APPEND SPECVERIFY_PYTHON_WHY " ${_candidate}: not found;")
    continue()
  endif()
  execute_process(
    COMMAND "${_candidate}" -c "import sys, numpy, pybind11; assert sys.version_info >= (3, 8); print(pybind11.get_cmake_dir(), end='')"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _pybind11_dir ERROR_VARIABLE _error)
  if(_rc EQUAL 0)
    set(SPECVERIFY_PYTHON_FOUND TRUE)
    set(Python_EXECUTABLE "${_candidate}" CACHE FILEPATH "Python interpreter for the specverify module")
    set(pybind11_DIR "${_pybind11_dir}" CACHE PATH "pybind11's CMake package directory")
    break()
  endif()
  string(REGEX MATCH "[A-Za-z]*Error: [^\n]*" _error "${_error}")
  string(APPEND SPECVERIFY_PYTHON_WHY " ${_candidate}: ${_error};")
endforeach()
