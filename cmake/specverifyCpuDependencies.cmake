# Dependencies of specverify::cpu (the CPU backend). Included by our CMakeLists.txt and by the
# installed package config, so a build tree and an installed package find them the same way.
include(CMakeFindDependencyMacro)
find_dependency(Threads)
find_dependency(xsimd 8)
# Debian's xsimd 8.1 export links a target named `xtl` that it never finds. Its headers need xtl
# only for xtl complex numbers, which specverify does not use: stand in an empty target.
if(xsimd_FOUND AND NOT TARGET xtl)
  find_package(xtl QUIET CONFIG)
  if(NOT TARGET xtl)
    add_library(xtl INTERFACE IMPORTED)
  endif()
endif()
