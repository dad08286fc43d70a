// verify() at B = 64, K = 5, V = 128256, measured next to a read pass over the bytes the rule must
// read and next to a plain scalar implementation, all in this binary.
//   Residual path: every chain rejected at its first draft, so each reads one (p, q) row pair.
//   All accepted: every position's statistic is needed (p rows for max, p and q rows for a
//   divergence), then the bonus row. AcceptedVerifyOne: the same at B = 1 (one sequence a call,
//   1 or 2 threads: the row split over the row team), next to AcceptedReadPassOne.
//
//   build/release/bench/bench_verify --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include "read_pass.hpp"
#include "reference_divergence.hpp"
#include "synthetic.hpp"

namespace specverify::bench {
namespace {

constexpr std::int32_t kB = 64, kK = 5, kV = 128256;

SyntheticBatch& rejecting_batch() {
  static SyntheticBatch batch = make_batch(kB, kK, kV, 1.0, true, 1);
  return batch;
}

SyntheticBatch& accepting_batch() {
  static SyntheticBatch batch = make_batch(kB, kK, kV, 0.5, false, 2);
  return batch;
}

const float* p_row(const SyntheticBatch& s, std::int32_t b, std::int32_t j) {
  return s.p.data() + (std::size_t(b) * (kK + 1) + j) * kV;
}
const float* q_row(const SyntheticBatch& s, std::int32_t b, std::int32_t j) {
  return s.q.data() + (std::size_t(b) * kK + j) * kV;
}

/// Rows a rule reads per chain when every draft is accepted: p at each position if it needs a
/// statistic, q too if that is a divergence, and the bonus row.
struct Reads {
  bool p_per_position = false, q_per_position = false;
  std::int64_t bytes() const {
    return std::int64_t{kB} * kV * sizeof(float) * (1 + (p_per_position + q_per_position) * kK);
  }
};

void set_bytes(benchmark::State& state, std::int64_t bytes) {
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["MB/step"] = double(bytes) / 1e6;
}

// ---------------------------------------------------------------- residual path (issue: core)

void ResidualReadPass(benchmark::State& state) {
  const SyntheticBatch& s = rejecting_batch();
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) sum += read_pass(p_row(s, b, 0), kV) + read_pass(q_row(s, b, 0), kV);
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, s.row_pair_bytes());
}

void ResidualScalar(benchmark::State& state) {
  const SyntheticBatch& s = rejecting_batch();
  for (auto _ : state) {
    std::int64_t sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) sum += scalar_residual_draw(p_row(s, b, 0), q_row(s, b, 0), kV, 0.5f);
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, s.row_pair_bytes());
}

void ResidualVerifyStandard(benchmark::State& state) {
  SyntheticBatch& s = rejecting_batch();
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, s.batch(), Randomness{1, step++}, s.output(), options);
    if (stats.accepted != 0) state.SkipWithError("a chain was accepted: not the residual path");
  }
  set_bytes(state, s.row_pair_bytes());
}

BENCHMARK(ResidualReadPass)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(ResidualScalar)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(ResidualVerifyStandard)->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime();

// ---------------------------------------------------------- all accepted (issue: relaxed rules)

/// A read pass over the rows sequence b's chain reads when every draft is accepted.
float read_sequence(const SyntheticBatch& s, std::int32_t b, Reads reads) {
  float sum = 0;
  for (std::int32_t j = 0; j < kK; ++j) {
    if (reads.p_per_position) sum += read_pass(p_row(s, b, j), kV);
    if (reads.q_per_position) sum += read_pass(q_row(s, b, j), kV);
  }
  return sum + read_pass(p_row(s, b, kK), kV);
}

void AcceptedReadPass(benchmark::State& state, Reads reads) {
  const SyntheticBatch& s = accepting_batch();
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) sum += read_sequence(s, b, reads);
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, reads.bytes());
}

/// The same work as plain loops: each position's statistic, then the bonus draw.
template <class Statistic>
void AcceptedScalar(benchmark::State& state, Reads reads, Statistic statistic) {
  const SyntheticBatch& s = accepting_batch();
  for (auto _ : state) {
    double sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      for (std::int32_t j = 0; j < kK; ++j) sum += statistic(p_row(s, b, j), q_row(s, b, j));
      sum += scalar_residual_draw(p_row(s, b, kK), p_row(s, b, kK), kV, 0.5f);
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, reads.bytes());
}

