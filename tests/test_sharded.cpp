// The sharded verify (docs/api.md "Sharded vocabulary") against the unsharded one: every rank's
// outputs bit for bit those of verify() on the whole rows, for ranks 1 to 8 with uneven and empty
// slices; a fixed number of all_gather calls whose bytes do not depend on the data or on V; bad
// input in one rank's slice reported by every rank alike.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "specverify/specverify.hpp"
#include "specverify/thread_communicator.hpp"
#include "support/sharded_chains.hpp"

namespace sv = specverify;

namespace {

using namespace specverify::testing::sharded;

/// Runs every rank on its own thread; returns each rank's outcome.
template <class Rule>
std::vector<Outcome> sharded(const Rule& rule, const Chains& c, const sv::Randomness& r, bool one_hot,
                             const std::vector<std::int32_t>& bounds, bool views, sv::ThreadGroup& group) {
  const std::int32_t ranks = static_cast<std::int32_t>(bounds.size()) - 1;
  std::vector<Outcome> outcomes(static_cast<std::size_t>(ranks));
  std::vector<std::vector<float>> p(ranks), q(ranks);
  std::vector<std::thread> threads;
  for (std::int32_t k = 0; k < ranks; ++k) {
    const std::int32_t start = bounds[k], size = bounds[k + 1] - bounds[k];
    sv::ChainBatch<float> batch{c.B, c.V, c.offsets.data(), c.tokens.data(), nullptr, nullptr};
    batch.shard = {k, ranks, start, size};
    if (views) {
      batch.target_probs = c.p.data() + start;
      batch.draft_probs = one_hot ? nullptr : c.q.data() + start;
      batch.target_stride = batch.draft_stride = c.V;
    } else if (size > 0) {  // an empty slice passes null rows
      p[k] = slice_rows(c.p, c.V, start, size);
      q[k] = slice_rows(c.q, c.V, start, size);
      batch.target_probs = p[k].data();
      // Without drafts q has no rows, but a rank that has draft rows says so with a pointer.
      if (!one_hot) batch.draft_probs = q[k].empty() ? p[k].data() : q[k].data();
    }
    threads.emplace_back([&, batch, k] {
      outcomes[k] = capture(c, [&](const sv::ChainOutput& out) {
        return sv::verify(rule, batch, r, out, group.communicator(k));
      });
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

template <class Rule>
void expect_same(const std::string& name, const Rule& rule, const Chains& c, std::mt19937_64& rng) {
  for (const bool one_hot : {false, true}) {
    for (const bool per_sequence : {false, true}) {
      const sv::Randomness r = randomness(c, per_sequence);
      const Outcome whole = unsharded(rule, c, r, one_hot);
      for (std::int32_t ranks = 1; ranks <= 8; ranks += (ranks < 4 ? 1 : 4)) {
        const auto bounds = random_bounds(c.V, ranks, rng);
        sv::ThreadGroup group(ranks);
        const bool views = rng() % 2 == 0;
        const auto outcomes = sharded(rule, c, r, one_hot, bounds, views, group);
        for (std::int32_t k = 0; k < ranks; ++k) {
          ASSERT_TRUE(outcomes[k] == whole)
              << name << (one_hot ? " one-hot" : "") << (per_sequence ? " per-sequence seeds" : "") << ": rank " << k
              << " of " << ranks << (views ? " (views)" : " (copies)") << " differs from the unsharded verify"
              << (outcomes[k].error.empty() ? "" : ": " + outcomes[k].error)
              << (whole.error.empty() ? "" : " (unsharded: " + whole.error + ")");
        }
      }
    }
  }
}

TEST(Sharded, MatchesUnshardedForEveryRuleAndSplit) {
  std::mt19937_64 rng(7);
  for (const Rows kind : {Rows::normalised, Rows::unnormalised_large, Rows::tiny, Rows::peaked, Rows::close}) {
    for (const std::int32_t V : {1, 7, 300}) {
      const Chains c = make_chains(5, V, 4, kind, 100 + V + 1000 * static_cast<int>(kind));
      every_rule(c, [&](const std::string& name, const auto& rule) {
        expect_same(name + " V=" + std::to_string(V) + " rows " + std::to_string(static_cast<int>(kind)), rule, c, rng);
      });
    }
  }
}

TEST(Sharded, MatchesUnshardedOnLargeRows) {
  std::mt19937_64 rng(8);
  const Chains c = make_chains(3, 40000, 5, Rows::normalised, 9);
  expect_same("standard V=40000", sv::Standard{}, c, rng);
  expect_same("fsd js V=40000", sv::Fsd{sv::Divergence::js, 0.4f}, c, rng);
  expect_same("coupled V=40000", sv::Coupled{}, c, rng);
}

/// Block and traversal verification where their masses Z_i and their scaled residual
/// max(s P - Q, 0) decide: q close to p keeps the weights near 1, so tests read Z_i and chains stop
/// before their end.
TEST(Sharded, JointWalksMatchUnshardedWhereTheirMassesDecide) {
  std::mt19937_64 rng(9);
  for (const auto& [B, V] : {std::pair{1024, 50}, std::pair{64, 3000}}) {
    const Chains c = make_chains(B, V, 5, Rows::close, 40 + V);
    expect_same("block V=" + std::to_string(V), sv::Block{}, c, rng);
    expect_same("traversal V=" + std::to_string(V), sv::Traversal{}, c, rng);
  }
}

/// The calls and bytes a rank makes, for a shape: the same for any data, and per row the same
/// for any V.
TEST(Sharded, CollectivesDependOnTheShapeAlone) {
  const auto count = [](const Chains& c, auto rule, std::int64_t& calls, std::int64_t& bytes) {
    sv::ThreadGroup group(3);
    sharded(rule, c, randomness(c, false), false, {0, c.V / 3, c.V / 2, c.V}, false, group);
    calls = group.calls();
    bytes = group.bytes_per_rank();
  };
  const auto same_for_any_data = [&](const std::string& name, const auto& rule, std::int64_t expected_calls) {
    for (const auto kind : {Rows::normalised, Rows::unnormalised_large, Rows::tiny}) {
      // The same seed gives the same drafts' shape; the rows and tokens differ.
      std::int64_t calls_a, bytes_a, calls_b, bytes_b, calls_c, bytes_c;
      count(make_chains(4, 4096, 5, kind, 1), rule, calls_a, bytes_a);
      count(make_chains(4, 4096, 5, Rows::peaked, 1), rule, calls_b, bytes_b);
      count(make_chains(4, 65536, 5, kind, 1), rule, calls_c, bytes_c);
      EXPECT_EQ(calls_a, expected_calls) << name;
      EXPECT_EQ(calls_a, calls_b) << name;
      EXPECT_EQ(bytes_a, bytes_b) << name;
      EXPECT_EQ(calls_a, calls_c) << name;
      EXPECT_EQ(bytes_a, bytes_c) << name;
    }
  };
  // shard, rows, rescaled statistics, draw sums, rescaled sums, tokens
  same_for_any_data("fsd js", sv::Fsd{sv::Divergence::js, 0.4f}, 6);
  // shard, rows, block masses, rescaled masses, draw sums, rescaled sums, tokens
  same_for_any_data("block", sv::Block{}, 7);
  same_for_any_data("traversal", sv::Traversal{}, 7);
  std::int64_t calls, bytes;
  const Chains c = make_chains(4, 4096, 5, Rows::normalised, 1);
  count(c, sv::Standard{}, calls, bytes);
  EXPECT_EQ(calls, 5);  // no statistics: no rescaled ones
}

/// A fault in one rank's slice: every rank throws the same invalid_input, the unsharded verify's
/// wording, and no output changes.
TEST(Sharded, EveryRankReportsABadValueInOneSlice) {
  std::mt19937_64 rng(3);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1.0f}) {
    Chains c = make_chains(3, 64, 3, Rows::normalised, 5);
    // Every sequence's first row bad at token 50 (held by the last rank): the unsharded verify reads
    // it in its residual draw or at the draft.
    for (std::int32_t b = 0; b < c.B; ++b) c.p[static_cast<std::size_t>(c.offsets[b] + b) * c.V + 50] = bad;
    c.tokens.assign(c.tokens.size(), 50);
    const sv::Randomness r = randomness(c, false);
    const Outcome whole = unsharded(sv::Standard{}, c, r, false);
    ASSERT_FALSE(whole.error.empty());
    sv::ThreadGroup group(4);
    const auto outcomes = sharded(sv::Standard{}, c, r, false, {0, 10, 30, 30, 64}, false, group);
    for (const Outcome& o : outcomes) {
      EXPECT_EQ(o.error, whole.error);
      EXPECT_EQ(o.tokens, std::vector<std::int32_t>(o.tokens.size(), -7)) << "an output changed";
    }
  }
}

/// A bad value in a draft row that only the residual draw reads: named in the draft row, as the
/// unsharded verify names it, though the target row's slices come first in the draw's message.
TEST(Sharded, EveryRankNamesABadDraftValueInTheDraw) {
  Chains c = make_chains(3, 64, 3, Rows::normalised, 6);
  c.tokens.assign(c.tokens.size(), 3);
  for (std::int32_t b = 0; b < c.B; ++b) c.p[static_cast<std::size_t>(c.offsets[b] + b) * c.V + 3] = 0.0f;  // rejected
  for (std::int32_t j = 0; j < c.offsets.back(); ++j) c.q[static_cast<std::size_t>(j) * c.V + 50] = std::numeric_limits<float>::quiet_NaN();
  const sv::Randomness r = randomness(c, false);
  const Outcome whole = unsharded(sv::Standard{}, c, r, false);
  ASSERT_NE(whole.error.find("draft row"), std::string::npos) << whole.error;
  sv::ThreadGroup group(4);
  for (const Outcome& o : sharded(sv::Standard{}, c, r, false, {0, 10, 30, 30, 64}, false, group)) EXPECT_EQ(o.error, whole.error);
}

/// Every rank's error (empty: none) when each rank k runs `call(k, batch, randomness, out, comm)`
/// over its slice of `bounds`; `call` may edit its arguments first.
template <class Call>
std::vector<std::string> rank_errors(const Chains& c, const std::vector<std::int32_t>& bounds, Call call) {
  const std::int32_t ranks = static_cast<std::int32_t>(bounds.size()) - 1;
  sv::ThreadGroup group(ranks);
  std::vector<std::string> out(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (std::int32_t k = 0; k < ranks; ++k) {
    threads.emplace_back([&, k] {
      sv::ChainBatch<float> batch{c.B, c.V, c.offsets.data(), c.tokens.data(), c.p.data() + bounds[k], c.q.data() + bounds[k]};
      batch.target_stride = batch.draft_stride = c.V;
      batch.shard = {k, ranks, bounds[k], bounds[k + 1] - bounds[k]};
      sv::Randomness r = randomness(c, false);
      out[k] = capture(c, [&](const sv::ChainOutput& o) { return call(k, batch, r, o, group.communicator(k)); }).error;
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST(Sharded, EveryRankReportsABadSplitOrInput) {
  const Chains c = make_chains(2, 50, 2, Rows::normalised, 4);
  const auto errors = [&](const std::vector<std::int32_t>& bounds, std::function<void(std::int32_t, sv::ChainBatch<float>&)> edit) {
    return rank_errors(c, bounds, [&](std::int32_t k, sv::ChainBatch<float>& batch, const sv::Randomness& r,
                                      const sv::ChainOutput& o, const auto& comm) {
      edit(k, batch);
      return sv::verify(sv::Standard{}, batch, r, o, comm);
    });
  };
  const auto all_same = [](const std::vector<std::string>& e, const char* needle) {
    for (const std::string& s : e) {
      EXPECT_EQ(s, e[0]);
      EXPECT_NE(s.find(needle), std::string::npos) << s;
    }
  };
  all_same(errors({0, 20, 45}, [](std::int32_t, sv::ChainBatch<float>&) {}), "cover [0, 45)");
  all_same(errors({0, 20, 50}, [](std::int32_t k, sv::ChainBatch<float>& b) { if (k == 1) b.shard = {1, 2, 21, 29}; }),
           "rank order");
  all_same(errors({0, 20, 50}, [](std::int32_t k, sv::ChainBatch<float>& b) { if (k == 1) b.target_stride = 5; }),
           "target_stride");
  all_same(errors({0, 20, 50}, [](std::int32_t k, sv::ChainBatch<float>& b) { if (k == 0) b.vocab_size = 49; }), "");
  std::vector<std::int32_t> bad_tokens(c.tokens.size(), c.V + 4);  // every rank's drafts, out of range
  all_same(errors({0, 20, 50}, [&](std::int32_t, sv::ChainBatch<float>& b) { b.draft_tokens = bad_tokens.data(); }),
           "54");
  std::vector<std::int32_t> other_tokens(c.tokens.size(), 3);
  all_same(errors({0, 20, 50}, [&](std::int32_t k, sv::ChainBatch<float>& b) { if (k == 1) b.draft_tokens = other_tokens.data(); }),
           "same");
  all_same(errors({0, 20, 50}, [](std::int32_t k, sv::ChainBatch<float>& b) { if (k == 1) b.draft_offsets = nullptr; }),
           "draft_offsets");
}

/// A rank that passes another randomness or another rule (type, parameter, per-draft input) than
/// its peers would return other tokens: every rank refuses the call alike, naming what differs.
TEST(Sharded, EveryRankNamesTheArgumentARankDisagreesOn) {
  const Chains c = make_chains(3, 60, 3, Rows::normalised, 14);
  const std::vector<std::int32_t> bounds{0, 20, 20, 60};
  std::vector<float> other_scores = c.scores, other_uniforms(std::size_t(c.offsets.back()), 0.25f),
                     uniforms = other_uniforms;
  other_scores[2] = other_scores[2] > 0.5f ? 0.1f : 0.9f;
  other_uniforms[1] = 0.75f;
  std::vector<std::uint64_t> seeds(std::size_t(c.B), 5), other_seeds = seeds;
  other_seeds[2] = 6;
  const auto expect = [&](const std::string& name, const std::vector<std::string>& errors, const std::string& what) {
    for (std::size_t k = 0; k < errors.size(); ++k) {
      EXPECT_EQ(errors[k], errors[0]) << name << ": rank " << k;
      if (what.empty()) {
        EXPECT_EQ(errors[k], "") << name << ": rank " << k;
      } else {
        EXPECT_NE(errors[k].find("rank 2 passes other " + what + " than rank 0"), std::string::npos)
            << name << ": rank " << k << ": " << errors[k];
      }
    }
  };
  // On rank 2 only: the edit; every other rank passes the common arguments.
  const auto with = [&](auto edit) {
    return [edit](std::int32_t k, const sv::ChainBatch<float>& batch, sv::Randomness& r, const sv::ChainOutput& out,
                  const auto& comm) { return edit(k == 2, batch, r, out, comm); };
  };
  const auto standard = [](bool, const auto& batch, auto& r, const auto& out, const auto& comm) {
    return sv::verify(sv::Standard{}, batch, r, out, comm);
  };
  expect("the same arguments (the control)", rank_errors(c, bounds, with(standard)), "");
  const std::string randomness_text = "randomness (seed, offset, sequence_seeds, caller uniforms, positions)";
  const auto randomness_case = [&](const std::string& name, auto change) {
    expect(name, rank_errors(c, bounds, with([&](bool edited, const auto& batch, auto& r, const auto& out, const auto& comm) {
             change(edited, r);
             return sv::verify(sv::Standard{}, batch, r, out, comm);
           })),
           randomness_text);
  };
  randomness_case("seed", [](bool e, sv::Randomness& r) { r.seed += e; });
  randomness_case("offset (a step counter that drifted)", [](bool e, sv::Randomness& r) { r.offset += e; });
  randomness_case("sequence_seeds on one rank", [&](bool e, sv::Randomness& r) { r.sequence_seeds = e ? seeds.data() : nullptr; });
  randomness_case("sequence_seeds", [&](bool e, sv::Randomness& r) { r.sequence_seeds = e ? other_seeds.data() : seeds.data(); });
  randomness_case("accept_uniforms", [&](bool e, sv::Randomness& r) { r.accept_uniforms = e ? other_uniforms.data() : uniforms.data(); });
  randomness_case("sample_uniforms on one rank", [&](bool e, sv::Randomness& r) { r.sample_uniforms = e ? uniforms.data() : nullptr; });
  std::vector<std::int64_t> other_positions = c.positions;
  other_positions[1] += 1;
  expect("Coupled's positions", rank_errors(c, bounds, with([&](bool e, const auto& batch, auto& r, const auto& out, const auto& comm) {
           if (e) r.positions = other_positions.data();
           return sv::verify(sv::Coupled{}, batch, r, out, comm);
         })),
         randomness_text);
  expect("positions, which Standard does not read", rank_errors(c, bounds, with([&](bool e, const auto& batch, auto& r, const auto& out, const auto& comm) {
           if (e) r.positions = other_positions.data();
           return sv::verify(sv::Standard{}, batch, r, out, comm);
         })),
         "");
  const std::string rule_text = "rule or rule parameters";
  const auto rule_case = [&](const std::string& name, const auto& common, const auto& edited) {
    expect(name, rank_errors(c, bounds, with([&](bool e, const auto& batch, auto& r, const auto& out, const auto& comm) {
             return e ? sv::verify(edited, batch, r, out, comm) : sv::verify(common, batch, r, out, comm);
           })),
           rule_text);
  };
  rule_case("Standard and Greedy", sv::Standard{}, sv::Greedy{});
  rule_case("Standard and Block", sv::Standard{}, sv::Block{});
  rule_case("EARS beta", sv::Ears{0.5f}, sv::Ears{0.6f});
  rule_case("FSD divergence", sv::Fsd{sv::Divergence::js, 0.4f}, sv::Fsd{sv::Divergence::tv, 0.4f});
  rule_case("FSD and reducible FSD", sv::Fsd{sv::Divergence::js, 0.4f}, sv::ReducibleFsd{sv::Divergence::js, 0.4f});
  rule_case("SPRINTER's scores", sv::Sprinter{0.5f, c.scores.data()}, sv::Sprinter{0.5f, other_scores.data()});
  rule_case("SpecDec++'s inner rule", sv::SpecDecPP<sv::Ears>{0.5f, c.accept_probs.data(), sv::Ears{0.1f}},
            sv::SpecDecPP<sv::Ears>{0.5f, c.accept_probs.data(), sv::Ears{0.2f}});
  // The same rule with its per-draft inputs in other buffers holding the same values: no error.
  const std::vector<float> scores_copy = c.scores;
  expect("SPRINTER's scores, copied", rank_errors(c, bounds, with([&](bool e, const auto& batch, auto& r, const auto& out, const auto& comm) {
           return sv::verify(sv::Sprinter{0.5f, e ? scores_copy.data() : c.scores.data()}, batch, r, out, comm);
         })),
         "");
}

TEST(Sharded, TheUnshardedVerifyRefusesASlice) {
  const Chains c = make_chains(1, 10, 1, Rows::normalised, 4);
  sv::ChainBatch<float> batch{c.B, c.V, c.offsets.data(), c.tokens.data(), c.p.data(), c.q.data()};
  batch.shard = {0, 2, 0, 5};
  const Outcome o = capture(c, [&](const sv::ChainOutput& out) { return sv::verify(sv::Standard{}, batch, randomness(c, false), out); });
  EXPECT_NE(o.error.find("needs verify(rule, batch, randomness, out, comm)"), std::string::npos) << o.error;
}

}  // namespace
