// specverify's CUDA backend: the core layer (layout types, rules, randomness) plus
// specverify::cuda::verify with the same rules on device memory. Compile with nvcc (or clang CUDA).
// The CPU backend is not included (no xsimd in device code): <specverify/specverify.hpp> adds it.
#pragma once

#include "specverify/core.hpp"
#include "specverify/cuda/block_logit_rows.cuh"
#include "specverify/cuda/block_rows.cuh"
#include "specverify/cuda/verify.cuh"
#include "specverify/cuda/verify_logits.cuh"
#include "specverify/cuda/workspace.cuh"
