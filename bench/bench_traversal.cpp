// Traversal verification against Standard on the same trees: B = 64, 32-node trees (bench_trees's
// shape: depth 5, up to four children a node), V = 128256, every row LLM-like (p from heavy-tailed
// logits, q = the same logits + N(0, 1)), children drafted i.i.d. from their parent's q. Each rule
// runs on the same batch and seeds, one thread, and reports beside its time its row passes per
// sequence (each mass or draw is one pass over a row pair; counted by running the walk once over
// the batch through counting rows) and its accepted tokens per sequence. TreeRowPairRead reads one
// row pair per sequence: the cost of one pass at the memory bound.
//
//   build/release/bench/bench_traversal --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "read_pass.hpp"
#include "specverify/specverify.hpp"
#include "support.hpp"
#include "tree_shape.hpp"

namespace specverify::bench {
namespace {

constexpr std::int32_t kB = 64, kV = 128256, kPool = 16;

/// The batch: rows copied from a pool of kPool (p, q) pairs (every row at its own address, so each
/// pass reads memory), tokens sampled from the parent's q.
struct Setup {
  std::vector<std::int32_t> offsets{0}, parents, tokens, out, accepted;
  std::vector<float> p, q;
  TreeBatch<float> batch;
  std::int32_t width = 6;

  Setup() {
    std::mt19937_64 rng(1);
    std::vector<std::vector<float>> pool_p, pool_q;
    std::normal_distribution<double> noise(0.0, 1.0);
    for (std::int32_t i = 0; i < kPool; ++i) {
      auto logits = testing::random_logits(kV, rng);
      pool_p.push_back(testing::softmax(logits));
      for (auto& l : logits) l += noise(rng);
      pool_q.push_back(testing::softmax(logits));
    }
    const auto shape = tree_parents();
    const std::size_t n = shape.size(), rows = std::size_t(kB) * (n + 1);
    p.resize(rows * kV);
    q.resize(rows * kV);
    for (std::int32_t b = 0; b < kB; ++b) {
      const std::size_t root = std::size_t(b) * (n + 1);
      std::vector<std::size_t> pick(n + 1);
      for (std::size_t r = 0; r <= n; ++r) {
        pick[r] = std::size_t(rng() % kPool);
        std::copy(pool_p[pick[r]].begin(), pool_p[pick[r]].end(), p.begin() + std::ptrdiff_t((root + r) * kV));
        std::copy(pool_q[pick[r]].begin(), pool_q[pick[r]].end(), q.begin() + std::ptrdiff_t((root + r) * kV));
      }
      for (std::size_t i = 0; i < n; ++i) tokens.push_back(testing::sample(pool_q[pick[std::size_t(shape[i] + 1)]], rng));
      parents.insert(parents.end(), shape.begin(), shape.end());
      offsets.push_back(offsets.back() + std::int32_t(n));
    }
    out.assign(std::size_t(kB) * std::size_t(width), 0);
    accepted.assign(kB, 0);
    batch.batch_size = kB;
    batch.vocab_size = kV;
    batch.node_offsets = offsets.data();
    batch.parents = parents.data();
    batch.draft_tokens = tokens.data();
    batch.target_probs = p.data();
    batch.draft_probs = q.data();
    batch.drafted = Drafted::sampled;
  }
  TreeOutput output() { return TreeOutput{out.data(), width, accepted.data()}; }
};

Setup& setup() {
  static Setup s;
  return s;
}

/// The CPU rows, counting the passes over a row (mass and draws; values are single reads).
struct CountingRows : cpu::Rows<> {
  std::int64_t* passes;
  cpu::Checked<std::int32_t> draw_residual(View p, const View* q, std::int32_t x, float u) const {
    ++*passes;
    return cpu::Rows<>::draw_residual(p, q, x, u);
  }
  cpu::Checked<std::int32_t> draw_target(View p, float u) const {
    ++*passes;
    return cpu::Rows<>::draw_target(p, u);
  }
  cpu::Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    ++*passes;
    return cpu::Rows<>::mass(r, x);
  }
  cpu::Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) const {
    ++*passes;
    return cpu::Rows<>::draw(r, x, u);
  }
};

