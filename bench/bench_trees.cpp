// Trees at B = 64, a 32-node tree (depth 5, up to 4 children per node), V = 128256, every child
// of the root rejected: the root's four children are tested one after another against the
// residual, and the extra token is drawn from what is left after all four. The rows read are the
// root's p and q (q not at all for deterministic children), so the yardstick is a read pass over
// them; next to it, the same walk with the scalar residual (core::residual_mass/residual_draw,
// what the CPU ran before cpu/residual_kernels.hpp), and a chain rejected at its first draft
// (one residual draw over the same pair of rows). One thread throughout, but for TreeVerifyOne:
// one tree at a time (B = 1) on 1 and 2 threads (its rows' passes split over the row team), and
// LogitsTreeVerifyOne, the same over logits rows (T = 0.8, four rejected children of the root).
// WideDeterministicNode: one root with 1k, 4k or 16k deterministic children (top-k, lookup),
// every one rejected, V = 32768, one thread, over probability and logits rows: each child costs
// a pass over p (its `per_child` time), whatever the number of siblings before it; against
// WideNodeReadPass, one read of the root's row per child.
//
//   build/release/bench/bench_trees --benchmark_counters_tabular=true
//   build/release/bench/bench_trees --benchmark_filter='TreeVerifyOne' --benchmark_repetitions=5
//   build/release/bench/bench_trees --benchmark_filter='WideDeterministicNode' --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "read_pass.hpp"
#include "specverify/specverify.hpp"
#include "support.hpp"
#include "tree_shape.hpp"

namespace specverify::bench {
namespace {

constexpr std::int32_t kB = 64, kV = 128256, kChainK = 5;

/// Zero-filled rows nobody reads stay unmapped: calloc'd pages are only backed once touched.
struct Rows {
  std::unique_ptr<float, decltype(&std::free)> data{nullptr, &std::free};
  std::int32_t width;
  explicit Rows(std::size_t rows, std::int32_t V = kV)
      : data(static_cast<float*>(std::calloc(rows * std::size_t(V), sizeof(float))), &std::free), width(V) {
    if (!data) throw std::bad_alloc();
  }
  float* row(std::int64_t r) const { return data.get() + r * width; }
};


/// A root p and q like an LLM's (q = p's logits plus noise), with p = 0 at the four tokens the
/// root's children carry, so every one of them is rejected.
struct RootRows {
  std::vector<float> p, q;
  std::vector<std::int32_t> children{17, 4242, 99999, 123456};
  RootRows() {
    std::mt19937_64 rng(1);
    auto logits = testing::random_logits(kV, rng);
    p = testing::softmax(logits);
    std::normal_distribution<double> noise(0.0, 1.0);
    for (auto& l : logits) l += noise(rng);
    q = testing::softmax(logits);
    for (std::int32_t x : children) p[std::size_t(x)] = 0.0f;
  }
};

const RootRows& root_rows() {
  static const RootRows rows;
  return rows;
}

struct TreeSetup {
  std::vector<std::int32_t> offsets, parents, tokens, out, accepted;
  Rows p, q;
  TreeBatch<float> batch;
  std::int32_t width = 0;