/// Caller uniforms of 0 make every lossless test pass, so each rule walks every position.
template <class Rule>
void AcceptedVerify(benchmark::State& state, Rule rule, Reads reads) {
  SyntheticBatch& s = accepting_batch();
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  const std::vector<float> zeros(s.tokens.size(), 0.0f);
  Randomness randomness{1};
  randomness.accept_uniforms = zeros.data();
  for (auto _ : state) {
    const VerifyStats stats = verify(rule, s.batch(), randomness, s.output(), options);
    if (stats.accepted != stats.drafted) state.SkipWithError("a draft was rejected");
  }
  set_bytes(state, reads.bytes());
}

/// AcceptedVerify at B = 1: each call verifies the next sequence's chain alone, its statistics
/// read on `threads` threads (the row split over the row team). Against AcceptedReadPassOne, the
/// read of the same rows.
template <class Rule>
void AcceptedVerifyOne(benchmark::State& state, Rule rule, Reads) {
  SyntheticBatch& s = accepting_batch();
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  const std::vector<float> zeros(std::size_t(kK), 0.0f);
  Randomness randomness{1};
  randomness.accept_uniforms = zeros.data();
  const std::int32_t offsets[] = {0, kK};
  std::int64_t step = 0;
  for (auto _ : state) {
    const auto b = static_cast<std::int32_t>(step++ % kB);
    const ChainBatch<float> one{1, kV, offsets, s.tokens.data() + std::size_t(b) * kK, p_row(s, b, 0), q_row(s, b, 0)};
    const ChainOutput out{s.out_tokens.data() + std::size_t(b) * (kK + 1), kK + 1, s.accepted.data() + b};
    const VerifyStats stats = verify(rule, one, randomness, out, options);
    if (stats.accepted != stats.drafted) state.SkipWithError("a draft was rejected");
  }
}

/// The read of one sequence's rows (AcceptedReadPass's, for one chain).
void AcceptedReadPassOne(benchmark::State& state, Reads reads) {
  const SyntheticBatch& s = accepting_batch();
  std::int64_t step = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(read_sequence(s, static_cast<std::int32_t>(step++ % kB), reads));
  }
}

float scalar_max(const float* p, const float*) {
  float m = 0;
  for (std::int32_t i = 0; i < kV; ++i) m = std::max(m, p[i]);
  return m;
}

template <Divergence d>
float scalar_divergence(const float* p, const float* q) {
  return reference::divergence_scalar(d, p, q, kV);
}

constexpr Reads kBonusOnly{false, false}, kMaxReads{true, false}, kPairReads{true, true};
constexpr float kLoose = 1e6f;  // thresholds and tolerances that accept every draft

#define SPECVERIFY_ACCEPTED(name, rule, reads, scalar)                                       \
  BENCHMARK_CAPTURE(AcceptedReadPass, name, reads)->Unit(benchmark::kMicrosecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(AcceptedScalar, name, reads, scalar)->Unit(benchmark::kMicrosecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(AcceptedVerify, name, rule, reads)                                       \
      ->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime();       \
  BENCHMARK_CAPTURE(AcceptedReadPassOne, name, reads)->Unit(benchmark::kMicrosecond)->UseRealTime(); \
  BENCHMARK_CAPTURE(AcceptedVerifyOne, name, rule, reads)                                    \
      ->Arg(1)->Arg(2)->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime()

SPECVERIFY_ACCEPTED(ears, Ears{kLoose}, kMaxReads, scalar_max);
SPECVERIFY_ACCEPTED(fsd_tv, (Fsd{Divergence::tv, kLoose}), kPairReads, scalar_divergence<Divergence::tv>);
SPECVERIFY_ACCEPTED(fsd_kl, (Fsd{Divergence::kl_target_draft, kLoose}), kPairReads,
                    scalar_divergence<Divergence::kl_target_draft>);
SPECVERIFY_ACCEPTED(fsd_js, (Fsd{Divergence::js, kLoose}), kPairReads, scalar_divergence<Divergence::js>);
BENCHMARK_CAPTURE(AcceptedVerify, standard, Standard{}, kBonusOnly)
    ->Arg(1)->ArgName("threads")->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace specverify::bench
