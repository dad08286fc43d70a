// The rule comparison's components: KN n-gram model, CMU's trigram model (against
// libsphinxbase where present), cost model, quality metric, bootstrap intervals, command line,
// the synthetic-acceptance example rule, and a tiny end-to-end run of the decode loop.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "comparison/bootstrap.hpp"
#include "comparison/cli.hpp"
#include "comparison/corpus.hpp"
#include "comparison/setup.hpp"
#include "markov.hpp"
#include "support.hpp"
#include "synthetic_acceptance.hpp"

#ifdef SPECVERIFY_HAVE_SPHINXBASE
#include <sphinxbase/err.h>
#include <sphinxbase/logmath.h>
#include <sphinxbase/ngram_model.h>
#endif

namespace sc = specverify::comparison;

namespace {

sc::Corpus tiny_corpus() {
  return sc::build_corpus({"The cat sat on the mat. The dog sat on the log!", "A cat and a dog.",
                           "The cat saw the dog? The mat was red.", "Red dogs sat."},
                          4);
}

double row_sum(const std::vector<float>& row) { return std::accumulate(row.begin(), row.end(), 0.0); }

}  // namespace

TEST(Corpus, SplitsByFortuneAndLowercases) {
  const sc::Corpus c = tiny_corpus();
  EXPECT_EQ(c.heldout.size(), 1u);  // the 4th fortune: "Red dogs sat."
  EXPECT_EQ(c.train.size(), 5u);
  EXPECT_EQ(c.ids.count("the"), 1u);
  EXPECT_EQ(c.ids.count("The"), 0u);
  EXPECT_EQ(c.ids.count("dogs"), 1u);  // held-out words are in the vocabulary
}

TEST(KneserNey, DistributionsSumToOneIncludingUnseenContexts) {
  sc::Corpus c = tiny_corpus();
  const sc::KneserNey lm(4, c.vocab(), c.train, c.bos, c.eos);
  const std::vector<std::vector<std::int32_t>> histories = {
      {}, {c.id("the")}, {c.id("the"), c.id("cat")}, {c.id("on"), c.id("the")},
      {c.id("dogs"), c.id("red"), c.id("mat")},  // unseen at every order above 1
      {c.id("cat"), c.eos}};                      // a finished sentence starts a new one
  std::vector<float> row(static_cast<std::size_t>(c.vocab()));
  for (const auto& h : histories) {
    lm.distribution(h.data(), std::int32_t(h.size()), row.data());
    EXPECT_NEAR(row_sum(row), 1.0, 1e-5);
    for (std::int32_t w = 0; w < c.vocab(); ++w) {
      EXPECT_GT(row[std::size_t(w)], 0.0f);
      EXPECT_NEAR(row[std::size_t(w)], lm.prob(h.data(), std::int32_t(h.size()), w), 1e-6);
    }
  }
}

TEST(KneserNey, SeenContinuationBeatsUnseenAndCountsMatter) {
  sc::Corpus c = tiny_corpus();
  const sc::KneserNey lm(4, c.vocab(), c.train, c.bos, c.eos);
  const std::int32_t h[] = {c.id("cat"), c.id("sat"), c.id("on"), c.id("the")};
  // After "sat on the", "mat" and "log" were seen once each; "mat" also follows "the" in a second
  // context ("<s> the mat"), so its continuation count, and the backed-off share, is larger.
  EXPECT_GT(lm.prob(h + 1, 3, c.id("mat")), lm.prob(h + 1, 3, c.id("log")));
  EXPECT_GT(lm.prob(h + 1, 3, c.id("log")), 0.1);
  EXPECT_LT(lm.prob(h + 1, 3, c.id("red")), lm.prob(h + 1, 3, c.id("mat")) / 5);
  // Sentence start: <s> <s> <s> -> "the" opened 4 of 5 training sentences.
  EXPECT_GT(lm.prob(nullptr, 0, c.id("the")), lm.prob(nullptr, 0, c.id("a")));
}

TEST(NgramPair, TemperedRowsAreNormalisedPowers) {
  sc::Corpus c = tiny_corpus();
  auto t = std::make_shared<const sc::KneserNey>(4, c.vocab(), c.train, c.bos, c.eos);
  auto d = std::make_shared<const sc::KneserNey>(2, c.vocab(), c.train, c.bos, c.eos);
  sc::NgramPair pair(t, d);
  const std::int32_t h[] = {c.id("the"), c.id("cat")};
  std::vector<float> p1(std::size_t(c.vocab())), pt(std::size_t(c.vocab())), p0(std::size_t(c.vocab()));
  pair.target_row(h, 2, 1.0f, p1.data());
  pair.target_row(h, 2, 0.6f, pt.data());
  pair.target_row(h, 2, 0.0f, p0.data());
  double z = 0;
  for (const float v : p1) z += std::pow(double(v), 1 / 0.6);
  for (std::size_t w = 0; w < p1.size(); ++w) EXPECT_NEAR(pt[w], std::pow(double(p1[w]), 1 / 0.6) / z, 1e-6);
  const auto best = std::max_element(p1.begin(), p1.end()) - p1.begin();
  EXPECT_EQ(p0[std::size_t(best)], 1.0f);
  EXPECT_DOUBLE_EQ(row_sum(p0), 1.0);
}

