// The CUDA backend over logits against the CPU one: identical tokens, counts, statistics and
// logprobs for every rule (Coupled and a user's rule included) on float, __half and
// __nv_bfloat16 logits (the CPU sees the rounded logits), over every combination of sampling
// parameters with ties at the top-k and top-p boundaries, greedy rows next to sampled ones,
// guidance, a grammar bitmask, draft parameters that differ and a reduced draft vocabulary; trees;
// and bad input reported in the CPU's words with no output written. Every test skips where there
// is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device_support.cuh"
#include "penalty_lists.hpp"
#include "specverify/cuda/verify_logits.cuh"
#include "typical_acceptance.hpp"

namespace specverify {
namespace {

using testing::cuda_ok;
using testing::DeviceArray;

template <class Logit>
Logit to_logit(float v) {
  if constexpr (std::is_same_v<Logit, __half>) {
    return __float2half_rn(v);
  } else if constexpr (std::is_same_v<Logit, __nv_bfloat16>) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

template <class Logit>
float from_logit(Logit v) {
  if constexpr (std::is_same_v<Logit, __half>) {
    return __half2float(v);
  } else if constexpr (std::is_same_v<Logit, __nv_bfloat16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <class Logit>
std::vector<Logit> convert(const std::vector<float>& v) {
  std::vector<Logit> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_logit<Logit>(v[i]);
  return out;
}

/// Rows rounded to Logit and back: what the CPU sees to reproduce a __half or bf16 run.
template <class Logit>
std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = from_logit(to_logit<Logit>(v[i]));
  return out;
}

/// Every combination the tests cycle through: greedy next to sampled rows, each filter alone and
/// together, k = 1, and top_p small enough that ties at the boundary decide the kept set.
std::vector<SamplingParams> parameter_grid() {
  std::vector<SamplingParams> grid;
  for (const float t : {0.0f, 0.6f, 1.0f, 1.7f}) {
    for (const std::int32_t k : {0, 1, 7, 60}) {
      for (const float top_p : {1.0f, 0.9f, 0.3f}) {
        for (const float min_p : {0.0f, 0.08f}) grid.push_back({t, k, top_p, min_p});
      }
    }
  }
  return grid;
}

/// A random batch of logits chains (or trees) with every optional field, in host memory.
struct LogitsCase : testing::PenaltyListArrays {
  std::int32_t B = 0, V = 0, draft_v = 0, width = 0;
  bool tree = false, one_hot = false, reduced = false, guided = false, masked = false;
  std::vector<std::int32_t> offsets, parents, tokens, d2t;
  std::vector<float> target, draft, unconditional, scale;
  std::vector<std::int64_t> first_row, positions;
  std::vector<std::uint32_t> allowed;
  std::vector<SamplingParams> target_params, draft_params;
  std::vector<float> scores, accept_probs;
  bool lists = false;

  /// Penalties (the target's and the drafter's own) with a history per sequence (about V / 10
  /// tokens, the drafts among them, counts 0 .. 3) and a bias list (in no order), for every row.
  void add_lists(std::uint32_t seed) {
    std::mt19937 rng(seed * 7919u);
    lists = true;
    for (std::int32_t b = 0; b < B; ++b) {
      for (std::int32_t v = 0; v < V; ++v) {
        const bool drafted = std::find(tokens.begin() + offsets[b], tokens.begin() + offsets[b + 1], v) !=
                             tokens.begin() + offsets[b + 1];
        if (rng() % 10 != 0 && !(drafted && rng() % 2 == 0)) continue;
        h_tokens.push_back(v);
        h_counts.push_back(std::int32_t(rng() % 4));
      }
      for (std::int32_t k = 0; k < 8; ++k) {
        const std::int32_t v = std::int32_t(rng() % V);
        if (std::find(b_tokens.begin() + b_offsets.back(), b_tokens.end(), v) != b_tokens.end()) continue;
        b_tokens.push_back(v);
        b_values.push_back(std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng));
      }
      end_sequence();
      target_params[b].repetition_penalty = 1.0f + 0.1f * float(b % 5);
      target_params[b].presence_penalty = 0.25f * float(b % 3);
      target_params[b].frequency_penalty = 0.2f;
      draft_params[b].repetition_penalty = b % 2 ? 1.3f : 1.0f;
      draft_params[b].frequency_penalty = 0.1f * float(b % 4);
    }
  }

  /// Logits on a grid of 1/4 (ties everywhere, at the top-k and top-p boundaries too) or spread.
  LogitsCase(std::uint32_t seed, std::int32_t batch, std::int32_t vocab, bool ties, bool tree_layout, bool one_hot_drafts,
             bool reduced_vocab, bool guidance, bool bitmask)
      : B(batch), V(vocab), tree(tree_layout), one_hot(one_hot_drafts), reduced(reduced_vocab),
        guided(guidance), masked(bitmask) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 2.5f);
    std::uniform_int_distribution<std::int32_t> length(0, 5);
    const auto logit = [&] {
      const float x = normal(rng);
      return ties ? std::round(x * 4.0f) / 4.0f : x;
    };
    draft_v = reduced ? V / 2 + 3 : V;
    offsets.push_back(0);
    std::int32_t deepest = 0;
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int32_t k = length(rng);
      for (std::int32_t i = 0; i < k; ++i) {
        // Trees: a node hangs off the root or any earlier node (siblings to absorb).
        parents.push_back(tree ? std::int32_t(rng() % (i + 1)) - 1 : i - 1);
      }
      offsets.push_back(offsets.back() + k);
      deepest = std::max(deepest, k);
    }
    width = deepest + 1;
    const std::int32_t N = offsets.back();
    if (reduced) {  // a shuffled injective map onto part of the target vocabulary
      std::vector<std::int32_t> ids(V);
      for (std::int32_t v = 0; v < V; ++v) ids[v] = v;
      std::shuffle(ids.begin(), ids.end(), rng);
      d2t.assign(ids.begin(), ids.begin() + draft_v);
    }
    for (std::int32_t g = 0; g < N; ++g) {
      tokens.push_back(reduced && rng() % 4 != 0 ? d2t[rng() % draft_v] : std::int32_t(rng() % V));
    }
    const std::int64_t rows = std::int64_t{N} + B;
    target.resize(std::size_t(rows) * V);
    for (float& l : target) l = logit();
    const std::int64_t draft_rows = tree ? rows : N;
    draft.resize(std::size_t(draft_rows) * draft_v);
    for (float& l : draft) l = logit();
    // A few masked logits in every row (-inf is a masked token, not an error).
    for (std::int64_t r = 0; r < rows; ++r) target[std::size_t(r * V + rng() % V)] = -INFINITY;
    const auto grid = parameter_grid();
    for (std::int32_t b = 0; b < B; ++b) {
      target_params.push_back(grid[(seed + 7u * b) % grid.size()]);
      draft_params.push_back(grid[(seed + 11u * b + 5u) % grid.size()]);
      positions.push_back(1000 + 37 * b);
    }
    if (guided) {
      unconditional.resize(std::size_t(rows) * V);
      for (float& l : unconditional) l = logit();
      for (std::int32_t b = 0; b < B; ++b) {
        first_row.push_back(b % 3 == 2 ? -1 : std::int64_t{offsets[b]} + b);
        scale.push_back(b % 2 ? 1.5f : 0.7f);
      }
    }
    if (masked) {
      const std::int64_t words = (V + 31) / 32;
      allowed.resize(std::size_t(rows * words));
      for (auto& w : allowed) w = static_cast<std::uint32_t>(rng()) | static_cast<std::uint32_t>(rng());  // ~3/4 allowed
    }
    for (std::int32_t g = 0; g < N; ++g) {
      scores.push_back(std::uniform_real_distribution<float>(0.0f, 1.0f)(rng));
      accept_probs.push_back(std::uniform_real_distribution<float>(0.5f, 1.0f)(rng));
    }
  }

