// The rule comparison's components: KN n-gram model, cost model, quality metric, and a tiny
// end-to-end run of the decode loop.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "comparison/corpus.hpp"
#include "comparison/setup.hpp"

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
  sc::QualityContext c{{0.3f, 0.2f, 0.15f, 0.1f, 0.1f, 0.05f, 0.05f, 0.05f}, {}};
  c.q = {0.05f, 0.05f, 0.1f, 0.1f, 0.15f, 0.15f, 0.2f, 0.2f};
  c.p.insert(c.p.end(), c.p.begin(), c.p.end());
  const sc::DraftPolicy fixed{sc::Drafting::fixed, 1, 0};
  const auto standard = sc::measure_quality({c}, 8, 20000, 8, fixed, nullptr,
                                            [](const float*) { return specverify::Standard{}; }, 3);
  EXPECT_LT(standard.tv, 0.02);
  EXPECT_LT(standard.noise_floor, 0.02);
  // Greedy always emits argmax p: TV = 1 - p(argmax) = 0.7.
  const auto greedy = sc::measure_quality({c}, 8, 2000, 8, fixed, nullptr,
                                          [](const float*) { return specverify::Greedy{}; }, 3);
  EXPECT_NEAR(greedy.tv, 0.7, 1e-6);
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
  }
  // Deterministic from the seed.
  const auto again = sc::run_setting(pair, prompts, prompts, 1.0f, o, [](const std::string&) {});
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].tokens_per_call, again[i].tokens_per_call);
    EXPECT_EQ(rows[i].tv, again[i].tv);
  }
}
