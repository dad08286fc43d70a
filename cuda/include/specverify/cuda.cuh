// specverify's CUDA backend: the host umbrella (layout types, rules, randomness, CPU verify) plus
// specverify::cuda::verify with the same rules on device memory. Compile with nvcc (or clang CUDA).
#pragma once

#include "specverify/cuda/block_logit_rows.cuh"
#include "specverify/cuda/block_rows.cuh"
#include "specverify/cuda/verify.cuh"
#include "specverify/cuda/verify_logits.cuh"
#include "specverify/cuda/workspace.cuh"
#include "specverify/specverify.hpp"
