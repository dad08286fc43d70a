// libFuzzer target: verify() over tree batches with every rule that has a tree form.
//
// The input decodes into a rule with edge-case parameters and a TreeBatch: ragged node counts,
// parent links (mostly valid, sometimes a parent at or after its child, or below -1), a root with
// dozens of children, every Drafted, draft rows present or not, rows from a
// palette of NaN, inf, negative, subnormal and ordinary values, wide rows (several draw chunks),
// strides, caller uniforms, and an output row that may be too narrow. Buffers are sized exactly
// to what the batch describes, so ASan sees any read past them. The invariants (docs/api.md "Errors"
// and "Trees"): either invalid_input is thrown with every output untouched, or each sequence's
// row is an accepted path (each node the child of the one before, from the root, its token the
// node's) whose tokens the rows they were tested on give positive mass, one extra token in [0, V)
// with positive mass in the row it came from, then kNoToken (nodes too); logprobs are log p of
// each emitted token under that row; Greedy follows argmax; the statistics add up; the same input
// gives the same output. Input known to be malformed must throw; input known to be well formed
// must not.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "fuzz_check.hpp"
#include "specverify/specverify.hpp"
#include "typical_acceptance.hpp"

namespace {

using namespace specverify;
using fuzz::kBelowOne;
using fuzz::kInf;
using fuzz::kNaN;

constexpr std::int32_t kSentinel = 0x5eed5eed;
constexpr float kLogSentinel = 777.0f;

bool valid_value(float v) { return v >= 0.0f && v <= FLT_MAX; }

/// A probability-like value: mostly ordinary, sometimes every edge the library must handle.
float edge_value(FuzzedDataProvider& in, bool allow_bad) {
  static const float good[] = {0.0f, -0.0f, 1.0f, 0.5f, 1e-3f, FLT_MIN, 0x1p-149f, FLT_MAX, 1e30f, kBelowOne, 2.0f};
  static const float bad[] = {kNaN, kInf, -kInf, -1.0f, -0x1p-149f};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 140) return static_cast<float>(pick) / 139.0f;
  if (pick < 210 || !allow_bad) return good[pick % (sizeof good / sizeof *good)];
  return bad[pick % (sizeof bad / sizeof *bad)];
}

float edge_uniform(FuzzedDataProvider& in, bool allow_bad) {
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 48) return 0.0f;
  if (pick < 96) return kBelowOne;
  if (pick < 240 || !allow_bad) return static_cast<float>(pick - 96) / 144.0f * kBelowOne;
  static const float bad[] = {1.0f, -1e-30f, kNaN, 2.0f};
  return bad[pick % 4];
}

float edge_parameter(FuzzedDataProvider& in, float top) {
  static const float edges[] = {0.0f, 1.0f, kBelowOne, 1e-30f, FLT_MAX, kInf, kNaN, -1.0f, 1.0000001f};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 200) return static_cast<float>(pick) / 199.0f * top;
  return edges[pick % (sizeof edges / sizeof *edges)];
}

struct Case {
  TreeBatch<float> batch;
  Randomness randomness;
  TreeOutput out;
  bool known_bad = false;      // structurally malformed: verify must throw
  bool values_ok = true;       // every value written is a valid probability, every target row has mass
  bool scores_ok = true;
  std::vector<std::int32_t> offsets, parents, tokens, out_tokens, accepted, nodes;
  std::vector<float> p, q, accept_u, sample_u, scores, logprobs;
  std::vector<std::uint64_t> seeds;
  std::int64_t t_stride = 0, d_stride = 0;
};

