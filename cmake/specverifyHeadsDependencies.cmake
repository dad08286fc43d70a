# Dependencies of specverify::heads (the learned heads), as specverifyCpuDependencies.cmake.
include(CMakeFindDependencyMacro)
find_dependency(Eigen3 3.3)