constexpr std::uint64_t kOffsets = 8;  // the seed offsets each benchmark cycles through

/// Row passes per sequence of `rule` over `batch` (a tree or chain batch), at every seed offset.
template <class Layout, class Rule, class Batch>
double passes_per_sequence(const Rule& rule, const Batch& batch) {
  const auto layout = Layout::of(batch);
  const auto source = core::ProbSource<float>::of(batch);
  std::int64_t passes = 0;
  for (std::uint64_t offset = 0; offset < kOffsets; ++offset) {
    for (std::int32_t b = 0; b < kB; ++b) {
      CountingRows rows{{kV}, &passes};
      core::walk(rule, layout, source, Randomness{1, offset}, b, rows);
    }
  }
  return double(passes) / double(kOffsets * kB);
}

void TreeRowPairRead(benchmark::State& state) {
  Setup& s = setup();
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      const std::size_t root = std::size_t(s.offsets[std::size_t(b)] + b) * kV;
      sum += read_pass(s.p.data() + root, kV) + read_pass(s.q.data() + root, kV);
    }
    benchmark::DoNotOptimize(sum);
  }
}

template <class Rule>
void TreeVerify(benchmark::State& state) {
  Setup& s = setup();
  std::int64_t accepted = 0, steps = 0;
  for (auto _ : state) {  // the same seed offsets over and over: both rules see the same draws
    const Randomness r{1, std::uint64_t(steps++) % kOffsets};
    accepted += verify(Rule{}, s.batch, r, s.output(), CpuOptions{1}).accepted;
  }
  state.counters["passes/seq"] = passes_per_sequence<core::TreeLayout>(Rule{}, s.batch);
  state.counters["accepted/seq"] = double(accepted) / double(steps * kB);
}

/// Chains of the tree's depth (5 drafts) over the same rows: Traversal against Block, whose law
/// it has there.
struct ChainSetup {
  testing::Chains c{kV};
  ChainBatch<float> batch;
  ChainSetup() {
    std::mt19937_64 rng(2);
    for (std::int32_t b = 0; b < kB; ++b) {
      std::vector<std::vector<float>> ps, qs;
      std::vector<std::int32_t> xs;
      for (std::int32_t j = 0; j <= 5; ++j) {
        const std::size_t row = std::size_t(rng() % 2048) * kV;  // rows of the tree batch
        ps.emplace_back(setup().p.begin() + std::ptrdiff_t(row), setup().p.begin() + std::ptrdiff_t(row + kV));
        if (j == 5) break;
        qs.emplace_back(setup().q.begin() + std::ptrdiff_t(row), setup().q.begin() + std::ptrdiff_t(row + kV));
        xs.push_back(testing::sample(qs.back(), rng));
      }
      c.add(xs, ps, qs);
    }
    batch = c.batch();
  }
};

template <class Rule>
void ChainVerify(benchmark::State& state) {
  static ChainSetup s;
  std::int64_t accepted = 0, steps = 0;
  for (auto _ : state) {
    const Randomness r{1, std::uint64_t(steps++) % kOffsets};
    accepted += verify(Rule{}, s.batch, r, s.c.output(), CpuOptions{1}).accepted;
  }
  state.counters["passes/seq"] = passes_per_sequence<core::ChainLayout>(Rule{}, s.batch);
  state.counters["accepted/seq"] = double(accepted) / double(steps * kB);
}

BENCHMARK(TreeRowPairRead)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_TEMPLATE(TreeVerify, Standard)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_TEMPLATE(TreeVerify, Traversal)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_TEMPLATE(ChainVerify, Standard)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_TEMPLATE(ChainVerify, Block)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_TEMPLATE(ChainVerify, Traversal)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace specverify::bench