TEST(CostModel, LeviathanWorkedValues) {
  // alpha 0.8, gamma 4, c 0.05: (1 - 0.8^5) / (0.2 * 1.2) = 0.67232 / 0.24 = 2.80133
  EXPECT_NEAR(sc::leviathan_speedup(0.8, 4, 0.05), 2.801333, 1e-5);
  EXPECT_NEAR(sc::leviathan_speedup(0.0, 4, 0.05), 1.0 / 1.2, 1e-12);  // every draft wasted
  EXPECT_NEAR(sc::leviathan_speedup(1.0, 3, 0.1), 4.0 / 1.3, 1e-12);   // alpha = 1 limit
  // Measured counts: 300 tokens, 100 target calls, 400 drafts at c = 0.05 -> 300 / 120.
  EXPECT_NEAR(sc::measured_speedup(300, 100, 400, 0.05), 2.5, 1e-12);
  // Counts from i.i.d. acceptance agree with the closed form: per step (1 - a^5)/(1 - a) tokens.
  const double a = 0.8, tokens = (1 - std::pow(a, 5)) / (1 - a);
  EXPECT_NEAR(sc::measured_speedup(std::int64_t(tokens * 1e6), 1000000, 4000000, 0.05),
              sc::leviathan_speedup(a, 4, 0.05), 1e-5);
}

TEST(QualityMetric, KnownTv) {
  const std::vector<float> p = {0.5f, 0.3f, 0.1f, 0.05f, 0.05f};
  const sc::BinnedTv top2(p.data(), 5, 2);  // bins: token 0, token 1, the rest
  EXPECT_EQ(top2.bins(), 3u);
  EXPECT_NEAR(top2.tv({50, 30, 20}), 0.0, 1e-6);  // p is float
  EXPECT_NEAR(top2.tv({30, 30, 40}), 0.2, 1e-6);  // 0.2 moved from token 0 to the tail
  // Sampled: identical distribution -> TV near 0; a known shift -> its TV.
  std::mt19937_64 rng(5);
  const sc::BinnedTv all(p.data(), 5, 5);
  const auto sample = [&](const std::vector<float>& d, int n) {
    std::discrete_distribution<int> dist(d.begin(), d.end());
    std::vector<std::int64_t> counts(all.bins(), 0);
    for (int i = 0; i < n; ++i) ++counts[std::size_t(all.bin(dist(rng)))];
    return counts;
  };
  EXPECT_LT(all.tv(sample(p, 200000)), 0.005);
  EXPECT_NEAR(all.tv(sample({0.3f, 0.3f, 0.1f, 0.05f, 0.25f}, 200000)), 0.2, 0.005);
}

TEST(QualityMetric, StandardIsAtTheNoiseFloorAndGreedyIsNot) {
  // p and q over 8 tokens; the first emitted token of Standard is distributed as p.
  const std::vector<float> p = {0.3f, 0.2f, 0.15f, 0.1f, 0.1f, 0.05f, 0.05f, 0.05f},
                           q = {0.05f, 0.05f, 0.1f, 0.1f, 0.15f, 0.15f, 0.2f, 0.2f};
  const sc::QualityContext c(p.data(), q.data(), 8, 8);
  const sc::DraftPolicy fixed{sc::Drafting::fixed, 1, 0, {}, specverify::Drafted::sampled};
  const auto standard = sc::measure_quality({c}, 20000, fixed, nullptr,
                                            [](const float*) { return specverify::Standard{}; }, 3);
  EXPECT_LT(standard.tv, 0.02);
  EXPECT_LT(standard.noise_floor, 0.02);
  // Greedy always emits argmax p: TV = 1 - p(argmax) = 0.7.
  const auto greedy = sc::measure_quality({c}, 2000, fixed, nullptr,
                                          [](const float*) { return specverify::Greedy{}; }, 3);
  EXPECT_NEAR(greedy.tv, 0.7, 1e-6);
  // One-level trees of every drafting: Standard's first token still follows p. 200k trials: the
  // TV of an unbiased sample over these 8 bins is about 0.002; Greedy's trees are far off.
  for (const auto how : {specverify::Drafted::deterministic, specverify::Drafted::sampled,
                         specverify::Drafted::sampled_without_replacement}) {
    const sc::DraftPolicy tree{sc::Drafting::tree, 6, 0, sc::TreeShape{{3, 1}}, how};
    const auto t = sc::measure_quality({c}, 200000, tree, nullptr, [](const float*) { return specverify::Standard{}; }, 3);
    EXPECT_LT(t.tv, 0.006) << int(how);
    EXPECT_LT(t.noise_floor, 0.006) << int(how);
    if (how == specverify::Drafted::deterministic) {
      const auto g = sc::measure_quality({c}, 2000, tree, nullptr, [](const float*) { return specverify::Greedy{}; }, 3);
      EXPECT_NEAR(g.tv, 0.7, 1e-6);
    }
  }
}

