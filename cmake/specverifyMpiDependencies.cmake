# Dependencies of specverify::mpi (the sharded verify over MPI): an MPI with its C++ compile line.
# Included by our CMakeLists.txt (quietly: the layer is built where MPI is found) and by the
# installed package config.
include(CMakeFindDependencyMacro)
# MPI's C interface alone: the deprecated C++ bindings (OpenMPI's mpicxx.h) would warn in users'
# -Werror builds.
set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "")
if(CMAKE_FIND_PACKAGE_NAME)
  find_dependency(MPI COMPONENTS CXX)
else()
  find_package(MPI QUIET COMPONENTS CXX)
endif()
