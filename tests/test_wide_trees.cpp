// Wide tree nodes (core/residual.hpp): each child tested against what is left of p costs one pass
// over the row, however many siblings were rejected before it, and gives the bits it gave when
// every sibling's r was recomputed from the first step at every weight (cubic in the children
// for one-hot drafts, quartic without replacement).
//
// The wide nodes below took hours that way (4,000 one-hot children took 70 s); now each child
// costs one pass over the row (bench_trees' WideDeterministicNode measures it). The known hashes were taken from that code (one definition of the
// weight, so the same bits on every instruction set, thread count and backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "specverify/specverify.hpp"

namespace sv = specverify;

namespace {

/// [rows][V] floats of 0, calloc'd: rows never written (nor read) cost no memory.
class RowBlock {
 public:
  RowBlock() = default;
  RowBlock(std::int64_t rows, std::int32_t V)
      : data_(static_cast<float*>(std::calloc(static_cast<std::size_t>(rows) * static_cast<std::size_t>(V), sizeof(float))),
              &std::free),
        V_(V) {
    if (!data_) throw std::bad_alloc();
  }
  float* row(std::int64_t r) const { return data_.get() + r * V_; }

 private:
  std::unique_ptr<float, decltype(&std::free)> data_{nullptr, &std::free};
  std::int32_t V_ = 0;
};

/// One tree (B = 1) with owned rows: [N + 1][V] of p and of q, root first, of which the first
/// `written` hold rows (the others are never read).
struct Tree {
  std::int32_t V = 0;
  sv::Drafted drafted = sv::Drafted::deterministic;
  std::vector<std::int32_t> offsets, parents, tokens;
  RowBlock p, q;
  std::int32_t written = 0;
  std::vector<float> accept_u, sample_u;  // caller uniforms, when not empty

  sv::TreeBatch<float> batch() const {
    sv::TreeBatch<float> b;
    b.batch_size = 1;
    b.vocab_size = V;
    b.node_offsets = offsets.data();
    b.parents = parents.data();
    b.draft_tokens = tokens.data();
    b.target_probs = p.row(0);
    b.draft_probs = drafted == sv::Drafted::deterministic ? nullptr : q.row(0);
    b.drafted = drafted;
    return b;
  }
  sv::Randomness randomness(std::uint64_t seed) const {
    sv::Randomness r{seed, 7};
    if (!accept_u.empty()) r.accept_uniforms = accept_u.data();
    if (!sample_u.empty()) r.sample_uniforms = sample_u.data();
    return r;
  }
};

/// The same tree over logits: log p and log q (-inf where 0) of the rows written, T = 1.
struct LogitTree {
  RowBlock target, draft;
  sv::SamplingParams params{1.0f, 0, 1.0f, 0.0f};
  sv::LogitsTreeBatch<float> batch;