void build(FuzzedDataProvider& in, Case& c) {
  const std::uint8_t shape = in.ConsumeIntegral<std::uint8_t>();
  const std::int32_t B = in.ConsumeIntegralInRange<std::int32_t>(0, 5);
  std::int32_t V = in.ConsumeIntegralInRange<std::int32_t>(1, 40);
  if (shape % 8 == 0) V = in.ConsumeIntegralInRange<std::int32_t>(1000, 2600);  // several draw chunks
  c.batch.batch_size = B;
  c.batch.vocab_size = V;
  c.batch.drafted = static_cast<Drafted>(in.ConsumeIntegralInRange<int>(0, 2));

  c.offsets.assign(std::size_t(B) + 1, 0);
  for (std::int32_t b = 0; b < B; ++b) {
    const std::uint8_t k = in.ConsumeIntegral<std::uint8_t>();
    c.offsets[std::size_t(b) + 1] = c.offsets[std::size_t(b)] + (k < 240 ? k % 10 : 60 + k % 12);
  }
  if (B > 0 && in.ConsumeIntegral<std::uint8_t>() >= 245) {  // decreasing, or not starting at 0
    c.known_bad = true;
    const std::int32_t at = in.ConsumeIntegralInRange<std::int32_t>(0, B);
    c.offsets[std::size_t(at)] = at == 0 ? 1 : c.offsets[std::size_t(at) - 1] - 1;
  }
  c.batch.node_offsets = c.offsets.data();
  if (c.known_bad) return;  // nothing else may be read
  const std::int32_t N = B > 0 ? c.offsets[std::size_t(B)] : 0;

  // Parent links: a child of any earlier node (or the root), a crowded root, or malformed.
  std::int32_t deepest = 0;
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t first = c.offsets[std::size_t(b)], n = c.offsets[std::size_t(b) + 1] - first;
    std::vector<std::int32_t> depth(std::size_t(n), 0);
    for (std::int32_t i = 0; i < n; ++i) {
      const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
      std::int32_t parent = n > 20 ? -1 : std::int32_t(pick % std::uint8_t(i + 1)) - 1;
      if (pick >= 250) {
        parent = pick % 2 ? i + (pick % 3) : -2 - pick % 3;
        c.known_bad = true;
      }
      c.parents.push_back(parent);
      if (parent >= -1 && parent < i) {
        depth[std::size_t(i)] = parent < 0 ? 1 : depth[std::size_t(parent)] + 1;
        deepest = std::max(deepest, depth[std::size_t(i)]);
      }
    }
  }
  c.batch.parents = c.parents.empty() ? nullptr : c.parents.data();
  for (std::int32_t g = 0; g < N; ++g) {
    const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
    std::int32_t x = pick % V;
    if (pick >= 252) {
      x = pick % 2 ? V + pick % 3 : -1 - pick % 3;
      c.known_bad = true;
    }
    c.tokens.push_back(x);
  }
  c.batch.draft_tokens = c.tokens.empty() ? nullptr : c.tokens.data();

  const auto stride = [&](std::int64_t& s) {
    const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
    s = pick < 200 ? 0 : pick < 250 ? std::int64_t{V} + pick % 5 : (V > 1 ? V - 1 : 0);
    if (pick >= 250 && V > 1) c.known_bad |= B > 0;
  };
  stride(c.batch.target_stride);
  stride(c.batch.draft_stride);
  c.t_stride = c.batch.target_stride ? c.batch.target_stride : V;
  c.d_stride = c.batch.draft_stride ? c.batch.draft_stride : V;

  // Rows: [N + B][stride], exactly sized; padding between rows holds NaN, which nothing may read.
  const std::int64_t rows = std::int64_t{N} + B;
  const auto fill = [&](std::vector<float>& data, std::int64_t s, bool target) {
    if (rows == 0) return;
    s = std::max<std::int64_t>(s, V);
    data.assign(static_cast<std::size_t>((rows - 1) * s + V), kNaN);
    const bool allow_bad = in.ConsumeIntegral<std::uint8_t>() >= 230;
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = data.data() + r * s;
      const std::uint8_t mode = in.ConsumeIntegral<std::uint8_t>();
      const float base = mode < 24 ? 0.0f : mode < 40 ? 0x1p-149f : mode < 48 ? FLT_MAX : 1.0f / V;
      bool mass = false;
      for (std::int32_t v = 0; v < V; ++v) {
        const bool explicit_value = V <= 64 || in.ConsumeIntegral<std::uint8_t>() < 8;
        row[v] = explicit_value && mode >= 16 ? edge_value(in, allow_bad) : base;
        c.values_ok = c.values_ok && valid_value(row[v]);
        mass = mass || row[v] > 0.0f;
      }
      if (target && !mass) c.values_ok = false;  // a row to draw from without mass is invalid input
    }
  };
  fill(c.p, c.t_stride, true);
  c.batch.target_probs = c.p.empty() ? nullptr : c.p.data();
  if (B > 0 && !c.batch.target_probs) c.known_bad = true;
  if (in.ConsumeIntegral<std::uint8_t>() >= 24) {
    fill(c.q, c.d_stride, false);
    c.batch.draft_probs = c.q.empty() ? nullptr : c.q.data();
  }
  if (B > 0 && c.batch.drafted != Drafted::deterministic && !c.batch.draft_probs) c.known_bad = true;

  c.randomness.seed = in.ConsumeIntegral<std::uint64_t>();
  c.randomness.offset = in.ConsumeIntegral<std::uint64_t>();
  if (B > 0 && in.ConsumeBool()) {
    c.seeds.resize(std::size_t(B));
    for (auto& s : c.seeds) s = in.ConsumeIntegral<std::uint64_t>();
    c.randomness.sequence_seeds = c.seeds.data();
  }
  if (N > 0 && in.ConsumeBool()) {
    const bool allow_bad = in.ConsumeIntegral<std::uint8_t>() >= 220;
    c.accept_u.resize(std::size_t(N));
    for (auto& u : c.accept_u) {
      u = edge_uniform(in, allow_bad);
      if (!(u >= 0.0f && u < 1.0f)) c.known_bad = true;
    }
    c.randomness.accept_uniforms = c.accept_u.data();
  }
  if (B > 0 && in.ConsumeBool()) {
    const bool allow_bad = in.ConsumeIntegral<std::uint8_t>() >= 220;
    c.sample_u.resize(std::size_t(B));
    for (auto& u : c.sample_u) {
      u = edge_uniform(in, allow_bad);
      if (!(u >= 0.0f && u < 1.0f)) c.known_bad = true;
    }
    c.randomness.sample_uniforms = c.sample_u.data();
  }

  std::int32_t width = deepest + 1 + in.ConsumeIntegralInRange<std::int32_t>(0, 2);
  if (in.ConsumeIntegral<std::uint8_t>() >= 245) {
    width = in.ConsumeIntegralInRange<std::int32_t>(0, deepest);
    if (B > 0) c.known_bad = true;
  }
  c.out.row_width = width;
  const std::size_t cells = std::size_t(B) * std::size_t(width);
  c.out_tokens.assign(cells, kSentinel);
  c.nodes.assign(cells, kSentinel);
  c.logprobs.assign(cells, kLogSentinel);
  c.accepted.assign(std::size_t(B), kSentinel);
  c.out.tokens = c.out_tokens.data();
  c.out.num_accepted = c.accepted.data();
  if (in.ConsumeBool()) c.out.accepted_nodes = c.nodes.data();
  if (in.ConsumeBool()) c.out.logprobs = c.logprobs.data();
}

