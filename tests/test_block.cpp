// Block verification: the emitted sequence follows the target (decode loops on Markov models,
// chi-square), the paper's worked example, never fewer accepted drafts than Standard, Standard
// bit for bit for one draft, token for token agreement with a plain reference of the formulas,
// lazy row passes, and bad input.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include "bad_inputs.hpp"
#include "context_free_logits.hpp"
#include "markov.hpp"
#include "reference_draw.hpp"
#include "support.hpp"

namespace specverify {
namespace {

using testing::Chains;
using testing::Markov;

// ---------------------------------------------------------------------------------------------
// A plain reference of block verification's formulas (Sun et al. 2024, arXiv 2403.10444, Algorithm 2),
// in double and index order, with planted bugs for the negative controls.

enum class Bug {
  none,
  first_failure,      // tau = the last i before the first failing test (token-wise style)
  no_one_minus_p,     // h_i = Z_i / Z_i: the 1 - p_i term dropped from the denominator
  unscaled_residual,  // the extra token from max(P_tau - Q_tau, 0) instead of max(p_tau P_tau - Q_tau, 0)
};

/// One chain: drafts x_1 .. x_k, target rows P_0 .. P_k, draft rows Q_0 .. Q_{k-1} (empty: one-hot).
struct Chain {
  std::vector<std::int32_t> x;
  std::vector<std::vector<float>> P, Q;
  bool one_hot() const { return Q.empty(); }
  double q(std::size_t j, std::int32_t v) const { return one_hot() ? (v == x[j] ? 1.0 : 0.0) : Q[j][std::size_t(v)]; }
};

using testing::reference_draw;

/// Emitted tokens of block verification with uniforms u_1 .. u_k and u_extra.
std::vector<std::int32_t> reference_block(const Chain& c, const std::vector<float>& u, float u_extra, Bug bug = Bug::none) {
  const std::size_t k = c.x.size(), V = c.P[0].size();
  std::vector<double> p(k + 1, 1.0);
  for (std::size_t i = 1; i <= k; ++i) {
    const double a = p[i - 1] * c.P[i - 1][std::size_t(c.x[i - 1])], q = c.q(i - 1, c.x[i - 1]);
    p[i] = a <= 0 ? 0.0 : (a >= q ? 1.0 : a / q);
  }
  const auto h = [&](std::size_t i) {
    if (i == k) return p[k];
    double z = 0;
    for (std::size_t v = 0; v < V; ++v) z += std::max(p[i] * c.P[i][v] - c.q(i, std::int32_t(v)), 0.0);
    const double d = bug == Bug::no_one_minus_p ? z : z + 1 - p[i];
    return d > 0 ? z / d : 1.0;
  };
  std::size_t tau = 0;
  if (bug == Bug::first_failure) {
    while (tau < k && u[tau] < h(tau + 1)) ++tau;
  } else {
    for (std::size_t i = k; i >= 1 && tau == 0; --i) {
      if (u[i - 1] < h(i)) tau = i;
    }
  }
  std::vector<std::int32_t> out(c.x.begin(), c.x.begin() + std::ptrdiff_t(tau));
  std::vector<double> w(V);
  const double s = bug == Bug::unscaled_residual ? 1.0 : p[tau];
  for (std::size_t v = 0; v < V; ++v) {
    w[v] = tau == k ? c.P[k][v] : std::max(s * c.P[tau][v] - c.q(tau, std::int32_t(v)), 0.0);
  }
  std::int32_t extra = reference_draw(w, u_extra);
  if (extra < 0) extra = reference_draw(std::vector<double>(c.P[tau].begin(), c.P[tau].end()), u_extra);
  out.push_back(extra);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Batches and decode steps.

Chains batch_of(const std::vector<Chain>& chains, std::int32_t V, bool one_hot) {
  Chains c(V, one_hot);
  for (const auto& ch : chains) c.add(ch.x, ch.P, ch.Q);
  return c;
}

/// How a decode step drafts: sampled from q (rows given), or one-hot drafts (greedy argmax of q,
/// or sampled from q but verified as one-hot: both are deterministic drafters given their noise).
enum class Drafts { sampled, one_hot_greedy, one_hot_sampled };

/// K drafts from Markov q after `context`, with the target's rows.
Chain draft_chain(const Markov& p, const Markov& q, const std::vector<std::int32_t>& context, std::int32_t K,
                  Drafts how, std::mt19937_64& rng) {
  Chain c;
  std::int32_t prev = context.empty() ? -1 : context.back();
  for (std::int32_t j = 0; j <= K; ++j) {
    c.P.push_back(p.row(prev));
    if (j == K) break;
    const auto& qrow = q.row(prev);
    const std::int32_t x = how == Drafts::one_hot_greedy
                               ? std::int32_t(std::max_element(qrow.begin(), qrow.end()) - qrow.begin())
                               : testing::sample(qrow, rng);
    if (how == Drafts::sampled) c.Q.push_back(qrow);
    c.x.push_back(x);
    prev = x;
  }
  return c;
}

struct Setup {
  std::int32_t V, K;
  Drafts drafts;
  bool adversarial;
};

/// The joint of the first 3 emitted tokens of `trials` decode loops against the exact one. The
/// loops run in lockstep: each round drafts a chain for every loop still short of 3 tokens and
/// verifies them all in one batch (the library: one verify call, one Philox stream per sequence;
/// otherwise the reference with test-side uniforms and the planted bug).
testing::ChiSquare decode_chi_square(const Setup& s, std::int64_t trials, Bug reference_bug, bool use_library) {
  std::mt19937_64 models(17 + std::uint64_t(s.V));
  const Markov p = Markov::random(s.V, models);
  const Markov q = s.adversarial ? p.reversed() : Markov::random(s.V, models);
  std::mt19937_64 rng(23), noise(29);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  constexpr std::int32_t n = 3;
  std::vector<std::vector<std::int32_t>> emitted(static_cast<std::size_t>(trials));
  for (std::uint64_t round = 0;; ++round) {
    std::vector<std::size_t> active;
    std::vector<Chain> chains;
    for (std::size_t t = 0; t < emitted.size(); ++t) {
      if (emitted[t].size() >= std::size_t(n)) continue;
      active.push_back(t);
      chains.push_back(draft_chain(p, q, emitted[t], s.K, s.drafts, rng));
    }
    if (active.empty()) break;
    if (use_library) {
      Chains c = batch_of(chains, s.V, s.drafts != Drafts::sampled);
      ChainOutput out = c.output();
      verify(Block{}, c.batch(), Randomness{5, round}, out);
      for (std::size_t i = 0; i < active.size(); ++i) {
        for (std::int32_t j = 0; j <= c.accepted[i]; ++j) emitted[active[i]].push_back(c.token(std::int32_t(i), j));
      }
    } else {
      for (std::size_t i = 0; i < active.size(); ++i) {
        std::vector<float> u(chains[i].x.size());
        for (auto& v : u) v = uniform(noise);
        const auto tokens = reference_block(chains[i], u, uniform(noise), reference_bug);
        emitted[active[i]].insert(emitted[active[i]].end(), tokens.begin(), tokens.end());
      }
    }
  }
  std::vector<std::int64_t> counts(p.joint(n).size(), 0);
  for (const auto& e : emitted) {
    std::int64_t bin = 0;
    for (std::int32_t i = 0; i < n; ++i) bin = bin * s.V + e[std::size_t(i)];
    ++counts[std::size_t(bin)];
  }
  return testing::chi_square(counts, p.joint(n));
}

constexpr std::int64_t kTrials = 200000;

/// Runs the decode loops and checks the fit; prints chi2 and df (the README's numbers).
void expect_fit(const Setup& s, Bug bug, bool use_library, bool should_fit) {
  const auto chi = decode_chi_square(s, kTrials, bug, use_library);
  std::printf("V %d K %d: chi2 %.1f, df %d, bound %.1f\n", s.V, s.K, chi.statistic, chi.df,
              chi.df + 10 * std::sqrt(2.0 * chi.df));
  EXPECT_EQ(chi.fits(), should_fit) << "chi2 " << chi.statistic << " df " << chi.df;
}

void expect_exact(const Setup& s) { expect_fit(s, Bug::none, true, true); }

TEST(BlockExactness, QRowsK2) { expect_exact({4, 2, Drafts::sampled, false}); }
TEST(BlockExactness, QRowsK3) { expect_exact({5, 3, Drafts::sampled, false}); }
TEST(BlockExactness, QRowsK2Adversarial) { expect_exact({4, 2, Drafts::sampled, true}); }
TEST(BlockExactness, QRowsK3Adversarial) { expect_exact({5, 3, Drafts::sampled, true}); }
TEST(BlockExactness, OneHotGreedyK2) { expect_exact({4, 2, Drafts::one_hot_greedy, false}); }
TEST(BlockExactness, OneHotGreedyK3Adversarial) { expect_exact({5, 3, Drafts::one_hot_greedy, true}); }
TEST(BlockExactness, OneHotSampledK3) { expect_exact({5, 3, Drafts::one_hot_sampled, false}); }
TEST(BlockExactness, OneHotSampledK2Adversarial) { expect_exact({4, 2, Drafts::one_hot_sampled, true}); }

// The same harness sees each planted bug: the test has teeth (and the reference without a bug fits).
TEST(BlockExactness, ReferenceFits) { expect_fit({5, 3, Drafts::sampled, false}, Bug::none, false, true); }
TEST(BlockExactness, NegativeControlFirstFailure) {
  expect_fit({5, 3, Drafts::sampled, false}, Bug::first_failure, false, false);
}
TEST(BlockExactness, NegativeControlNoOneMinusP) {
  expect_fit({5, 3, Drafts::sampled, false}, Bug::no_one_minus_p, false, false);
}
TEST(BlockExactness, NegativeControlUnscaledResidual) {
  expect_fit({5, 3, Drafts::sampled, false}, Bug::unscaled_residual, false, false);
}

// ---------------------------------------------------------------------------------------------
// The library against the reference, token for token, on the same uniforms.

/// A distribution with about a fifth of its entries exactly 0.
std::vector<float> row_with_zeros(std::int32_t V, std::mt19937_64& rng) {
  std::bernoulli_distribution zero(0.2);
  for (;;) {
    auto p = testing::random_distribution(V, rng, 1.5);
    double s = 0;
    for (auto& v : p) s += (v = zero(rng) ? 0.0f : v);
    if (!(s > 0)) continue;  // every token with mass zeroed: draw again
    for (auto& v : p) v = float(v / s);
    return p;
  }
}

/// Random chains of up to `max_k` drafts (drafts sampled from q; rows with exact zeros so that
/// p_i = 0, p_i = 1 and empty residuals all occur), verified with caller uniforms.
void expect_matches_reference(std::int32_t V, std::int32_t max_k, std::int32_t chains, bool one_hot, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> length(0, max_k);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<Chain> all;
  std::vector<float> u, u_extra;
  for (std::int32_t b = 0; b < chains; ++b) {
    Chain c;
    const std::int32_t k = length(rng);
    for (std::int32_t j = 0; j <= k; ++j) {
      c.P.push_back(row_with_zeros(V, rng));
      if (j == k) break;
      auto q = j % 3 == 2 ? c.P.back() : row_with_zeros(V, rng);  // p = q makes p_i = 1 paths
      c.x.push_back(testing::sample(q, rng));
      if (!one_hot) c.Q.push_back(q);
      // Uniforms: some 0, to check that u = 0 never accepts P(x) = 0.
      u.push_back(j % 7 == 3 ? 0.0f : uniform(rng));
    }
    u_extra.push_back(uniform(rng));
    all.push_back(c);
  }
  Chains c = batch_of(all, V, one_hot);
  Randomness r;
  r.accept_uniforms = u.data();
  r.sample_uniforms = u_extra.data();
  ChainOutput out = c.output();
  std::vector<float> logprobs(c.out_tokens.size(), 7.0f);
  out.logprobs = logprobs.data();
  const VerifyStats stats = verify(Block{}, c.batch(), r, out);
  std::int64_t accepted = 0, drafted = 0;
  for (std::int32_t b = 0; b < chains; ++b) {
    const std::vector<float> ub(u.begin() + c.offsets[b], u.begin() + c.offsets[b + 1]);
    const auto expected = reference_block(all[std::size_t(b)], ub, u_extra[std::size_t(b)]);
    ASSERT_EQ(c.accepted[b] + 1, std::int32_t(expected.size())) << "sequence " << b;
    for (std::size_t i = 0; i < expected.size(); ++i) ASSERT_EQ(c.token(b, std::int32_t(i)), expected[i]) << "sequence " << b << " token " << i;
    for (std::int32_t i = c.accepted[b] + 1; i < c.width; ++i) ASSERT_EQ(c.token(b, i), kNoToken);
    for (std::int32_t i = 0; i < c.width; ++i) {  // log p of each emitted token under its row; the rest untouched
      const float lp = logprobs[std::size_t(b) * std::size_t(c.width) + std::size_t(i)];
      const float expected_lp = i <= c.accepted[b]
          ? float(std::log(double(all[std::size_t(b)].P[std::size_t(i)][std::size_t(c.token(b, i))])))
          : 7.0f;
      ASSERT_EQ(lp, expected_lp) << "sequence " << b << " slot " << i;
    }
    for (std::int32_t i = 0; i < c.accepted[b]; ++i) ASSERT_GT(all[std::size_t(b)].P[std::size_t(i)][std::size_t(c.token(b, i))], 0.0f);
    accepted += c.accepted[b];
    drafted += std::int64_t(all[std::size_t(b)].x.size());
  }
  EXPECT_EQ(stats.accepted, accepted);
  EXPECT_EQ(stats.drafted, drafted);
  EXPECT_EQ(stats.target_checked, drafted);
  EXPECT_EQ(stats.relaxed, 0);
}

TEST(BlockReference, QRowsTokenForToken) { expect_matches_reference(6, 5, 20000, false, 1); }
TEST(BlockReference, OneHotTokenForToken) { expect_matches_reference(6, 5, 20000, true, 2); }
TEST(BlockReference, WideRowsTokenForToken) { expect_matches_reference(3000, 4, 500, false, 3); }
// Longer than core::kBlockWindow: the windows from the end.
TEST(BlockReference, LongChainsTokenForToken) {
  expect_matches_reference(5, 100, 300, false, 4);
  expect_matches_reference(5, 100, 300, true, 5);
}

// ---------------------------------------------------------------------------------------------
// The paper's worked example and acceptance against Standard.

struct Acceptance {
  double mean = 0, sigma = 0;  // per chain, and the standard error of the mean
};

template <class Rule>
std::vector<std::int32_t> accepted_counts(const Chains& chains, std::uint64_t seed, std::uint64_t offset) {
  Chains c = chains;
  ChainOutput out = c.output();
  verify(Rule{}, c.batch(), Randomness{seed, offset}, out);
  return c.accepted;
}

Acceptance summarise(const std::vector<double>& x) {
  double m = 0, v = 0;
  for (double a : x) m += a;
  m /= double(x.size());
  for (double a : x) v += (a - m) * (a - m);
  v /= double(x.size() - 1);
  return {m, std::sqrt(v / double(x.size()))};
}

TEST(BlockWorkedExample, ElevenNinthsAgainstTenNinths) {
  // p = (1/3, 2/3), q = (2/3, 1/3) at every position, k = 2, drafts from q.
  const std::vector<float> p{1.0f / 3, 2.0f / 3}, q{2.0f / 3, 1.0f / 3};
  std::mt19937_64 rng(3);
  constexpr std::int32_t kChains = 200000;
  Chains c(2);
  for (std::int32_t b = 0; b < kChains; ++b) c.add({testing::sample(q, rng), testing::sample(q, rng)}, {p, p, p}, {q, q});
  const auto standard = accepted_counts<Standard>(c, 9, 0), block = accepted_counts<Block>(c, 9, 0);
  const Acceptance s = summarise(std::vector<double>(standard.begin(), standard.end()));
  const Acceptance k = summarise(std::vector<double>(block.begin(), block.end()));
  std::printf("worked example: Standard %.4f (exact 10/9 = %.4f), Block %.4f (exact 11/9 = %.4f)\n", s.mean,
              10.0 / 9, k.mean, 11.0 / 9);
  EXPECT_NEAR(s.mean, 10.0 / 9, 5 * s.sigma);
  EXPECT_NEAR(k.mean, 11.0 / 9, 5 * k.sigma);
}

/// Mean accepted drafts of Block and Standard on the same chains and seeds; Block never fewer
/// (5 sigma of the paired difference).
void expect_block_accepts_more(const Chains& c, std::uint64_t seeds, const char* what) {
  std::vector<double> s, k, d;
  for (std::uint64_t offset = 0; offset < seeds; ++offset) {
    const auto a = accepted_counts<Standard>(c, 77, offset), b = accepted_counts<Block>(c, 77, offset);
    for (std::size_t i = 0; i < a.size(); ++i) {
      s.push_back(a[i]);
      k.push_back(b[i]);
      d.push_back(double(b[i]) - a[i]);
    }
  }
  const Acceptance standard = summarise(s), block = summarise(k), gain = summarise(d);
  std::printf("%s: accepted per chain Standard %.4f, Block %.4f (+%.2f%%, +-%.4f)\n", what, standard.mean,
              block.mean, 100 * gain.mean / standard.mean, gain.sigma);
  EXPECT_GT(gain.mean, -5 * gain.sigma);
}

TEST(BlockAcceptance, AtLeastStandardOnRandomRows) {
  std::mt19937_64 rng(41);
  constexpr std::int32_t V = 64, K = 5;
  Chains c(V);
  for (std::int32_t b = 0; b < 2000; ++b) {
    std::vector<std::vector<float>> ps, qs;
    std::vector<std::int32_t> xs;
    for (std::int32_t j = 0; j <= K; ++j) {
      ps.push_back(testing::random_distribution(V, rng, 0.7));
      if (j == K) break;
      qs.push_back(testing::random_distribution(V, rng, 0.7));
      xs.push_back(testing::sample(qs.back(), rng));
    }
    c.add(xs, ps, qs);
  }
  expect_block_accepts_more(c, 20, "random rows (independent p, q), V 64, K 5");
}

TEST(BlockAcceptance, AtLeastStandardOnLlmLikeRows) {
  std::mt19937_64 rng(43);
  Chains c(2048);
  for (std::int32_t b = 0; b < 500; ++b) testing::add_aligned_chain(c, 5, 1.0, rng);
  expect_block_accepts_more(c, 60, "LLM-like rows (draft = target logits + N(0, 1)), V 2048, K 5");
}

// ---------------------------------------------------------------------------------------------
// One draft or none: Standard bit for bit.

TEST(BlockOneDraft, StandardBitForBit) {
  constexpr std::int32_t V = 1000, B = 64;
  for (const bool one_hot : {false, true}) {
    std::mt19937_64 rng(one_hot ? 51 : 52);
    std::bernoulli_distribution has_draft(0.7);
    Chains c(V, one_hot);
    for (std::int32_t b = 0; b < B; ++b) {
      const bool drafted = has_draft(rng);
      auto p = testing::random_distribution(V, rng), bonus = testing::random_distribution(V, rng);
      auto q = testing::random_distribution(V, rng);
      std::vector<std::int32_t> xs;
      if (drafted) xs.push_back(b % 5 == 0 ? testing::sample(p, rng) : testing::sample(q, rng));
      if (drafted && b % 7 == 0) p[std::size_t(xs[0])] = 0.0f;  // the target excludes the draft
      if (drafted) {
        c.add(xs, {p, bonus}, {q});
      } else {
        c.add(xs, {p});
      }
    }
    std::vector<float> zeros(std::size_t(c.offsets.back()), 0.0f);
    for (std::uint64_t seed = 0; seed < 200; ++seed) {
      Randomness r{seed, seed * 3};
      if (seed % 10 == 0) r.accept_uniforms = zeros.data();  // u = 0 on every draft
      Chains a = c, b = c;
      std::vector<float> la(std::size_t(B) * std::size_t(c.width)), lb(la.size());
      ChainOutput oa = a.output(), ob = b.output();
      oa.logprobs = la.data();
      ob.logprobs = lb.data();
      const VerifyStats sa = verify(Standard{}, a.batch(), r, oa), sb = verify(Block{}, b.batch(), r, ob);
      ASSERT_EQ(a.out_tokens, b.out_tokens) << "seed " << seed;
      ASSERT_EQ(a.accepted, b.accepted) << "seed " << seed;
      for (std::size_t i = 0; i < la.size(); ++i) {
        ASSERT_TRUE(la[i] == lb[i] || (std::isnan(la[i]) && std::isnan(lb[i]))) << "seed " << seed << " slot " << i;
      }
      ASSERT_EQ(sa.accepted, sb.accepted);
      ASSERT_EQ(sa.drafted, sb.drafted);
      ASSERT_EQ(sa.target_checked, sb.target_checked);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Cost: row passes only where the values cannot decide.

/// cpu::Rows counting the residual passes the walk asks for.
struct CountingRows : cpu::Rows<> {
  std::int32_t* masses;
  cpu::Checked<double> mass(const core::Residual<View>& r, std::int32_t x) const {
    ++*masses;
    return cpu::Rows<>::mass(r, x);
  }
};

std::int32_t mass_passes(const Chains& c, const float* u) {
  std::int32_t masses = 0;
  CountingRows rows{{c.V}, &masses};
  const ChainBatch<float> batch = c.batch();
  Randomness r;
  r.accept_uniforms = u;
  const auto result = core::walk(Block{}, core::ChainLayout::of(batch), core::ProbSource<float>::of(batch), r, 0, rows);
  EXPECT_EQ(result.fault.kind, core::FaultKind::none);
  return masses;
}

TEST(BlockCost, AllAcceptedChainMakesNoMassPass) {
  std::mt19937_64 rng(61);
  constexpr std::int32_t V = 256, K = 6;
  for (const bool one_hot : {false, true}) {
    Chains c(V, one_hot);
    std::vector<std::vector<float>> ps, qs;
    std::vector<std::int32_t> xs;
    for (std::int32_t j = 0; j <= K; ++j) {
      ps.push_back(testing::random_distribution(V, rng));
      qs.push_back(testing::random_distribution(V, rng));
      xs.push_back(testing::sample(qs.back(), rng));
    }
    xs.pop_back();
    qs.pop_back();
    c.add(xs, ps, qs);
    const std::vector<float> tiny(K, 0.0f);  // every test passes (p(x) > 0)
    EXPECT_EQ(mass_passes(c, tiny.data()), 0);
    // Rejected everywhere (u just below 1): passes only at positions with u < p_i < 1; none for
    // one-hot drafts, whose Z_i has a closed form.
    const std::vector<float> high(K, 0.99999994f);
    const std::int32_t passes = mass_passes(c, high.data());
    EXPECT_LE(passes, one_hot ? 0 : K - 1);
  }
}

// ---------------------------------------------------------------------------------------------
// The CPU's vectorised plain-residual passes against the generic element-by-element ones.

TEST(BlockRows, ScaledResidualMatchesTheScalarResidual) {
  std::mt19937_64 rng(71);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (const std::int32_t V : {1, 7, 100, 1000, 5000, 128256}) {
    const auto p = testing::random_distribution(V, rng), q = testing::random_distribution(V, rng);
    const cpu::Rows<> rows{V};
    for (const double scale : {1.0, 0.37, 1e-3}) {
      for (const bool has_q : {true, false}) {
        for (const std::int32_t x : {0, V / 2, V - 1, kNoToken}) {
          core::Residual<const float*> r;
          r.p = p.data();
          r.q = has_q ? q.data() : nullptr;
          r.has_q = has_q;
          r.p_scale = scale;
          const auto scalar = core::residual_mass(rows, r, x);
          const auto fast = rows.mass(r, x);
          ASSERT_TRUE(fast.ok);
          ASSERT_EQ(fast.value, scalar.value) << V << " " << scale << " " << x;  // one definition, one sum
          for (int t = 0; t < 20; ++t) {
            const float u = uniform(rng);
            ASSERT_EQ(rows.draw(r, x, u).value, core::residual_draw(rows, r, x, u).value)
                << "V " << V << " scale " << scale << " x " << x << " u " << u;
          }
        }
      }
    }
  }
}

TEST(BlockRows, ScaledResidualFindsBadValues) {
  constexpr std::int32_t V = 5000;
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1e-3f}) {
    for (const std::int32_t at : {3, 2500, V - 1}) {
      for (const bool in_q : {false, true}) {
        std::vector<float> p(V, 1.0f / V), q(V, 1.0f / V);
        (in_q ? q : p)[std::size_t(at)] = bad;
        core::Residual<const float*> r;
        r.p = p.data();
        r.q = q.data();
        r.has_q = true;
        r.p_scale = 0.5;
        const cpu::Rows<> rows{V};
        EXPECT_FALSE(rows.mass(r, 1).ok);
        EXPECT_FALSE(rows.draw(r, 1, 0.5f).ok);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Bad input: named, nothing written.

template <class Rule>
void expect_rejected(Chains& c, const Randomness& r, std::initializer_list<const char*> fragments) {
  ChainOutput out = c.output();
  try {
    verify(Rule{}, c.batch(), r, out);
    ADD_FAILURE() << "no invalid_input";
  } catch (const invalid_input& e) {
    for (const char* f : fragments) EXPECT_THAT(e.what(), ::testing::HasSubstr(f));
  }
  for (auto t : c.out_tokens) ASSERT_EQ(t, 12345) << "output written before the error";
  for (auto n : c.accepted) ASSERT_EQ(n, 12345) << "output written before the error";
}

TEST(BlockBadInput, AsStandardOnOneDraft) {
  for (const bool all_nan : {false, true}) {
    Chains c = testing::nan_in_residual_row(all_nan);
    expect_rejected<Block>(c, Randomness{}, {"sequence 1", "position 0", "nan"});
  }
  for (const float v : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -0.5f}) {
    Chains c = testing::two_sequences();
    c.p[std::size_t(c.V) * 3 + 3] = v;  // sequence 1's first row, at its draft token 3
    expect_rejected<Block>(c, Randomness{}, {"sequence 1", "position 0", "token 3"});
  }
}

TEST(BlockBadInput, EveryValueOfTheChainIsRead) {
  // Sequence 1's second target row at its draft token: Block reads it even where the first draft
  // is rejected (p_k needs every position); the draft row likewise.
  constexpr std::int32_t V = 8;
  const auto uniform = testing::uniform_row(V);
  for (const bool draft_row : {false, true}) {
    Chains c(V);
    c.add({1}, {uniform, uniform}, {uniform});
    c.add({3, 4}, {uniform, uniform, uniform}, {uniform, uniform});
    (draft_row ? c.q[std::size_t(V) * 2 + 4] : c.p[std::size_t(V) * 3 + 4]) = std::numeric_limits<float>::quiet_NaN();
    expect_rejected<Block>(c, Randomness{}, {"sequence 1", "position 1", "token 4", "nan", draft_row ? "draft row" : "target row"});
  }
}

TEST(BlockBadInput, BadValueInAMassPassIsNamed) {
  // u just below 1 rejects position 2; position 1 has u < p_1 < 1, so its Z pass reads rows P_1
  // and Q_1, where a NaN sits away from the drafts.
  constexpr std::int32_t V = 8;
  const auto uniform = testing::uniform_row(V);
  std::vector<float> half(V, 0.0f), q0(V, 0.0f);
  half[0] = half[1] = 0.5f;
  q0[0] = 1.0f;  // x_1 = 0: p_1 = 0.5 / 1
  Chains c(V);
  c.add({0, 1}, {half, uniform, uniform}, {q0, uniform});
  c.q[std::size_t(V) + 6] = std::numeric_limits<float>::quiet_NaN();  // Q_1 at token 6
  const float u[2] = {0.25f, 0.99999994f};
  Randomness r;
  r.accept_uniforms = u;
  expect_rejected<Block>(c, r, {"sequence 0", "position 1", "nan", "draft row"});
}

}  // namespace
}  // namespace specverify

namespace specverify {
namespace {

// Block over logits: the same joint walk through the logits row source. Context-free rows make
// the target's sequence i.i.d. p, so the first 3 emitted tokens must follow p x p x p.
TEST(BlockLogits, SequenceFollowsTheProcessedTarget) {
  constexpr std::int32_t V = 5, K = 3;
  const std::vector<float> target{1.2f, -0.3f, 0.4f, 2.0f, -1.0f}, draft{-0.5f, 0.9f, 0.4f, 0.1f, 1.5f};
  const SamplingParams tp{0.9f, 4, 1.0f, 0.0f}, dp{1.1f, 0, 1.0f, 0.0f};
  const std::vector<float> p = testing::library_processed(target, tp), q = testing::library_processed(draft, dp);
  ASSERT_EQ(p[4], 0.0f) << "top_k = 4 removes token 4";
  const std::vector<float> exact = testing::iid_joint3(p);
  std::mt19937_64 rng(3);
  std::vector<float> trows, drows;
  for (std::int32_t j = 0; j <= K; ++j) trows.insert(trows.end(), target.begin(), target.end());
  for (std::int32_t j = 0; j < K; ++j) drows.insert(drows.end(), draft.begin(), draft.end());
  const auto chi = testing::prefix_chi_square(V, 3, 100000, exact, [&](const auto&, std::int64_t step) {
    std::vector<std::int32_t> drafts;
    for (std::int32_t j = 0; j < K; ++j) drafts.push_back(testing::sample(q, rng));
    const std::int32_t offsets[2] = {0, K};
    LogitsChainBatch<float> batch;
    batch.batch_size = 1;
    batch.vocab_size = V;
    batch.draft_offsets = offsets;
    batch.draft_tokens = drafts.data();
    batch.target_logits = trows.data();
    batch.draft_logits = drows.data();
    batch.target_params = &tp;
    batch.draft_params = &dp;
    std::int32_t out[K + 1], accepted = 0;
    verify(Block{}, batch, Randomness{21, std::uint64_t(step)}, ChainOutput{out, K + 1, &accepted});
    return std::vector<std::int32_t>(out, out + accepted + 1);
  });
  EXPECT_TRUE(chi.fits()) << "chi2 " << chi.statistic << " df " << chi.df;
}

}  // namespace
}  // namespace specverify