  explicit TreeSetup(Drafted how)
      : p(std::size_t(kB) * 33), q(std::size_t(kB) * 33) {
    const auto shape = tree_parents();
    const std::int32_t n = std::int32_t(shape.size());
    offsets.push_back(0);
    for (std::int32_t b = 0; b < kB; ++b) {
      offsets.push_back(offsets.back() + n);
      parents.insert(parents.end(), shape.begin(), shape.end());
      for (std::int32_t i = 0; i < n; ++i) tokens.push_back(i < 4 ? root_rows().children[std::size_t(i)] : i);
      const std::int64_t root = std::int64_t{offsets[std::size_t(b)]} + b;
      std::copy(root_rows().p.begin(), root_rows().p.end(), p.row(root));
      std::copy(root_rows().q.begin(), root_rows().q.end(), q.row(root));
    }
    width = 6;
    out.assign(std::size_t(kB) * width, 0);
    accepted.assign(kB, 0);
    batch.batch_size = kB;
    batch.vocab_size = kV;
    batch.node_offsets = offsets.data();
    batch.parents = parents.data();
    batch.draft_tokens = tokens.data();
    batch.target_probs = p.row(0);
    batch.draft_probs = how == Drafted::deterministic ? nullptr : q.row(0);
    batch.drafted = how;
  }
  TreeOutput output() { return TreeOutput{out.data(), width, accepted.data()}; }
  const float* root_p(std::int32_t b) const { return p.row(std::int64_t{offsets[std::size_t(b)]} + b); }
  const float* root_q(std::int32_t b) const { return q.row(std::int64_t{offsets[std::size_t(b)]} + b); }
};

TreeSetup& tree(Drafted how) {
  static TreeSetup sampled(Drafted::sampled), without(Drafted::sampled_without_replacement),
      deterministic(Drafted::deterministic);
  return how == Drafted::sampled ? sampled : how == Drafted::deterministic ? deterministic : without;
}

void set_bytes(benchmark::State& state, bool reads_q) {
  const std::int64_t bytes = std::int64_t{kB} * kV * std::int64_t(sizeof(float)) * (reads_q ? 2 : 1);
  state.SetBytesProcessed(state.iterations() * bytes);
}

void TreeReadPass(benchmark::State& state) {
  const Drafted how = static_cast<Drafted>(state.range(0));
  TreeSetup& t = tree(how);
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      sum += read_pass(t.root_p(b), kV);
      if (how != Drafted::deterministic) sum += read_pass(t.root_q(b), kV);
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, how != Drafted::deterministic);
}

void TreeVerifyStandard(benchmark::State& state) {
  const Drafted how = static_cast<Drafted>(state.range(0));
  TreeSetup& t = tree(how);
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, t.batch, Randomness{1, step++}, t.output(), CpuOptions{1});
    if (stats.accepted != 0) state.SkipWithError("a child was accepted: not the all-rejected path");
  }
  set_bytes(state, how != Drafted::deterministic);
}

/// One tree at a time (B = 1, cycling through the batch's), on `threads` threads: a row's
/// residual passes split over the row team.
void TreeVerifyOne(benchmark::State& state) {
  const Drafted how = static_cast<Drafted>(state.range(0));
  TreeSetup& t = tree(how);
  const std::int32_t n = t.offsets[1], offsets[] = {0, n};
  const CpuOptions options{static_cast<std::int32_t>(state.range(1))};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const auto b = static_cast<std::int32_t>(step % kB);
    TreeBatch<float> one = t.batch;
    one.batch_size = 1;
    one.node_offsets = offsets;
    one.parents = t.parents.data() + std::int64_t{b} * n;
    one.draft_tokens = t.tokens.data() + std::int64_t{b} * n;
    one.target_probs = t.root_p(b);
    if (one.draft_probs) one.draft_probs = t.root_q(b);
    const VerifyStats stats = verify(Standard{}, one, Randomness{1, step++}, t.output(), options);
    if (stats.accepted != 0) state.SkipWithError("a child was accepted: not the all-rejected path");
  }
  const std::int64_t rows = how != Drafted::deterministic ? 2 : 1;
  state.SetBytesProcessed(state.iterations() * rows * kV * std::int64_t(sizeof(float)));
}

/// Logits trees one at a time (B = 1), T = 0.8, the root's four children rejected (p's logit at
/// each of them -1e30: weight 0), on `threads` threads: the residual passes over logits views
/// (cpu/logit_residual.hpp).
struct LogitsTree {
  static constexpr std::int32_t kNodes = 5;
  std::vector<float> target, draft;
  std::vector<std::int32_t> offsets{0, kNodes}, parents{-1, -1, -1, -1, 0}, tokens{17, 4242, 99999, 123456, 5};
  std::vector<std::int32_t> out = std::vector<std::int32_t>(3), accepted = std::vector<std::int32_t>(1);
  SamplingParams params{0.8f, 0, 1.0f, 0.0f};
  LogitsTreeBatch<float> batch;
  LogitsTree() : target(std::size_t(kNodes + 1) * kV), draft(std::size_t(kNodes + 1) * kV) {
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (std::size_t i = 0; i < target.size(); ++i) {
      target[i] = normal(rng);
      draft[i] = target[i] + 0.5f * normal(rng);
    }
    for (std::int32_t c = 0; c < 4; ++c) target[std::size_t(tokens[std::size_t(c)])] = -1e30f;
    batch.batch_size = 1;
    batch.vocab_size = kV;
    batch.node_offsets = offsets.data();
    batch.parents = parents.data();
    batch.draft_tokens = tokens.data();
    batch.target_logits = target.data();
    batch.draft_logits = draft.data();
    batch.target_params = &params;
    batch.draft_params = &params;
  }
};

