// Support for the CUDA suites: device arrays, conversion to __half and bf16 (and what the CPU sees
// of them), the rules that read every statistic or per-draft inputs, and the CPU's message for a
// bad input, which the device must give word for word.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "specverify/cuda.cuh"
#include "specverify/specverify.hpp"  // the CPU backend each result is compared with

namespace specverify::testing {

inline bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_DEVICE() \
  if (!::specverify::testing::has_device()) GTEST_SKIP() << "no CUDA device"

inline void cuda_ok(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error(cudaGetErrorString(status));
}

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host) { assign(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data_); }

  void assign(const std::vector<T>& host) {
    if (host.size() != size_) {
      cudaFree(data_);
      data_ = nullptr;
      size_ = host.size();
      if (size_) cuda_ok(cudaMalloc(&data_, size_ * sizeof(T)));
    }
    if (size_) cuda_ok(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> read() const {
    std::vector<T> host(size_);
    if (size_) cuda_ok(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

/// A host array copied to the device when it is set; nullptr stays nullptr.
template <class T>
T* upload(DeviceArray<T>& device, const T* host, std::size_t n) {
  if (!host) return nullptr;
  device.assign(std::vector<T>(host, host + n));
  return device.get();
}

template <class Prob>
std::vector<Prob> convert(const std::vector<float>& v) {
  std::vector<Prob> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<Prob, __half>) {
      out[i] = __float2half_rn(v[i]);
    } else if constexpr (std::is_same_v<Prob, __nv_bfloat16>) {
      out[i] = __float2bfloat16_rn(v[i]);
    } else {
      out[i] = v[i];
    }
  }
  return out;
}

/// Rows rounded to Prob and back: what the CPU sees to reproduce a __half or bf16 run.
template <class Prob>
std::vector<float> rounded(const std::vector<float>& v) {
  const std::vector<Prob> low = convert<Prob>(v);
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<Prob, float>) {
      out[i] = low[i];
    } else if constexpr (std::is_same_v<Prob, __half>) {
      out[i] = __half2float(low[i]);
    } else {
      out[i] = __bfloat162float(low[i]);
    }
  }
  return out;
}

/// The invalid_input message `run` throws, or "" when it throws none.
template <class Run>
std::string message_of(const Run& run) {
  try {
    run();
  } catch (const invalid_input& e) {
    return e.what();
  }
  return "";
}

/// Logprobs of two backends: the same where the CPU wrote one, within float rounding of the log.
inline void expect_same_logprobs(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  ASSERT_EQ(gpu.size(), cpu.size());
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    if (std::isnan(cpu[i])) {
      EXPECT_TRUE(std::isnan(gpu[i])) << "slot " << i << " written on the GPU only";
    } else {
      EXPECT_NEAR(gpu[i], cpu[i], 1e-6 * std::max(1.0f, std::fabs(cpu[i]))) << "slot " << i;
    }
  }
}

/// Reads every row statistic, so a CPU/GPU difference in any of them changes tokens.
struct Probe {
  static constexpr Draw on_reject = Draw::target;
  Divergence kind = Divergence::tv;
  float threshold = 0.3f;
  SPECVERIFY_HD RowStats stats() const {
    RowStats s;
    s.max = s.argmax = s.entropy = s.divergence = true;
    s.kind = kind;
    return s;
  }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    const bool close = at.divergence <= threshold;
    const bool confident = at.p_x >= 0.5f * at.p_max && at.entropy < 2.5f;
    const bool accepted = at.p_x > 0 && (close || confident || at.token == at.p_argmax);
    return {accepted, accepted && !Decision::standard_test(at), true};
  }
};

/// A user's rule with per-draft inputs checked on the device (a SPRINTER-like verifier path).
struct Scored {
  static constexpr Draw on_reject = Draw::residual;
  const float* scores{};
  float eta = 0.5f;
  SPECVERIFY_HD Problem check_draft(std::int32_t g) const {
    return scores[g] >= 0.0f && scores[g] <= 1.0f ? Problem{} : Problem{"verifier_scores", scores[g]};
  }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    if (at.p_x > 0 && scores[at.draft] >= eta) return {true, !Decision::standard_test(at), false};
    return Decision::exact(Decision::standard_test(at));
  }
};

}  // namespace specverify::testing
