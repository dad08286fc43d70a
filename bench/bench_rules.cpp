// Every rule at B in {1, 16, 64, 256}, K in {4, 8}, V in {32000, 128256, 256000}, on its worst
// path (every chain rejected at its first draft) and with every draft accepted. Counters:
//   bytes     what the rule must read per step (the distinct rows it touches)
//   GB/s      bytes / time
//   x_read    time / the time of a vectorised read of the same bytes (1.0 = memory bound)
//   x_scalar  the plain scalar backend's time / time (how much the SIMD row work buys; measured
//             where the step reads at most 1 GB)
// The yardsticks are timed inside each benchmark, side by side with it, because this machine's
// load varies. The whole matrix takes long; pick with --benchmark_filter, e.g.
//   build/release/bench/bench_rules --benchmark_filter=/K8/V128256 --benchmark_out=rules.csv
//       --benchmark_out_format=csv   (one command), then: sh bench/plot_rules.sh rules.csv
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "read_pass.hpp"
#include "scalar_rows.hpp"
#include "synthetic.hpp"
#include "typical_acceptance.hpp"

namespace specverify::bench {
namespace {

enum class Path { worst, accepted };

struct Config {
  std::int32_t B, K, V;
  Path path;
  bool operator==(const Config& o) const { return B == o.B && K == o.K && V == o.V && path == o.path; }
};

/// The current batch and per-draft inputs; rebuilt only when the shape changes (benchmarks are
/// registered shape by shape), so at most one multi-gigabyte batch is alive.
struct Fixture {
  Config config;
  SyntheticBatch s;
  std::vector<float> accept_uniforms, scores, accept_probs;

