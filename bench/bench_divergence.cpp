// Row kernels at V = 128256 over 64 row pairs (64 MB, so rows come from memory, not cache): a
// plain SIMD read pass over the same bytes as the floor, row_max, argmax, the draw (residual with
// a draft row, one-hot residual, target), entropy, each divergence by the fused kernels and by a
// plain scalar loop with std::log. Counters: bytes/s read.
//
// Built twice: bench_divergence at the build type's flags and bench_divergence_o2 at -O2 (as
// engines built RelWithDebInfo compile the kernels); the kernels must run as fast in both.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "reference_divergence.hpp"
#include "specverify/cpu/divergence_kernels.hpp"

namespace {

using specverify::Divergence;
namespace cpu = specverify::cpu;

constexpr std::int32_t kVocab = 128256;
constexpr std::int32_t kRows = 64;

struct Rows {
  std::vector<float> p, q;  // [kRows][kVocab] each
  Rows() : p(std::size_t{kRows} * kVocab), q(p.size()) {
    std::mt19937_64 rng(1);
    std::normal_distribution<double> logit(0.0, 2.5);
    std::normal_distribution<double> g(0.0, 0.5);
    std::vector<double> lp(kVocab), lq(kVocab);
    for (std::int32_t r = 0; r < kRows; ++r) {
      double sp = 0, sq = 0;
      for (std::int32_t i = 0; i < kVocab; ++i) {
        lp[i] = std::exp(logit(rng));  // no subnormals: see the report on rows with subnormal tails
        lq[i] = lp[i] * std::exp(g(rng));
        sp += lp[i], sq += lq[i];
      }
      for (std::int32_t i = 0; i < kVocab; ++i) {
        p[static_cast<std::size_t>(r) * kVocab + i] = static_cast<float>(lp[i] / sp);
        q[static_cast<std::size_t>(r) * kVocab + i] = static_cast<float>(lq[i] / sq);
      }
    }
  }
  const float* p_row(std::int32_t r) const { return p.data() + static_cast<std::size_t>(r) * kVocab; }
  const float* q_row(std::int32_t r) const { return q.data() + static_cast<std::size_t>(r) * kVocab; }
};

const Rows& rows() {
  static const Rows r;
  return r;
}

template <class F>
void run(benchmark::State& state, int rows_read, F f) {
  const Rows& data = rows();
  std::int32_t r = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(data, r));
    r = (r + 1) % kRows;
  }
  state.SetBytesProcessed(state.iterations() * rows_read * std::int64_t{kVocab} * 4);
}

float read_pass(const float* p, const float* q, std::int32_t n) {
  using B = xsimd::batch<float>;
  B acc(0.0f);
  std::int32_t i = 0;
  for (; i + std::int32_t{B::size} <= n; i += B::size) acc += B::load_unaligned(p + i) + B::load_unaligned(q + i);
  float s = xsimd::hadd(acc);
  for (; i < n; ++i) s += p[i] + q[i];
  return s;
}

void BM_ReadPass(benchmark::State& s) {
  run(s, 2, [](const Rows& d, std::int32_t r) { return read_pass(d.p_row(r), d.q_row(r), kVocab); });
}
void BM_RowMax(benchmark::State& s) {
  run(s, 1, [](const Rows& d, std::int32_t r) { return cpu::row_max(d.p_row(r), kVocab).value; });
}
void BM_RowArgmax(benchmark::State& s) {
  run(s, 1, [](const Rows& d, std::int32_t r) { return cpu::row_argmax(d.p_row(r), kVocab).value; });
}
void BM_DrawResidual(benchmark::State& s) {
  run(s, 2, [](const Rows& d, std::int32_t r) {
    return cpu::draw(cpu::Weights::residual(d.p_row(r), d.q_row(r), -1, kVocab), 0.999f).value;
  });
}
void BM_DrawOneHotResidual(benchmark::State& s) {
  run(s, 1, [](const Rows& d, std::int32_t r) {
    return cpu::draw(cpu::Weights::residual(d.p_row(r), nullptr, r, kVocab), 0.999f).value;
  });
}
void BM_DrawTarget(benchmark::State& s) {
  run(s, 1, [](const Rows& d, std::int32_t r) {
    return cpu::draw(cpu::Weights::target(d.p_row(r), kVocab), 0.999f).value;
  });
}
void BM_Entropy(benchmark::State& s) {
  run(s, 1, [](const Rows& d, std::int32_t r) { return cpu::row_entropy(d.p_row(r), kVocab).value; });
}
void BM_Divergence(benchmark::State& s, Divergence d) {
  run(s, 2, [d](const Rows& rw, std::int32_t r) {
    return cpu::row_divergence(d, rw.p_row(r), rw.q_row(r), -1, kVocab).value;
  });
}
void BM_DivergenceScalar(benchmark::State& s, Divergence d) {
  run(s, 2, [d](const Rows& rw, std::int32_t r) {
    return specverify::reference::divergence_scalar(d, rw.p_row(r), rw.q_row(r), kVocab);
  });
}

BENCHMARK(BM_ReadPass);
BENCHMARK(BM_RowMax);
BENCHMARK(BM_RowArgmax);
BENCHMARK(BM_DrawResidual);
BENCHMARK(BM_DrawOneHotResidual);
BENCHMARK(BM_DrawTarget);
BENCHMARK(BM_Entropy);
BENCHMARK_CAPTURE(BM_Divergence, tv, Divergence::tv);
BENCHMARK_CAPTURE(BM_Divergence, kl_target_draft, Divergence::kl_target_draft);
BENCHMARK_CAPTURE(BM_Divergence, kl_draft_target, Divergence::kl_draft_target);
BENCHMARK_CAPTURE(BM_Divergence, js, Divergence::js);
BENCHMARK_CAPTURE(BM_Divergence, js_fsd, Divergence::js_fsd);
BENCHMARK_CAPTURE(BM_DivergenceScalar, tv, Divergence::tv);
BENCHMARK_CAPTURE(BM_DivergenceScalar, kl_target_draft, Divergence::kl_target_draft);
BENCHMARK_CAPTURE(BM_DivergenceScalar, kl_draft_target, Divergence::kl_draft_target);
BENCHMARK_CAPTURE(BM_DivergenceScalar, js, Divergence::js);
BENCHMARK_CAPTURE(BM_DivergenceScalar, js_fsd, Divergence::js_fsd);

}  // namespace