  /// The batch's sizes and host arrays; the caller sets the rows (rounded as wanted).
  template <class Batch>
  void fill(Batch& batch) const {
    batch.batch_size = B;
    batch.vocab_size = V;
    batch.draft_tokens = tokens.data();
    batch.target_params = target_params.data();
    batch.draft_params = draft_params.data();
    if (reduced) {
      batch.draft_vocab_size = draft_v;
      batch.draft_to_target = d2t.data();
    }
    if (guided) {
      batch.unconditional_first_row = first_row.data();
      batch.guidance_scale = scale.data();
    }
    if (masked) batch.allowed_tokens = allowed.data();
    if (lists) attach(batch);
  }
};

/// The case on the device as Logit, with its outputs (filled with 12345) and workspace.
template <class Logit>
struct DeviceCase {
  DeviceArray<std::int32_t> offsets, parents, tokens, d2t, out_tokens, accepted, nodes;
  DeviceArray<Logit> target, draft, unconditional;
  DeviceArray<float> scale, logprobs;
  DeviceArray<std::int64_t> first_row, positions;
  DeviceArray<std::uint32_t> allowed;
  DeviceArray<SamplingParams> target_params, draft_params;
  DeviceArray<std::int32_t> h_offsets, h_tokens, h_counts, b_offsets, b_tokens;
  DeviceArray<float> b_values;
  DeviceArray<unsigned char> workspace_data;
  cuda::Workspace workspace;

