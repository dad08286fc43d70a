// The sharded verify over logits (docs/api.md "Sharded vocabulary", with "Logits and sampling
// parameters" and "Penalties and logit bias") against the unsharded one:
// every rank's outputs (tokens, accepted counts, logprobs' bits, stats, or the same invalid_input)
// bit for bit those of verify() on the whole rows, for every rule, per-sequence sampling
// parameters (temperature, top-k with ties, top-p, min-p), guidance, a bitmask, penalties and
// bias, a reduced draft vocabulary, ranks 1 to 8 with uneven and empty slices held as views,
// copies or padded copies; a number of all_gather calls and bytes that depend on the shape and
// parameters alone, never on V; bad logits in one rank's slice reported by every rank alike.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "specverify/specverify.hpp"
#include "specverify/thread_communicator.hpp"
#include "support/sharded_logit_chains.hpp"

namespace sv = specverify;

namespace {

using namespace specverify::testing::sharded;

/// The call under test: rank k's verify with its slice.
template <class Rule, class Comm>
sv::VerifyStats sharded_verify(const Rule& rule, const sv::LogitsChainBatch<float>& batch,
                               const sv::Randomness& r, const sv::ChainOutput& out,
                               const Comm& comm) {
  return sv::verify(rule, batch, r, out, comm);
}

template <class Rule>
Outcome unsharded(const Rule& rule, const LogitChains& c, const sv::Randomness& r, bool one_hot) {
  const sv::LogitsChainBatch<float> batch = c.whole(one_hot);
  return capture(c.shape,
                 [&](const sv::ChainOutput& out) { return sv::verify(rule, batch, r, out); });
}

/// Runs every rank k on its own thread over rows[k].batch and the communicator comm_of(k); returns
/// each rank's outcome. An exception other than invalid_input is recorded as an error that no
/// unsharded outcome has.
template <class Rule, class CommOf>
std::vector<Outcome> on_ranks(const Rule& rule, const LogitChains& c, const sv::Randomness& r,
                              const std::vector<RankRows>& rows, CommOf comm_of) {
  std::vector<Outcome> outcomes(rows.size());
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < rows.size(); ++k) {
    threads.emplace_back([&, k] {
      const auto comm = comm_of(static_cast<std::int32_t>(k));
      try {
        outcomes[k] = capture(c.shape, [&](const sv::ChainOutput& out) {
          return sharded_verify(rule, rows[k].batch, r, out, comm);
        });
      } catch (const std::exception& e) {
        outcomes[k].error = std::string("(not invalid_input) ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

/// Every rank's batch of `bounds` in `layout`.
std::vector<RankRows> rank_rows(const LogitChains& c, bool one_hot, const std::vector<std::int32_t>& bounds,
                                Layout layout) {
  std::vector<RankRows> rows(bounds.size() - 1);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    rank_batch(c, one_hot, bounds, static_cast<std::int32_t>(k), layout, rows[k]);
  }
  return rows;
}

/// Runs every rank on its own thread over a ThreadGroup; returns each rank's outcome.
template <class Rule>
std::vector<Outcome> sharded(const Rule& rule, const LogitChains& c, const sv::Randomness& r,
                             bool one_hot, const std::vector<std::int32_t>& bounds, Layout layout,
                             sv::ThreadGroup& group) {
  return on_ranks(rule, c, r, rank_rows(c, one_hot, bounds, layout), [&](std::int32_t k) { return group.communicator(k); });
}

std::string bounds_text(const std::vector<std::int32_t>& bounds) {
  std::string s = "bounds {";
  for (std::size_t i = 0; i < bounds.size(); ++i) s += (i ? ", " : "") + std::to_string(bounds[i]);
  return s + "}";
}

std::string params_text(const LogitChains& c) {
  std::string s = "target params [";
  for (const auto& p : c.tp) {
    s += "(T " + std::to_string(p.temperature) + " k " + std::to_string(p.top_k) + " p " +
         std::to_string(p.top_p) + " min_p " + std::to_string(p.min_p) +
         (sv::penalties_off(p) ? "" : " penalised") + ") ";
  }
  s += "]";
  if (c.features.draft_params) {
    s += " draft params [";
    for (const auto& p : c.dp) {
      s += "(T " + std::to_string(p.temperature) + " k " + std::to_string(p.top_k) + " p " +
           std::to_string(p.top_p) + " min_p " + std::to_string(p.min_p) +
           (sv::penalties_off(p) ? "" : " penalised") + ") ";
    }
    s += "]";
  }
  return s;
}

/// Every rank's outcome equals the unsharded one's; the failure names the case.
void expect_ranks_match(const std::string& name, const Outcome& whole,
                        const std::vector<Outcome>& outcomes,
                        const std::vector<std::int32_t>& bounds, Layout layout,
                        const LogitChains& c) {
  const std::int32_t ranks = static_cast<std::int32_t>(outcomes.size());
  for (std::int32_t k = 0; k < ranks; ++k) {
    ASSERT_TRUE(outcomes[std::size_t(k)] == whole)
        << name << ": rank " << k << " of " << ranks << " (" << ::name(layout) << ", "
        << bounds_text(bounds) << ") differs from the unsharded verify\n  sharded:   "
        << describe(outcomes[std::size_t(k)]) << "\n  unsharded: " << describe(whole) << "\n  "
        << params_text(c);
  }
}

/// Counts the cases compared and how many of them were errors, so that a test can insist on
/// mostly valid input.
struct Tally {
  std::int64_t cases = 0, errors = 0;
};

/// For both draft kinds (rows, one-hot), each with per-sequence seeds or the batch's seed at
/// random: the unsharded outcome against a few random splits over 1 to 8 ranks, each in a random
/// layout.
template <class Rule>
void expect_same(const std::string& name, const Rule& rule, const LogitChains& c,
                 std::mt19937_64& rng, Tally& tally, int splits = 2) {
  for (const bool one_hot : {false, true}) {
    const bool per_sequence = rng() % 2 == 0;
    const sv::Randomness r = randomness(c.shape, per_sequence);
    const Outcome whole = unsharded(rule, c, r, one_hot);
    ++tally.cases;
    if (!whole.error.empty()) ++tally.errors;
    for (int i = 0; i < splits; ++i) {
      const std::int32_t ranks = 1 + static_cast<std::int32_t>(rng() % 8);
      const auto bounds = random_bounds(c.V(), ranks, rng);
      const Layout layout = static_cast<Layout>(rng() % 3);
      sv::ThreadGroup group(ranks);
      const auto outcomes = sharded(rule, c, r, one_hot, bounds, layout, group);
      expect_ranks_match(name + (one_hot ? " one-hot" : " draft rows") +
                             (per_sequence ? " per-sequence seeds" : ""),
                         whole, outcomes, bounds, layout, c);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

std::string features_text(const LogitFeatures& f) {
  std::string s;
  if (f.quantised) s += " quantised";
  if (f.sparse) s += " sparse";
  if (f.guidance) s += " guidance";
  if (f.mask) s += " bitmask";
  if (f.penalties) s += " penalties";
  if (f.reduced_draft) s += " reduced-draft";
  if (f.draft_params) s += " draft-params";
  if (f.top_p_alone) s += " top-p-alone";
  return s;
}

/// Every rule over batches with features f at V in `sizes`; at most `max_error_share` of the
/// unsharded outcomes may be errors (the cases must mostly compare outputs).
void matrix(const LogitFeatures& f, std::uint64_t seed,
            const std::vector<std::int32_t>& sizes = {1, 7, 300, 5000},
            double max_error_share = 0.1) {
  std::mt19937_64 rng(seed);
  Tally tally;
  for (const std::int32_t V : sizes) {
    const std::int32_t B = V >= 5000 ? 4 : 6;
    const LogitChains c =
        make_logit_chains(B, V, 4, f, seed + 17 * std::uint64_t(V), seed * 31 + std::uint64_t(V));
    every_rule(c.shape, [&](const std::string& rule_name, const auto& rule) {
      if (::testing::Test::HasFatalFailure()) return;
      expect_same(rule_name + " V=" + std::to_string(V) + features_text(f), rule, c, rng, tally,
                  V == 7 || V == 300 ? 2 : 1);
    });
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_LE(double(tally.errors), max_error_share * double(tally.cases))
      << features_text(f) << ": " << tally.errors << " of " << tally.cases
      << " unsharded outcomes are errors; the cases test too little";
}

TEST(ShardedLogits, MatchesUnshardedWithPlainSamplingParameters) {
  matrix(LogitFeatures{}, 1);
}

TEST(ShardedLogits, MatchesUnshardedOnSparseRowsWithTopKAboveTheFiniteCount) {
  LogitFeatures f;
  f.sparse = true;
  matrix(f, 2);
}

TEST(ShardedLogits, MatchesUnshardedOnQuantisedLogitsTiedAtTheKthLargest) {
  LogitFeatures f;
  f.quantised = true;
  matrix(f, 3);
}

TEST(ShardedLogits, MatchesUnshardedWithDraftParametersUnlikeTheTargets) {
  LogitFeatures f;
  f.draft_params = true;
  f.quantised = true;
  matrix(f, 4);
}

TEST(ShardedLogits, MatchesUnshardedWithGuidance) {
  LogitFeatures f;
  f.guidance = true;
  matrix(f, 5);
}

TEST(ShardedLogits, MatchesUnshardedWithABitmask) {
  LogitFeatures f;
  f.mask = true;
  matrix(f, 6);
}

TEST(ShardedLogits, MatchesUnshardedWithPenaltiesAndBias) {
  LogitFeatures f;
  f.penalties = true;
  f.draft_params = true;
  matrix(f, 7);
}

TEST(ShardedLogits, MatchesUnshardedWithAReducedDraftVocabulary) {
  LogitFeatures f;
  f.reduced_draft = true;
  matrix(f, 8);
}

TEST(ShardedLogits, MatchesUnshardedWithEverythingAtOnce) {
  LogitFeatures f;
  f.quantised = true;
  f.guidance = true;
  f.mask = true;
  f.penalties = true;
  f.reduced_draft = true;
  f.draft_params = true;
  matrix(f, 9);
  f.quantised = false;
  f.sparse = true;
  f.reduced_draft = false;
  matrix(f, 10, {300, 5000});
}

/// Ranks with an empty slice pass null target, draft and unconditional rows (docs/api.md: "its row
/// pointers may then be null") while the other ranks pass rows: the same outputs.
TEST(ShardedLogits, EmptySlicesMayPassNullRows) {
  LogitFeatures f;
  f.guidance = true;
  f.penalties = true;
  f.mask = true;
  const LogitChains c = make_logit_chains(4, 7, 3, f, 51, 52);
  for (const std::vector<std::int32_t>& bounds :
       {std::vector<std::int32_t>{0, 0, 3, 3, 7}, std::vector<std::int32_t>{0, 7, 7},
        std::vector<std::int32_t>{0, 0, 7}}) {
    for (const bool one_hot : {false, true}) {
      const sv::Randomness r = randomness(c.shape, true);
      for (const Layout layout : {Layout::copies, Layout::padded}) {
        sv::ThreadGroup group(static_cast<std::int32_t>(bounds.size()) - 1);
        const Outcome whole = unsharded(sv::Standard{}, c, r, one_hot);
        ASSERT_EQ(whole.error, "") << "test setup";
        expect_ranks_match(
            std::string("standard V=7 null rows on empty slices") + (one_hot ? " one-hot" : ""),
            whole, sharded(sv::Standard{}, c, r, one_hot, bounds, layout, group), bounds, layout,
            c);
      }
    }
  }
}

/// top_p without top_k: the nucleus threshold over the whole row.
TEST(ShardedLogits, TopPWithoutTopK) {
  LogitFeatures f;
  f.top_p_alone = true;
  matrix(f, 11);
  f.quantised = true;
  f.penalties = true;
  f.mask = true;
  f.guidance = true;
  matrix(f, 12, {300, 5000});
}

TEST(ShardedLogits, MatchesUnshardedOnLargeRows) {
  std::mt19937_64 rng(13);
  Tally tally;
  LogitFeatures f;
  f.guidance = true;
  f.mask = true;
  f.penalties = true;
  f.draft_params = true;
  const LogitChains c = make_logit_chains(3, 40000, 5, f, 14, 15);
  const auto one = [&](const std::string& name, const auto& rule, bool one_hot,
                       std::int32_t ranks) {
    const sv::Randomness r = randomness(c.shape, true);
    const Outcome whole = unsharded(rule, c, r, one_hot);
    ++tally.cases;
    if (!whole.error.empty()) ++tally.errors;
    const auto bounds = random_bounds(c.V(), ranks, rng);
    for (const Layout layout : {Layout::views, Layout::padded}) {
      sv::ThreadGroup group(ranks);
      expect_ranks_match(name + " V=40000", whole,
                         sharded(rule, c, r, one_hot, bounds, layout, group), bounds, layout, c);
    }
  };
  one("standard", sv::Standard{}, false, 4);
  one("standard one-hot", sv::Standard{}, true, 3);
  one("fsd js", sv::Fsd{sv::Divergence::js, 0.4f}, false, 5);
  one("coupled", sv::Coupled{}, false, 8);
  one("greedy", sv::Greedy{}, false, 2);
  EXPECT_EQ(tally.errors, 0) << "the large rows are valid input";
}

/// A bitmask that forbids every token of one rank's slice (slices not on 32-token words),
/// in every row or in the first only.
TEST(ShardedLogits, BitmaskForbiddingOneRanksWholeSlice) {
  std::mt19937_64 rng(16);
  struct Case {
    std::int32_t V;
    std::vector<std::int32_t> bounds;
    std::int32_t forbidden_rank;
    bool every_row;
  };
  const Case cases[] = {{300, {0, 37, 37, 150, 201, 300}, 2, true},
                        {300, {0, 37, 37, 150, 201, 300}, 3, false},
                        {300, {0, 100, 300}, 0, true},
                        {7, {0, 3, 5, 7}, 1, true},
                        {5000, {0, 1001, 2333, 4097, 5000}, 3, true},
                        {5000, {0, 1001, 2333, 4097, 5000}, 1, false}};
  for (const Case& k : cases) {
    LogitFeatures f;
    f.mask = true;
    LogitChains c = make_logit_chains(5, k.V, 4, f, 17 + std::uint64_t(k.V),
                                      18 + std::uint64_t(k.forbidden_rank));
    const std::int32_t lo = k.bounds[std::size_t(k.forbidden_rank)],
                       hi = k.bounds[std::size_t(k.forbidden_rank) + 1];
    const std::int64_t rows = c.shape.target_rows();
    for (std::int64_t r = 0; r < (k.every_row ? rows : 1); ++r) {
      for (std::int32_t v = lo; v < hi; ++v)
        c.mask[std::size_t(r) * c.words() + std::size_t(v / 32)] &= ~(1u << (v % 32));
      // Keep a finite token outside the slice allowed.
      const float* l = &c.target[std::size_t(r) * k.V];
      std::int32_t t = hi % k.V;
      while ((t >= lo && t < hi) || !std::isfinite(l[t])) t = (t + 1) % k.V;
      c.mask[std::size_t(r) * c.words() + std::size_t(t / 32)] |= 1u << (t % 32);
    }
    const std::string name = "V=" + std::to_string(k.V) + " rank " +
                             std::to_string(k.forbidden_rank) + " forbidden " +
                             (k.every_row ? "in every row" : "in the first row");
    Tally tally;
    every_rule(c.shape, [&](const std::string& rule_name, const auto& rule) {
      for (const bool one_hot : {false, true}) {
        if (one_hot && !takes_one_hot(rule)) continue;
        const sv::Randomness r = randomness(c.shape, one_hot);
        const Outcome whole = unsharded(rule, c, r, one_hot);
        ++tally.cases;
        if (!whole.error.empty()) ++tally.errors;
        const Layout layout = static_cast<Layout>(rng() % 3);
        sv::ThreadGroup group(static_cast<std::int32_t>(k.bounds.size()) - 1);
        expect_ranks_match(name + " " + rule_name + (one_hot ? " one-hot" : ""), whole,
                           sharded(rule, c, r, one_hot, k.bounds, layout, group), k.bounds, layout,
                           c);
      }
    });
    EXPECT_EQ(tally.errors, 0) << name << ": every row keeps a token, so no case is an error";
  }
}

/// The calls and bytes a rank makes, for a shape and parameters: the same for any row data and
/// tokens, and for any V.
TEST(ShardedLogits, CollectivesDependOnTheShapeAndParametersAlone) {
  struct Count {
    std::int64_t calls = 0, bytes = 0;
  };
  const auto count = [](const LogitChains& c, const auto& rule, bool one_hot) {
    sv::ThreadGroup group(3);
    const std::vector<std::int32_t> bounds{0, c.V() / 3, c.V() / 2, c.V()};
    const auto outcomes =
        sharded(rule, c, randomness(c.shape, false), one_hot, bounds, Layout::views, group);
    for (const Outcome& o : outcomes) EXPECT_EQ(o.error, "") << "the batches are valid input";
    return Count{group.calls(), group.bytes_per_rank()};
  };
  const sv::Fsd fsd{sv::Divergence::js, 0.4f};
  LogitFeatures all;
  all.guidance = true;
  all.mask = true;
  all.penalties = true;
  all.draft_params = true;
  all.quantised = true;
  LogitFeatures reduced = all;
  reduced.reduced_draft = true;
  LogitFeatures top_p = all;  // top_p without top_k: its threshold's rounds too
  top_p.top_p_alone = true;
  for (const LogitFeatures& f : {LogitFeatures{}, all, reduced, top_p}) {
    for (const std::uint64_t shape_seed : {21u, 22u}) {
      // The same shape seed gives the same drafts' shape, list lengths and parameters; the data
      // seed changes the rows, the drafted tokens and the lists' tokens.
      const LogitChains a = make_logit_chains(4, 4096, 3, f, shape_seed, 1);
      const LogitChains b = make_logit_chains(4, 4096, 3, f, shape_seed, 2);
      const LogitChains v = make_logit_chains(4, 65536, 3, f, shape_seed, 3);
      ASSERT_EQ(a.shape.offsets, v.shape.offsets) << "test setup: one shape";
      ASSERT_NE(a.shape.tokens, b.shape.tokens) << "test setup: other tokens";
      const auto check = [&](const std::string& name, const auto& rule) {
        for (const bool one_hot : {false, true}) {
          if (one_hot && !takes_one_hot(rule)) continue;
          const std::string what = name + features_text(f) + " shape " +
                                   std::to_string(shape_seed) + (one_hot ? " one-hot" : "");
          const Count ca = count(a, rule, one_hot), cb = count(b, rule, one_hot),
                      cv = count(v, rule, one_hot);
          EXPECT_GT(ca.calls, 0) << what << ": the ranks never talked";
          EXPECT_GT(ca.bytes, 0) << what;
          EXPECT_EQ(ca.calls, cb.calls) << what << ": calls depend on the row data";
          EXPECT_EQ(ca.bytes, cb.bytes) << what << ": bytes depend on the row data";
          EXPECT_EQ(ca.calls, cv.calls) << what << ": calls depend on V (4096 vs 65536)";
          EXPECT_EQ(ca.bytes, cv.bytes) << what << ": bytes per rank depend on V (4096 vs 65536)";
        }
      };
      check("standard", sv::Standard{});
      check("fsd js", fsd);
      check("coupled", sv::Coupled{});
      check("block", sv::Block{});
      check("traversal", sv::Traversal{});
    }
  }
}

/// What every rank of a bad batch gives, against the unsharded outcome: the same error, and
/// nothing written.
void expect_every_rank_reports(const std::string& name, const Outcome& whole,
                               const std::vector<Outcome>& outcomes) {
  ASSERT_FALSE(whole.error.empty())
      << name << ": the unsharded verify accepts the batch (test setup)";
  for (std::size_t k = 0; k < outcomes.size(); ++k) {
    const Outcome& o = outcomes[k];
    EXPECT_EQ(o.error, whole.error) << name << ": rank " << k;
    EXPECT_EQ(o.tokens, std::vector<std::int32_t>(o.tokens.size(), -7))
        << name << ": rank " << k << " wrote tokens";
    EXPECT_EQ(o.accepted, std::vector<std::int32_t>(o.accepted.size(), -7))
        << name << ": rank " << k << " wrote counts";
    for (const float l : o.logprobs) {
      EXPECT_EQ(l, 0.5f) << name << ": rank " << k << " wrote logprobs";
      if (l != 0.5f) break;
    }
  }
}

/// NaN or +inf in one rank's slice of a row the unsharded verify reads (sequence 0's first
/// target row, its first draft row, its first unconditional row), and in two ranks' slices.
TEST(ShardedLogits, EveryRankReportsABadLogitInOneSlice) {
  const std::vector<std::int32_t> bounds{0, 10, 10, 150, 300};
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (const int where : {0, 1, 2}) {  // target, draft, unconditional row
      for (const bool two : {false, true}) {
        LogitFeatures f;
        f.guidance = true;
        f.penalties = true;
        LogitChains c = make_logit_chains(3, 300, 3, f, 31, 32);
        // Sequence 0 has drafts and guidance.
        c.shape.offsets = {0, 3, 4, 6};
        c.shape.tokens.resize(6, 5);
        c.shape.scores.resize(6, 0.5f);
        c.shape.accept_probs.resize(6, 0.7f);
        c.draft.resize(6 * std::size_t(c.Vd), 0.0f);
        c.target.resize(std::size_t(c.shape.target_rows()) * 300, 0.0f);
        c.uncond.resize(std::size_t(c.shape.target_rows() + 1) * 300, 0.0f);
        c.first_u = {1, -1, 6};
        float* row = where == 0   ? c.target.data()
                     : where == 1 ? c.draft.data()
                                  : c.uncond.data() + 300;
        row[200] = bad;           // rank 3's slice
        if (two) row[20] = -bad;  // and rank 2's: -NaN, or -inf (no fault: the fault is still 200)
        if (two && std::isnan(bad)) row[120] = bad;
        const std::string name = std::string(std::isnan(bad) ? "NaN" : "+inf") + " in the first " +
                                 (where == 0   ? "target"
                                  : where == 1 ? "draft"
                                               : "unconditional") +
                                 " row" + (two ? " (and in another slice)" : "");
        for (const bool one_hot : {false, true}) {
          if (one_hot && where == 1) continue;  // one-hot drafts have no draft rows
          const sv::Randomness r = randomness(c.shape, false);
          const Outcome whole = unsharded(sv::Standard{}, c, r, one_hot);
          for (const Layout layout : {Layout::views, Layout::copies}) {
            sv::ThreadGroup group(4);
            expect_every_rank_reports(
                name + (one_hot ? " one-hot" : "") + " (" + ::name(layout) + ")", whole,
                sharded(sv::Standard{}, c, r, one_hot, bounds, layout, group));
          }
          sv::ThreadGroup group(4);
          const Outcome fsd_whole = unsharded(sv::Fsd{sv::Divergence::js, 0.4f}, c, r, one_hot);
          expect_every_rank_reports(name + " fsd js" + (one_hot ? " one-hot" : ""), fsd_whole,
                                    sharded(sv::Fsd{sv::Divergence::js, 0.4f}, c, r, one_hot,
                                            bounds, Layout::views, group));
        }
      }
    }
  }
}

/// A bad logit in the first rank's slice of every target row: the later ranks' parts of the scan
/// phase are still read in order (a merge that skipped reading a later rank's validity once the row
/// was known bad read every later field of that rank's part one byte off).
TEST(ShardedLogits, ABadLogitInTheFirstSliceLeavesTheLaterSlicesReadInOrder) {
  LogitFeatures f;
  LogitChains c = make_logit_chains(4, 300, 3, f, 41, 42);
  for (sv::SamplingParams& p : c.tp) p.top_k = 20;  // every row sends its top_k candidates
  for (std::int64_t r = 0; r < c.shape.target_rows(); ++r) c.target[std::size_t(r) * 300 + 5] = std::numeric_limits<float>::quiet_NaN();
  const sv::Randomness r = randomness(c.shape, false);
  const Outcome whole = unsharded(sv::Standard{}, c, r, false);
  ASSERT_FALSE(whole.error.empty());
  sv::ThreadGroup group(4);
  expect_every_rank_reports("NaN at token 5 of every target row", whole,
                            sharded(sv::Standard{}, c, r, false, {0, 10, 10, 150, 300}, Layout::copies, group));
}

/// A target row the unsharded walk reads that keeps no token (every logit -inf, or every finite
/// one masked by the bitmask): every rank reports it as the unsharded verify does. The same row
/// where the walk never reads it (the chain ends before) is no fault: the outputs match.
TEST(ShardedLogits, EveryRankReportsAnAllMaskedRowTheWalkReads) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<std::int32_t> bounds{0, 40, 40, 170, 300};
  for (const bool by_mask : {false, true}) {
    LogitFeatures f;
    f.mask = by_mask;
    LogitChains c = make_logit_chains(3, 300, 3, f, 41, 42);
    c.shape.offsets = {0, 3, 4, 6};
    c.shape.tokens.assign(6, 5);
    c.shape.scores.assign(6, 0.5f);
    c.shape.accept_probs.assign(6, 0.7f);
    c.draft.assign(6 * std::size_t(c.Vd), 0.0f);
    c.target.assign(std::size_t(c.shape.target_rows()) * 300, 0.0f);
    if (by_mask) c.mask.assign(std::size_t(c.shape.target_rows()) * c.words(), ~0u);
    const auto empty_row = [&](LogitChains& x, std::int64_t r) {
      float* l = &x.target[std::size_t(r) * 300];
      if (by_mask) {
        for (std::int32_t w = 0; w < x.words(); ++w)
          x.mask[std::size_t(r) * x.words() + std::size_t(w)] = 0u;
        for (std::int32_t v = 0; v < 300; v += 2) l[v] = ninf;  // finite ones masked
      } else {
        for (std::int32_t v = 0; v < 300; ++v) l[v] = ninf;
      }
    };
    const std::string how = by_mask ? "masked by the bitmask" : "all -inf";
    {
      LogitChains bad = c;
      empty_row(bad, 0);  // sequence 0's first row: always read
      for (const bool one_hot : {false, true}) {
        const sv::Randomness r = randomness(bad.shape, false);
        for (const Layout layout : {Layout::views, Layout::copies}) {
          sv::ThreadGroup group(4);
          expect_every_rank_reports(
              "first row " + how + (one_hot ? " one-hot" : "") + " standard",
              unsharded(sv::Standard{}, bad, r, one_hot),
              sharded(sv::Standard{}, bad, r, one_hot, bounds, layout, group));
          sv::ThreadGroup group2(4);
          expect_every_rank_reports("first row " + how + (one_hot ? " one-hot" : "") + " greedy",
                                    unsharded(sv::Greedy{}, bad, r, one_hot),
                                    sharded(sv::Greedy{}, bad, r, one_hot, bounds, layout, group2));
        }
      }
    }
    {
      // Sequence 0's drafts are all 7 and p(7) = 0 in its first row (below the row's max, so
      // Greedy rejects too), q(7) > 0: the walk stops at position 0 and never reads row 1.
      LogitChains skip = c;
      for (std::int32_t v = 0; v < 300; ++v) skip.target[std::size_t(v)] = float(v % 5);
      skip.target[7] = ninf;
      for (std::int32_t j = 0; j < 3; ++j) {
        skip.shape.tokens[std::size_t(j)] = 7;
        skip.draft[std::size_t(j) * 300 + 7] = 4.0f;
      }
      empty_row(skip, 1);
      for (const bool one_hot : {false, true}) {
        const sv::Randomness r = randomness(skip.shape, true);
        const auto check = [&](const std::string& rule_name, const auto& rule) {
          const Outcome whole = unsharded(rule, skip, r, one_hot);
          const std::string name =
              "an unread row " + how + " " + rule_name + (one_hot ? " one-hot" : "");
          ASSERT_EQ(whole.error, "") << name << ": the unsharded verify reads the row (test setup)";
          ASSERT_EQ(whole.accepted[0], 0) << name << " (test setup)";
          for (const Layout layout : {Layout::views, Layout::copies}) {
            sv::ThreadGroup group(4);
            expect_ranks_match(name, whole, sharded(rule, skip, r, one_hot, bounds, layout, group),
                               bounds, layout, skip);
          }
        };
        check("standard", sv::Standard{});
        check("greedy", sv::Greedy{});
        check("coupled", sv::Coupled{});
      }
    }
  }
}


/// A rank that passes other sampling parameters, lists, guidance, draft map or bitmask than its
/// peers would return other tokens: every rank refuses the call alike, naming what differs (and
/// with nothing edited, the control, every rank returns the unsharded outputs).
TEST(ShardedLogits, EveryRankNamesTheArgumentARankDisagreesOn) {
  LogitFeatures f;
  f.guidance = f.mask = f.penalties = f.reduced_draft = f.draft_params = true;
  const LogitChains c = make_logit_chains(4, 300, 3, f, 51, 52);
  const std::vector<std::int32_t> bounds{0, 100, 100, 300};
  const sv::Randomness r = randomness(c.shape, false);
  const auto run = [&](const std::function<void(sv::LogitsChainBatch<float>&)>& edit) {
    std::vector<RankRows> rows = rank_rows(c, false, bounds, Layout::copies);
    edit(rows[2].batch);
    sv::ThreadGroup group(3);
    return on_ranks(sv::Standard{}, c, r, rows, [&](std::int32_t k) { return group.communicator(k); });
  };
  const Outcome whole = unsharded(sv::Standard{}, c, r, false);
  ASSERT_EQ(whole.error, "") << "test setup";
  for (const Outcome& o : run([](sv::LogitsChainBatch<float>&) {})) EXPECT_TRUE(o == whole) << describe(o);
  std::vector<sv::SamplingParams> tp = c.tp, dp = c.dp;
  std::vector<std::int32_t> d2t = c.d2t, h_tokens = c.lists.h_tokens, h_counts = c.lists.h_counts;
  std::vector<float> b_values = c.lists.b_values, scales = c.scales;
  std::vector<std::int64_t> first_u = c.first_u;
  tp[1].temperature *= 1.5f;
  dp[2].top_k += 1;
  std::swap(d2t[0], d2t[1]);
  ASSERT_FALSE(h_counts.empty() || b_values.empty()) << "test setup";
  h_counts.back() += 1;
  b_values.back() += 1.0f;
  scales[0] += 0.5f;
  std::size_t guided = 0;
  while (guided < first_u.size() && first_u[guided] < 0) ++guided;
  ASSERT_LT(guided, first_u.size()) << "test setup";
  first_u[guided] = -1;
  const auto expect = [&](const std::string& name, const std::string& what,
                          const std::function<void(sv::LogitsChainBatch<float>&)>& edit) {
    const std::vector<Outcome> outcomes = run(edit);
    for (std::size_t k = 0; k < outcomes.size(); ++k) {
      EXPECT_EQ(outcomes[k].error, outcomes[0].error) << name << ": rank " << k;
      EXPECT_NE(outcomes[k].error.find("rank 2 passes other " + what + " than rank 0"), std::string::npos)
          << name << ": rank " << k << ": " << outcomes[k].error;
    }
  };
  const std::string sampling = "sampling parameters (target_params, draft_params)";
  expect("a temperature", sampling, [&](auto& b) { b.target_params = tp.data(); });
  expect("a draft top_k", sampling, [&](auto& b) { b.draft_params = dp.data(); });
  expect("draft_params on one rank", sampling, [&](auto& b) { b.draft_params = nullptr; });
  expect("the draft map", "draft vocabulary (draft_vocab_size, draft_to_target)", [&](auto& b) { b.draft_to_target = d2t.data(); });
  expect("a history count", "penalty or bias lists", [&](auto& b) { b.history_counts = h_counts.data(); });
  expect("a bias value", "penalty or bias lists", [&](auto& b) { b.bias_values = b_values.data(); });
  expect("no lists on one rank", "penalty or bias lists", [&](auto& b) {
    b.history_offsets = b.bias_offsets = nullptr;
  });
  expect("a guidance scale", "guidance (unconditional_first_row, guidance_scale)", [&](auto& b) { b.guidance_scale = scales.data(); });
  expect("a sequence's guidance rows", "guidance (unconditional_first_row, guidance_scale)",
         [&](auto& b) { b.unconditional_first_row = first_u.data(); });
  expect("no bitmask on one rank", "bitmask (whether allowed_tokens is given)", [&](auto& b) { b.allowed_tokens = nullptr; });
}

/// Writes `value` over byte `at` of rank `from`'s part of all_gather number `call`, alike on every
/// rank (as what a rank sent reaches all its peers); records each call's bytes per rank.
class CorruptingCommunicator {
 public:
  struct Fault {
    std::int32_t call = -1, from = 0;
    std::size_t at = 0;
    unsigned char value = 0;
  };
  CorruptingCommunicator(sv::ThreadGroup& group, std::int32_t rank, const Fault& fault, std::vector<std::size_t>* sizes)
      : inner_(group.communicator(rank)), fault_(fault), sizes_(sizes) {}
  void all_gather(const void* send, std::size_t bytes, void* recv) const {
    inner_.all_gather(send, bytes, recv);
    if (sizes_) sizes_->push_back(bytes);
    if (calls_++ == fault_.call && fault_.at < bytes) {
      static_cast<unsigned char*>(recv)[std::size_t(fault_.from) * bytes + fault_.at] = fault_.value;
    }
  }

 private:
  sv::ThreadGroup::Communicator inner_;
  Fault fault_;
  std::vector<std::size_t>* sizes_;
  mutable std::int32_t calls_ = 0;
};

/// Every byte of one rank's part of every message (but the text of its shard header, below), set
/// to 0xff, 0x7f or 0 in turn (so each byte of a word meets each value somewhere): each call
/// returns the same on every rank, and fails only with invalid_input (no over-read, no other
/// exception, no huge allocation: the sanitizer builds run this too); what it returns are tokens of
/// [0, V). At least one corruption is named as a malformed message (the checks exist) and one is
/// harmless (the sweep reaches the outputs). The top_k case sends candidates, counts and ties;
/// top_p alone sends histograms of fixed-point sums. Last, a shard header whose text has no end.
TEST(ShardedLogits, EveryRankRefusesAMalformedMessageAlike) {
  for (const bool top_k : {true, false}) {
    LogitFeatures f;
    f.top_p_alone = !top_k;
    LogitChains c = make_logit_chains(2, 40, 2, f, 61, 62);
    for (sv::SamplingParams& p : c.tp) {
      p.top_k = top_k ? 5 : 0;
      p.top_p = top_k ? 1.0f : 0.8f;
    }
    const std::vector<std::int32_t> bounds{0, 15, 40};
    const sv::Randomness r = randomness(c.shape, false);
    const std::vector<RankRows> rows = rank_rows(c, false, bounds, Layout::copies);
    std::vector<std::size_t> sizes;
    const auto run = [&](const CorruptingCommunicator::Fault& fault) {
      sv::ThreadGroup group(2);
      return on_ranks(sv::Standard{}, c, r, rows, [&](std::int32_t k) {
        return CorruptingCommunicator(group, k, fault, fault.call < 0 && k == 0 ? &sizes : nullptr);
      });
    };
    const Outcome whole = unsharded(sv::Standard{}, c, r, false);
    ASSERT_EQ(whole.error, "") << "test setup";
    ASSERT_TRUE(run({})[1] == whole) << "the control";
    std::int64_t malformed = 0, harmless = 0;
    constexpr std::size_t kText = offsetof(sv::cpu::shard::Header, message);
    constexpr unsigned char kValues[3] = {0xff, 0x7f, 0x00};
    for (std::int32_t call = 0; call < static_cast<std::int32_t>(sizes.size()); ++call) {
      for (std::size_t at = 0; at < sizes[std::size_t(call)]; ++at) {
        if (call == 0 && at >= kText) break;  // the text: read as a whole, below
        {
          const unsigned char value = kValues[at % 3];
          const std::vector<Outcome> o = run({call, 1, at, value});
          const std::string where = "call " + std::to_string(call) + " byte " + std::to_string(at) + " = " +
                                    std::to_string(value) + (top_k ? " (top_k)" : " (top_p)");
          ASSERT_TRUE(o[0] == o[1]) << where << ": the ranks differ: " << describe(o[0]) << " / " << describe(o[1]);
          ASSERT_EQ(o[0].error.find("(not invalid_input)"), std::string::npos) << where << ": " << o[0].error;
          if (o[0].error.find("rank 1 sent a malformed message") != std::string::npos) ++malformed;
          if (o[0] == whole) ++harmless;
          if (!o[0].error.empty()) continue;
          for (const std::int32_t t : o[0].tokens) ASSERT_TRUE(t == sv::kNoToken || (t >= 0 && t < 40)) << where << ": " << t;
        }
      }
    }
    EXPECT_GT(malformed, 0) << (top_k ? "top_k" : "top_p");
    EXPECT_GT(harmless, 0) << (top_k ? "top_k" : "top_p");
  }
  // Rank 1 says it failed, with a text that fills the header: every rank names the message as
  // malformed (it once threw the text read past the header).
  struct Unterminated {
    sv::ThreadGroup::Communicator inner;
    mutable std::int32_t calls = 0;
    void all_gather(const void* send, std::size_t bytes, void* recv) const {
      inner.all_gather(send, bytes, recv);
      if (calls++ != 0) return;  // the shard phase's
      auto* h = reinterpret_cast<sv::cpu::shard::Header*>(static_cast<unsigned char*>(recv) + bytes);
      h->failed = 1;
      std::memset(h->message, 'x', sizeof h->message);
    }
  };
  const LogitChains c = make_logit_chains(2, 40, 2, LogitFeatures{}, 61, 62);
  const sv::Randomness r = randomness(c.shape, false);
  sv::ThreadGroup group(2);
  const auto outcomes = on_ranks(sv::Standard{}, c, r, rank_rows(c, false, {0, 15, 40}, Layout::copies),
                                 [&](std::int32_t k) { return Unterminated{group.communicator(k)}; });
  for (const Outcome& o : outcomes) {
    EXPECT_EQ(o.error, "specverify::verify: rank 1 sent a malformed message in phase 1 (shard) (an unterminated message)");
  }
}

/// Rows of logits past the largest vocabulary (core::kMaxLogitsVocab): every rank refuses the
/// batch by its size, as the unsharded verify does, and the slices' flat rows at the largest
/// vocabulary give every rank the unsharded verify's outputs (a normaliser of exactly 2^22).
TEST(ShardedLogits, EveryRankRefusesAVocabularyPastTheLargest) {
  for (const std::int32_t V : {sv::core::kMaxLogitsVocab, sv::core::kMaxLogitsVocab + 1}) {
    const std::int32_t cut = V / 3;
    const std::int32_t bounds[3] = {0, cut, V};
    std::vector<std::vector<float>> slices(2);
    const std::int32_t offsets[2] = {0, 1}, draft = V - 1;
    const sv::SamplingParams params;
    std::vector<std::vector<std::int32_t>> tokens(3, std::vector<std::int32_t>(2, 12345));
    std::vector<std::int32_t> accepted(3, 12345);
    std::vector<std::string> errors(3);
    const auto batch_of = [&](const float* rows, std::int32_t start, std::int32_t size, std::int32_t rank) {
      sv::LogitsChainBatch<float> b;
      b.batch_size = 1;
      b.vocab_size = V;
      b.draft_offsets = offsets;
      b.draft_tokens = &draft;
      b.target_logits = rows;
      b.target_params = &params;
      if (rank >= 0) b.shard = {rank, 2, start, size};
      return b;
    };
    const std::vector<float> whole(2 * static_cast<std::size_t>(V), 0.0f);
    try {
      sv::verify(sv::Standard{}, batch_of(whole.data(), 0, V, -1), {3, 0}, {tokens[2].data(), 2, &accepted[2]});
    } catch (const sv::invalid_input& e) {
      errors[2] = e.what();
    }
    sv::ThreadGroup group(2);
    std::vector<std::thread> threads;
    for (std::int32_t k = 0; k < 2; ++k) {
      const std::int32_t start = bounds[k], size = bounds[k + 1] - bounds[k];
      slices[std::size_t(k)].assign(2 * static_cast<std::size_t>(size), 0.0f);
      threads.emplace_back([&, k, start, size] {
        try {
          sv::verify(sv::Standard{}, batch_of(slices[std::size_t(k)].data(), start, size, k), {3, 0},
                     {tokens[std::size_t(k)].data(), 2, &accepted[std::size_t(k)]}, group.communicator(k));
        } catch (const sv::invalid_input& e) {
          errors[std::size_t(k)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    const bool past = V > sv::core::kMaxLogitsVocab;
    EXPECT_EQ(errors[2].find("vocab_size = 4194305 exceeds 4194304") != std::string::npos, past) << errors[2];
    for (std::int32_t k = 0; k < 2; ++k) {
      EXPECT_EQ(errors[std::size_t(k)], errors[2]) << "V = " << V << ", rank " << k;
      EXPECT_EQ(tokens[std::size_t(k)], tokens[2]) << "V = " << V << ", rank " << k;
      EXPECT_EQ(accepted[std::size_t(k)], accepted[2]) << "V = " << V << ", rank " << k;
    }
    // Past the limit nothing is written; at it p(x) = 2^-22, and u < p(x) is not drawn at this seed.
    EXPECT_EQ(accepted[2], past ? 12345 : 0);
  }
}

}  // namespace