void per_node(FuzzedDataProvider& in, Case& c) {
  c.scores.resize(c.tokens.size());
  for (auto& s : c.scores) {
    const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
    s = pick < 64 ? 0.0f : pick < 128 ? 1.0f : pick < 250 ? (pick - 128) / 122.0f : kNaN;
    if (!(s >= 0.0f && s <= 1.0f)) c.scores_ok = false;
  }
}

const Case* current = nullptr;

void describe_current_case() {
  if (!current) return;
  const Case& c = *current;
  std::fprintf(stderr, "B=%d V=%d drafted=%d strides=%lld,%lld known_bad=%d values_ok=%d width=%d q=%d\n",
               c.batch.batch_size, c.batch.vocab_size, int(c.batch.drafted), (long long)c.batch.target_stride,
               (long long)c.batch.draft_stride, c.known_bad, c.values_ok, c.out.row_width,
               c.batch.draft_probs != nullptr);
  const auto ints = [](const char* name, const std::vector<std::int32_t>& v) {
    std::fprintf(stderr, "%s:", name);
    for (std::size_t i = 0; i < v.size() && i < 200; ++i) std::fprintf(stderr, " %d", v[i]);
    std::fprintf(stderr, "\n");
  };
  ints("offsets", c.offsets);
  ints("parents", c.parents);
  ints("tokens", c.tokens);
  ints("out", c.out_tokens);
  ints("nodes", c.nodes);
  ints("accepted", c.accepted);
}