  explicit DeviceCase(const LogitsCase& c)
      : offsets(c.offsets), tokens(c.tokens), target(convert<Logit>(c.target)), draft(convert<Logit>(c.draft)),
        scale(c.scale), first_row(c.first_row), positions(c.positions), allowed(c.allowed),
        target_params(c.target_params), draft_params(c.draft_params) {
    if (c.tree) parents.assign(c.parents);
    if (c.reduced) d2t.assign(c.d2t);
    if (c.guided) unconditional.assign(convert<Logit>(c.unconditional));
    if (c.lists) {
      h_offsets.assign(c.h_offsets);
      h_tokens.assign(c.h_tokens);
      h_counts.assign(c.h_counts);
      b_offsets.assign(c.b_offsets);
      b_tokens.assign(c.b_tokens);
      b_values.assign(c.b_values);
    }
    const std::size_t slots = std::size_t(c.B) * c.width;
    out_tokens.assign(std::vector<std::int32_t>(slots, 12345));
    nodes.assign(std::vector<std::int32_t>(slots, 12345));
    accepted.assign(std::vector<std::int32_t>(std::size_t(c.B), 12345));
    logprobs.assign(std::vector<float>(slots, 12345.0f));
  }

  template <class Batch>
  Batch batch(const LogitsCase& c) {
    Batch b;
    c.fill(b);
    b.target_logits = target.get();
    b.draft_logits = c.one_hot ? nullptr : draft.get();
    b.draft_tokens = tokens.get();
    b.target_params = target_params.get();
    b.draft_params = draft_params.get();
    if (c.reduced) b.draft_to_target = d2t.get();
    if (c.guided) {
      b.unconditional_logits = unconditional.get();
      b.unconditional_first_row = first_row.get();
      b.guidance_scale = scale.get();
    }
    if (c.masked) b.allowed_tokens = allowed.get();
    if (c.lists) {
      b.history_offsets = h_offsets.get();
      b.history_tokens = h_tokens.get();
      b.history_counts = h_counts.get();
      b.bias_offsets = b_offsets.get();
      b.bias_tokens = b_tokens.get();
      b.bias_values = b_values.get();
    }
    return b;
  }

  template <class Rule, class Batch, class Output>
  void make_workspace(const Rule& rule, const Batch& b, const Output& out) {
    const std::size_t bytes = cuda::workspace_bytes(rule, b, out);
    workspace_data.assign(std::vector<unsigned char>(bytes));
    workspace = cuda::Workspace{workspace_data.get(), bytes};
  }
};

/// A rule with its per-draft input pointers on the host (CPU) and on the device (GPU).
template <class Rule>
struct RulePair {
  Rule cpu, gpu;
};

struct Inputs {
  DeviceArray<float> scores, accept_probs;
};

/// Reads every row statistic, so a CPU/GPU difference in any of them changes tokens.
struct Probe {
  static constexpr Draw on_reject = Draw::target;
  Divergence kind = Divergence::tv;
  SPECVERIFY_HD RowStats stats() const {
    RowStats s;
    s.max = s.argmax = s.entropy = s.divergence = true;
    s.kind = kind;
    return s;
  }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    const bool close = at.divergence <= 0.4f;
    const bool confident = at.p_x >= 0.5f * at.p_max && at.entropy < 2.0f;
    const bool accepted = at.p_x > 0 && (close || confident || at.token == at.p_argmax);
    return {accepted, accepted && !Decision::standard_test(at), true};
  }
};

