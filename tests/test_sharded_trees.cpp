// The sharded verify of trees (docs/api.md "Sharded vocabulary") against the unsharded one: every rank's
// outputs bit for bit those of verify() on the whole rows, for every rule with a tree form and every way
// the children were drafted, over probabilities and over logits with every sampling parameter, a
// bitmask and penalties, ranks 1 to 8 with uneven and empty slices; what is left of p after
// rejected siblings (its masses, summed over the slices round by round) where it decides; calls and
// bytes set by the trees' shapes alone; bad values anywhere reported as the unsharded verify does.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "specverify/specverify.hpp"
#include "specverify/thread_communicator.hpp"
#include "support/sharded_logit_chains.hpp"
#include "support/trees.hpp"

namespace sv = specverify;

namespace {

using sv::testing::Trees;
using sv::testing::sharded::random_bounds;
using sv::testing::sharded::slice_rows;

/// Everything a tree verify returns or writes.
struct Outcome {
  std::vector<std::int32_t> tokens, accepted, nodes;
  std::vector<float> logprobs;
  sv::VerifyStats stats{};
  std::string error;

  bool operator==(const Outcome& o) const {
    return tokens == o.tokens && accepted == o.accepted && nodes == o.nodes && logprobs.size() == o.logprobs.size() &&
           std::memcmp(logprobs.data(), o.logprobs.data(), logprobs.size() * sizeof(float)) == 0 &&
           std::memcmp(&stats, &o.stats, sizeof stats) == 0 && error == o.error;
  }
};

/// Per-sequence seeds and Coupled's positions alongside a Trees batch.
struct Extras {
  std::vector<std::uint64_t> seeds;
  std::vector<std::int64_t> positions;
  std::vector<float> scores;  // SPRINTER's, per node

  Extras(const Trees& t, std::mt19937_64& rng) {
    for (std::int32_t b = 0; b < t.size(); ++b) {
      seeds.push_back(rng());
      positions.push_back(50 + 7 * b);
    }
    for (std::size_t i = 0; i < t.tokens.size(); ++i) scores.push_back(static_cast<float>(rng() % 101) / 100.0f);
  }
  sv::Randomness randomness(bool per_sequence) const {
    sv::Randomness r{777u, 3u};
    r.positions = positions.data();
    if (per_sequence) r.sequence_seeds = seeds.data();
    return r;
  }
};

template <class Run>
Outcome capture(const Trees& t, Run run) {
  Trees outputs = t;  // the outputs' storage, sentinel-filled
  const sv::TreeOutput out = outputs.output();
  Outcome o;
  try {
    o.stats = run(out);
  } catch (const sv::invalid_input& e) {
    o.error = e.what();
  }
  o.tokens = outputs.out_tokens;
  o.accepted = outputs.accepted;
  o.nodes = outputs.nodes;
  o.logprobs = outputs.logprobs;
  return o;
}

template <class Rule>
Outcome unsharded(const Rule& rule, const Trees& t, const sv::Randomness& r) {
  const sv::TreeBatch<float> batch = t.batch();
  return capture(t, [&](const sv::TreeOutput& out) { return sv::verify(rule, batch, r, out); });
}

/// Every rank on its own thread, each with its slice (copied, or a view into the whole rows).
template <class Rule>
std::vector<Outcome> sharded(const Rule& rule, const Trees& t, const sv::Randomness& r,
                             const std::vector<std::int32_t>& bounds, bool views, sv::ThreadGroup& group) {
  const std::int32_t ranks = static_cast<std::int32_t>(bounds.size()) - 1;
  std::vector<Outcome> outcomes(static_cast<std::size_t>(ranks));
  std::vector<std::vector<float>> p(ranks), q(ranks);
  std::vector<std::thread> threads;
  for (std::int32_t k = 0; k < ranks; ++k) {
    const std::int32_t start = bounds[k], size = bounds[k + 1] - bounds[k];
    sv::TreeBatch<float> batch = t.batch();
    batch.shard = {k, ranks, start, size};
    if (views) {
      batch.target_probs = t.p.data() + start;
      batch.draft_probs = t.with_q ? t.q.data() + start : nullptr;
      batch.target_stride = batch.draft_stride = t.V;
    } else {
      batch.target_probs = batch.draft_probs = nullptr;  // an empty slice passes null rows
      if (size > 0) {
        p[k] = slice_rows(t.p, t.V, start, size);
        q[k] = slice_rows(t.q, t.V, start, size);
        batch.target_probs = p[k].data();
        if (t.with_q) batch.draft_probs = q[k].data();
      }
    }
    threads.emplace_back([&, batch, k] {
      outcomes[k] = capture(t, [&](const sv::TreeOutput& out) { return sv::verify(rule, batch, r, out, group.communicator(k)); });
    });
  }
  for (auto& thread : threads) thread.join();
  return outcomes;
}

/// A tree batch of logits over a Trees batch's rows (log p, log q; -inf where p or q is 0), each
/// sequence's parameters from the logits tests' pool, and where asked draft parameters unlike the
/// target's, a bitmask (each row keeps its largest logit allowed) and history and bias lists.
struct LogitTrees {
  Trees t{1};
  sv::testing::sharded::LogitFeatures features;
  std::vector<float> target, draft;
  std::vector<sv::SamplingParams> tp, dp;
  std::vector<std::uint32_t> mask;
  sv::testing::PenaltyListArrays lists;