  explicit LogitTree(const Tree& t)
      : target(std::int64_t(t.tokens.size()) + 1, t.V), draft(std::int64_t(t.tokens.size()) + 1, t.V) {
    for (std::int32_t r = 0; r < t.written; ++r) {
      for (std::int32_t v = 0; v < t.V; ++v) {
        const float p = t.p.row(r)[v], q = t.q.row(r)[v];
        target.row(r)[v] = p > 0.0f ? std::log(p) : -INFINITY;
        draft.row(r)[v] = q > 0.0f ? std::log(q) : -INFINITY;
      }
    }
    batch.batch_size = 1;
    batch.vocab_size = t.V;
    batch.node_offsets = t.offsets.data();
    batch.parents = t.parents.data();
    batch.draft_tokens = t.tokens.data();
    batch.target_logits = target.row(0);
    batch.draft_logits = t.drafted == sv::Drafted::deterministic ? nullptr : draft.row(0);
    batch.drafted = t.drafted;
    batch.target_params = &params;
  }
};

/// Everything verify returns or writes for one tree.
struct Outcome {
  std::vector<std::int32_t> tokens, accepted, nodes;
  std::vector<float> logprobs;
  sv::VerifyStats stats{};
};

template <class Run>
Outcome run(std::int32_t width, Run verify) {
  Outcome o;
  o.tokens.assign(std::size_t(width), -7);
  o.nodes.assign(std::size_t(width), -7);
  o.logprobs.assign(std::size_t(width), 777.0f);
  o.accepted.assign(1, -7);
  o.stats = verify(sv::TreeOutput{o.tokens.data(), width, o.accepted.data(), o.nodes.data(), o.logprobs.data()});
  return o;
}

// ---- Wide nodes that took hours: every child rejected, against a plain reference.

/// A root with n children (tokens: a shuffled n of V, so siblings come in no order), none of
/// which passes: deterministic children share half of p (each at most 500 / n of it; the other
/// tokens keep the other half, so r(c) <= 1000 / n < u = 0.999 however much mass the rejected
/// siblings took away), and each rejection sets r(c) <- 0; without replacement p gives the
/// children nothing and q is uniform over them, so r - q_i is r off the children. Either way what
/// is left at the end is p off the children, renormalised.
Tree wide_rejected(std::int32_t n, std::int32_t V, sv::Drafted how, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Tree t;
  t.V = V;
  t.drafted = how;
  t.offsets = {0, n};
  t.parents.assign(std::size_t(n), -1);
  std::vector<std::int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  t.tokens.assign(order.begin(), order.begin() + n);
  std::vector<double> w(static_cast<std::size_t>(V));
  double children = 0, others = 0;
  for (std::int32_t i = 0; i < V; ++i) {
    w[std::size_t(order[std::size_t(i)])] = double(1 + rng() % 1000);
    (i < n ? children : others) += w[std::size_t(order[std::size_t(i)])];
  }
  const double share = how == sv::Drafted::deterministic ? 0.5 : 0.0;  // the children's
  std::vector<float> root(static_cast<std::size_t>(V)), q(static_cast<std::size_t>(V), 0.0f);
  for (std::int32_t i = 0; i < V; ++i) {
    const auto v = std::size_t(order[std::size_t(i)]);
    root[v] = float(i < n ? w[v] / children * share : w[v] / others * (1.0 - share));
    if (i < n) q[v] = 1.0f / float(n);
  }
  t.p = RowBlock(n + 1, V);
  t.q = RowBlock(n + 1, V);
  t.written = 1;  // no child passes: only the root's rows are read
  std::copy(root.begin(), root.end(), t.p.row(0));
  std::copy(q.begin(), q.end(), t.q.row(0));
  t.accept_u.assign(std::size_t(n), 0.999f);
  t.sample_u = {0.0f};
  return t;
}

/// The plain reference's extra token: the inverse CDF of p off the children (in double), with a
/// u whose threshold lies well inside its token's interval (so the library's FixedSums, and the
/// logits view's probabilities, draw the same).
std::int32_t reference_extra(Tree& t, std::mt19937_64& rng) {
  std::vector<double> left(t.p.row(0), t.p.row(0) + t.V);
  for (const std::int32_t x : t.tokens) left[std::size_t(x)] = 0.0;
  const double total = std::accumulate(left.begin(), left.end(), 0.0);
  for (;;) {
    const float u = float(rng() % 1000000) / 1e6f;
    const double threshold = double(u) * total;
    double before = 0;
    for (std::int32_t v = 0; v < t.V; ++v) {
      if (!(left[std::size_t(v)] > 0)) continue;
      const double after = before + left[std::size_t(v)];
      if (after > threshold) {
        if (threshold - before < 1e-6 * total || after - threshold < 1e-6 * total) break;  // too close: another u
        t.sample_u = {u};
        return v;
      }
      before = after;
    }
  }
}

/// Verifies a wide_rejected tree with Standard over its rows of p, or over their logits, and
/// compares every output with the reference's.
void expect_every_child_rejected(std::int32_t n, std::int32_t V, sv::Drafted how, bool from_logits) {
  std::mt19937_64 rng(91 + std::uint64_t(how));
  Tree t = wide_rejected(n, V, how, rng());
  const std::int32_t expected = reference_extra(t, rng);
  const LogitTree l(t);
  const std::string where = std::to_string(n) + " children, Drafted " + std::to_string(int(how)) +
                            (from_logits ? ", logits" : ", probabilities");
  const Outcome o = run(2, [&](const sv::TreeOutput& out) {
    return from_logits ? sv::verify(sv::Standard{}, l.batch, t.randomness(1), out)
                       : sv::verify(sv::Standard{}, t.batch(), t.randomness(1), out);
  });
  EXPECT_EQ(o.accepted[0], 0) << where;
  EXPECT_EQ(o.tokens[0], expected) << where;
  EXPECT_EQ(o.tokens[1], sv::kNoToken) << where;
  EXPECT_EQ(o.nodes[0], sv::kNoToken) << where;
  EXPECT_NEAR(o.logprobs[0], std::log(t.p.row(0)[expected]), 1e-5) << where;
  EXPECT_EQ(o.stats.drafted, n) << where;
  EXPECT_EQ(o.stats.accepted, 0) << where;
  EXPECT_EQ(o.stats.target_checked, n) << where;
}

TEST(WideNodes, EightThousandRejectedDeterministicChildren) {
  expect_every_child_rejected(8000, 8192, sv::Drafted::deterministic, false);
}

// Logits views cost an exp per element and pass: fewer children.
TEST(WideNodes, SixThousandRejectedDeterministicChildrenOverLogits) {
  expect_every_child_rejected(6000, 6144, sv::Drafted::deterministic, true);
}

TEST(WideNodes, ThreeThousandRejectedChildrenWithoutReplacement) {
  expect_every_child_rejected(3000, 3360, sv::Drafted::sampled_without_replacement, false);
  expect_every_child_rejected(3000, 3360, sv::Drafted::sampled_without_replacement, true);
}

// ---- The same bits as before, by hash, on narrower nodes where that code took seconds at most.

/// FNV-1a over an outcome's every field.
struct Hash {
  std::uint64_t h = 1469598103934665603ull;
  void bytes(const void* data, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  template <class T>
  void all(const std::vector<T>& v) {
    bytes(v.data(), v.size() * sizeof(T));
  }
  void add(const Outcome& o) {
    all(o.tokens);
    all(o.accepted);
    all(o.nodes);
    all(o.logprobs);
    const std::int64_t s[4] = {o.stats.drafted, o.stats.accepted, o.stats.relaxed, o.stats.target_checked};
    bytes(s, sizeof s);
  }
};

/// A row of p from the generator's integers alone (no std:: distribution, whose values differ
/// between standard libraries): weights 1 .. 1000, a fifth of them 0, and with `peak` one token holding all
/// but about 1e-7 of it: where what is left of p rounds above 1 at that token.
std::vector<float> random_row(std::int32_t V, std::mt19937_64& rng, std::int32_t peak = -1) {
  std::vector<double> w(static_cast<std::size_t>(V));
  double total = 0;
  for (auto& x : w) total += x = rng() % 5 == 0 ? 0.0 : double(1 + rng() % 1000);
  if (peak >= 0) {
    total -= w[std::size_t(peak)];
    w[std::size_t(peak)] = total * 1e7;
    total += w[std::size_t(peak)];
  }
  std::vector<float> p(static_cast<std::size_t>(V));
  for (std::int32_t v = 0; v < V; ++v) p[std::size_t(v)] = float(w[std::size_t(v)] / total);
  return p;
}

/// A root with n children and three grandchildren, rows at random. kind 0: p at random; 1: the
/// children's tokens given little of p (most rejected); 2: the middle child's token holding
/// nearly all of p; 3: p one-hot at the middle child's token. About one token in eleven repeats
/// a sibling's.
Tree random_wide(std::int32_t n, std::int32_t V, sv::Drafted how, int kind, std::mt19937_64& rng) {
  Tree t;
  t.V = V;
  t.drafted = how;
  const std::int32_t N = n + 3;
  t.offsets = {0, N};
  t.parents.assign(std::size_t(n), -1);
  for (std::int32_t i = 0; i < 3; ++i) t.parents.push_back(std::int32_t(rng() % std::uint64_t(n)));
  std::vector<std::int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  for (std::int32_t i = V - 1; i > 0; --i) std::swap(order[std::size_t(i)], order[rng() % std::uint64_t(i + 1)]);
  for (std::int32_t i = 0; i < N; ++i) {
    t.tokens.push_back(rng() % 11 == 0 ? t.tokens.empty() ? 0 : t.tokens[rng() % t.tokens.size()] : order[std::size_t(i)]);
  }
  const std::int32_t middle = t.tokens[std::size_t(n / 2)];
  t.p = RowBlock(N + 1, V);
  t.q = RowBlock(N + 1, V);
  t.written = N + 1;
  for (std::int32_t r = 0; r <= N; ++r) {
    std::vector<float> p = random_row(V, rng, r == 0 && kind == 2 ? middle : -1);
    if (r == 0 && kind == 1) {
      for (std::int32_t i = 0; i < n; ++i) p[std::size_t(t.tokens[std::size_t(i)])] *= 0.01f;
    }
    if (r == 0 && kind == 3) {
      std::fill(p.begin(), p.end(), 0.0f);
      p[std::size_t(middle)] = 1.0f;
    }
    std::copy(p.begin(), p.end(), t.p.row(r));
    const std::vector<float> q = random_row(V, rng);
    std::copy(q.begin(), q.end(), t.q.row(r));
  }
  return t;
}

/// Every residual rule's outcome on t over probability and logits rows, into h.
void hash_tree(Hash& h, const Tree& t, std::uint64_t seed) {
  const LogitTree l(t);
  const auto both = [&](const auto& rule) {
    h.add(run(3, [&](const sv::TreeOutput& out) { return sv::verify(rule, t.batch(), t.randomness(seed), out); }));
    h.add(run(3, [&](const sv::TreeOutput& out) { return sv::verify(rule, l.batch, t.randomness(seed), out); }));
  };
  both(sv::Standard{});
  both(sv::Ears{0.3f});
  both(sv::ReducibleFsd{sv::Divergence::tv, 0.4f});
}

std::uint64_t wide_nodes_hash(sv::Drafted how) {
  std::mt19937_64 rng(2024 + std::uint64_t(how));
  Hash h;
  for (const std::int32_t n : {50, 120, 300}) {
    for (int kind = 0; kind < 4; ++kind) {
      const Tree t = random_wide(n, kind >= 2 ? 400 : 700, how, kind, rng);
      for (std::uint64_t seed = 1; seed <= 3; ++seed) hash_tree(h, t, seed);
    }
  }
  return h.h;
}

std::string hex(std::uint64_t h) {
  char text[20];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

TEST(WideNodes, DeterministicNodesGiveTheBitsTheyGave) {
  EXPECT_EQ(hex(wide_nodes_hash(sv::Drafted::deterministic)), "550fb12bde0e02dd");
}

TEST(WideNodes, WithoutReplacementNodesGiveTheBitsTheyGave) {
  EXPECT_EQ(hex(wide_nodes_hash(sv::Drafted::sampled_without_replacement)), "2f197f7192586e0a");
}

TEST(WideNodes, SampledNodesGiveTheBitsTheyGave) {
  EXPECT_EQ(hex(wide_nodes_hash(sv::Drafted::sampled)), "ab1ebc4af4c9372e");
}

/// One residual of rows p and q (probability rows, or the views `rows` opened) absorbing 40
/// siblings one after another, each step's mass and draws by the vector kernel and by the scalar
/// definition, and r at the sibling, into hs[how]. The siblings are chosen as no rule rejects them,
/// so that without replacement some keep r above 0 after their own step (r(c) > q(c)): the steps
/// kept for them are hashed too; one-hot, a rejected token weighs 0 from its step on.
template <class Rows, class View>
void hash_steps(Hash (&hs)[3], Rows& rows, const View& p, const View& q, std::int32_t V, std::int32_t peak,
                std::mt19937_64& rng) {
  for (const sv::Drafted how : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    Hash& h = hs[static_cast<int>(how)];
    sv::core::Residual<View> r;
    r.p = p;
    r.q = q;
    r.has_q = how != sv::Drafted::deterministic;
    r.drafted = how;
    r.siblings = rows.siblings(40);
    for (std::int32_t step = 0; step < 40; ++step) {
      const auto pick = rng() % 5;
      const std::int32_t x = pick == 0   ? peak
                             : pick == 1 ? (peak + 1) % V
                             : pick == 2 && r.steps > 0 ? r.siblings.token[rng() % std::uint64_t(r.steps)]
                                                        : std::int32_t(rng() % std::uint64_t(V));
      const double at = r.at(rows, x), z = rows.mass(r, x).value, scalar = sv::core::residual_mass(rows, r, x).value;
      h.bytes(&at, sizeof at);
      h.bytes(&z, sizeof z);
      h.bytes(&scalar, sizeof scalar);
      for (const float u : {0.1f, 0.5f, 0.93f}) {
        const std::int32_t t[2] = {rows.draw(r, x, u).value, sv::core::residual_draw(rows, r, x, u).value};
        h.bytes(t, sizeof t);
      }
      if (z > 0) r.absorb(rows, x, z);
    }
    const std::int32_t t = rows.draw(r, sv::kNoToken, 0.4f).value;
    h.bytes(&t, sizeof t);
  }
}

// Rows at random, with a peak (all but about 1e-7 of p at one token), and with p at two tokens
// only (the second's share from 1/4 down to 2^-24, where renormalising step by step once rounded
// r above 1 at the first), over probabilities and logits.
TEST(WideNodes, AbsorbedStepsGiveTheBitsTheyGave) {
  std::mt19937_64 rng(5150);
  Hash h[3];  // by Drafted
  constexpr std::int32_t V = 300;
  for (int kind = 0; kind < 3; ++kind) {
    for (int trial = 0; trial < 12; ++trial) {
      const std::int32_t peak = std::int32_t(rng() % V);
      std::vector<float> p = random_row(V, rng, kind == 1 ? peak : -1), q = random_row(V, rng);
      if (kind == 2) {
        const float second = float(1 + rng() % 255) * std::ldexp(1.0f, -8 - trial);
        std::fill(p.begin(), p.end(), 0.0f);
        p[std::size_t(peak)] = 1.0f - second;
        p[std::size_t((peak + 1) % V)] = second;
      }
      sv::cpu::Rows<> rows{V};
      hash_steps(h, rows, static_cast<const float*>(p.data()), static_cast<const float*>(q.data()), V, peak, rng);
      std::vector<float> lp, lq;
      for (const float x : p) lp.push_back(x > 0.0f ? std::log(x) : -INFINITY);
      for (const float x : q) lq.push_back(x > 0.0f ? std::log(x) : -INFINITY);
      sv::cpu::OpenedLogitRows<> logit_rows(V, V);
      sv::core::LogitRow<float> target, draft;
      target.logits = lp.data();
      draft.logits = lq.data();
      target.n = draft.n = V;
      const auto pv = logit_rows.open(target);
      const auto qv = logit_rows.open(draft);
      hash_steps(h, logit_rows, pv, qv, V, peak, rng);
    }
  }
  EXPECT_EQ(hex(h[0].h), "b26215ba05b1a729");
  EXPECT_EQ(hex(h[1].h), "10ecec7feeb07c66");
  // One-hot residuals are kept unnormalised (core/residual.hpp): their masses are the row's sum
  // less the rejected tokens' terms, so these bits are that definition's, not version 3's.
  EXPECT_EQ(hex(h[2].h), "898b16aa86eadb52");
}

// Chains never absorb a sibling: the same bits, with draft rows and one-hot.
TEST(WideNodes, ChainsGiveTheBitsTheyGave) {
  std::mt19937_64 rng(77);
  constexpr std::int32_t B = 24, K = 6, V = 700;
  std::vector<std::int32_t> offsets{0}, tokens, out(std::size_t(B) * (K + 1)), accepted(B);
  std::vector<float> p, q, logprobs(std::size_t(B) * (K + 1));
  for (std::int32_t b = 0; b < B; ++b) {
    offsets.push_back(offsets.back() + K);
    for (std::int32_t j = 0; j < K; ++j) tokens.push_back(std::int32_t(rng() % V));
    for (std::int32_t r = 0; r <= K; ++r) {
      const auto row = random_row(V, rng);
      p.insert(p.end(), row.begin(), row.end());
    }
    for (std::int32_t r = 0; r < K; ++r) {
      const auto row = random_row(V, rng);
      q.insert(q.end(), row.begin(), row.end());
    }
  }
  Hash h;
  for (const bool one_hot : {false, true}) {
    sv::ChainBatch<float> batch;
    batch.batch_size = B;
    batch.vocab_size = V;
    batch.draft_offsets = offsets.data();
    batch.draft_tokens = tokens.data();
    batch.target_probs = p.data();
    batch.draft_probs = one_hot ? nullptr : q.data();
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      const sv::VerifyStats s = sv::verify(sv::Standard{}, batch, sv::Randomness{seed, 3},
                                           sv::ChainOutput{out.data(), K + 1, accepted.data(), logprobs.data()});
      Outcome o;
      o.tokens = out;
      o.accepted = accepted;
      o.logprobs = logprobs;
      o.stats = s;
      h.add(o);
    }
  }
  EXPECT_EQ(hex(h.h), "3419f6d996015fb4");
}

}  // namespace