void LogitsTreeVerifyOne(benchmark::State& state) {
  static LogitsTree t;
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, t.batch, Randomness{1, step++},
                                     TreeOutput{t.out.data(), 3, t.accepted.data()}, options);
    if (stats.accepted != 0) state.SkipWithError("a child was accepted: not the all-rejected path");
  }
  state.SetBytesProcessed(state.iterations() * 2 * kV * std::int64_t(sizeof(float)));
}

/// A root with `width` deterministic children, tokens 0 .. width - 1, to which p gives nothing:
/// every one is rejected, and the extra token is drawn from what is left. Only the root's rows
/// (p, and its logits: log p, -inf where p is 0) are written; the children's rows stay unread.
struct WideNode {
  static constexpr std::int32_t kWideV = 32768;
  std::int32_t width;
  std::vector<std::int32_t> offsets, parents, tokens, out = std::vector<std::int32_t>(2),
                                               accepted = std::vector<std::int32_t>(1);
  Rows p, logit_rows;
  SamplingParams params{1.0f, 0, 1.0f, 0.0f};
  TreeBatch<float> batch;
  LogitsTreeBatch<float> logits;

  explicit WideNode(std::int32_t n)
      : width(n), offsets{0, n}, parents(std::size_t(n), -1), tokens(std::size_t(n)), p(std::size_t(n + 1), kWideV),
        logit_rows(std::size_t(n + 1), kWideV) {
    std::iota(tokens.begin(), tokens.end(), 0);
    std::mt19937_64 rng(5);
    auto root = testing::softmax(testing::random_logits(kWideV, rng));
    for (std::int32_t x : tokens) root[std::size_t(x)] = 0.0f;
    for (std::int32_t v = 0; v < kWideV; ++v) {
      p.row(0)[v] = root[std::size_t(v)];
      logit_rows.row(0)[v] = root[std::size_t(v)] > 0.0f ? std::log(root[std::size_t(v)]) : -INFINITY;
    }
    batch.batch_size = logits.batch_size = 1;
    batch.vocab_size = logits.vocab_size = kWideV;
    batch.node_offsets = logits.node_offsets = offsets.data();
    batch.parents = logits.parents = parents.data();
    batch.draft_tokens = logits.draft_tokens = tokens.data();
    batch.drafted = logits.drafted = Drafted::deterministic;
    batch.target_probs = p.row(0);
    logits.target_logits = logit_rows.row(0);
    logits.target_params = &params;
  }
};

WideNode& wide_node(std::int32_t width) {
  static std::unique_ptr<WideNode> node;
  if (!node || node->width != width) node = std::make_unique<WideNode>(width);
  return *node;
}

/// A node's passes as bytes: one read of the root's row per child.
void set_wide_bytes(benchmark::State& state, std::int32_t width) {
  state.SetBytesProcessed(state.iterations() * std::int64_t{width} * WideNode::kWideV * std::int64_t(sizeof(float)));
  state.counters["per_child"] = benchmark::Counter(double(width), benchmark::Counter::kIsIterationInvariantRate |
                                                                      benchmark::Counter::kInvert);
}

/// The yardstick of WideDeterministicNode: a read pass over the root's row for every child.
void WideNodeReadPass(benchmark::State& state) {
  WideNode& node = wide_node(static_cast<std::int32_t>(state.range(0)));
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t c = 0; c < node.width; ++c) sum += read_pass(node.p.row(0), WideNode::kWideV);
    benchmark::DoNotOptimize(sum);
  }
  set_wide_bytes(state, node.width);
}