/// Runs the rule on the CPU over the Logit-rounded logits and on the GPU over the Logit logits;
/// expects the same tokens, counts, statistics, accepted nodes and (to float rounding) logprobs.
template <class Logit, class Rule>
void expect_same(const RulePair<Rule>& rule, const LogitsCase& c, Randomness r) {
  const std::vector<float> t = rounded<Logit>(c.target), d = rounded<Logit>(c.draft),
                           u = rounded<Logit>(c.unconditional);
  const std::size_t slots = std::size_t(c.B) * c.width;
  std::vector<std::int32_t> tokens(slots, 12345), accepted(c.B, 12345), nodes(slots, 12345);
  std::vector<float> logprobs(slots, 12345.0f);
  DeviceCase<Logit> dc(c);
  Randomness dr = r;
  r.positions = c.positions.data();
  dr.positions = dc.positions.get();
  VerifyStats cpu_stats;
  // Rules that cut chains (SpecDecPP) or decide them jointly as Block does have no tree form
  // (Traversal, joint too, is a tree rule).
  constexpr bool kChainsOnly =
      specverify::detail::has_cut<Rule>::value || rule_traits<Rule>::joint == Joint::block;
  if constexpr (kChainsOnly) {
    ASSERT_FALSE(c.tree) << "this rule has no tree form";
  }
  if (c.tree) {
    if constexpr (!kChainsOnly) {
    LogitsTreeBatch<float> cpu;
    c.fill(cpu);
    cpu.target_logits = t.data();
    cpu.draft_logits = c.one_hot ? nullptr : d.data();
    cpu.unconditional_logits = c.guided ? u.data() : nullptr;
    cpu.node_offsets = c.offsets.data();
    cpu.parents = c.parents.data();
    cpu_stats = verify(rule.cpu, cpu, r, TreeOutput{tokens.data(), c.width, accepted.data(), nodes.data(), logprobs.data()});
    auto gpu = dc.template batch<LogitsTreeBatch<Logit>>(c);
    gpu.node_offsets = dc.offsets.get();
    gpu.parents = dc.parents.get();
    const TreeOutput out{dc.out_tokens.get(), c.width, dc.accepted.get(), dc.nodes.get(), dc.logprobs.get()};
    dc.make_workspace(rule.gpu, gpu, out);
    cuda_ok(cuda::verify(rule.gpu, gpu, dr, out, dc.workspace, nullptr));
    EXPECT_EQ(dc.nodes.read(), nodes);
    }
  } else {
    LogitsChainBatch<float> cpu;
    c.fill(cpu);
    cpu.target_logits = t.data();
    cpu.draft_logits = c.one_hot ? nullptr : d.data();
    cpu.unconditional_logits = c.guided ? u.data() : nullptr;
    cpu.draft_offsets = c.offsets.data();
    cpu_stats = verify(rule.cpu, cpu, r, ChainOutput{tokens.data(), c.width, accepted.data(), logprobs.data()});
    auto gpu = dc.template batch<LogitsChainBatch<Logit>>(c);
    gpu.draft_offsets = dc.offsets.get();
    const ChainOutput out{dc.out_tokens.get(), c.width, dc.accepted.get(), dc.logprobs.get()};
    dc.make_workspace(rule.gpu, gpu, out);
    cuda_ok(cuda::verify(rule.gpu, gpu, dr, out, dc.workspace, nullptr));
  }
  cuda::check(dc.workspace, nullptr);
  const VerifyStats gpu_stats = cuda::read_stats(dc.workspace, nullptr);
  EXPECT_EQ(dc.out_tokens.read(), tokens);
  EXPECT_EQ(dc.accepted.read(), accepted);
  EXPECT_EQ(gpu_stats.drafted, cpu_stats.drafted);
  EXPECT_EQ(gpu_stats.accepted, cpu_stats.accepted);
  EXPECT_EQ(gpu_stats.relaxed, cpu_stats.relaxed);
  EXPECT_EQ(gpu_stats.target_checked, cpu_stats.target_checked);
  const std::vector<float> gpu_logprobs = dc.logprobs.read();
  for (std::size_t i = 0; i < slots; ++i) {
    if (logprobs[i] == 12345.0f) {
      EXPECT_EQ(gpu_logprobs[i], 12345.0f) << "slot " << i;
    } else {
      // p is the CPU's bit for bit (block_logit_rows.cuh); log p is the double log of the
      // device, correctly rounded to within an ulp of double, rounded to float.
      EXPECT_EQ(gpu_logprobs[i], logprobs[i]) << "slot " << i;
    }
  }
}

