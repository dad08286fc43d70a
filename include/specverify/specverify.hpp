// specverify: speculative-decoding verification rules on one generic verify-and-resample core.
// Umbrella header for the host (CMake target specverify::cpu or specverify::specverify): the core
// layer (layout types, rules, randomness, drafting controllers) and the CPU backend (verify,
// sample; xsimd). The learned heads (Eigen) are in <specverify/heads.hpp>.
#pragma once

#include "specverify/core.hpp"
#include "specverify/cpu/sharded_verify.hpp"
#include "specverify/cpu/verify.hpp"
#include "specverify/sample.hpp"
#include "specverify/compiled.hpp"