TEST(Comparison, TinyEndToEndRun) {
  sc::Corpus c = tiny_corpus();
  auto t = std::make_shared<const sc::KneserNey>(4, c.vocab(), c.train, c.bos, c.eos);
  auto d = std::make_shared<const sc::KneserNey>(2, c.vocab(), c.train, c.bos, c.eos);
  sc::NgramPair pair(t, d);
  sc::Options o;
  o.prompts = 2;
  o.tokens = 6;
  o.trials = 20;
  o.sweep.standard_k = {2};
  o.sweep.fsd_scale = {0.3f};
  const std::vector<std::vector<std::int32_t>> prompts = {{c.id("the")}, {c.id("a"), c.id("cat")}};
  int progress = 0;
  const auto rows = sc::run_setting(pair, prompts, prompts, 1.0f, o, [&](const std::string&) { ++progress; });
  ASSERT_EQ(rows.size(), std::size_t(sc::rules_per_setting(o.sweep)));
  // Trees verified by Standard ("Tree <drafting>"), Greedy ("Greedy tree") or Traversal ("Traversal <drafting>").
  const auto is_tree = [](const sc::Row& r) {
    return r.family.rfind("Tree", 0) == 0 || r.family == "Greedy tree" || r.family.rfind("Traversal ", 0) == 0;
  };
  EXPECT_EQ(progress, int(rows.size()));
  for (const auto& r : rows) {
    SCOPED_TRACE(r.rule);
    EXPECT_GE(r.tokens_per_call, 1.0);   // every target call yields at least its extra token
    EXPECT_LE(r.accept_rate, 1.0);
    EXPECT_GT(r.ppl, 1.0);
    EXPECT_GE(r.tv, 0.0);
    if (r.family == "Standard") {
      EXPECT_LE(r.tokens_per_call, 3.0);  // K = 2
    }
    if (r.family == "Block" || r.family == "Traversal") {
      EXPECT_LE(r.tokens_per_call, r.parameter + 1);  // K drafts and the extra token
    }
    if (is_tree(r)) {
      EXPECT_LE(r.tokens_per_call, 3.0);  // the default trees have depth 2
      EXPECT_GE(r.drafts_per_call, 1.0);
      EXPECT_LE(r.drafts_per_call, r.parameter);  // at most its node budget per call
    }
  }
  // Block and Traversal chains and every default tree ran.
  EXPECT_EQ(std::count_if(rows.begin(), rows.end(), [](const auto& r) { return r.family == "Block"; }),
            std::ptrdiff_t(o.sweep.block_k.size()));
  EXPECT_EQ(std::count_if(rows.begin(), rows.end(), [](const auto& r) { return r.family == "Traversal"; }),
            std::ptrdiff_t(o.sweep.traversal_k.size()));
  EXPECT_EQ(std::count_if(rows.begin(), rows.end(), is_tree), std::ptrdiff_t(o.sweep.trees.size()));
  // Deterministic from the seed.
  const auto again = sc::run_setting(pair, prompts, prompts, 1.0f, o, [](const std::string&) {});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].tokens_per_call, again[i].tokens_per_call);
    EXPECT_EQ(rows[i].tv, again[i].tv);
    EXPECT_EQ(rows[i].tokens_per_call_ci.lo, again[i].tokens_per_call_ci.lo);
    EXPECT_EQ(rows[i].tv_ci.hi, again[i].tv_ci.hi);
  }
  // Intervals bracket their estimates; the synthetic rule's closed form is in its interval's reach.
  for (const auto& r : rows) {
    SCOPED_TRACE(r.rule);
    EXPECT_LE(r.tokens_per_call_ci.lo, r.tokens_per_call + 1e-12);
    EXPECT_GE(r.tokens_per_call_ci.hi, r.tokens_per_call - 1e-12);
    EXPECT_LE(r.tv_ci.lo, r.tv + 1e-12);
    EXPECT_GE(r.tv_ci.hi, r.tv - 1e-12);
  }
}

// --- CMU's US English trigram model (Debian pocketsphinx-en-us) ---

namespace {

const char* kLm = "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin";

std::shared_ptr<const sc::SphinxTrigram> cmu_model() {
  static std::shared_ptr<const sc::SphinxTrigram> lm =
      std::filesystem::exists(kLm) ? std::make_shared<const sc::SphinxTrigram>(kLm) : nullptr;
  return lm;
}

double tv_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d += std::abs(double(a[i]) - b[i]);
  return d / 2;
}

}  // namespace