/// Every built-in rule (Block on chains, Traversal with q), Coupled, a user's rule (typical acceptance) and the statistics probe.
template <class Logit>
void every_rule(const LogitsCase& c, std::uint64_t seed) {
  Inputs in{DeviceArray<float>(c.scores), DeviceArray<float>(c.accept_probs)};
  const Randomness r{seed, 3};
  SCOPED_TRACE("seed " + std::to_string(seed));
  expect_same<Logit>(RulePair<Standard>{}, c, r);
  expect_same<Logit>(RulePair<Greedy>{}, c, r);
  expect_same<Logit>(RulePair<Ears>{{0.3f}, {0.3f}}, c, r);
  expect_same<Logit>(RulePair<Fsd>{{Divergence::js, 0.3f}, {Divergence::js, 0.3f}}, c, r);
  expect_same<Logit>(RulePair<Fsd>{{Divergence::kl_target_draft, 0.5f}, {Divergence::kl_target_draft, 0.5f}}, c, r);
  expect_same<Logit>(RulePair<ReducibleFsd>{{Divergence::tv, 0.4f}, {Divergence::tv, 0.4f}}, c, r);
  expect_same<Logit>(RulePair<Sprinter>{{0.5f, c.scores.data()}, {0.5f, in.scores.get()}}, c, r);
  expect_same<Logit>(RulePair<Coupled>{}, c, r);
  expect_same<Logit>(RulePair<TypicalAcceptance>{}, c, r);
  expect_same<Logit>(RulePair<Probe>{}, c, r);
  if (!c.one_hot) expect_same<Logit>(RulePair<Traversal>{}, c, r);  // i.i.d. children, with q
  if (!c.tree) {
    expect_same<Logit>(RulePair<Block>{}, c, r);  // chains only: its walk is core/block_walk.hpp's
    expect_same<Logit>(RulePair<SpecDecPP<Standard>>{{0.6f, c.accept_probs.data(), {}},
                                                     {0.6f, in.accept_probs.get(), {}}},
                       c, r);
  }
}

// V = 3000 spans three draw chunks (core::chunk_length's minimum is 1024).
TEST(LogitsCpuMatch, FloatChainsEveryRuleAndParameter) {
  REQUIRE_DEVICE();
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    every_rule<float>(LogitsCase(seed, 40, 3000, seed % 2 == 1, false, false, false, false, false), seed);
  }
}

TEST(LogitsCpuMatch, FloatChainsWithGuidanceBitmaskAndReducedDraftVocabulary) {
  REQUIRE_DEVICE();
  for (std::uint32_t seed = 5; seed <= 7; ++seed) {
    every_rule<float>(LogitsCase(seed, 40, 3000, true, false, false, true, true, true), seed);
  }
}

TEST(LogitsCpuMatch, OneHotDrafts) {
  REQUIRE_DEVICE();
  every_rule<float>(LogitsCase(8, 40, 2000, true, false, true, false, true, true), 8);
}

TEST(LogitsCpuMatch, HalfLogits) {
  REQUIRE_DEVICE();
  every_rule<__half>(LogitsCase(9, 40, 3000, false, false, false, true, true, true), 9);
}

TEST(LogitsCpuMatch, Bfloat16Logits) {
  REQUIRE_DEVICE();
  // bf16's 8-bit mantissa rounds spread logits onto ties as well.
  every_rule<__nv_bfloat16>(LogitsCase(10, 40, 3000, false, false, false, true, true, true), 10);
}

TEST(LogitsCpuMatch, Trees) {
  REQUIRE_DEVICE();
  for (std::uint32_t seed = 11; seed <= 12; ++seed) {
    every_rule<float>(LogitsCase(seed, 30, 2500, seed % 2 == 0, true, false, seed == 12, true, true), seed);
  }
}