bool in_range(float v, float lo, float hi) { return v >= lo && v <= hi; }

template <class Rule>
void run(const Rule& rule, Case& c, bool params_ok) {
  const TreeBatch<float>& batch = c.batch;
  VerifyStats stats;
  bool threw = false;
  try {
    stats = verify(rule, batch, c.randomness, c.out);
  } catch (const invalid_input&) {
    threw = true;
  }
  if (threw) {
    for (auto t : c.out_tokens) CHECK(t == kSentinel, t);
    for (auto t : c.nodes) CHECK(t == kSentinel, t);
    for (auto n : c.accepted) CHECK(n == kSentinel, n);
    for (auto l : c.logprobs) CHECK(l == kLogSentinel);
    CHECK(!(params_ok && !c.known_bad && c.values_ok));  // well formed must not throw
    return;
  }
  CHECK(!c.known_bad && params_ok);
  if (!c.out.accepted_nodes) {  // the nodes name the path (siblings may share a token): ask for them
    const std::vector<std::int32_t> tokens = c.out_tokens, counts = c.accepted;
    TreeOutput with_nodes = c.out;
    with_nodes.accepted_nodes = c.nodes.data();
    verify(rule, batch, c.randomness, with_nodes);
    CHECK(tokens == c.out_tokens && counts == c.accepted);
  }
  const std::int32_t B = batch.batch_size, V = batch.vocab_size, width = c.out.row_width;
  std::int64_t drafted = 0, accepted = 0;
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t first = c.offsets[std::size_t(b)], count = c.offsets[std::size_t(b) + 1] - first;
    const std::int32_t n = c.accepted[std::size_t(b)];
    CHECK(n >= 0 && n < width, n, width);
    const std::int32_t* row = c.out_tokens.data() + std::size_t(b) * width;
    const std::int32_t* nodes = c.nodes.data() + std::size_t(b) * width;
    const float* logprobs = c.logprobs.data() + std::size_t(b) * width;
    // Which node each emitted token came after: the accepted path, from the root.
    std::int32_t from = -1;
    for (std::int32_t i = 0; i <= n; ++i) {
      const std::int64_t p_row = std::int64_t{first} + b + from + 1;
      const float* p = c.p.data() + p_row * c.t_stride;
      const std::int32_t token = row[i];
      CHECK(token >= 0 && token < V, token, V);
      CHECK(p[token] > 0.0f, b, i);  // no rule accepts or draws a token the target excludes
      if (c.out.logprobs) CHECK(logprobs[i] == static_cast<float>(std::log(static_cast<double>(p[token]))), b, i);
      std::int32_t greedy_pick = -1;  // the child Greedy must follow: the first equal to argmax p
      const std::int32_t argmax = static_cast<std::int32_t>(std::max_element(p, p + V) - p);
      for (std::int32_t k = from + 1; k < count; ++k) {
        if (c.parents[std::size_t(first + k)] == from && c.tokens[std::size_t(first + k)] == argmax) {
          greedy_pick = k;
          break;
        }
      }
      if (i == n) {  // the extra token
        if (rule_traits<Rule>::on_bonus == Draw::argmax) {
          CHECK(greedy_pick < 0, greedy_pick);
          CHECK(token == argmax, token, argmax);
        }
        break;
      }
      const std::int32_t node = nodes[i];
      CHECK(node > from && node < count, node, count);
      CHECK(c.parents[std::size_t(first + node)] == from, node, from);
      CHECK(c.tokens[std::size_t(first + node)] == token, node, token);
      if (rule_traits<Rule>::on_bonus == Draw::argmax) CHECK(node == greedy_pick, node, greedy_pick);
      from = node;
    }
    for (std::int32_t i = n + 1; i < width; ++i) CHECK(row[i] == kNoToken, i, row[i]);
    for (std::int32_t i = n; i < width; ++i) CHECK(nodes[i] == kNoToken, i, nodes[i]);
    if (c.out.logprobs) {
      for (std::int32_t i = n + 1; i < width; ++i) CHECK(logprobs[i] == kLogSentinel, i);
    }
    drafted += count;
    accepted += n;
  }
  CHECK(stats.drafted == drafted, stats.drafted, drafted);
  CHECK(stats.accepted == accepted, stats.accepted, accepted);
  CHECK(stats.relaxed >= 0 && stats.relaxed <= accepted, stats.relaxed, accepted);

  const std::vector<std::int32_t> first_tokens = c.out_tokens, first_accepted = c.accepted;
  verify(rule, batch, c.randomness, c.out);
  CHECK(first_tokens == c.out_tokens && first_accepted == c.accepted);
}