TEST(SphinxTrigram, RowsAreFullAndNormalisedIncludingUnseenContexts) {
  const auto lm = cmu_model();
  if (!lm) GTEST_SKIP() << "no " << kLm << " (Debian pocketsphinx-en-us)";
  EXPECT_EQ(lm->vocab(), 72547);
  sc::SphinxPair pair(lm);
  const std::int32_t V = lm->vocab();
  const auto id = [&](const char* w) {
    const std::int32_t i = lm->id(w);
    EXPECT_GE(i, 0) << w;
    return i;
  };
  // A seen trigram context, an unseen one ("zebra quantum" is no bigram), a sentence start, and
  // a finished sentence (context after </s>).
  const std::vector<std::vector<std::int32_t>> texts = {
      {id("one"), id("of"), id("the")}, {id("zebra"), id("quantum")}, {}, {id("the"), id("end"), lm->eos()}};
  std::vector<float> p(std::size_t(V), 0.0f), q(std::size_t(V), 0.0f);
  for (const float t : {1.0f, 0.6f}) {
    for (const auto& text : texts) {
      SCOPED_TRACE(testing::Message() << "T " << t << ", text of " << text.size() << " words");
      pair.target_row(text.data(), std::int32_t(text.size()), t, p.data());
      pair.draft_row(text.data(), std::int32_t(text.size()), t, q.data());
      for (const auto* row : {&p, &q}) {
        EXPECT_NEAR(row_sum(*row), 1.0, 1e-6);
        // Back-off reaches every word: all but <s> (log10 p = -99 in the model) have mass.
        std::int32_t positive = 0;
        for (const float v : *row) positive += v > 0.0f;
        EXPECT_EQ(positive, V - 1);
        EXPECT_EQ((*row)[std::size_t(lm->bos())], 0.0f);
      }
    }
  }
  // An unseen two-word context backs off to the bigram row of its last word: target == draft.
  pair.target_row(texts[1].data(), 2, 1.0f, p.data());
  pair.draft_row(texts[1].data(), 2, 1.0f, q.data());
  EXPECT_LT(tv_distance(p, q), 1e-6);
  // Where history matters the rows differ: "of the" vs "in the" share the draft row (last word
  // "the") but not the target row.
  const std::int32_t of_the[] = {id("of"), id("the")}, in_the[] = {id("in"), id("the")};
  std::vector<float> p2(p.size()), q2(p.size());
  pair.target_row(of_the, 2, 1.0f, p.data());
  pair.target_row(in_the, 2, 1.0f, p2.data());
  pair.draft_row(of_the, 2, 1.0f, q.data());
  pair.draft_row(in_the, 2, 1.0f, q2.data());
  EXPECT_EQ(q, q2);
  EXPECT_GT(tv_distance(p, p2), 0.05);
  EXPECT_GT(tv_distance(p, q), 0.05);
  // Every word's value is b^score (the precomputed stored values, a bigram's times the history's
  // back-off weight): ratios to one word against the scores, over the whole row, at T = 1 and 0.6.
  for (const float t : {1.0f, 0.6f}) {
    pair.target_row(of_the, 2, t, p2.data());
    const std::int32_t ref = id("the");
    const double ref_score = lm->score(of_the, 2, ref);
    double worst = 0;
    for (std::int32_t w = 0; w < V; ++w) {
      if (w == lm->bos()) continue;
      const double expected = std::exp((lm->score(of_the, 2, w) - ref_score) * sc::SphinxTrigram::kLnBase / t);
      worst = std::max(worst, std::abs(double(p2[std::size_t(w)]) / p2[std::size_t(ref)] / expected - 1.0));
    }
    EXPECT_LT(worst, 1e-5) << "T " << t;
  }
  // target_logprob agrees with the row.
  for (const char* w : {"same", "first", "zebra"})
    EXPECT_NEAR(pair.target_logprob(of_the, 2, id(w)), std::log(double(p[std::size_t(id(w))])), 1e-5) << w;
  // Tempering: the T = 0.6 row is p^(1/0.6), normalised.
  pair.target_row(of_the, 2, 0.6f, p2.data());
  double z = 0;
  for (const float v : p) z += std::pow(double(v), 1 / 0.6);
  for (const char* w : {"same", "first", "zebra"})
    EXPECT_NEAR(p2[std::size_t(id(w))] / (std::pow(double(p[std::size_t(id(w))]), 1 / 0.6) / z), 1.0, 1e-4) << w;
}