  std::int32_t words() const { return (t.V + 31) / 32; }
  sv::LogitsTreeBatch<float> batch() const {
    sv::LogitsTreeBatch<float> b;
    b.batch_size = t.size();
    b.vocab_size = t.V;
    b.node_offsets = t.offsets.data();
    b.parents = t.parents.data();
    b.draft_tokens = t.tokens.data();
    b.target_logits = target.data();
    b.draft_logits = t.with_q ? draft.data() : nullptr;
    b.drafted = t.drafted;
    b.target_params = tp.data();
    if (features.draft_params) b.draft_params = dp.data();
    if (features.mask) b.allowed_tokens = mask.data();
    if (features.penalties) lists.attach(b);
    return b;
  }
};

LogitTrees logit_trees(std::int32_t B, std::int32_t V, sv::Drafted how, const sv::testing::sharded::LogitFeatures& f,
                       std::mt19937_64& rng) {
  LogitTrees l;
  l.t = sv::testing::random_trees(B, V, 9, how, rng);
  l.features = f;
  const auto logs = [](const std::vector<float>& rows) {
    std::vector<float> out;
    for (const float x : rows) out.push_back(x > 0.0f ? std::log(x) : -std::numeric_limits<float>::infinity());
    return out;
  };
  l.target = logs(l.t.p);
  l.draft = logs(l.t.q);
  const auto pool = sv::testing::sharded::params_pool(f);
  for (std::int32_t b = 0; b < B; ++b) {
    sv::SamplingParams p = pool[(static_cast<std::size_t>(b) + rng()) % pool.size()];
    sv::SamplingParams d = f.draft_params ? pool[rng() % pool.size()] : p;
    if (f.penalties && b % 2 == 0) {
      p.repetition_penalty = 1.3f;
      p.presence_penalty = 0.5f;
      p.frequency_penalty = 0.2f;
      d.repetition_penalty = f.draft_params ? 1.1f : p.repetition_penalty;
    }
    if (!f.top_p_alone) {
      for (sv::SamplingParams* s : {&p, &d}) {
        if (s->top_k >= V) s->top_p = 1.0f;
      }
    }
    l.tp.push_back(p);
    l.dp.push_back(d);
    // History: a few ascending tokens with counts; bias: a few tokens.
    for (std::int32_t v = static_cast<std::int32_t>(rng() % 4); v < V; v += 1 + static_cast<std::int32_t>(rng() % 9)) {
      l.lists.h_tokens.push_back(v);
      l.lists.h_counts.push_back(static_cast<std::int32_t>(rng() % 3));
    }
    l.lists.b_tokens.push_back(static_cast<std::int32_t>(rng() % V));
    l.lists.b_values.push_back(static_cast<float>(static_cast<std::int32_t>(rng() % 21) - 10) / 5.0f);
    l.lists.end_sequence();
  }
  if (f.mask) {
    const std::int64_t rows = static_cast<std::int64_t>(l.target.size()) / V;
    l.mask.resize(static_cast<std::size_t>(rows) * l.words());
    for (auto& w : l.mask) w = static_cast<std::uint32_t>(rng()) | static_cast<std::uint32_t>(rng());
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = &l.target[static_cast<std::size_t>(r) * V];
      const auto top = static_cast<std::int32_t>(std::max_element(row, row + V) - row);
      l.mask[static_cast<std::size_t>(r) * l.words() + static_cast<std::size_t>(top / 32)] |= 1u << (top % 32);
    }
  }
  return l;
}

