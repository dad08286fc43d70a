# Dependencies of the host target. Included by our CMakeLists.txt and by the installed package
# config, so a build tree and an installed package find the same things the same way.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(xsimd 8)
# Debian's xsimd 8.1 export links a target named `xtl` that it never finds. Its headers need xtl
# only for xtl complex numbers, which specverify does not use: stand in an empty target.
if(NOT TARGET xtl)
  find_package(xtl QUIET CONFIG)
  if(NOT TARGET xtl)
    add_library(xtl INTERFACE IMPORTED)
  endif()
endif()
find_dependency(Eigen3 3.3)