  explicit Fixture(const Config& c) : config(c), s(tile_batch(c.B, c.K, c.V, c.path == Path::worst, 17)) {
    const std::size_t drafts = s.tokens.size();
    accept_uniforms.assign(drafts, 0.0f);  // every lossless test passes where p(x) > 0
    scores.assign(drafts, c.path == Path::accepted ? 1.0f : 0.0f);
    accept_probs.assign(drafts, 1.0f);
    if (c.path == Path::accepted) {  // drafts on the argmax: Greedy accepts them too
      for (std::int32_t b = 0; b < c.B; ++b) {
        for (std::int32_t j = 0; j < c.K; ++j) {
          const float* p = s.p.data() + (std::size_t(b) * (c.K + 1) + j) * c.V;
          s.tokens[std::size_t(b) * c.K + j] = std::int32_t(std::max_element(p, p + c.V) - p);
        }
      }
    }
  }
  const float* p_row(std::int32_t b, std::int32_t j) const { return s.p.data() + (std::size_t(b) * (config.K + 1) + j) * config.V; }
  const float* q_row(std::int32_t b, std::int32_t j) const { return s.q.data() + (std::size_t(b) * config.K + j) * config.V; }
};

Fixture& fixture(const Config& c) {
  static std::unique_ptr<Fixture> current;
  if (!current || !(current->config == c)) {
    current.reset();
    current = std::make_unique<Fixture>(c);
  }
  return *current;
}

/// The rows a rule must read per chain: on the worst path p_0 (and q_0 for a divergence or the
/// residual); with everything accepted, each position's statistic rows and the bonus row.
template <class Rule>
std::vector<const float*> rows_read(const Rule& rule, const Fixture& f) {
  const RowStats need = rule_traits<Rule>::stats(rule);
  std::vector<const float*> rows;
  for (std::int32_t b = 0; b < f.config.B; ++b) {
    if (f.config.path == Path::worst) {
      rows.push_back(f.p_row(b, 0));
      if (need.divergence || rule_traits<Rule>::on_reject == Draw::residual) rows.push_back(f.q_row(b, 0));
      continue;
    }
    for (std::int32_t j = 0; need.any() && j < f.config.K; ++j) {
      rows.push_back(f.p_row(b, j));
      if (need.divergence) rows.push_back(f.q_row(b, j));
    }
    rows.push_back(f.p_row(b, f.config.K));
  }
  return rows;
}

template <class Body>
double seconds(const Body& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

template <class Rule>
void VerifyRule(benchmark::State& state, Rule rule, Config config) {
  Fixture& f = fixture(config);
  if constexpr (std::is_same_v<Rule, Sprinter>) rule.verifier_scores = f.scores.data();
  if constexpr (std::is_same_v<Rule, SpecDecPP<Standard>>) rule.accept_probs = f.accept_probs.data();
  Randomness randomness{3};
  randomness.accept_uniforms = f.accept_uniforms.data();
  const ChainBatch<float> batch = f.s.batch();
  const ChainOutput out = f.s.output();

  const std::vector<const float*> rows = rows_read(rule, f);
  const double bytes = double(rows.size()) * config.V * sizeof(float);
  double read_time = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    read_time = std::min(read_time, seconds([&] {
      float sum = 0;
      for (const float* row : rows) sum += read_pass(row, config.V);
      benchmark::DoNotOptimize(sum);
    }));
  }
  double scalar_time = 0;
  if (bytes <= 1e9) {
    scalar_time = seconds([&] {
      for (std::int32_t b = 0; b < config.B; ++b) {
        testing::ScalarRows scalar{config.V};
        benchmark::DoNotOptimize(core::walk(rule, core::ChainLayout::of(batch),
                                            core::ProbSource<float>::of(batch), randomness, b, scalar)
                                     .extra);
      }
    });
  }

  const CpuOptions one_thread{1};
  bool on_path = true;
  const double elapsed = seconds([&] {
    for (auto _ : state) {
      const VerifyStats stats = verify(rule, batch, randomness, out, one_thread);
      on_path = on_path && (config.path == Path::worst ? stats.accepted == 0 : stats.accepted == stats.drafted);
    }
  });
  if (!on_path) state.SkipWithError("the batch did not take the intended path");
  const double step = elapsed / double(std::max<benchmark::IterationCount>(1, state.iterations()));
  state.SetBytesProcessed(std::int64_t(bytes) * state.iterations());
  state.counters["bytes"] = bytes;
  state.counters["x_read"] = step / read_time;
  if (scalar_time > 0) state.counters["x_scalar"] = scalar_time / step;
}

template <class Rule>
void add(const char* name, const Rule& rule, const Config& c) {
  const std::string full = std::string("verify/") + name + (c.path == Path::worst ? "/worst" : "/accepted") +
                           "/B" + std::to_string(c.B) + "/K" + std::to_string(c.K) + "/V" + std::to_string(c.V);
  benchmark::RegisterBenchmark(full.c_str(), VerifyRule<Rule>, rule, c)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.2);
}

/// Registered shape by shape so one batch serves every rule before the next is built.
const bool registered = [] {
  constexpr float kLoose = 1e6f;  // thresholds that accept every draft on the accepted path
  for (const std::int32_t V : {32000, 128256, 256000}) {
    for (const std::int32_t B : {1, 16, 64, 256}) {
      for (const std::int32_t K : {4, 8}) {
        for (const Path path : {Path::worst, Path::accepted}) {
          const Config c{B, K, V, path};
          add("standard", Standard{}, c);
          add("greedy", Greedy{}, c);
          add("ears", Ears{0.2f}, c);
          add("fsd_tv", Fsd{Divergence::tv, kLoose}, c);
          add("fsd_kl", Fsd{Divergence::kl_target_draft, kLoose}, c);
          add("fsd_js", Fsd{Divergence::js, kLoose}, c);
          add("rfsd_js", ReducibleFsd{Divergence::js, kLoose}, c);
          add("sprinter", Sprinter{0.5f, nullptr}, c);
          add("specdecpp", SpecDecPP<Standard>{0.5f, nullptr, Standard{}}, c);
          add("typical", TypicalAcceptance{0.0f, 0.0f}, c);
        }
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace specverify::bench