/// As sharded() above, over rows of logits.
template <class Rule>
std::vector<Outcome> sharded_logits(const Rule& rule, const LogitTrees& l, const sv::Randomness& r,
                                    const std::vector<std::int32_t>& bounds, bool views, sv::ThreadGroup& group) {
  const std::int32_t ranks = static_cast<std::int32_t>(bounds.size()) - 1, V = l.t.V;
  std::vector<Outcome> outcomes(static_cast<std::size_t>(ranks));
  std::vector<std::vector<float>> p(ranks), q(ranks);
  std::vector<std::thread> threads;
  for (std::int32_t k = 0; k < ranks; ++k) {
    const std::int32_t start = bounds[k], size = bounds[k + 1] - bounds[k];
    sv::LogitsTreeBatch<float> batch = l.batch();
    batch.shard = {k, ranks, start, size};
    if (views) {
      batch.target_logits = l.target.data() + start;
      batch.draft_logits = l.t.with_q ? l.draft.data() + start : nullptr;
      batch.target_stride = batch.draft_stride = V;
    } else {
      batch.target_logits = batch.draft_logits = nullptr;
      if (size > 0) {
        p[k] = slice_rows(l.target, V, start, size);
        q[k] = slice_rows(l.draft, V, start, size);
        batch.target_logits = p[k].data();
        if (l.t.with_q) batch.draft_logits = q[k].data();
      }
    }
    threads.emplace_back([&, batch, k] {
      outcomes[k] = capture(l.t, [&](const sv::TreeOutput& out) { return sv::verify(rule, batch, r, out, group.communicator(k)); });
    });
  }
  for (auto& thread : threads) thread.join();
  return outcomes;
}

/// Every rank's outcome against `whole`, for ranks 1 to 8 at random bounds.
template <class Sharded>
void expect_ranks_match(const std::string& name, const Outcome& whole, std::int32_t V, std::mt19937_64& rng, Sharded run) {
  for (std::int32_t ranks = 1; ranks <= 8; ranks += (ranks < 4 ? 1 : 4)) {
    const auto bounds = random_bounds(V, ranks, rng);
    sv::ThreadGroup group(ranks);
    const bool views = rng() % 2 == 0;
    const auto outcomes = run(bounds, views, group);
    for (std::int32_t k = 0; k < ranks; ++k) {
      ASSERT_TRUE(outcomes[k] == whole)
          << name << ": rank " << k << " of " << ranks << (views ? " (views)" : " (copies)")
          << " differs from the unsharded verify" << (outcomes[k].error.empty() ? "" : ": " + outcomes[k].error)
          << (whole.error.empty() ? "" : " (unsharded: " + whole.error + ")");
    }
  }
}

template <class Rule>
void expect_same(const std::string& name, const Rule& rule, const Trees& t, const Extras& extras, std::mt19937_64& rng) {
  for (const bool per_sequence : {false, true}) {
    const sv::Randomness r = extras.randomness(per_sequence);
    expect_ranks_match(name + (per_sequence ? " per-sequence seeds" : ""), unsharded(rule, t, r), t.V, rng,
                       [&](const auto& bounds, bool views, sv::ThreadGroup& group) {
                         return sharded(rule, t, r, bounds, views, group);
                       });
  }
}

/// Every rule with a tree form: those that decide draft by draft, and Traversal (which needs
/// children drafted i.i.d. from q: elsewhere every rank throws what the unsharded verify throws).
template <class Fn>
void every_tree_rule(const float* scores, Fn check) {
  sv::testing::sharded::every_tree_rule(scores, check);
  check("traversal", sv::Traversal{});
}

enum class Scale { as_drawn, large, tiny };

/// Random trees whose rows are scaled far from 1 (FixedSum's rescaled sums) where asked.
Trees trees(std::int32_t B, std::int32_t V, std::int32_t nodes, sv::Drafted how, Scale scale, std::mt19937_64& rng) {
  Trees t = sv::testing::random_trees(B, V, nodes, how, rng);
  const float factor = scale == Scale::large ? 3000.0f : scale == Scale::tiny ? 1e-12f : 1.0f;
  for (float& v : t.p) v *= factor;
  for (float& v : t.q) v *= factor;
  return t;
}

