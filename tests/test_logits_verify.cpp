// verify() over logits, end to end: the emitted tokens follow the processed p of docs/api.md's
// steps (a long-double reference, bias and penalties aside) for every parameter and in
// combination, with adversarial, reduced-vocabulary and differently-parameterised drafts;
// logprobs; Coupled reproduces plain sampling token for token; bad logits inputs are named and
// nothing is written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "reference_sampling.hpp"
#include "support.hpp"

namespace specverify {
namespace {

using testing::ReferenceRow;
using testing::reference_probs;

/// B sequences of K drafts over one target row and one draft row repeated at every position, so
/// every emitted token is an independent draw from p; drafts are drawn from the reference q.
struct LogitsCase {
  std::int32_t V = 16, K = 2, B = 40000;
  ReferenceRow target, draft;                 // draft.logits over the draft vocabulary
  std::vector<std::int32_t> draft_to_target;  // empty: the target's vocabulary
  bool one_hot = false;
  bool draft_params_differ = false;

  // Built by run():
  std::vector<std::int32_t> offsets, tokens, out, accepted;
  std::vector<float> p_rows, q_rows, u_rows, logprobs;
  std::vector<std::int64_t> first_u;
  std::vector<float> scales;
  std::vector<SamplingParams> tp, dp;

  std::vector<float> p() const { return testing::as_floats(reference_probs(target)); }
  std::vector<float> q() const {  // over target ids
    const auto qd = reference_probs(draft);
    std::vector<float> q(std::size_t(V), 0.0f);
    for (std::size_t d = 0; d < qd.size(); ++d) {
      q[std::size_t(draft_to_target.empty() ? std::int32_t(d) : draft_to_target[d])] = float(qd[d]);
    }
    return q;
  }

  LogitsChainBatch<float> batch(std::uint64_t draft_seed) {
    std::mt19937_64 rng(draft_seed);
    const std::vector<float> qt = q();
    offsets.assign(1, 0);
    tokens.clear();
    for (std::int32_t b = 0; b < B; ++b) {
      for (std::int32_t j = 0; j < K; ++j) {
        tokens.push_back(one_hot ? std::int32_t(rng() % std::uint64_t(V)) : testing::sample(qt, rng));
      }
      offsets.push_back(offsets.back() + K);
    }
    const std::size_t rows = std::size_t(B) * (K + 1);
    p_rows.clear();
    u_rows.clear();
    for (std::size_t r = 0; r < rows; ++r) {
      p_rows.insert(p_rows.end(), target.logits.begin(), target.logits.end());
      if (!target.unconditional.empty()) u_rows.insert(u_rows.end(), target.unconditional.begin(), target.unconditional.end());
    }
    q_rows.clear();
    for (std::size_t r = 0; r < std::size_t(B) * K; ++r) q_rows.insert(q_rows.end(), draft.logits.begin(), draft.logits.end());
    tp.assign(std::size_t(B), target.params);
    dp.assign(std::size_t(B), draft.params);
    LogitsChainBatch<float> b;
    b.batch_size = B;
    b.vocab_size = V;
    b.draft_offsets = offsets.data();
    b.draft_tokens = tokens.data();
    b.target_logits = p_rows.data();
    b.draft_logits = one_hot ? nullptr : q_rows.data();
    b.target_params = tp.data();
    b.draft_params = draft_params_differ ? dp.data() : nullptr;
    if (!draft_to_target.empty()) {
      b.draft_vocab_size = std::int32_t(draft_to_target.size());
      b.draft_to_target = draft_to_target.data();
    }
    if (!target.unconditional.empty()) {
      first_u.resize(std::size_t(B));
      scales.assign(std::size_t(B), target.guidance_scale);
      for (std::int32_t s = 0; s < B; ++s) first_u[std::size_t(s)] = std::int64_t(s) * (K + 1);
      b.unconditional_logits = u_rows.data();
      b.unconditional_first_row = first_u.data();
      b.guidance_scale = scales.data();
    }
    return b;
  }