Divergence pick_divergence(std::uint8_t v) { return static_cast<Divergence>(v % 5); }

/// Whether Traversal takes the batch: children sampled i.i.d. with q (an empty batch asks for
/// nothing, as for every rule), and no path deeper than its frames (parents out of order make the
/// case known bad anyway).
bool traversal_fits(const Case& c) {
  if (c.batch.batch_size == 0) return true;
  if (c.batch.drafted != Drafted::sampled || !c.batch.draft_probs) return false;
  for (std::size_t b = 0; b + 1 < c.offsets.size(); ++b) {
    const std::int32_t first = c.offsets[b], count = c.offsets[b + 1] - first;
    if (first < 0 || count <= 0 || std::size_t(first) + std::size_t(count) > c.parents.size()) continue;
    std::vector<std::int32_t> depth(std::size_t(count), 1);
    for (std::int32_t i = 0; i < count; ++i) {
      const std::int32_t parent = c.parents[std::size_t(first + i)];
      if (parent >= 0 && parent < i) depth[std::size_t(i)] = depth[std::size_t(parent)] + 1;
      if (depth[std::size_t(i)] > core::kTraversalDepth) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::describe_case = describe_current_case;
  FuzzedDataProvider in(data, size);
  const std::uint8_t which = in.ConsumeIntegral<std::uint8_t>() % 8;
  const std::uint8_t kind = in.ConsumeIntegral<std::uint8_t>();
  const float a = edge_parameter(in, 2.0f), b = edge_parameter(in, 1.0f);
  Case c;
  current = &c;
  build(in, c);
  per_node(in, c);
  const float* scores = c.scores.empty() ? nullptr : c.scores.data();
  const bool nonneg_a = in_range(a, 0.0f, 3.4e38f);
  const bool scores_ok = (scores || c.tokens.empty()) && c.scores_ok;
  switch (which) {
    case 0: run(Standard{}, c, true); break;
    case 1: run(Greedy{}, c, true); break;
    case 2: run(Ears{a}, c, nonneg_a); break;
    case 3: run(Fsd{pick_divergence(kind), a}, c, nonneg_a); break;
    case 4: run(ReducibleFsd{pick_divergence(kind), a}, c, nonneg_a); break;
    case 5: {
      static const float kNoScore = 0.0f;  // a non-null pointer for a batch without nodes
      run(Sprinter{b, scores ? scores : &kNoScore}, c, in_range(b, 0.0f, 1.0f) && scores_ok);
      break;
    }
    case 6: run(TypicalAcceptance{b, a}, c, in_range(b, 0.0f, 1.0f) && nonneg_a); break;
    default: run(Traversal{}, c, traversal_fits(c)); break;
  }
  current = nullptr;
  return 0;
}