void WideDeterministicNode(benchmark::State& state) {
  const auto width = static_cast<std::int32_t>(state.range(0));
  const bool from_logits = state.range(1) != 0;
  WideNode* const node = &wide_node(width);
  std::uint64_t step = 0;
  for (auto _ : state) {
    const TreeOutput out{node->out.data(), 2, node->accepted.data()};
    const Randomness randomness{1, step++};
    const VerifyStats stats = from_logits ? verify(Standard{}, node->logits, randomness, out, CpuOptions{1})
                                          : verify(Standard{}, node->batch, randomness, out, CpuOptions{1});
    if (stats.accepted != 0) state.SkipWithError("a child was accepted: not the all-rejected path");
  }
  set_wide_bytes(state, width);
}

/// The CPU rows with the scalar residual passes: the walk as it ran before the vector kernel.
struct ScalarResidualRows : cpu::Rows<> {
  cpu::Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    const auto m = core::residual_mass(*this, r, x);
    return {m.value, m.ok};
  }
  cpu::Checked<std::int32_t> draw(const core::Residual<View>& r, std::int32_t x, float u) const {
    const auto d = core::residual_draw(*this, r, x, u);
    return {d.value, d.ok};
  }
};

void TreeWalkScalarResidual(benchmark::State& state) {
  const Drafted how = static_cast<Drafted>(state.range(0));
  TreeSetup& t = tree(how);
  const auto layout = core::TreeLayout::of(t.batch);
  const auto source = core::ProbSource<float>::of(t.batch);
  std::uint64_t step = 0;
  for (auto _ : state) {
    const Randomness randomness{1, step++};
    std::int64_t sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      ScalarResidualRows rows{{kV}};
      sum += core::walk(Standard{}, layout, source, randomness, b, rows).extra;
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, how != Drafted::deterministic);
}

/// Chains of 5 drafts over the same root rows, each rejected at its first draft.
struct ChainSetup {
  std::vector<std::int32_t> offsets, tokens, out, accepted;
  Rows p, q;
  ChainBatch<float> batch;
  ChainSetup() : p(std::size_t(kB) * (kChainK + 1)), q(std::size_t(kB) * kChainK) {
    offsets.push_back(0);
    for (std::int32_t b = 0; b < kB; ++b) {
      offsets.push_back(offsets.back() + kChainK);
      for (std::int32_t j = 0; j < kChainK; ++j) tokens.push_back(j == 0 ? root_rows().children[0] : j);
      std::copy(root_rows().p.begin(), root_rows().p.end(), p.row(std::int64_t{b} * (kChainK + 1)));
      std::copy(root_rows().q.begin(), root_rows().q.end(), q.row(std::int64_t{b} * kChainK));
    }
    out.assign(std::size_t(kB) * (kChainK + 1), 0);
    accepted.assign(kB, 0);
    batch.batch_size = kB;
    batch.vocab_size = kV;
    batch.draft_offsets = offsets.data();
    batch.draft_tokens = tokens.data();
    batch.target_probs = p.row(0);
    batch.draft_probs = q.row(0);
  }
};

void ChainVerifyStandard(benchmark::State& state) {
  static ChainSetup c;
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, c.batch, Randomness{1, step++},
                                     ChainOutput{c.out.data(), kChainK + 1, c.accepted.data()}, CpuOptions{1});
    if (stats.accepted != 0) state.SkipWithError("a chain was accepted: not the residual path");
  }
  set_bytes(state, true);
}

void drafted_args(benchmark::internal::Benchmark* b) {
  b->ArgName("drafted");  // 0 sampled, 1 without replacement, 2 deterministic
  for (int how = 0; how < 3; ++how) b->Arg(how);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(TreeReadPass)->Apply(drafted_args);
BENCHMARK(TreeVerifyStandard)->Apply(drafted_args);
BENCHMARK(TreeWalkScalarResidual)->Apply(drafted_args);
BENCHMARK(ChainVerifyStandard)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(TreeVerifyOne)
    ->ArgNames({"drafted", "threads"})
    ->ArgsProduct({{0, 1, 2}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(LogitsTreeVerifyOne)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(WideNodeReadPass)->ArgName("children")->Arg(1000)->Arg(4000)->Arg(16000)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(WideDeterministicNode)
    ->ArgNames({"children", "logits"})
    ->ArgsProduct({{1000, 4000, 16000}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace specverify::bench