#ifdef SPECVERIFY_HAVE_SPHINXBASE
TEST(SphinxTrigram, ScoresEqualLibsphinxbaseWordByWord) {
  const auto lm = cmu_model();
  if (!lm) GTEST_SKIP() << "no " << kLm;
  err_set_logfp(nullptr);
  logmath_t* lmath = logmath_init(1.0001, 0, 0);
  ngram_model_t* ref = ngram_model_read(nullptr, kLm, NGRAM_AUTO, lmath);
  ASSERT_NE(ref, nullptr);
  std::mt19937_64 rng(3);
  std::vector<std::array<std::int32_t, 2>> contexts = {{lm->id("of"), lm->id("the")}, {lm->bos(), lm->id("i")},
                                                       {lm->id("zebra"), lm->id("quantum")}};
  for (int i = 0; i < 3; ++i) contexts.push_back({std::int32_t(rng() % 72547), std::int32_t(rng() % 72547)});
  std::int64_t compared = 0, mismatched = 0, reversed_mismatched = 0;
  for (const auto& c : contexts) {
    std::int32_t hist[2] = {c[1], c[0]};  // sphinxbase: latest word first
    for (std::int32_t w = 0; w < lm->vocab(); ++w) {
      std::int32_t used = 0;
      const std::int32_t lib = ngram_ng_prob(ref, w, hist, 2, &used);
      mismatched += std::int32_t(lm->score(c.data(), 2, w)) != lib;
      const std::int32_t backwards[2] = {c[1], c[0]};  // negative control: history in the wrong order
      reversed_mismatched += std::int32_t(lm->score(backwards, 2, w)) != lib;
      const std::int32_t bigram = ngram_ng_prob(ref, w, hist, 1, &used);
      mismatched += std::int32_t(lm->score(c.data() + 1, 1, w)) != bigram;
      compared += 2;
    }
  }
  EXPECT_EQ(mismatched, 0) << "of " << compared;
  EXPECT_GT(reversed_mismatched, 1000);
  ngram_model_free(ref);
  logmath_free(lmath);
}
#endif

// --- Bootstrap intervals ---

TEST(Bootstrap, DeterministicForASeed) {
  std::mt19937_64 rng(1);
  std::exponential_distribution<double> e(1.0);
  std::vector<double> x(30);
  for (auto& v : x) v = e(rng);
  const auto ci = [&](std::uint64_t seed) {
    const auto draws = sc::bootstrap_draws(30, sc::BootstrapOptions{1000, 0.95, seed});
    return sc::percentile_interval(draws, [&](const auto& m) { return sc::weighted_mean(m, x); });
  };
  const sc::Interval a = ci(5), b = ci(5), c = ci(6);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_NE(a.lo, c.lo);
  EXPECT_LT(a.lo, a.hi);
}

namespace {

/// Fraction of `reps` samples of n exponentials whose interval for the mean contains the true mean 1.
double coverage(double level, int reps) {
  std::mt19937_64 rng(11);
  std::exponential_distribution<double> e(1.0);
  int covered = 0;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> x(40);
    for (auto& v : x) v = e(rng);
    const auto draws = sc::bootstrap_draws(40, sc::BootstrapOptions{500, level, 100 + std::uint64_t(r)});
    covered += sc::percentile_interval(draws, [&](const auto& m) { return sc::weighted_mean(m, x); }, level).contains(1.0);
  }
  return double(covered) / reps;
}

}  // namespace

TEST(Bootstrap, CoverageOnASkewedKnownDistribution) {
  // Mean of 40 exponentials: the percentile interval covers about 93% (its known slight
  // undercoverage on skewed data); 400 repetitions give a standard error of 0.012.
  const double c95 = coverage(0.95, 400);
  EXPECT_GT(c95, 0.89);
  EXPECT_LT(c95, 0.99);
  // Negative control: a 50% interval must fail the 95% check, and cover about half.
  const double c50 = coverage(0.5, 400);
  EXPECT_LT(c50, 0.89);
  EXPECT_NEAR(c50, 0.5, 0.1);
}

TEST(Bootstrap, RatioOfSumsIsWeightedByUnits) {
  const std::vector<double> a = {3, 1}, b = {1, 1};
  EXPECT_DOUBLE_EQ(sc::weighted_ratio({1, 1}, a, b), 2.0);
  EXPECT_DOUBLE_EQ(sc::weighted_ratio({2, 0}, a, b), 3.0);
  EXPECT_DOUBLE_EQ(sc::weighted_mean({0, 3}, a), 1.0);
}

// --- Command line ---

namespace {

sc::CommandLine parse(std::vector<std::string> args) {
  sc::CommandLine c;
  CLI::App app;
  sc::add_options(app, c);
  std::reverse(args.begin(), args.end());  // CLI11 takes them last first
  app.parse(args);
  return c;
}

}  // namespace