TEST(LogitsCpuMatch, PenaltiesAndBiasPerDraftPosition) {
  REQUIRE_DEVICE();
  // Chains and trees, every optional field, a reduced draft vocabulary in one of each.
  for (std::uint32_t seed = 14; seed <= 17; ++seed) {
    LogitsCase c(seed, 30, 2500, seed % 2 == 0, seed >= 16, false, seed % 2 == 1, true, true);
    c.add_lists(seed);
    every_rule<float>(c, seed);
  }
  LogitsCase half(18, 20, 3000, false, false, false, false, true, true);
  half.add_lists(18);
  every_rule<__half>(half, 18);
}

TEST(LogitsCpuMatch, LargeVocabularyBf16) {
  REQUIRE_DEVICE();
  const LogitsCase c(13, 8, 128256, false, false, false, false, false, false);
  expect_same<__nv_bfloat16>(RulePair<Standard>{}, c, Randomness{13, 1});
  expect_same<__nv_bfloat16>(RulePair<Coupled>{}, c, Randomness{13, 1});
}

// ------------------------------------------------------------------ bad input

/// Runs Standard on both backends over a case the caller broke; expects the CPU's message from
/// check() and no output written.
template <class Logit = float, class Break>
void expect_same_error(LogitsCase c, const Break& break_it) {
  break_it(c);
  const std::vector<float> t = rounded<Logit>(c.target), d = rounded<Logit>(c.draft),
                           u = rounded<Logit>(c.unconditional);
  std::vector<std::int32_t> tokens(std::size_t(c.B) * c.width, 12345), accepted(c.B, 12345);
  LogitsChainBatch<float> cpu;
  c.fill(cpu);
  cpu.target_logits = t.data();
  cpu.draft_logits = c.one_hot ? nullptr : d.data();
  cpu.unconditional_logits = c.guided ? u.data() : nullptr;
  cpu.draft_offsets = c.offsets.data();
  std::string cpu_message;
  try {
    verify(Standard{}, cpu, Randomness{1, 1}, ChainOutput{tokens.data(), c.width, accepted.data()});
  } catch (const invalid_input& e) {
    cpu_message = e.what();
  }
  ASSERT_FALSE(cpu_message.empty()) << "the CPU accepted the broken input";
  DeviceCase<Logit> dc(c);
  auto gpu = dc.template batch<LogitsChainBatch<Logit>>(c);
  gpu.draft_offsets = dc.offsets.get();
  const ChainOutput out{dc.out_tokens.get(), c.width, dc.accepted.get()};
  dc.make_workspace(Standard{}, gpu, out);
  std::string gpu_message;
  try {
    cuda_ok(cuda::verify(Standard{}, gpu, Randomness{1, 1}, out, dc.workspace, nullptr));
    cuda::check(dc.workspace, nullptr);
  } catch (const invalid_input& e) {
    gpu_message = e.what();
  }
  EXPECT_EQ(gpu_message, cpu_message);
  for (const std::int32_t v : dc.out_tokens.read()) ASSERT_EQ(v, 12345);
  for (const std::int32_t v : dc.accepted.read()) ASSERT_EQ(v, 12345);
}

LogitsCase small_case(bool reduced = false) { return LogitsCase(21, 6, 300, true, false, false, reduced, true, false); }

TEST(LogitsBadInput, CoupledWithDeviceRandomnessNeedsPositions) {
  // DeviceRandomness carries positions like Randomness; without them Coupled is refused on the
  // host before any device work, so this runs anywhere (the pointers below are never read).
  const std::int32_t offsets[3] = {0, 1, 2}, drafts[2] = {0, 1};
  const float logits[8] = {};
  const SamplingParams params[2] = {};
  LogitsChainBatch<float> batch;
  batch.batch_size = 2;
  batch.vocab_size = 2;
  batch.draft_offsets = offsets;
  batch.draft_tokens = drafts;
  batch.target_logits = logits;
  batch.target_params = params;
  std::int32_t tokens[4] = {}, accepted[2] = {};
  const ChainOutput out{tokens, 2, accepted};
  const std::uint64_t word = 0;
  int placeholder = 0;
  std::string message;
  try {
    (void)cuda::verify(Coupled{}, batch, cuda::DeviceRandomness{&word, &word}, out,
                       cuda::Workspace{&placeholder, std::size_t{1} << 30}, nullptr);
  } catch (const invalid_input& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("randomness.positions is null"), std::string::npos) << message;
}

