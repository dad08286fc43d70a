// The heads' evaluation cost at a 7B-class draft model's width (d = 4096) for a batch of n = 64
// hidden states, next to the plain Eigen GEMM of the same shape (n x d times d x d).
#include <benchmark/benchmark.h>

#include "specverify/heads.hpp"

namespace {

constexpr Eigen::Index kN = 64;
constexpr Eigen::Index kD = 4096;
constexpr int kBlocks = 3;

Eigen::MatrixXf hidden_states() { return Eigen::MatrixXf::Random(kN, kD); }

/// FLOP counter: benchmark divides by the measured time per iteration, giving FLOP/s.
void set_flops(benchmark::State& state, double flop_per_iteration) {
  state.counters["GFLOP/s"] = benchmark::Counter(flop_per_iteration * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_EigenGemm(benchmark::State& state) {
  const Eigen::MatrixXf H = hidden_states();
  const Eigen::MatrixXf W = Eigen::MatrixXf::Random(kD, kD);
  Eigen::MatrixXf out(kN, kD);
  for (auto _ : state) {
    out.noalias() = H * W;
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * kN * kD * kD);
}
BENCHMARK(BM_EigenGemm)->Unit(benchmark::kMicrosecond);

void BM_AcceptanceHead(benchmark::State& state) {
  const Eigen::MatrixXf H = hidden_states();
  specverify::AcceptanceHead head(kD, kBlocks, state.range(0) != 0, 1);
  Eigen::VectorXf out;
  head.accept_probs(H, out);  // warm the scratch
  for (auto _ : state) {
    head.accept_probs(H, out);
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(state, kBlocks * 2.0 * kN * kD * kD + 2.0 * kN * kD * 2);
}
BENCHMARK(BM_AcceptanceHead)->ArgName("tied")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_LinearVerifier(benchmark::State& state) {
  const Eigen::MatrixXf H = hidden_states();
  const specverify::LinearVerifier verifier(kD, 1);
  Eigen::VectorXf out;
  for (auto _ : state) {
    verifier.scores(H, out);
    benchmark::DoNotOptimize(out.data());
  }
  set_flops(state, 2.0 * kN * kD);
}
BENCHMARK(BM_LinearVerifier)->Unit(benchmark::kMicrosecond);

}  // namespace