TEST(CommandLine, BadValuesAreErrorsNamingTheOption) {
  EXPECT_EQ(parse({"--seed", "7", "--prompts", "12", "--full"}).options.seed, 7u);
  EXPECT_EQ(parse({"--seed", "7", "--prompts", "12"}).options.prompts, 12);
  EXPECT_TRUE(parse({"--full"}).full);
  EXPECT_THROW(parse({"--seed", "abc"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--seed", "12x"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--seed", "99999999999999999999"}), CLI::ParseError);  // over 2^64 - 1
  EXPECT_THROW(parse({"--seed", "-1"}), CLI::ValidationError);  // not wrapped to 2^64 - 1
  EXPECT_THROW(parse({"--prompts", "1"}), CLI::ValidationError);  // the bootstrap needs 2 units
  EXPECT_THROW(parse({"--cost-ratio", "-0.5"}), CLI::ValidationError);
  EXPECT_THROW(parse({"--trials", "ten"}), CLI::ParseError);  // the range check sees it first
  EXPECT_THROW(parse({"--bogus"}), CLI::ExtrasError);
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--seed", "abc"}, {"--trials", "ten"}, {"--seed", "-1"}}) {
    try {
      parse(bad);
      ADD_FAILURE() << bad[0] << " " << bad[1] << " was accepted";
    } catch (const CLI::ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(bad[0]), std::string::npos) << e.what();
    }
  }
}

// --- The synthetic-acceptance example rule ---

TEST(SyntheticAcceptance, AcceptsEachPositionAtItsConfiguredRate) {
  const std::vector<float> rates = {0.9f, 0.5f, 0.2f};  // position 3 uses 0.2 too
  const SyntheticAcceptance rule{rates.data(), 3};
  constexpr std::int32_t B = 4000, K = 4, V = 8;
  std::mt19937_64 rng(9);
  const std::vector<float> p = specverify::testing::random_distribution(V, rng), q(p.rbegin(), p.rend());  // adversarial q
  std::vector<std::int32_t> offsets(B + 1), drafts(std::size_t(B) * K), tokens(std::size_t(B) * (K + 1)), accepted(B);
  std::vector<float> P, Q;
  for (std::int32_t b = 0; b <= B; ++b) offsets[std::size_t(b)] = b * K;
  for (std::int32_t i = 0; i < B * (K + 1); ++i) P.insert(P.end(), p.begin(), p.end());
  for (std::int32_t i = 0; i < B * K; ++i) Q.insert(Q.end(), q.begin(), q.end());
  std::vector<std::int64_t> reached(K, 0), kept(K, 0), extra(V, 0);
  for (std::uint64_t step = 0; step < 5; ++step) {
    for (auto& d : drafts) d = specverify::testing::sample(q, rng);
    const specverify::ChainBatch<float> batch{B, V, offsets.data(), drafts.data(), P.data(), Q.data()};
    specverify::verify(rule, batch, {21, step}, specverify::ChainOutput{tokens.data(), K + 1, accepted.data()});
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int32_t a = accepted[std::size_t(b)];
      for (std::int32_t j = 0; j <= std::min(a, K - 1); ++j) ++reached[std::size_t(j)];
      for (std::int32_t j = 0; j < a; ++j) ++kept[std::size_t(j)];
      if (a < K) ++extra[std::size_t(tokens[std::size_t(b) * (K + 1) + std::size_t(a)])];
    }
  }
  for (std::int32_t j = 0; j < K; ++j) {
    const double n = double(reached[std::size_t(j)]), r = rule.rate(j);
    const double bound = 5 * std::sqrt(r * (1 - r) / n);  // binomial: 5 standard errors
    EXPECT_NEAR(double(kept[std::size_t(j)]) / n, r, bound) << "position " << j << ", " << n << " reached";
    // Negative control: the neighbouring position's rate is far outside the same bound.
    const double other = rule.rate(j == 0 ? 1 : j - 1);
    if (other != r) {
      EXPECT_GT(std::abs(double(kept[std::size_t(j)]) / n - other), bound);
    }
  }
  // The extra token on rejection is drawn from p (not from the residual, not from q).
  const auto fit = specverify::testing::chi_square(extra, p);
  EXPECT_TRUE(fit.fits()) << fit.statistic << " df " << fit.df;
  EXPECT_FALSE(specverify::testing::chi_square(extra, q).fits());
  EXPECT_NEAR(expected_tokens_per_call(rule, 4), 1 + 0.9 + 0.45 + 0.09 + 0.018, 1e-6);
}

TEST(SyntheticAcceptance, RejectsRatesOutsideTheUnitInterval) {
  const std::vector<float> bad = {0.5f, 1.5f};
  const std::vector<float> p = {0.5f, 0.5f};
  const std::int32_t offsets[2] = {0, 1}, draft = 0;
  std::int32_t tokens[2], accepted = 0;
  const specverify::ChainBatch<float> batch{1, 2, offsets, &draft, p.data(), p.data()};
  EXPECT_THROW(specverify::verify(SyntheticAcceptance{bad.data(), 2}, batch, {1, 0},
                                  specverify::ChainOutput{tokens, 2, &accepted}),
               specverify::invalid_input);
  EXPECT_THROW(specverify::verify(SyntheticAcceptance{nullptr, 1}, batch, {1, 0},
                                  specverify::ChainOutput{tokens, 2, &accepted}),
               specverify::invalid_input);
}

// --- Tree drafting and Block in the decode loop ---