const char* drafted_name(sv::Drafted how) {
  return how == sv::Drafted::sampled ? "sampled" : how == sv::Drafted::deterministic ? "deterministic" : "without replacement";
}

TEST(ShardedTrees, MatchUnshardedForEveryRuleDraftingAndSplit) {
  std::mt19937_64 rng(21);
  for (const sv::Drafted how : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    for (const Scale scale : {Scale::as_drawn, Scale::large, Scale::tiny}) {
      for (const std::int32_t V : {7, 300}) {
        const Trees t = trees(6, V, 9, how, scale, rng);
        const Extras extras(t, rng);
        every_tree_rule(extras.scores.data(), [&](const std::string& name, const auto& rule) {
          expect_same(name + " " + drafted_name(how) + " V=" + std::to_string(V) + " scale " +
                          std::to_string(static_cast<int>(scale)),
                      rule, t, extras, rng);
        });
      }
    }
  }
}

TEST(ShardedTrees, LogitsMatchUnshardedForEveryRuleDraftingAndParameter) {
  std::mt19937_64 rng(24);
  using sv::testing::sharded::LogitFeatures;
  LogitFeatures plain, top_p_alone, everything;
  top_p_alone.top_p_alone = true;
  everything.mask = everything.penalties = everything.draft_params = true;
  std::int32_t checked = 0, failed = 0;
  for (const sv::Drafted how : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    for (const LogitFeatures& f : {plain, top_p_alone, everything}) {
      for (const std::int32_t V : {7, 300}) {
        const LogitTrees l = logit_trees(5, V, how, f, rng);
        const Extras extras(l.t, rng);
        every_tree_rule(extras.scores.data(), [&](const std::string& rule_name, const auto& rule) {
          const sv::Randomness r = extras.randomness(rng() % 2 == 0);
          const sv::LogitsTreeBatch<float> whole_batch = l.batch();
          const Outcome whole = capture(l.t, [&](const sv::TreeOutput& out) { return sv::verify(rule, whole_batch, r, out); });
          ++checked;
          failed += !whole.error.empty();
          const std::string name = rule_name + " " + drafted_name(how) + " V=" + std::to_string(V) +
                                   (f.top_p_alone ? " top_p alone" : "") + (f.mask ? " with mask, penalties" : "");
          expect_ranks_match(name, whole, V, rng, [&](const auto& bounds, bool views, sv::ThreadGroup& group) {
            return sharded_logits(rule, l, r, bounds, views, group);
          });
        });
      }
    }
  }
  EXPECT_LT(failed, checked / 10) << "most batches must verify, not throw";
}

/// Wide nodes whose children are mostly rejected: what is left of p after each, its mass summed
/// over the slices round by round, decides the later children and the extra token.
TEST(ShardedTrees, ResidualsAfterRejectedSiblingsMatchUnsharded) {
  std::mt19937_64 rng(22);
  for (const sv::Drafted how : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    for (const std::int32_t V : {5, 3000}) {
      Trees t(V, how);
      for (std::int32_t b = 0; b < 40; ++b) {
        // A root with four children, its first with three, its second with one.
        const std::vector<std::int32_t> parents{-1, -1, -1, -1, 0, 0, 0, 1};
        std::vector<std::vector<float>> ps, qs;
        for (std::size_t r = 0; r <= parents.size(); ++r) {
          const auto logits = sv::testing::random_logits(V, rng, 3.0);
          ps.push_back(sv::testing::softmax(logits));
          std::vector<double> other = sv::testing::random_logits(V, rng, 3.0);  // q far from p: rejections
          qs.push_back(sv::testing::softmax(other));
        }
        std::vector<std::int32_t> xs(parents.size());
        for (std::int32_t node = -1; node < 2; ++node) {
          std::vector<std::int32_t> children;
          for (std::size_t i = 0; i < parents.size(); ++i) {
            if (parents[i] == node) children.push_back(static_cast<std::int32_t>(i));
          }
          const auto drafts = sv::testing::draft_children(qs[static_cast<std::size_t>(node + 1)],
                                                          static_cast<std::int32_t>(children.size()), how, rng);
          for (std::size_t c = 0; c < children.size(); ++c) xs[static_cast<std::size_t>(children[c])] = drafts[c];
        }
        t.add(parents, xs, ps, qs);
      }
      const Extras extras(t, rng);
      const std::string where = std::string(drafted_name(how)) + " V=" + std::to_string(V);
      expect_same("standard " + where, sv::Standard{}, t, extras, rng);
      expect_same("sprinter " + where, sv::Sprinter{0.5f, extras.scores.data()}, t, extras, rng);
      if (how == sv::Drafted::sampled) {  // its own splits: the trees below are drawn as before
        std::mt19937_64 splits(31);
        expect_same("traversal " + where, sv::Traversal{}, t, extras, splits);
      }
      // The masses decide here: some tokens must come from a residual after absorbed siblings.
      const Outcome whole = unsharded(sv::Standard{}, t, extras.randomness(false));
      ASSERT_TRUE(whole.error.empty()) << whole.error;
      std::int32_t rejected_at_root = 0;
      for (std::int32_t b = 0; b < t.size(); ++b) rejected_at_root += whole.accepted[static_cast<std::size_t>(b)] == 0;
      EXPECT_GT(rejected_at_root, 5) << where << ": too few sequences drew after rejecting every child";
    }
  }
}