  ChainOutput output() {
    out.assign(std::size_t(B) * (K + 1), 12345);
    accepted.assign(std::size_t(B), 12345);
    logprobs.assign(std::size_t(B) * (K + 1), 7.0f);
    return ChainOutput{out.data(), K + 1, accepted.data(), logprobs.data()};
  }
};

std::vector<float> random_row(std::int32_t n, std::mt19937_64& rng, double scale = 2.0) {
  const auto l = testing::random_logits(n, rng, scale);
  return std::vector<float>(l.begin(), l.end());
}

/// Counts follow p: chi-square, or with one kept token, every draw on it. Needs 1000 draws.
void expect_fits(const std::vector<std::int64_t>& counts, const std::vector<float>& p, const char* what) {
  std::int64_t n = 0;
  for (auto c : counts) n += c;
  ASSERT_GE(n, 1000) << what << ": too few draws to test";
  const auto chi = testing::chi_square(counts, p);
  if (chi.df <= 0) {
    for (std::size_t v = 0; v < p.size(); ++v) EXPECT_TRUE(counts[v] == 0 || p[v] > 0) << what << " token " << v;
    return;
  }
  EXPECT_TRUE(chi.fits()) << what << ": chi2 " << chi.statistic << " df " << chi.df;
}

/// Position 0's token, and position 1's where the chain got there, each follow p; logprobs match.
/// `second`: also test position 1 (drafts that are rarely accepted reach it too seldom).
template <class Rule = Standard>
void expect_follows_p(LogitsCase& c, bool second = true, Rule rule = {}) {
  const auto batch = c.batch(5);
  verify(rule, batch, Randomness{17, 3}, c.output());
  const std::vector<float> p = c.p();
  std::vector<std::int64_t> first(std::size_t(c.V)), later(std::size_t(c.V));
  for (std::int32_t b = 0; b < c.B; ++b) {
    const std::int32_t* row = c.out.data() + std::size_t(b) * (c.K + 1);
    ASSERT_GT(p[std::size_t(row[0])], 0.0f) << "a token the processed p excludes";
    ++first[std::size_t(row[0])];
    if (c.accepted[std::size_t(b)] >= 1) ++later[std::size_t(row[1])];
    for (std::int32_t i = 0; i <= c.accepted[std::size_t(b)]; ++i) {
      const float lp = c.logprobs[std::size_t(b) * (c.K + 1) + i];
      ASSERT_NEAR(lp, std::log(double(p[std::size_t(row[i])])), 1e-4) << "sequence " << b << " slot " << i;
    }
    for (std::int32_t i = c.accepted[std::size_t(b)] + 1; i <= c.K; ++i) {
      ASSERT_EQ(c.logprobs[std::size_t(b) * (c.K + 1) + i], 7.0f) << "kNoToken slot written";
    }
  }
  expect_fits(first, p, "position 0");
  if (second) expect_fits(later, p, "position 1");
}

LogitsCase base(std::uint64_t seed, SamplingParams params, bool adversarial = true) {
  std::mt19937_64 rng(seed);
  LogitsCase c;
  c.target.logits = random_row(c.V, rng);
  c.target.params = params;
  c.draft.logits = c.target.logits;
  if (adversarial) {
    std::reverse(c.draft.logits.begin(), c.draft.logits.end());
  } else {  // a draft model close to the target
    std::normal_distribution<float> noise(0.0f, 0.7f);
    for (auto& l : c.draft.logits) l += noise(rng);
  }
  c.draft.params = params;
  return c;
}

TEST(LogitsVerify, TemperatureAdversarialDraft) {
  auto c = base(1, {0.8f, 0, 1.0f, 0.0f});
  expect_follows_p(c, false);
}

TEST(LogitsVerify, TopKWithTiesAtTheBoundary) {
  auto c = base(2, {1.0f, 4, 1.0f, 0.0f}, false);
  std::sort(c.target.logits.begin(), c.target.logits.end(), std::greater<float>());
  c.target.logits[4] = c.target.logits[3];  // the 4th and 5th largest tie: both kept
  c.draft.params = {1.0f, 0, 1.0f, 0.0f};     // an untruncated drafter, adversarially reversed
  c.draft_params_differ = true;
  c.draft.logits = c.target.logits;
  std::reverse(c.draft.logits.begin(), c.draft.logits.end());
  c.draft.logits[0] = c.target.logits[0] + 3.0f;  // ... but for one shared favourite
  const std::vector<float> p = c.p();
  ASSERT_EQ(std::count_if(p.begin(), p.end(), [](float v) { return v > 0; }), 5);
  expect_follows_p(c);
}

TEST(LogitsVerify, TopPWithTiesAndMinP) {
  auto c = base(3, {1.5f, 0, 0.8f, 0.0f}, false);
  c.target.logits[7] = c.target.logits[2];
  c.draft.logits[7] = c.draft.logits[2];
  expect_follows_p(c);
  auto m = base(4, {1.3f, 0, 1.0f, 0.2f});
  expect_follows_p(m, false);
  auto all = base(5, {1.2f, 6, 0.9f, 0.05f}, false);
  expect_follows_p(all);
}

TEST(LogitsVerify, GuidanceAndBitmask) {
  auto c = base(6, {1.0f, 0, 0.95f, 0.0f}, false);
  std::mt19937_64 rng(60);
  c.target.unconditional = random_row(c.V, rng);
  c.target.guidance_scale = 1.5f;
  expect_follows_p(c);
  auto masked = base(7, {0.8f, 0, 1.0f, 0.0f}, false);
  std::vector<std::uint32_t> allowed{0x0000f0f3u};  // tokens 0, 1, 4-7, 12-15
  masked.target.allowed = allowed;
  // The same mask on every target row of the batch.
  const auto batch_mask = [&](LogitsChainBatch<float>& b, std::vector<std::uint32_t>& words) {
    words.assign(std::size_t(masked.B) * (masked.K + 1), allowed[0]);
    b.allowed_tokens = words.data();
  };
  auto b = masked.batch(5);
  std::vector<std::uint32_t> words;
  batch_mask(b, words);
  verify(Standard{}, b, Randomness{17, 3}, masked.output());
  const std::vector<float> p = masked.p();
  std::vector<std::int64_t> first(std::size_t(masked.V));
  for (std::int32_t s = 0; s < masked.B; ++s) {
    const std::int32_t t = masked.out[std::size_t(s) * (masked.K + 1)];
    ASSERT_TRUE((allowed[0] >> t) & 1u) << "a forbidden token " << t;
    ++first[std::size_t(t)];
  }
  const auto chi = testing::chi_square(first, p);
  EXPECT_TRUE(chi.fits()) << chi.statistic << " df " << chi.df;
}

TEST(LogitsVerify, ReducedDraftVocabularyAndDifferentDraftParameters) {
  auto c = base(8, {0.9f, 0, 1.0f, 0.0f}, false);
  c.draft_to_target = {15, 3, 0, 9, 12, 6, 1, 10, 4, 7};
  std::mt19937_64 rng(80);
  c.draft.logits = random_row(std::int32_t(c.draft_to_target.size()), rng);
  c.draft.params = {1.2f, 5, 1.0f, 0.0f};
  c.draft_params_differ = true;
  expect_follows_p(c, false);
}

TEST(LogitsVerify, OneHotDrafts) {
  auto c = base(9, {2.0f, 8, 1.0f, 0.0f});
  c.one_hot = true;
  expect_follows_p(c);
}

TEST(LogitsVerify, NegativeControlWrongDraftParametersBias) {
  // The drafter sampled after top_k = 3 but the batch claims its q was untruncated: the residual
  // is then computed against the wrong q and the output leaves p (LESSONS: q must be what the
  // drafter sampled from).
  auto c = base(10, {1.0f, 0, 1.0f, 0.0f});
  c.draft.params = {1.0f, 3, 1.0f, 0.0f};
  const auto batch_true_q = c.batch(5);  // drafts from top-3 q
  (void)batch_true_q;
  auto lie = c;
  lie.draft_params_differ = false;  // so the batch passes the target's (untruncated) parameters
  auto b = lie.batch(5);
  verify(Standard{}, b, Randomness{17, 3}, lie.output());
  std::vector<std::int64_t> first(std::size_t(lie.V));
  for (std::int32_t s = 0; s < lie.B; ++s) ++first[std::size_t(lie.out[std::size_t(s) * (lie.K + 1)])];
  EXPECT_FALSE(testing::chi_square(first, lie.p()).fits());
}

TEST(LogitsVerify, GreedyRowsNextToSampledRows) {
  std::mt19937_64 rng(11);
  LogitsCase c;
  c.B = 2000;
  c.target.logits = random_row(c.V, rng);
  c.target.params = {0.0f, 0, 1.0f, 0.0f};
  c.draft.logits = random_row(c.V, rng);
  c.draft.params = {1.0f, 0, 1.0f, 0.0f};
  c.draft_params_differ = true;
  auto b = c.batch(3);
  for (std::size_t s = 1; s < c.tp.size(); s += 2) c.tp[s] = {0.7f, 0, 1.0f, 0.0f};  // odd: sampled
  verify(Standard{}, b, Randomness{5, 1}, c.output());
  const auto argmax = std::int32_t(std::max_element(c.target.logits.begin(), c.target.logits.end()) - c.target.logits.begin());
  for (std::int32_t s = 0; s < c.B; s += 2) {
    for (std::int32_t i = 0; i <= c.accepted[std::size_t(s)]; ++i) {
      ASSERT_EQ(c.out[std::size_t(s) * (c.K + 1) + i], argmax) << "greedy sequence " << s;
    }
  }
  std::int64_t other = 0;
  for (std::int32_t s = 1; s < c.B; s += 2) other += c.out[std::size_t(s) * (c.K + 1)] != argmax;
  EXPECT_GT(other, 0) << "sampled sequences must not be greedy";
}

TEST(LogitsVerify, EveryRuleNeverEmitsAMaskedToken) {
  auto c = base(12, {1.0f, 3, 1.0f, 0.0f});
  c.B = 3000;
  const auto check = [&](auto rule) {
    auto b = c.batch(5);
    const std::vector<float> scores(c.tokens.size(), 0.9f);
    verify(rule, b, Randomness{23, 4}, c.output());
    const std::vector<float> p = c.p();
    for (std::int32_t s = 0; s < c.B; ++s) {
      for (std::int32_t i = 0; i <= c.accepted[std::size_t(s)]; ++i) {
        ASSERT_GT(p[std::size_t(c.out[std::size_t(s) * (c.K + 1) + i])], 0.0f);
      }
    }
  };
  check(Standard{});
  check(Greedy{});
  check(Ears{5.0f});
  check(Fsd{Divergence::tv, 1.0f});
  check(ReducibleFsd{Divergence::js, 1.0f});
  const std::vector<float> scores(std::size_t(c.B) * c.K, 1.0f);
  check(Sprinter{0.5f, scores.data()});
}

TEST(LogitsVerify, TiesAtTheTopPBoundaryAreKept) {
  // p = (1, 1/2, 1/2, e^-3 ...) / S: the top token alone holds 0.38 of the mass, with the next
  // value 0.76, so top_p = 0.6 stops inside the tie at 1/2 and keeps both; and four tied top
  // tokens with top_p = 0.5: two of them reach it, their ties make four.
  auto c = base(13, {1.0f, 0, 0.6f, 0.0f});
  c.target.logits.assign(std::size_t(c.V), -1.0f);
  c.target.logits[5] = 2.0f;
  c.target.logits[9] = c.target.logits[11] = 2.0f - 0.69314718f;
  c.draft.logits = c.target.logits;
  std::reverse(c.draft.logits.begin(), c.draft.logits.end());  // adversarial: mass on the residual
  c.draft.params = {1.0f, 0, 1.0f, 0.0f};
  c.draft_params_differ = true;
  std::vector<float> p = c.p();
  ASSERT_EQ(std::count_if(p.begin(), p.end(), [](float v) { return v > 0; }), 3);
  EXPECT_GT(p[9], 0.0f);
  EXPECT_EQ(p[9], p[11]);
  expect_follows_p(c, false);
  auto four = base(14, {1.0f, 0, 0.5f, 0.0f});
  four.target.logits.assign(std::size_t(four.V), -2.0f);
  for (const std::size_t v : {1u, 4u, 7u, 14u}) four.target.logits[v] = 1.0f;
  four.draft.logits = c.draft.logits;
  four.draft.params = {1.0f, 0, 1.0f, 0.0f};
  four.draft_params_differ = true;
  p = four.p();
  ASSERT_EQ(std::count_if(p.begin(), p.end(), [](float v) { return v > 0; }), 4);
  expect_follows_p(four, false);
}

/// A user's rule (a minimal typical-acceptance variant), to run the logits front end with a rule
/// the library does not know: it reads the entropy of p and falls back to argmax p.
struct EntropyFloor {
  float epsilon = 0.05f;
  static constexpr Draw on_reject = Draw::argmax;
  RowStats stats() const { return RowStats::of_entropy(); }
  Decision decide(const Position& at) const {
    const bool typical = at.p_x > std::fmin(epsilon, 0.5f * std::exp(-at.entropy));
    return {typical, typical && !Decision::standard_test(at), true};
  }
  Problem check() const { return Problem::unless_within("epsilon", epsilon, 0.0, 1.0); }
};

TEST(LogitsVerify, EveryRuleDecidesAsOnTheProcessedProbabilityRows) {
  // Chains of logits over V = 3000 (rows of two streaming blocks, the max anywhere), parameters
  // varying by sequence (T alone, greedy, top_k + top_p listed, top_k 400 unlisted, min_p), and
  // the same batch as probability rows made from the views' own value(): the rules see the same
  // floats, so every rule decides the same and emits the same tokens, logprobs included.
  constexpr std::int32_t B = 40, K = 3, V = 3000;
  const SamplingParams kinds[] = {{0.8f, 0, 1.0f, 0.0f}, {0.0f, 0, 1.0f, 0.0f}, {0.9f, 20, 0.9f, 0.0f},
                                  {1.1f, 400, 1.0f, 0.0f}, {1.0f, 0, 1.0f, 0.02f}};
  std::mt19937_64 rng(31);
  std::vector<float> target, draft, p_rows, q_rows;
  std::vector<std::int32_t> offsets{0}, tokens;
  std::vector<SamplingParams> params;
  std::vector<std::int64_t> positions;
  for (std::int32_t b = 0; b < B; ++b) {
    params.push_back(kinds[b % 5]);
    positions.push_back(100 * b);
    std::normal_distribution<float> noise(0.0f, 0.4f);
    for (std::int32_t j = 0; j <= K; ++j) {
      const std::vector<float> row = random_row(V, rng, 2.0);
      target.insert(target.end(), row.begin(), row.end());
      if (j == K) break;
      std::vector<float> q = row;
      for (float& l : q) l += noise(rng);
      draft.insert(draft.end(), q.begin(), q.end());
      // The draft's favourite, or a random token: some chains accepted deep, some rejected early.
      tokens.push_back(rng() % 3 ? std::int32_t(std::max_element(q.begin(), q.end()) - q.begin())
                                 : std::int32_t(rng() % V));
    }
    offsets.push_back(offsets.back() + K);
  }
  // Probability rows from the views' value(): each row's pre-pass with its sequence's parameters.
  const cpu::LogitRows<> rows{V};
  std::vector<float> scratch(V);
  const auto to_probs = [&](const std::vector<float>& logits, std::int32_t per_sequence, std::vector<float>& out) {
    for (std::size_t r = 0; r * V < logits.size(); ++r) {
      core::LogitRow<float> row;
      row.logits = logits.data() + r * V;
      row.n = V;
      row.params = params[r / std::size_t(per_sequence)];
      const core::LogitView<float> view = cpu::prepare(row, scratch.data());
      for (std::int32_t v = 0; v < V; ++v) out.push_back(rows.value(view, v));
    }
  };
  to_probs(target, K + 1, p_rows);
  to_probs(draft, K, q_rows);

  LogitsChainBatch<float> logits_batch;
  logits_batch.batch_size = B;
  logits_batch.vocab_size = V;
  logits_batch.draft_offsets = offsets.data();
  logits_batch.draft_tokens = tokens.data();
  logits_batch.target_logits = target.data();
  logits_batch.draft_logits = draft.data();
  logits_batch.target_params = params.data();
  const ChainBatch<float> prob_batch{B, V, offsets.data(), tokens.data(), p_rows.data(), q_rows.data()};
  const std::vector<float> scores(tokens.size(), 0.8f);
  std::int64_t accepted = 0, rejected_somewhere = 0;
  const auto same = [&](const auto& rule, const char* name) {
    for (const std::uint64_t seed : {1u, 2u}) {
      Randomness r{seed, 7};
      r.positions = positions.data();
      std::vector<std::int32_t> t1(B * (K + 1)), t2(B * (K + 1)), n1(B), n2(B);
      std::vector<float> l1(t1.size(), 7.0f), l2(t2.size(), 7.0f);
      const VerifyStats s1 = verify(rule, logits_batch, r, ChainOutput{t1.data(), K + 1, n1.data(), l1.data()});
      const VerifyStats s2 = verify(rule, prob_batch, r, ChainOutput{t2.data(), K + 1, n2.data(), l2.data()});
      EXPECT_EQ(t1, t2) << name << " seed " << seed;
      EXPECT_EQ(n1, n2) << name << " seed " << seed;
      EXPECT_EQ(l1, l2) << name << " seed " << seed;
      EXPECT_EQ(s1.accepted, s2.accepted) << name;
      EXPECT_EQ(s1.relaxed, s2.relaxed) << name;
      EXPECT_EQ(s1.target_checked, s2.target_checked) << name;
      accepted += s1.accepted;
      rejected_somewhere += s1.drafted - s1.accepted;
    }
  };
  same(Standard{}, "Standard");
  same(Greedy{}, "Greedy");
  same(Ears{0.3f}, "Ears");
  same(Fsd{Divergence::tv, 0.3f}, "Fsd tv");
  same(Fsd{Divergence::js, 0.2f}, "Fsd js");
  same(ReducibleFsd{Divergence::kl_target_draft, 0.5f}, "ReducibleFsd kl");
  same(Sprinter{0.5f, scores.data()}, "Sprinter");
  same(SpecDecPP<Standard>{0.5f, scores.data(), {}}, "SpecDecPP");
  same(Coupled{}, "Coupled");
  same(EntropyFloor{}, "user rule");
  EXPECT_GT(accepted, 0);  // both paths taken: accepted drafts and residual draws
  EXPECT_GT(rejected_somewhere, 0);
}

TEST(LogitsVerify, TreeLogprobsMatchTheReference) {
  // Trees of logits (two children at the root, a chain under the first), distinct rows per node:
  // each emitted token's logprob is log p of the processed row it came from, to 1e-4.
  constexpr std::int32_t B = 400, V = 16, N = 4;
  const std::int32_t parents_one[N] = {-1, -1, 0, 2};
  std::mt19937_64 rng(41);
  std::vector<std::int32_t> offsets{0}, parents, tokens, out(B * 4), accepted(B), nodes(B * 4);
  std::vector<float> target, draft, logprobs(B * 4, 7.0f);
  std::vector<ReferenceRow> refs;
  const SamplingParams params{0.9f, 6, 0.95f, 0.0f};
  for (std::int32_t b = 0; b < B; ++b) {
    for (std::int32_t r = 0; r <= N; ++r) {  // row 0: the root, row 1 + i: after node i
      ReferenceRow ref;
      ref.logits = random_row(V, rng, 1.5);
      ref.params = params;
      target.insert(target.end(), ref.logits.begin(), ref.logits.end());
      const std::vector<float> q = random_row(V, rng, 1.5);
      draft.insert(draft.end(), q.begin(), q.end());
      refs.push_back(ref);
    }
    for (std::int32_t i = 0; i < N; ++i) {
      parents.push_back(parents_one[i]);
      tokens.push_back(std::int32_t(rng() % V));
    }
    offsets.push_back(offsets.back() + N);
  }
  std::vector<SamplingParams> tp(B, params);
  LogitsTreeBatch<float> batch;
  batch.batch_size = B;
  batch.vocab_size = V;
  batch.node_offsets = offsets.data();
  batch.parents = parents.data();
  batch.draft_tokens = tokens.data();
  batch.target_logits = target.data();
  batch.draft_logits = draft.data();
  batch.target_params = tp.data();
  batch.drafted = Drafted::sampled;
  verify(Standard{}, batch, Randomness{9, 1}, TreeOutput{out.data(), 4, accepted.data(), nodes.data(), logprobs.data()});
  std::int64_t deep = 0;
  for (std::int32_t b = 0; b < B; ++b) {
    std::int32_t node = -1;
    for (std::int32_t d = 0; d <= accepted[b]; ++d) {
      const ReferenceRow& ref = refs[std::size_t(b) * (N + 1) + std::size_t(node + 1)];
      const std::int32_t token = out[std::size_t(b) * 4 + d];
      const long double p = reference_probs(ref)[std::size_t(token)];
      ASSERT_GT(p, 0.0L) << "sequence " << b << " depth " << d;
      EXPECT_NEAR(logprobs[std::size_t(b) * 4 + d], std::log(double(p)), 1e-4) << "sequence " << b << " depth " << d;
      if (d < accepted[b]) node = nodes[std::size_t(b) * 4 + d];
    }
    deep += accepted[b] >= 2;
  }
  EXPECT_GT(deep, 0) << "no path reached a node's child: the test would not see its rows";
}

/// A context-dependent logits model for decode loops: row(prev) over V tokens.
struct LogitsModel {
  std::int32_t V;
  std::vector<std::vector<float>> rows;  // V + 1: start, then after each token
  explicit LogitsModel(std::int32_t v, std::uint64_t seed) : V(v) {
    std::mt19937_64 rng(seed);
    for (std::int32_t i = 0; i <= V; ++i) rows.push_back(random_row(V, rng, 1.5));
  }
  const std::vector<float>& row(std::int32_t prev) const { return rows[std::size_t(prev + 1)]; }
};

TEST(Coupled, SpeculationEmitsThePlainSampleDecodeTokenForToken) {
  constexpr std::int32_t V = 12, N = 60;
  const LogitsModel model(V, 3);
  for (const float temperature : {0.0f, 0.6f, 1.0f}) {
    for (const std::uint64_t seed : {1u, 2u, 99u}) {
      const SamplingParams params{temperature, 0, temperature == 0.6f ? 0.9f : 1.0f, 0.0f};
      std::vector<std::int32_t> plain;
      for (std::int32_t i = 0; i < N; ++i) {
        plain.push_back(sample(model.row(plain.empty() ? -1 : plain.back()).data(), V, params, seed, i));
      }
      for (const int drafter : {0, 1, 2}) {  // unrelated random, always the plain token, always wrong
        std::mt19937_64 rng(seed * 31 + drafter);
        std::vector<std::int32_t> spec;
        while (std::int32_t(spec.size()) < N) {
          const std::int32_t k = 1 + std::int32_t(rng() % 4);
          std::vector<std::int32_t> drafts;
          for (std::int32_t j = 0; j < k; ++j) {
            const std::size_t at = spec.size() + std::size_t(j);
            std::int32_t x = std::int32_t(rng() % V);
            if (drafter == 1 && at < plain.size()) x = plain[at];
            if (drafter == 2 && at < plain.size()) x = (plain[at] + 1) % V;
            drafts.push_back(x);
          }
          std::vector<float> rows;
          for (std::int32_t j = 0; j <= k; ++j) {
            const std::int32_t prev = j > 0 ? drafts[std::size_t(j - 1)] : spec.empty() ? -1 : spec.back();
            rows.insert(rows.end(), model.row(prev).begin(), model.row(prev).end());
          }
          const std::int32_t offsets[2] = {0, k};
          LogitsChainBatch<float> batch;
          batch.batch_size = 1;
          batch.vocab_size = V;
          batch.draft_offsets = offsets;
          batch.draft_tokens = drafts.data();
          batch.target_logits = rows.data();
          batch.target_params = &params;
          std::vector<std::int32_t> out(std::size_t(k + 1));
          std::int32_t accepted = 0;
          Randomness r;
          r.seed = seed;
          const std::int64_t position = std::int64_t(spec.size());
          r.positions = &position;
          verify(Coupled{}, batch, r, ChainOutput{out.data(), k + 1, &accepted});
          if (drafter == 1 && std::int32_t(spec.size()) + k <= N) {
            ASSERT_EQ(accepted, k) << "drafts equal to the plain decode are all kept";
          }
          spec.insert(spec.end(), out.begin(), out.begin() + accepted + 1);
        }
        spec.resize(N);
        EXPECT_EQ(spec, plain) << "T " << temperature << " seed " << seed << " drafter " << drafter;
      }
    }
  }
}

TEST(Coupled, FollowsPAndWorksOnProbabilityRows) {
  constexpr std::int32_t V = 10, B = 50000;
  std::mt19937_64 rng(4);
  const auto logits = random_row(V, rng);
  const SamplingParams params{0.8f, 0, 1.0f, 0.0f};
  ReferenceRow ref;
  ref.logits = logits;
  ref.params = params;
  const auto p = testing::as_floats(reference_probs(ref));
  // Probability rows: Coupled over p as given, one draft (always token 0), one position each.
  std::vector<float> prows;
  for (std::int32_t b = 0; b < B; ++b) {
    prows.insert(prows.end(), p.begin(), p.end());
    prows.insert(prows.end(), p.begin(), p.end());
  }
  std::vector<std::int32_t> offsets(B + 1), drafts(B, 0), out(std::size_t(B) * 2), acc(B);
  std::vector<std::int64_t> positions(B);
  for (std::int32_t b = 0; b <= B; ++b) offsets[std::size_t(b)] = b;
  for (std::int32_t b = 0; b < B; ++b) positions[std::size_t(b)] = std::int64_t(b) * 7;
  ChainBatch<float> batch{B, V, offsets.data(), drafts.data(), prows.data(), nullptr};
  Randomness r;
  r.seed = 8;
  r.positions = positions.data();
  verify(Coupled{}, batch, r, ChainOutput{out.data(), 2, acc.data()});
  std::vector<std::int64_t> counts(V);
  for (std::int32_t b = 0; b < B; ++b) ++counts[std::size_t(out[std::size_t(b) * 2])];
  const auto chi = testing::chi_square(counts, p);
  EXPECT_TRUE(chi.fits()) << chi.statistic << " df " << chi.df;
}

// ------------------------------------------------------------------- bad input

void expect_rejected(LogitsCase& c, const LogitsChainBatch<float>& batch, std::initializer_list<const char*> fragments,
                     const Randomness& r = Randomness{}) {
  ChainOutput out = c.output();
  try {
    verify(Standard{}, batch, r, out);
    ADD_FAILURE() << "no invalid_input";
  } catch (const invalid_input& e) {
    for (const char* f : fragments) EXPECT_THAT(e.what(), ::testing::HasSubstr(f));
  }
  for (auto t : c.out) ASSERT_EQ(t, 12345) << "output written before the error";
  for (auto n : c.accepted) ASSERT_EQ(n, 12345) << "output written before the error";
  for (auto l : c.logprobs) ASSERT_EQ(l, 7.0f) << "output written before the error";
}

TEST(LogitsBadInput, NaNAndPlusInfLogitsAreNamed) {
  auto c = base(20, {1.0f, 0, 1.0f, 0.0f});
  c.B = 3;
  auto b = c.batch(1);
  c.p_rows[std::size_t(1) * (c.K + 1) * c.V + 5] = std::numeric_limits<float>::quiet_NaN();
  expect_rejected(c, b, {"sequence 1", "position 0", "target logits row 3", "nan", "index 5"});
  c.p_rows[std::size_t(1) * (c.K + 1) * c.V + 5] = 0.0f;
  c.q_rows[std::size_t(2) * c.K * c.V + 9] = std::numeric_limits<float>::infinity();
  expect_rejected(c, b, {"sequence 2", "position 0", "draft logits row 4", "inf", "index 9"});
}

TEST(LogitsBadInput, ParametersOutOfRangeAreNamed) {
  auto c = base(21, {1.0f, 0, 1.0f, 0.0f});
  c.B = 3;
  auto b = c.batch(1);
  c.tp[1].top_p = 0.0f;
  expect_rejected(c, b, {"sequence 1", "target_params.top_p", "out of range"});
  c.tp[1].top_p = 1.0f;
  c.tp[2].temperature = -1.0f;
  expect_rejected(c, b, {"sequence 2", "target_params.temperature"});
  c.tp[2].temperature = 1.0f;
  c.dp[0].min_p = 1.5f;
  b.draft_params = c.dp.data();
  expect_rejected(c, b, {"sequence 0", "draft_params.min_p"});
  b.draft_params = nullptr;
  b.target_params = nullptr;
  expect_rejected(c, b, {"target_params is null"});
}

TEST(LogitsBadInput, EveryTokenMaskedInARowThatMustBeRead) {
  auto c = base(22, {1.0f, 0, 1.0f, 0.0f});
  c.B = 2;
  auto b = c.batch(1);
  for (std::int32_t v = 0; v < c.V; ++v) c.p_rows[std::size_t(1) * (c.K + 1) * c.V + v] = -INFINITY;
  expect_rejected(c, b, {"sequence 1", "position 0", "keeps no token"});
}

TEST(LogitsBadInput, ADraftRowThatKeepsNoTokenIsNamedWhereItIsRead) {
  // A draft row whose every logit is -inf keeps no token: nothing can have been sampled from it,
  // so reading it is invalid input (docs/api.md), named by sequence, position and row; sampled or
  // greedy, and through a draft map that covers every target id (where fuzz_logits once found
  // the residual draw searching the map past its end). Version 2 read such a row as q = 0.
  for (const float draft_temperature : {1.0f, 0.0f}) {
    for (const bool mapped : {false, true}) {
      auto c = base(15, {1.0f, 4, 1.0f, 0.0f});
      c.K = 1;
      c.B = 3;
      if (mapped) {
        for (std::int32_t d = 0; d < c.V; ++d) c.draft_to_target.push_back((d * 5 + 3) % c.V);  // a permutation
      }
      c.draft.params = {draft_temperature, 0, 1.0f, 0.0f};
      c.draft_params_differ = true;
      auto b = c.batch(5);
      for (std::int32_t v = 0; v < c.V; ++v) c.q_rows[std::size_t(1) * std::size_t(c.V) + std::size_t(v)] = -INFINITY;
      SCOPED_TRACE(::testing::Message() << "T " << draft_temperature << (mapped ? ", mapped" : ""));
      expect_rejected(c, b, {"sequence 1, position 0: draft logits row 1 keeps no token"});
    }
  }
}

TEST(LogitsBadInput, DraftMapOutOfRangeOrNotInjective) {
  auto c = base(23, {1.0f, 0, 1.0f, 0.0f});
  c.B = 2;
  c.draft_to_target = {1, 2, 3, 4};
  c.draft.logits.resize(4);
  auto b = c.batch(1);
  c.draft_to_target[2] = 16;
  expect_rejected(c, b, {"draft_to_target[2] = 16", "outside"});
  c.draft_to_target[2] = 1;
  expect_rejected(c, b, {"draft_to_target[2] = 1", "two draft ids"});
}

TEST(LogitsBadInput, GuidanceRowsPastTheAddressRangeAreNamed) {
  // The unconditional rows' addresses, (first + j) * stride, once overflowed int64 (UBSan) and
  // were then read out of bounds.
  auto c = base(25, {1.0f, 0, 1.0f, 0.0f});
  c.B = 3;
  c.target.unconditional = c.target.logits;
  auto b = c.batch(1);
  c.first_u[1] = std::numeric_limits<std::int64_t>::max();
  expect_rejected(c, b, {"sequence 1", "unconditional_first_row = 9223372036854775807", "overflows the address range"});
  c.first_u[1] = std::numeric_limits<std::int64_t>::max() - 2;  // its last row is INT64_MAX
  expect_rejected(c, b, {"sequence 1", "overflows the address range"});
  c.first_u[1] = 3;
  b.unconditional_stride = std::numeric_limits<std::int64_t>::max() / 2;
  expect_rejected(c, b, {"sequence 0", "unconditional_stride = 4611686018427387903", "overflows the address range"});
  b.unconditional_stride = 0;
  ChainOutput out = c.output();
  EXPECT_NO_THROW(verify(Standard{}, b, Randomness{}, out));
}

TEST(LogitsBadInput, GuidanceOverflowNamesTheGuidedValueAndTheScale) {
  auto c = base(26, {1.0f, 0, 1.0f, 0.0f});
  c.B = 3;
  c.target.unconditional.assign(std::size_t(c.V), 0.0f);
  c.target.guidance_scale = 1.5f;
  auto b = c.batch(1);
  const std::size_t row3 = std::size_t(1) * (c.K + 1) * c.V;  // sequence 1's first row
  c.p_rows[row3 + 5] = 3e38f;                                  // an ordinary logit; 1.5 times it is not
  expect_rejected(c, b, {"sequence 1", "position 0", "guidance gives inf at index 5 of target logits row 3",
                         "guidance_scale s = 1.5"});
  // A NaN in the unconditional row is named there, not as the target's logit.
  c.p_rows[row3 + 5] = 0.0f;
  c.u_rows[row3 + 7] = std::numeric_limits<float>::quiet_NaN();
  expect_rejected(c, b, {"sequence 1", "position 0", "unconditional logits row 3 holds nan at index 7"});
}

TEST(LogitsBadInput, CoupledNeedsPositions) {
  auto c = base(24, {1.0f, 0, 1.0f, 0.0f});
  c.B = 2;
  auto b = c.batch(1);
  ChainOutput out = c.output();
  EXPECT_THROW(verify(Coupled{}, b, Randomness{}, out), invalid_input);
  for (auto t : c.out) ASSERT_EQ(t, 12345);
  // Probability rows too: a null positions pointer is named, never read.
  const std::vector<float> p(std::size_t(c.V) * 2, 1.0f / float(c.V));
  const std::int32_t offsets[2] = {0, 1}, drafts[1] = {0};
  std::int32_t tokens[2] = {12345, 12345}, accepted = 12345;
  ChainBatch<float> chain{1, c.V, offsets, drafts, p.data(), nullptr};
  EXPECT_THROW(verify(Coupled{}, chain, Randomness{}, ChainOutput{tokens, 2, &accepted}), invalid_input);
  EXPECT_EQ(tokens[0], 12345);
}

}  // namespace
}  // namespace specverify