namespace {

using specverify::Drafted;

/// Children of one node drawn `n` times; counts[c][v]: how often sibling c was token v.
std::vector<std::vector<std::int64_t>> sibling_counts(const std::vector<float>& q, std::int32_t width, Drafted how,
                                                      std::int32_t n, std::uint64_t seed) {
  const std::int32_t V = std::int32_t(q.size());
  std::vector<std::vector<std::int64_t>> counts(std::size_t(width), std::vector<std::int64_t>(std::size_t(V), 0));
  std::vector<float> row = q;
  std::vector<std::int32_t> children;
  std::mt19937_64 rng(seed);
  for (std::int32_t i = 0; i < n; ++i) {
    sc::draft_children(row.data(), V, width, how, rng, children);
    EXPECT_EQ(std::int32_t(children.size()), width);
    for (std::size_t c = 0; c < children.size(); ++c) ++counts[c][std::size_t(children[c])];
    if (how == Drafted::sampled_without_replacement) {
      EXPECT_NE(children[0], children[1]);
    }
  }
  EXPECT_EQ(row, q);  // the zeroed siblings were restored
  return counts;
}

/// P(second child = y) when drawn from q without the first: sum_x q(x) q(y) / (1 - q(x)), x != y.
std::vector<float> second_without_replacement(const std::vector<float>& q) {
  std::vector<float> out(q.size(), 0.0f);
  for (std::size_t x = 0; x < q.size(); ++x)
    for (std::size_t y = 0; y < q.size(); ++y)
      if (x != y) out[y] += float(double(q[x]) * q[y] / (1.0 - q[x]));
  return out;
}

}  // namespace

TEST(TreeDrafting, DeterministicChildrenAreTheTopKOfQInOrder) {
  // Ties (0.2 at tokens 1 and 4) keep the lower index first; q is only read.
  std::vector<float> q = {0.05f, 0.2f, 0.1f, 0.3f, 0.2f, 0.15f};
  std::vector<std::int32_t> children;
  std::mt19937_64 rng(1);
  sc::draft_children(q.data(), 6, 3, Drafted::deterministic, rng, children);
  EXPECT_EQ(children, (std::vector<std::int32_t>{3, 1, 4}));
  sc::draft_children(q.data(), 6, 6, Drafted::deterministic, rng, children);
  EXPECT_EQ(children, (std::vector<std::int32_t>{3, 1, 4, 5, 2, 0}));
  sc::draft_children(q.data(), 6, 1, Drafted::deterministic, rng, children);
  EXPECT_EQ(children, (std::vector<std::int32_t>{3}));
  // A random row against a full sort.
  std::mt19937_64 g(5);
  const std::vector<float> r = specverify::testing::random_distribution(1000, g);
  std::vector<std::int32_t> order(1000);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return r[std::size_t(a)] > r[std::size_t(b)]; });
  std::vector<float> row = r;
  sc::draft_children(row.data(), 1000, 4, Drafted::deterministic, rng, children);
  EXPECT_EQ(children, std::vector<std::int32_t>(order.begin(), order.begin() + 4));
}

TEST(TreeDrafting, SampledChildrenFollowQ) {
  // A peaked q, so drawing without replacement visibly changes the second child's distribution.
  const std::vector<float> q = {0.45f, 0.25f, 0.12f, 0.08f, 0.06f, 0.04f};
  constexpr std::int32_t n = 200000;
  const auto iid = sibling_counts(q, 3, Drafted::sampled, n, 3);
  for (std::size_t c = 0; c < iid.size(); ++c) {
    const auto fit = specverify::testing::chi_square(iid[c], q);
    EXPECT_TRUE(fit.fits()) << "i.i.d. sibling " << c << ": " << fit.statistic << " df " << fit.df;
  }
  const auto wor = sibling_counts(q, 2, Drafted::sampled_without_replacement, n, 4);
  const auto first = specverify::testing::chi_square(wor[0], q);
  EXPECT_TRUE(first.fits()) << first.statistic;
  const std::vector<float> second = second_without_replacement(q);
  const auto fit = specverify::testing::chi_square(wor[1], second);
  EXPECT_TRUE(fit.fits()) << fit.statistic << " df " << fit.df;
  // Negative controls: each drawing fails the other's law for the second sibling.
  EXPECT_FALSE(specverify::testing::chi_square(wor[1], q).fits());
  EXPECT_FALSE(specverify::testing::chi_square(iid[1], second).fits());
}

TEST(TreeDrafting, ShapeCountsNodesAndLevels) {
  EXPECT_EQ((sc::TreeShape{{2, 1}}).nodes(), 4);
  EXPECT_EQ((sc::TreeShape{{2, 2}}).nodes(), 6);
  EXPECT_EQ((sc::TreeShape{{2, 1, 1, 1}}).nodes(), 8);
  EXPECT_EQ((sc::TreeShape{{2, 2}}).depth(), 2);
  EXPECT_EQ((sc::TreeShape{{2, 2}}).name(), "2-2");
}