/// The calls and bytes a rank makes: a function of the trees' shapes and the drafting, the same for
/// any rows, tokens and V. Two calls per mass one path may ask for.
TEST(ShardedTrees, CollectivesDependOnTheShapeAlone) {
  const auto count = [](const Trees& t, auto rule, std::int64_t& calls, std::int64_t& bytes) {
    sv::ThreadGroup group(3);
    std::mt19937_64 rng(1);
    const Extras extras(t, rng);
    sharded(rule, t, extras.randomness(false), {0, t.V / 3, t.V / 2, t.V}, false, group);
    calls = group.calls();
    bytes = group.bytes_per_rank();
  };
  // Shapes alike (random_trees draws the shape before the rows from the seed), rows and tokens not.
  const auto shaped = [](std::int32_t V, sv::Drafted how, std::uint64_t data) {
    Trees t(V, how);
    std::mt19937_64 rng(data);
    for (std::int32_t b = 0; b < 3; ++b) {
      const std::vector<std::int32_t> parents{-1, -1, -1, 0, 0, 3};  // root: 3 children; node 0: 2
      std::vector<std::vector<float>> ps, qs;
      for (std::size_t r = 0; r <= parents.size(); ++r) {
        ps.push_back(sv::testing::random_distribution(V, rng));
        qs.push_back(sv::testing::random_distribution(V, rng));
      }
      std::vector<std::int32_t> xs;
      for (std::size_t i = 0; i < parents.size(); ++i) xs.push_back(static_cast<std::int32_t>(rng() % V));
      if (how != sv::Drafted::sampled) xs = {0, 1, 2, 3, 4, 5};  // distinct siblings
      t.add(parents, xs, ps, qs);
    }
    return t;
  };
  for (const sv::Drafted how : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    // Masses on the longest path: root 2, node 0 1 (without replacement: and each node's q total).
    const std::int64_t masses = how == sv::Drafted::sampled_without_replacement ? 5 : 3;
    std::int64_t calls_a, bytes_a, calls_b, bytes_b, calls_c, bytes_c;
    count(shaped(4096, how, 1), sv::Standard{}, calls_a, bytes_a);
    count(shaped(4096, how, 2), sv::Standard{}, calls_b, bytes_b);
    count(shaped(65536, how, 3), sv::Standard{}, calls_c, bytes_c);
    // shard, rows, the masses' rounds, draw sums, rescaled sums, tokens
    EXPECT_EQ(calls_a, 5 + 2 * masses) << drafted_name(how);
    EXPECT_EQ(calls_a, calls_b) << drafted_name(how);
    EXPECT_EQ(bytes_a, bytes_b) << drafted_name(how);
    EXPECT_EQ(calls_a, calls_c) << drafted_name(how);
    EXPECT_EQ(bytes_a, bytes_c) << drafted_name(how);
    // A rule that draws from p on rejection asks no mass.
    count(shaped(4096, how, 1), sv::Greedy{}, calls_a, bytes_a);
    EXPECT_EQ(calls_a, 5) << drafted_name(how);
    if (how != sv::Drafted::sampled) continue;  // Traversal needs children drafted i.i.d. from q
    // Traversal may absorb every node but one into its parent: a round for each.
    count(shaped(4096, how, 1), sv::Traversal{}, calls_a, bytes_a);
    count(shaped(65536, how, 3), sv::Traversal{}, calls_c, bytes_c);
    EXPECT_EQ(calls_a, 5 + 2 * 5) << drafted_name(how);
    EXPECT_EQ(calls_a, calls_c) << drafted_name(how);
    EXPECT_EQ(bytes_a, bytes_c) << drafted_name(how);
  }
}

