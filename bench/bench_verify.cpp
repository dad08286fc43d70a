// verify(Standard) on its worst path: B = 64, K = 5, V = 128256, every chain rejected at its first
// draft, so each chain draws from max(p - q, 0) over a full row pair. Measured next to a read pass
// over the same bytes and a plain scalar residual draw, all in this binary.
//
//   build/release/bench/bench_verify --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include "read_pass.hpp"
#include "synthetic.hpp"

namespace specverify::bench {
namespace {

constexpr std::int32_t kB = 64, kK = 5, kV = 128256;

SyntheticBatch& rejecting_batch() {
  static SyntheticBatch batch = make_batch(kB, kK, kV, 1.0, true, 1);
  return batch;
}

const float* first_row(const std::vector<float>& rows, std::int32_t b, std::int32_t rows_per_chain) {
  return rows.data() + std::size_t(b) * rows_per_chain * kV;
}

void set_bytes(benchmark::State& state, std::int64_t bytes) {
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["MB/step"] = double(bytes) / 1e6;
}

void ReadPass(benchmark::State& state) {
  const SyntheticBatch& s = rejecting_batch();
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      sum += read_pass(first_row(s.p, b, kK + 1), kV);
      sum += read_pass(first_row(s.q, b, kK), kV);
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, s.row_pair_bytes());
}

void ScalarResidual(benchmark::State& state) {
  const SyntheticBatch& s = rejecting_batch();
  for (auto _ : state) {
    std::int64_t sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      sum += scalar_residual_draw(first_row(s.p, b, kK + 1), first_row(s.q, b, kK), kV, 0.5f);
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, s.row_pair_bytes());
}

void VerifyStandard(benchmark::State& state) {
  SyntheticBatch& s = rejecting_batch();
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, s.batch(), Randomness{1, step++}, s.output(), options);
    if (stats.accepted != 0) state.SkipWithError("a chain was accepted: not the residual path");
  }
  set_bytes(state, s.row_pair_bytes());
}

BENCHMARK(ReadPass)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(ScalarResidual)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(VerifyStandard)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace specverify::bench