namespace {

/// First-order Markov target and draft (tests/support/markov.hpp) as a comparison model pair: rows
/// depend on the last token only (the start row for an empty text). Temperature 1 only.
class MarkovPair final : public sc::ModelPair {
 public:
  MarkovPair(specverify::testing::Markov p, specverify::testing::Markov q) : p_(std::move(p)), q_(std::move(q)) {}
  std::string name() const override { return "markov"; }
  std::int32_t vocab() const override { return p_.V; }
  void target_row(const std::int32_t* text, std::int32_t n, float, float* out) override { copy(p_, text, n, out); }
  void draft_row(const std::int32_t* text, std::int32_t n, float, float* out) override { copy(q_, text, n, out); }
  double target_logprob(const std::int32_t* text, std::int32_t n, std::int32_t w) override {
    return std::log(double(p_.row(n > 0 ? text[n - 1] : -1)[std::size_t(w)]));
  }

 private:
  static void copy(const specverify::testing::Markov& m, const std::int32_t* text, std::int32_t n, float* out) {
    const auto& row = m.row(n > 0 ? text[n - 1] : -1);
    std::copy(row.begin(), row.end(), out);
  }
  specverify::testing::Markov p_, q_;
};

/// The decode loop from an empty prompt, `prompts` times: the chi-square of the first 3 emitted
/// tokens against the target's exact joint.
template <class MakeRule>
specverify::testing::ChiSquare loop_fit(MarkovPair& pair, const specverify::testing::Markov& p,
                                        const sc::DraftPolicy& policy, MakeRule make_rule, std::int32_t prompts,
                                        double* tokens_per_call = nullptr) {
  const std::int32_t V = p.V;
  const sc::RunStats run = sc::decode(pair, std::vector<std::vector<std::int32_t>>(std::size_t(prompts)),
                                      sc::DecodeSettings{3, 1.0f, 17}, policy, nullptr, make_rule);
  std::vector<std::int64_t> counts(std::size_t(V * V * V), 0);
  for (const auto& t : run.texts) {
    EXPECT_GE(t.size(), 3u);
    ++counts[std::size_t((t[0] * V + t[1]) * V + t[2])];
  }
  if (tokens_per_call) *tokens_per_call = double(run.generated) / double(run.target_calls);
  return specverify::testing::chi_square(counts, p.joint(3));
}

}  // namespace

TEST(DecodeLoop, StandardTreesEmitTheTarget) {
  std::mt19937_64 rng(7);
  const auto p = specverify::testing::Markov::random(5, rng);
  for (const bool adversarial : {false, true}) {
    MarkovPair pair(p, adversarial ? p.reversed() : specverify::testing::Markov::random(5, rng));
    for (const auto how : {Drafted::deterministic, Drafted::sampled, Drafted::sampled_without_replacement}) {
      for (const auto& shape : {sc::TreeShape{{2, 2}}, sc::TreeShape{{3, 1}}}) {
        SCOPED_TRACE(testing::Message() << (adversarial ? "adversarial " : "") << int(how) << " " << shape.name());
        double per_call = 0;
        const auto fit = loop_fit(pair, p, sc::DraftPolicy{sc::Drafting::tree, shape.nodes(), 0, shape, how},
                                  [](const float*) { return specverify::Standard{}; }, 30000, &per_call);
        EXPECT_TRUE(fit.fits()) << fit.statistic << " df " << fit.df;
        EXPECT_GT(per_call, 1.0);  // some children were accepted
        EXPECT_LE(per_call, 3.0);  // depth 2: at most two drafts and the extra token
      }
    }
  }
  // Negative control: the same loop and test see Greedy's bias.
  MarkovPair pair(p, specverify::testing::Markov::random(5, rng));
  const sc::TreeShape shape{{2, 2}};
  const auto greedy = loop_fit(pair, p, sc::DraftPolicy{sc::Drafting::tree, 6, 0, shape, Drafted::deterministic},
                               [](const float*) { return specverify::Greedy{}; }, 30000);
  EXPECT_FALSE(greedy.fits()) << greedy.statistic;
}

TEST(DecodeLoop, BlockChainsEmitTheTargetAndAcceptMore) {
  std::mt19937_64 rng(8);
  const auto p = specverify::testing::Markov::random(5, rng);
  MarkovPair pair(p, p.reversed());
  const sc::DraftPolicy chain{sc::Drafting::fixed, 3, 0, {}, Drafted::sampled};
  double block = 0, standard = 0;
  // 100k prompts: the standard error of the difference in tokens per call is about 0.003.
  const auto fit = loop_fit(pair, p, chain, [](const float*) { return specverify::Block{}; }, 100000, &block);
  EXPECT_TRUE(fit.fits()) << fit.statistic << " df " << fit.df;
  loop_fit(pair, p, chain, [](const float*) { return specverify::Standard{}; }, 100000, &standard);
  std::printf("Markov V = 5, adversarial draft, K = 3: tokens per call Standard %.4f, Block %.4f\n", standard, block);
  EXPECT_GT(block, standard);
}
