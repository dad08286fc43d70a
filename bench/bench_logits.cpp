// The logits row source's row work at B = 64, K = 5, V = 128256, float logits, every chain
// rejected at its first draft: per sequence, prepare target row 0 and draft row 0 (the pre-pass),
// then one residual draw over the pair. Measured next to a read pass over the same logits bytes
// and next to what engines do today: their own softmax with the same parameters into float
// probability rows (top-k / top-p by a full-row sort, as PyTorch samplers do), then the
// probability-row residual draw cpu::draw(Weights::residual(...)). One thread.
//
//   build/release/bench/bench_logits --benchmark_counters_tabular=true
// Ratios: LogitsRowWork / LogitsReadPass (goals: 2.0x at T = 0.8, 3.0x with top_k 50, top_p 0.9)
// and EngineToday / LogitsRowWork.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "read_pass.hpp"
#include "specverify/cpu/logit_kernels.hpp"
#include "specverify/cpu/row_kernels.hpp"

namespace specverify::bench {
namespace {

constexpr std::int32_t kB = 64, kV = 128256;

/// Target row 0 and draft row 0 of every sequence (the rows a first-draft rejection reads), each
/// in its own memory: Student-t (3 dof) logits clamped to +-12, scaled like an LLM's (x 2); the
/// draft's are the target's plus N(0, 1) noise.
struct LogitRows {
  std::vector<float> target, draft;
  LogitRows() : target(std::size_t(kB) * kV), draft(std::size_t(kB) * kV) {
    std::mt19937_64 rng(17);
    std::student_t_distribution<float> heavy(3.0f);
    std::normal_distribution<float> noise(0.0f, 1.0f);
    for (std::size_t i = 0; i < target.size(); ++i) {
      target[i] = 2.0f * std::clamp(heavy(rng), -12.0f, 12.0f);
      draft[i] = target[i] + noise(rng);
    }
  }
  const float* p(std::int32_t b) const { return target.data() + std::size_t(b) * kV; }
  const float* q(std::int32_t b) const { return draft.data() + std::size_t(b) * kV; }
};

const LogitRows& rows() {
  static const LogitRows r;
  return r;
}

const SamplingParams kTemperature{0.8f, 0, 1.0f, 0.0f};
const SamplingParams kTopKTopP{0.8f, 50, 0.9f, 0.0f};

void set_bytes(benchmark::State& state) {
  const std::int64_t bytes = std::int64_t{kB} * kV * 2 * sizeof(float);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["MB/step"] = double(bytes) / 1e6;
}

float uniform_for(std::int32_t b) { return static_cast<float>((b * 2654435761u) >> 8) * 0x1p-24f; }

void LogitsReadPass(benchmark::State& state) {
  const LogitRows& r = rows();
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) sum += read_pass(r.p(b), kV) + read_pass(r.q(b), kV);
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state);
}

/// The library: pre-pass of p and q through one row of scratch, then the residual draw.
void LogitsRowWork(benchmark::State& state, SamplingParams params) {
  const LogitRows& r = rows();
  std::vector<float> scratch(kV);
  const cpu::LogitRows<> ops{kV};
  for (auto _ : state) {
    std::int64_t sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      core::LogitRow<float> target, draft;
      target.logits = r.p(b);
      draft.logits = r.q(b);
      target.n = draft.n = kV;
      target.params = draft.params = params;
      const core::LogitView<float> p = cpu::prepare(target, scratch.data());
      const core::LogitView<float> q = cpu::prepare(draft, scratch.data());
      sum += ops.draw_residual(p, &q, -1, uniform_for(b)).value;
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state);
}

/// An engine's softmax with sampling parameters into a probability row: temperature, then top-k
/// and top-p on a full sort of the row (as PyTorch samplers do), then normalise.
void engine_softmax(const float* logits, const SamplingParams& s, float* out, std::vector<std::int32_t>& order) {
  const float inv_t = 1.0f / s.temperature;
  const float top = *std::max_element(logits, logits + kV);
  for (std::int32_t v = 0; v < kV; ++v) out[v] = std::exp((logits[v] - top) * inv_t);
  if (s.top_k > 0 || s.top_p < 1.0f) {
    order.resize(kV);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
    std::int32_t keep = kV;
    if (s.top_k > 0 && s.top_k < kV) {
      const float kth = logits[order[s.top_k - 1]];
      while (keep > 0 && logits[order[keep - 1]] < kth) --keep;
    }
    double total = 0;
    for (std::int32_t r = 0; r < keep; ++r) total += out[order[r]];
    if (s.top_p < 1.0f) {
      double mass = 0;
      std::int32_t r = 0;
      while (r < keep && mass < s.top_p * total) mass += out[order[r++]];
      keep = r;
    }
    for (std::int32_t r = keep; r < kV; ++r) out[order[r]] = 0.0f;
  }
  double sum = 0;
  for (std::int32_t v = 0; v < kV; ++v) sum += out[v];
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int32_t v = 0; v < kV; ++v) out[v] *= inv;
}

/// What engines do today: probability rows for every row read, written to memory, then the
/// probability-row residual draw.
void EngineToday(benchmark::State& state, SamplingParams params) {
  const LogitRows& r = rows();
  std::vector<float> p_rows(std::size_t(kB) * kV), q_rows(std::size_t(kB) * kV);
  std::vector<std::int32_t> order;
  for (auto _ : state) {
    std::int64_t sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      float* p = p_rows.data() + std::size_t(b) * kV;
      float* q = q_rows.data() + std::size_t(b) * kV;
      engine_softmax(r.p(b), params, p, order);
      engine_softmax(r.q(b), params, q, order);
    }
    for (std::int32_t b = 0; b < kB; ++b) {
      sum += cpu::draw(cpu::Weights::residual(p_rows.data() + std::size_t(b) * kV,
                                              q_rows.data() + std::size_t(b) * kV, -1, kV),
                       uniform_for(b)).value;
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state);
}

BENCHMARK(LogitsReadPass)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(LogitsRowWork, temperature, kTemperature)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(LogitsRowWork, top_k_top_p, kTopKTopP)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(EngineToday, temperature, kTemperature)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(EngineToday, top_k_top_p, kTopKTopP)->Unit(benchmark::kMicrosecond)->Iterations(3);

}  // namespace
}  // namespace specverify::bench