TEST(LogitsBadInput, VocabularyPastTheLargestIsRefusedInTheCpusWords) {
  // Past core::kMaxLogitsVocab a row's normaliser would leave its fixed-point word: refused on
  // the host by its size, before any device work, so this runs anywhere (nothing is read).
  const std::int32_t offsets[2] = {0, 1}, drafts[1] = {0};
  const float logits[1] = {};
  const SamplingParams params[1] = {};
  LogitsChainBatch<float> batch;
  batch.batch_size = 1;
  batch.vocab_size = core::kMaxLogitsVocab + 1;
  batch.draft_offsets = offsets;
  batch.draft_tokens = drafts;
  batch.target_logits = logits;
  batch.target_params = params;
  std::int32_t tokens[2] = {12345, 12345}, accepted[1] = {12345};
  const ChainOutput out{tokens, 2, accepted};
  std::string cpu_message, gpu_message;
  try {
    verify(Standard{}, batch, Randomness{1, 1}, out);
  } catch (const invalid_input& e) {
    cpu_message = e.what();
  }
  int placeholder = 0;
  try {
    (void)cuda::verify(Standard{}, batch, Randomness{1, 1}, out, cuda::Workspace{&placeholder, std::size_t{1} << 30},
                       nullptr);
  } catch (const invalid_input& e) {
    gpu_message = e.what();
  }
  EXPECT_NE(cpu_message.find("vocab_size = 4194305 exceeds 4194304"), std::string::npos) << cpu_message;
  EXPECT_EQ(gpu_message, cpu_message);
  EXPECT_EQ(tokens[0], 12345);
  EXPECT_EQ(accepted[0], 12345);
}

TEST(LogitsBadInput, NaNTargetLogitIsNamed) {
  REQUIRE_DEVICE();
  expect_same_error(small_case(), [](LogitsCase& c) { c.target[std::size_t(c.offsets[3] + 3) * c.V + 17] = NAN; });
}

TEST(LogitsBadInput, InfiniteDraftLogitIsNamed) {
  REQUIRE_DEVICE();
  expect_same_error(small_case(), [](LogitsCase& c) {
    for (float& l : c.draft) l = l > 3.0f ? INFINITY : l;
  });
}

TEST(LogitsBadInput, ParametersOutOfRange) {
  REQUIRE_DEVICE();
  expect_same_error(small_case(), [](LogitsCase& c) { c.target_params[4].top_p = 1.5f; });
  expect_same_error(small_case(), [](LogitsCase& c) { c.draft_params[2].temperature = -1.0f; });
  expect_same_error(small_case(), [](LogitsCase& c) { c.target_params[1].min_p = NAN; });
}

TEST(LogitsBadInput, DraftMapOutOfRangeOrNotInjective) {
  REQUIRE_DEVICE();
  expect_same_error(small_case(true), [](LogitsCase& c) { c.d2t[9] = c.V; });
  expect_same_error(small_case(true), [](LogitsCase& c) { c.d2t[12] = c.d2t[4]; });
  expect_same_error(small_case(true), [](LogitsCase& c) {
    c.d2t[30] = -2;
    c.d2t[20] = c.d2t[10];
  });
}

TEST(LogitsBadInput, GuidanceAndMaskedRows) {
  REQUIRE_DEVICE();
  expect_same_error(small_case(), [](LogitsCase& c) { c.scale[3] = INFINITY; });
  expect_same_error(small_case(), [](LogitsCase& c) { c.first_row[2] = -5; });
  expect_same_error(small_case(), [](LogitsCase& c) {  // every token masked in sequence 1's first row
    const std::size_t row = std::size_t(c.offsets[1] + 1);
    for (std::int32_t v = 0; v < c.V; ++v) c.target[row * c.V + v] = -INFINITY;
    c.first_row[1] = -1;
  });
}

