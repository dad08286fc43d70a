// The C API (libspecverify) at B = 64, K = 5, V = 128256 over probability rows, on the instruction
// set it picks, next to a read pass over the same bytes and the C++ verify of this binary (built
// with this build's flags). Run it once per instruction set the library holds:
//   for isa in sse2 avx2 avx512; do SPECVERIFY_ISA=$isa build/release/bench/bench_c_api; done
// Each result's label is sv_isa(). Residual: every chain rejected at its first draft (one (p, q)
// row pair a chain). Fsd: every draft accepted, a divergence at every position (p and q rows).
#include <benchmark/benchmark.h>

#include <cstring>

#include "read_pass.hpp"
#include "specverify/specverify.h"
#include "synthetic.hpp"

namespace specverify::bench {
namespace {

constexpr std::int32_t kB = 64, kK = 5, kV = 128256;

SyntheticBatch& rejecting_batch() {
  static SyntheticBatch batch = make_batch(kB, kK, kV, 1.0, true, 1);
  return batch;
}

SyntheticBatch& accepting_batch() {
  static SyntheticBatch batch = make_batch(kB, kK, kV, 0.05, false, 2);
  return batch;
}

sv_chain_batch c_batch(const SyntheticBatch& s) {
  sv_chain_batch b;
  std::memset(&b, 0, sizeof b);
  b.struct_size = sizeof b;
  b.batch_size = s.B;
  b.vocab_size = s.V;
  b.draft_offsets = s.offsets.data();
  b.draft_tokens = s.tokens.data();
  b.target_probs = s.p.data();
  b.draft_probs = s.q.data();
  return b;
}

sv_chain_output c_output(SyntheticBatch& s) {
  sv_chain_output o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.tokens = s.out_tokens.data();
  o.row_width = s.K + 1;
  o.num_accepted = s.accepted.data();
  return o;
}

void set_bytes(benchmark::State& state, std::int64_t bytes) {
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["MB/step"] = double(bytes) / 1e6;
}

/// What every chain's first position reads (residual), or every position's p and q plus the bonus
/// row (all accepted under a divergence).
std::int64_t residual_bytes() { return rejecting_batch().row_pair_bytes(); }
std::int64_t accepted_bytes() { return std::int64_t{kB} * kV * sizeof(float) * (1 + 2 * kK); }

void ResidualReadPass(benchmark::State& state) {
  const SyntheticBatch& s = rejecting_batch();
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      sum += read_pass(s.p.data() + std::size_t(b) * (kK + 1) * kV, kV) + read_pass(s.q.data() + std::size_t(b) * kK * kV, kV);
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, residual_bytes());
}

/// One verify through the C API; stops the benchmark on an error or a chain not on its path.
void run_c(benchmark::State& state, SyntheticBatch& s, const sv_rule& rule, bool all_accepted, std::int64_t bytes) {
  const sv_chain_batch batch = c_batch(s);
  const sv_chain_output out = c_output(s);
  sv_randomness r;
  std::memset(&r, 0, sizeof r);
  r.struct_size = sizeof r;
  r.seed = 1;
  sv_stats stats{};
  sv_chain_output counted = out;
  counted.stats = &stats;
  for (auto _ : state) {
    sv_error err;
    if (sv_verify_chains(&rule, &batch, &r, &counted, static_cast<int>(state.range(0)), &err) != SV_OK) {
      state.SkipWithError(err.message);
      break;
    }
    if (stats.accepted != (all_accepted ? kB * kK : 0)) {
      state.SkipWithError("a chain left the path this benchmark measures");
      break;
    }
    ++r.offset;
  }
  state.SetLabel(sv_isa());
  set_bytes(state, bytes);
}

void ResidualCStandard(benchmark::State& state) {
  sv_rule rule{};
  rule.kind = SV_STANDARD;
  run_c(state, rejecting_batch(), rule, false, residual_bytes());
}

void ResidualCppStandard(benchmark::State& state) {
  SyntheticBatch& s = rejecting_batch();
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, s.batch(), Randomness{1, step++}, s.output(), options);
    if (stats.accepted != 0) state.SkipWithError("a chain was accepted: not the residual path");
  }
  set_bytes(state, residual_bytes());
}

void AcceptedReadPass(benchmark::State& state) {
  const SyntheticBatch& s = accepting_batch();
  for (auto _ : state) {
    float sum = 0;
    for (std::size_t i = 0; i < s.q.size(); i += kV) sum += read_pass(s.q.data() + i, kV);
    for (std::size_t i = 0; i < s.p.size(); i += kV) sum += read_pass(s.p.data() + i, kV);
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, accepted_bytes());
}

sv_rule fsd_rule() {
  sv_rule rule{};
  rule.kind = SV_FSD;
  rule.divergence = SV_TV;
  rule.threshold = 1.0f;  // TV <= 1 always: every draft accepted
  return rule;
}

void AcceptedCFsd(benchmark::State& state) { run_c(state, accepting_batch(), fsd_rule(), true, accepted_bytes()); }

void AcceptedCppFsd(benchmark::State& state) {
  SyntheticBatch& s = accepting_batch();
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Fsd{Divergence::tv, 1.0f}, s.batch(), Randomness{1, step++}, s.output(), options);
    if (stats.accepted != kB * kK) state.SkipWithError("a draft was rejected: not the all-accepted path");
  }
  set_bytes(state, accepted_bytes());
}

BENCHMARK(ResidualReadPass)->Unit(benchmark::kMicrosecond);
BENCHMARK(ResidualCStandard)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(ResidualCppStandard)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(AcceptedReadPass)->Unit(benchmark::kMicrosecond);
BENCHMARK(AcceptedCFsd)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(AcceptedCppFsd)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace specverify::bench
