// consumer_cpu.cpp's chain through specverify::compiled: the target must bring SPECVERIFY_COMPILED,
// which makes the built-in rules' verify extern here (compiled.hpp), and link their definitions.
#ifndef SPECVERIFY_COMPILED
#error "specverify::compiled did not define SPECVERIFY_COMPILED"
#endif
#include "consumer_cpu.cpp"