/// A NaN, an infinity or a negative value in one row: every rank reports what the unsharded verify
/// reports (Standard reads the same rows sharded and whole), and no output changes.
TEST(ShardedTrees, BadValuesAreReportedAsUnshardedByEveryRank) {
  std::mt19937_64 rng(23);
  std::int32_t failures = 0;
  for (std::int32_t trial = 0; trial < 90; ++trial) {
    const sv::Drafted how = trial % 3 == 0 ? sv::Drafted::sampled
                            : trial % 3 == 1 ? sv::Drafted::sampled_without_replacement
                                             : sv::Drafted::deterministic;
    Trees t = sv::testing::random_trees(4, 64, 7, how, rng);
    const float bads[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -0.5f};
    std::vector<float>& rows = t.with_q && rng() % 2 ? t.q : t.p;
    // Anywhere, or in the first sequence's root row (read whole where the walk rejects or draws there).
    const std::size_t at = rng() % 2 ? rng() % rows.size() : rng() % static_cast<std::size_t>(t.V);
    rows[at] = bads[trial % 3];
    const Extras extras(t, rng);
    const sv::Randomness r = extras.randomness(false);
    const Outcome whole = unsharded(sv::Standard{}, t, r);
    failures += !whole.error.empty();
    sv::ThreadGroup group(3);
    const auto outcomes = sharded(sv::Standard{}, t, r, random_bounds(t.V, 3, rng), false, group);
    for (const Outcome& o : outcomes) {
      ASSERT_TRUE(o == whole) << "trial " << trial << ": " << o.error << " vs unsharded: " << whole.error;
    }
  }
  EXPECT_GT(failures, 15) << "too few bad values were read";  // 23 of 90 at this seed
}

/// A NaN or +inf logit in a sequence's root rows (which its walk opens first): every rank names it
/// as the unsharded verify does, at its node, and no output changes.
TEST(ShardedTrees, BadLogitsAreReportedAsUnshardedByEveryRank) {
  std::mt19937_64 rng(25);
  sv::testing::sharded::LogitFeatures everything;
  everything.mask = everything.penalties = everything.draft_params = true;
  for (std::int32_t trial = 0; trial < 24; ++trial) {
    const sv::Drafted how = trial % 2 ? sv::Drafted::sampled : sv::Drafted::deterministic;
    LogitTrees l = logit_trees(4, 64, how, everything, rng);
    const std::int32_t b = static_cast<std::int32_t>(rng() % 4);
    const std::int64_t root = l.t.offsets[static_cast<std::size_t>(b)] + b;
    std::vector<float>& rows = l.t.with_q && l.t.offsets[b + 1] > l.t.offsets[b] && rng() % 2 ? l.draft : l.target;
    rows[static_cast<std::size_t>(root) * 64 + rng() % 64] =
        trial % 3 ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    const Extras extras(l.t, rng);
    const sv::Randomness r = extras.randomness(false);
    const sv::LogitsTreeBatch<float> whole_batch = l.batch();
    const Outcome whole = capture(l.t, [&](const sv::TreeOutput& out) { return sv::verify(sv::Standard{}, whole_batch, r, out); });
    ASSERT_FALSE(whole.error.empty()) << "trial " << trial;
    sv::ThreadGroup group(3);
    for (const Outcome& o : sharded_logits(sv::Standard{}, l, r, random_bounds(64, 3, rng), false, group)) {
      ASSERT_TRUE(o == whole) << "trial " << trial << ": " << o.error << " vs unsharded: " << whole.error;
    }
  }
}

}  // namespace