TEST(LogitsBadInput, PenaltyAndBiasLists) {
  REQUIRE_DEVICE();
  const auto listed = [] {
    LogitsCase c = small_case();
    c.add_lists(21);
    return c;
  };
  expect_same_error(listed(), [](LogitsCase& c) { c.h_offsets[0] = 1; });
  expect_same_error(listed(), [](LogitsCase& c) { c.h_offsets[3] = c.h_offsets[2] - 1; });
  expect_same_error(listed(), [](LogitsCase& c) { c.h_tokens[c.h_offsets[2] + 1] = c.h_tokens[c.h_offsets[2]]; });
  expect_same_error(listed(), [](LogitsCase& c) { c.h_tokens[c.h_offsets[4]] = -1; });
  expect_same_error(listed(), [](LogitsCase& c) { c.h_counts[c.h_offsets[1] + 2] = -3; });
  expect_same_error(listed(), [](LogitsCase& c) { c.b_tokens[c.b_offsets[3]] = c.V; });
  expect_same_error(listed(), [](LogitsCase& c) { c.b_values[c.b_offsets[2] + 1] = NAN; });
  expect_same_error(listed(), [](LogitsCase& c) {  // two tokens biased twice: the lower one is named
    const std::int32_t o = c.b_offsets[1];
    c.b_tokens[o + 3] = c.b_tokens[o];
    c.b_tokens[o + 4] = c.b_tokens[o + 1];
  });
  expect_same_error(listed(), [](LogitsCase& c) {  // a history fault in a later sequence than a bias fault
    c.h_counts[c.h_offsets[4]] = -1;
    c.b_values[c.b_offsets[1]] = INFINITY;
  });
  expect_same_error(listed(), [](LogitsCase& c) {  // a bias that makes a finite logit overflow
    const std::size_t row = std::size_t(c.offsets[2] + 2) * c.V;
    c.target[row + c.b_tokens[c.b_offsets[2]]] = 3.0e38f;
    c.b_values[c.b_offsets[2]] = 3.0e38f;
  });
}

TEST(LogitsBadInput, LayoutFaultsComeFirstInTheCpuOrder) {
  REQUIRE_DEVICE();
  expect_same_error(small_case(), [](LogitsCase& c) {
    c.target_params[0].top_k = -3;  // a later stage than the token below, in an earlier sequence
    c.tokens.back() = c.V + 1;
  });
  expect_same_error(small_case(), [](LogitsCase& c) { c.width = 1; });
}

/// Gumbel noise of word 4099 i, and the log of the float whose bits are 1 + 2039 i: every binade
/// of positive finite floats, from the smallest subnormal to 3e38.
__global__ void shared_log_kernel(std::int32_t n, double* gumbels, double* logs) {
  for (std::int32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    gumbels[i] = core::gumbel(4099u * static_cast<std::uint32_t>(i));
    logs[i] = core::shared_log(double(__uint_as_float(1u + 2039u * static_cast<std::uint32_t>(i))));
  }
}

// Coupled's keys (log p + Gumbel) on the device are the host's bit for bit: the shared log is one
// sequence of IEEE operations (core/shared_log.hpp), where CUDA's log and libm's differ.
TEST(SharedLog, TheDeviceGivesTheHostsBits) {
  REQUIRE_DEVICE();
  const std::int32_t n = 1 << 20;  // the words wrap around 2^32
  const std::vector<double> zeros(static_cast<std::size_t>(n));
  DeviceArray<double> gumbels(zeros), logs(zeros);
  shared_log_kernel<<<256, 256>>>(n, gumbels.get(), logs.get());
  cuda_ok(cudaGetLastError());
  const std::vector<double> device_gumbels = gumbels.read(), device_logs = logs.read();
  std::int32_t differ = 0, first = -1;
  for (std::int32_t i = 0; i < n; ++i) {
    float p;
    const std::uint32_t bits = 1u + 2039u * static_cast<std::uint32_t>(i);
    std::memcpy(&p, &bits, sizeof p);
    const double g = core::gumbel(4099u * static_cast<std::uint32_t>(i)), l = core::shared_log(double(p));
    if (std::memcmp(&g, &device_gumbels[std::size_t(i)], sizeof g) != 0 ||
        std::memcmp(&l, &device_logs[std::size_t(i)], sizeof l) != 0) {
      if (first < 0) first = i;
      ++differ;
    }
  }
  EXPECT_EQ(differ, 0) << "first at i = " << first;
}

}  // namespace
}  // namespace specverify
