// The logits row source at row level: the shared log and exp, the pre-pass (kept sets, values)
// against the long-double reference of the seven steps, the row operations through views
// (statistics and draws, by chi-square), coupled (Gumbel) sampling, and the reduced draft
// vocabulary map.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "reference_divergence.hpp"
#include "reference_sampling.hpp"
#include "specverify/core/logit_rows.hpp"
#include "specverify/cpu/logit_kernels.hpp"
#include "specverify/sample.hpp"
#include "support.hpp"

namespace specverify::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
using View = core::LogitView<float>;

/// A view over `row` (which must outlive it), optionally read through a target_to_draft map.
View prepare_row(const ReferenceRow& row, std::vector<float>& scratch,
                 const std::int32_t* target_to_draft = nullptr) {
  core::LogitRow<float> r;
  r.logits = row.logits.data();
  r.n = static_cast<std::int32_t>(row.logits.size());
  r.unconditional = row.unconditional.empty() ? nullptr : row.unconditional.data();
  r.guidance_scale = row.guidance_scale;
  r.allowed = row.allowed.empty() ? nullptr : row.allowed.data();
  r.target_to_draft = target_to_draft;
  r.params = row.params;
  scratch.assign(row.logits.size(), std::nanf(""));  // scratch content must not matter
  return cpu::prepare(r, scratch.data());
}

ReferenceRow random_row(std::int32_t V, std::uint64_t seed, SamplingParams params, double scale = 2.0) {
  std::mt19937_64 rng(seed);
  ReferenceRow row;
  for (double l : random_logits(V, rng, scale)) row.logits.push_back(static_cast<float>(l));
  row.params = params;
  return row;
}

/// One token's term of D(p, q) in long double (the definitions of docs/api.md "Divergence").
long double reference_divergence_term(Divergence d, long double p, long double q) {
  const long double m = (p + q) / 2;
  switch (d) {
    case Divergence::kl_target_draft: return reference::xlogy_ratio(p, q);
    case Divergence::kl_draft_target: return reference::xlogy_ratio(q, p);
    case Divergence::js: return (reference::xlogy_ratio(p, m) + reference::xlogy_ratio(q, m)) / 2;
    case Divergence::js_fsd: return (reference::xlogy_ratio(m, p) + reference::xlogy_ratio(m, q)) / 2;
    case Divergence::tv: break;
  }
  return std::fabs(p - q) / 2;
}

float uniform(std::mt19937_64& rng) { return static_cast<float>(rng() >> 40) * 0x1p-24f; }

/// Kept sets equal; values within the documented bound; log p within 1e-4.
void expect_matches_reference(const ReferenceRow& row, const View& view, bool guided = false) {
  ASSERT_TRUE(view.ok);
  const std::vector<long double> p = reference_probs(row);
  const std::vector<long double> g = reference_logits(row);
  const auto n = static_cast<std::int32_t>(p.size());
  const long double top = *std::max_element(g.begin(), g.end());
  const long double T = row.params.temperature;
  long double mean_a = 0;  // sum p |a|: how far the normaliser's weights lie below the top
  for (std::int32_t v = 0; v < n; ++v) {
    if (p[v] > 0 && T > 0) mean_a += p[v] * (top - g[v]) / T;
  }
  const long double p_max = *std::max_element(p.begin(), p.end());
  std::int32_t kept = 0;
  for (std::int32_t v = 0; v < n; ++v) {
    const float value = core::probability(view, v);
    // Kept tokens more than e^87 below the top have weight 0 (core::kExpCutoff); keep a margin
    // of e^0.01 either side of it, where the float argument may round across.
    const long double below = std::log(p_max / p[v]);
    if (p[v] > 0 && std::fabs(below + core::kExpCutoff) < 0.01L) continue;
    if (p[v] > 0 && below > -core::kExpCutoff) {
      ASSERT_EQ(value, 0.0f) << "token " << v << " below the cutoff";
      continue;
    }
    ASSERT_EQ(value > 0.0f, p[v] > 0) << "token " << v << " reference " << double(p[v]) << " got " << value;
    if (p[v] == 0) continue;
    ++kept;
    // Three roundings of a = (g - max) / T (the difference, 1/T, the product), the exp's ulp, the
    // normaliser (the same weights' errors, averaged), inv_norm and the product: see logit_rows.hpp.
    const long double a = T > 0 ? (top - g[v]) / T : 0;
    long double bound = 2e-7L * (a + mean_a) + 4e-7L;
    if (guided) bound += 1.2e-7L * (std::fabs(g[v]) + std::fabs(top)) / T;  // g's own rounding
    EXPECT_LE(std::fabs(value - p[v]) / p[v], bound) << "token " << v;
    EXPECT_LE(std::fabs(std::log(static_cast<long double>(value)) - std::log(p[v])), 1e-4L) << "token " << v;
  }
  EXPECT_GT(kept, 0);
}

// ------------------------------------------------------------------------------ the shared log

/// |shared_log(x) - log x| in units in the last place of log x (long double reference).
double log_ulp_error(double x) {
  const long double exact = std::log(static_cast<long double>(x));
  if (exact == 0.0L) return core::shared_log(x) == 0.0 ? 0.0 : HUGE_VAL;
  int exponent;
  std::frexp(exact, &exponent);
  return double(std::fabs(core::shared_log(x) - exact) / std::ldexp(1.0L, exponent - 53));
}

TEST(SharedLog, WithinItsUlpBoundOverADenseSweep) {
  double worst = 0;
  // Every 97th positive finite float (the probabilities of Coupled's keys), subnormals included.
  for (std::uint32_t b = 1; b < core::float_bits(kInf); b += 97) {
    worst = std::max(worst, log_ulp_error(core::bits_float(b)));
  }
  // The uniforms of the Gumbel noise, (w + 1/2) 2^-32, and -log of them.
  for (std::uint64_t w = 0; w < (std::uint64_t{1} << 32); w += 4099) {
    const double u = (static_cast<double>(w) + 0.5) * 0x1p-32;
    worst = std::max({worst, log_ulp_error(u), log_ulp_error(-core::shared_log(u))});
  }
  // Normal doubles of every exponent, and 1 +- small.
  std::mt19937_64 rng(17);
  for (int i = 0; i < 1000000; ++i) {
    const double x = core::bits_double(static_cast<std::int64_t>((rng() >> 12) | ((1 + rng() % 2046) << 52)));
    worst = std::max({worst, log_ulp_error(x), log_ulp_error(1.0 + (i - 500000) * 0x1p-40)});
  }
  EXPECT_LE(worst, core::kLogMaxUlp);
  EXPECT_GT(worst, 0.5);  // the sweep saw roundings: a test that could fail
  EXPECT_EQ(core::shared_log(1.0), 0.0);
  EXPECT_EQ(core::shared_log(2.0), 0x1.62e42fefa39efp-1);  // ln 2, correctly rounded
}

// A known answer, as Philox's: the bits of the Gumbel noise and of log p that Coupled's keys are
// made of, the same on every instruction set, compiler and backend. g++ 12 (-O0 to -O3, SSE2,
// AVX2 and AVX-512, -ffp-contract=fast) and clang 14 gave this hash alike; test_cuda_logits.cu
// checks the device's bits against the host's. A change of the shared log's operations changes
// Coupled's tokens: it must show here.
TEST(SharedLog, KnownAnswer) {
  std::uint64_t hash = 14695981039346656037ull;  // FNV-1a over the results' bits
  const auto add = [&](double v) { hash = (hash ^ static_cast<std::uint64_t>(core::double_bits(v))) * 1099511628211ull; };
  for (std::uint64_t w = 0; w < (std::uint64_t{1} << 32); w += 4099) {
    add(core::gumbel(static_cast<std::uint32_t>(w)));
    add(core::shared_log(double(core::bits_float(static_cast<std::uint32_t>(w >> 1) % core::float_bits(kInf) + 1))));
  }
  EXPECT_EQ(hash, 0xf1a9752ffb2f6742ull) << std::hex << hash;
}

// ------------------------------------------------------------------------------ the shared exp

TEST(ExpWeight, WithinItsUlpBoundAndMonotoneOverADenseSweep) {
  // Every 97th float in [-87, 0] (the exhaustive sweep is in logit_rows.hpp's comment).
  const std::uint32_t first = core::float_bits(-0.0f), last = core::float_bits(core::kExpCutoff);
  double worst = 0;
  float previous = 2.0f;
  for (std::uint32_t b = first; b <= last; b += 97) {
    const float a = core::bits_float(b);
    const float e = core::exp_weight(a);
    const long double exact = std::exp(static_cast<long double>(a));
    int exponent;
    std::frexp(exact, &exponent);
    worst = std::max(worst, double(std::fabs(e - exact) / std::ldexp(1.0L, exponent - 24)));
    ASSERT_LE(e, previous) << "not monotone at " << a;
    previous = e;
  }
  EXPECT_LE(worst, core::kExpMaxUlp);
  EXPECT_GT(worst, 0.5);  // the sweep saw roundings: a test that could fail
  EXPECT_EQ(core::exp_weight(0.0f), 1.0f);
  EXPECT_EQ(core::exp_weight(-0.0f), 1.0f);
  EXPECT_GE(core::exp_weight(core::kExpCutoff), FLT_MIN);
  EXPECT_EQ(core::exp_weight(std::nextafter(core::kExpCutoff, -kInf)), 0.0f);
  EXPECT_EQ(core::exp_weight(-kInf), 0.0f);
  EXPECT_EQ(core::exp_weight(std::nanf("")), 0.0f);
}

template <class Arch>
void expect_lanes_match_scalar() {
  using B = xsimd::batch<float, Arch>;
  constexpr std::uint32_t W = B::size;
  const std::uint32_t first = core::float_bits(-0.0f), last = core::float_bits(-90.0f);
  alignas(64) float in[W], out[W];
  std::uint64_t compared = 0;
  const std::uint32_t stride = kSanitized ? 13 * 8 : 13;  // every 13th float (repeats: an 8th of them)
  for (std::uint32_t b = first; b <= last; b += stride * W) {
    for (std::uint32_t l = 0; l < W; ++l) in[l] = core::bits_float(std::min(last, b + stride * l));
    cpu::logits_detail::exp_weight<Arch>(B::load_aligned(in)).store_aligned(out);
    for (std::uint32_t l = 0; l < W; ++l) {
      ASSERT_EQ(core::float_bits(out[l]), core::float_bits(core::exp_weight(in[l]))) << in[l];
      ++compared;
    }
  }
  EXPECT_GT(compared, 80'000'000u / stride);
}

TEST(ExpWeight, LanesBitIdenticalToScalar) { expect_lanes_match_scalar<cpu::DefaultArch>(); }
#if XSIMD_WITH_FMA3_AVX2
TEST(ExpWeight, LanesBitIdenticalToScalarFma3Avx2) { expect_lanes_match_scalar<xsimd::fma3<xsimd::avx2>>(); }
#endif
#if XSIMD_WITH_SSE2
TEST(ExpWeight, LanesBitIdenticalToScalarWithoutFma) { expect_lanes_match_scalar<xsimd::sse2>(); }
#endif

// ------------------------------------------------------------------------------ parameters

TEST(SamplingParams, CheckNamesFieldAndValue) {
  EXPECT_FALSE(check_sampling_params(SamplingParams{}));
  EXPECT_FALSE(check_sampling_params(SamplingParams{0.0f, 5, 1.0f, 1.0f}));
  const auto named = [](SamplingParams s) { return std::string(check_sampling_params(s).what); };
  EXPECT_EQ(named({-0.5f, 0, 1, 0}), "temperature");
  EXPECT_EQ(named({kInf, 0, 1, 0}), "temperature");
  EXPECT_EQ(named({std::nanf(""), 0, 1, 0}), "temperature");
  EXPECT_EQ(named({1, -1, 1, 0}), "top_k");
  EXPECT_EQ(named({1, 0, 0.0f, 0}), "top_p");
  EXPECT_EQ(named({1, 0, 1.5f, 0}), "top_p");
  EXPECT_EQ(named({1, 0, std::nanf(""), 0}), "top_p");
  EXPECT_EQ(named({1, 0, 1, -0.1f}), "min_p");
  EXPECT_EQ(named({1, 0, 1, 1.1f}), "min_p");
  EXPECT_EQ(check_sampling_params({1, 0, 1.5f, 0}).value, 1.5);
}

// ------------------------------------------------------------------------------ kept sets and values

struct Case {
  const char* name;
  SamplingParams params;
};

const Case kCases[] = {
    {"temperature", {0.8f, 0, 1.0f, 0.0f}},     {"hot", {2.5f, 0, 1.0f, 0.0f}},
    {"top_k", {1.0f, 10, 1.0f, 0.0f}},          {"top_p", {1.0f, 0, 0.9f, 0.0f}},
    {"min_p", {1.0f, 0, 1.0f, 0.05f}},          {"top_k_top_p", {0.8f, 50, 0.9f, 0.0f}},
    {"top_p_min_p", {0.7f, 0, 0.8f, 0.1f}},     {"all", {1.3f, 20, 0.95f, 0.02f}},
    {"top_k_over_n", {1.0f, 100000, 1.0f, 0.0f}}, {"greedy_with_filters", {0.0f, 5, 0.5f, 0.3f}},
};

TEST(LogitRows, KeptSetsAndValuesMatchReference) {
  for (std::int32_t V : {5, 64, 1000, 128256}) {
    for (const Case& c : kCases) {
      SCOPED_TRACE(std::string(c.name) + " V=" + std::to_string(V));
      const ReferenceRow row = random_row(V, 7 + V, c.params);
      std::vector<float> scratch;
      expect_matches_reference(row, prepare_row(row, scratch));
    }
  }
}

TEST(LogitRows, TopKKeepsEveryTieAtTheBoundary) {
  ReferenceRow row{{1, 5, 3, 4, 3, 2, 3, 0, 3, -1}, {1.0f, 3, 1.0f, 0.0f}, {}, 1.0f, {}};
  std::vector<float> scratch;
  const View view = prepare_row(row, scratch);
  expect_matches_reference(row, view);
  std::int32_t kept = 0;
  for (std::int32_t v = 0; v < 10; ++v) kept += core::probability(view, v) > 0;
  EXPECT_EQ(kept, 6);  // 5, 4 and the four 3s
  EXPECT_EQ(view.threshold, 3.0f);
}

TEST(LogitRows, TopPKeepsEveryTieAtTheBoundary) {
  // p = (e^2, e, e, e, 1, ...) / Z: the top token holds ~0.36; reaching 0.5 takes one of the three
  // equal tokens, and the tie keeps all three.
  ReferenceRow row{{0, 1, 2, 1, 0, 1, 0, 0}, {1.0f, 0, 0.5f, 0.0f}, {}, 1.0f, {}};
  std::vector<float> scratch;
  const View view = prepare_row(row, scratch);
  expect_matches_reference(row, view);
  std::int32_t kept = 0;
  for (std::int32_t v = 0; v < 8; ++v) kept += core::probability(view, v) > 0;
  EXPECT_EQ(kept, 4);
}

TEST(LogitRows, TopKStreamingSelectionInAnyOrder) {
  // The pre-pass collects candidates against a rising pivot. Ascending rows (every value clears
  // it: many compactions), descending rows (the top k come first), ties across compactions.
  const std::int32_t V = 20000;
  for (int order = 0; order < 3; ++order) {
    SCOPED_TRACE(order);
    ReferenceRow row = random_row(V, 3, {1.0f, 50, 1.0f, 0.0f}, 0.5);
    if (order < 2) {
      std::sort(row.logits.begin(), row.logits.end());
      if (order == 1) std::reverse(row.logits.begin(), row.logits.end());
    } else {
      for (std::int32_t v = 0; v < V; ++v) row.logits[static_cast<std::size_t>(v)] = static_cast<float>(v % 40) / 8.0f;
    }
    std::vector<float> scratch;
    expect_matches_reference(row, prepare_row(row, scratch));
  }
}

TEST(LogitRows, TopPOverAWideRowSelectsOnMass) {
  // Flat logits: top_p = 0.9 keeps tens of thousands of tokens (the quickselect path).
  const ReferenceRow row = random_row(50000, 11, {1.0f, 0, 0.9f, 0.0f}, 0.3);
  std::vector<float> scratch;
  const View view = prepare_row(row, scratch);
  expect_matches_reference(row, view);
  std::int32_t kept = 0;
  for (std::int32_t v = 0; v < 50000; ++v) kept += core::probability(view, v) > 0;
  EXPECT_GT(kept, 4096);  // well past the sorted base case (2048)
}

TEST(LogitRows, GreedyIsOneHotOnTheLowestArgmax) {
  ReferenceRow row{{1, 7, 3, 7, -kInf, 7}, {0.0f, 0, 1.0f, 0.0f}, {}, 1.0f, {}};
  std::vector<float> scratch;
  const View view = prepare_row(row, scratch);
  expect_matches_reference(row, view);
  EXPECT_EQ(view.argmax, 1);
  const cpu::LogitRows<> rows{6};
  EXPECT_EQ(rows.argmax(view).value, 1);
  EXPECT_EQ(rows.max(view).value, 1.0f);
  EXPECT_EQ(rows.draw_target(view, 0.999f).value, 1);
  EXPECT_EQ(rows.gumbel_argmax(view, 5, 9).value, 1);
  EXPECT_EQ(rows.entropy(view).value, 0.0f);
  // Sampled rows keep ties too: T > 0 splits the mass between the three 7s.
  row.params.temperature = 1.0f;
  const View sampled = prepare_row(row, scratch);
  EXPECT_EQ(core::probability(sampled, 1), core::probability(sampled, 5));
  EXPECT_EQ(rows.argmax(sampled).value, 1);
}

TEST(LogitRows, GuidanceAndBitmask) {
  // l and u are multiples of 1/8 and s = 1.5, so u + s (l - u) is exact in float and the
  // reference's kept set cannot differ by rounding.
  std::mt19937_64 rng(5);
  const std::int32_t V = 300;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    ReferenceRow row;
    row.params = c.params;
    row.guidance_scale = 1.5f;
    std::uniform_int_distribution<int> eighths(-40, 40);
    for (std::int32_t v = 0; v < V; ++v) {
      row.logits.push_back(eighths(rng) / 8.0f);
      row.unconditional.push_back(eighths(rng) / 8.0f);
    }
    row.unconditional[7] = -kInf;  // masked by the unconditional row
    row.allowed.assign((V + 31) / 32, 0u);
    for (std::int32_t v = 0; v < V; ++v) {
      if (rng() % 3) row.allowed[v / 32] |= 1u << (v % 32);
    }
    std::vector<float> scratch;
    const View view = prepare_row(row, scratch);
    expect_matches_reference(row, view, true);
    EXPECT_EQ(core::probability(view, 7), 0.0f);
  }
}

TEST(LogitRows, EveryTokenMaskedHasNoMass) {
  ReferenceRow row = random_row(100, 1, {1.0f, 0, 0.9f, 0.0f});
  row.allowed.assign(4, 0u);
  std::vector<float> scratch;
  const View view = prepare_row(row, scratch);
  EXPECT_TRUE(view.ok);
  EXPECT_FALSE(view.has_mass());
  const cpu::LogitRows<> rows{100};
  EXPECT_EQ(rows.draw_target(view, 0.5f).value, -1);
  EXPECT_TRUE(rows.draw_target(view, 0.5f).ok);
  EXPECT_EQ(rows.argmax(view).value, -1);
  ReferenceRow all_inf{std::vector<float>(40, -kInf), {0.0f, 0, 1.0f, 0.0f}, {}, 1.0f, {}};
  EXPECT_FALSE(prepare_row(all_inf, scratch).has_mass());
}

TEST(LogitRows, NanAndPlusInfAreInvalidMinusInfIsMasked) {
  for (std::int32_t at : {0, 17, 99}) {  // body and tail lanes
    for (float bad : {std::nanf(""), kInf, -std::nanf("")}) {
      for (const Case& c : kCases) {
        ReferenceRow row = random_row(100, 2, c.params);
        row.logits[static_cast<std::size_t>(at)] = bad;
        std::vector<float> scratch;
        EXPECT_FALSE(prepare_row(row, scratch).ok) << c.name << " at " << at << " value " << bad;
      }
    }
    ReferenceRow row = random_row(100, 2, {1.0f, 0, 1.0f, 0.0f});
    row.logits[static_cast<std::size_t>(at)] = -kInf;
    std::vector<float> scratch;
    const View view = prepare_row(row, scratch);
    EXPECT_TRUE(view.ok);
    EXPECT_EQ(core::probability(view, at), 0.0f);
  }
  // The unconditional row is read too, and guidance that overflows is reported.
  ReferenceRow row = random_row(50, 4, {1.0f, 0, 1.0f, 0.0f});
  row.unconditional.assign(50, 0.0f);
  row.unconditional[20] = std::nanf("");
  std::vector<float> scratch;
  EXPECT_FALSE(prepare_row(row, scratch).ok);
  row.unconditional[20] = -3e38f;
  row.logits[20] = 3e38f;
  row.guidance_scale = 2.0f;
  EXPECT_FALSE(prepare_row(row, scratch).ok);
}

TEST(LogitRows, VectorLanesMatchScalarValues) {
  // What the draws sum (lanes) and what value() returns (scalar) are the same bits.
  for (const Case& c : kCases) {
    ReferenceRow row = random_row(203, 9, c.params);
    row.allowed.assign(7, 0xfff7fffeu);
    std::vector<float> scratch;
    const View view = prepare_row(row, scratch);
    using B = xsimd::batch<float>;
    alignas(64) float lanes[B::size];
    for (std::int32_t v = 0; v + static_cast<std::int32_t>(B::size) <= 203; v += B::size) {
      cpu::logits_detail::probs<cpu::DefaultArch>(view, v).store_aligned(lanes);
      for (std::int32_t l = 0; l < static_cast<std::int32_t>(B::size); ++l) {
        ASSERT_EQ(core::float_bits(lanes[l]), core::float_bits(core::probability(view, v + l))) << c.name;
      }
    }
  }
}

// ------------------------------------------------------------------------------ statistics

TEST(LogitRows, MaxEntropyAndDivergencesMatchReference) {
  const std::int32_t V = 3000;
  const ReferenceRow target = random_row(V, 21, {0.9f, 0, 0.95f, 0.0f});
  ReferenceRow draft = random_row(V, 22, {1.1f, 200, 1.0f, 0.0f});
  std::vector<float> s1, s2;
  const View p = prepare_row(target, s1), q = prepare_row(draft, s2);
  const std::vector<long double> pr = reference_probs(target), qr = reference_probs(draft);
  const cpu::LogitRows<> rows{V};
  EXPECT_NEAR(rows.max(p).value, double(*std::max_element(pr.begin(), pr.end())), 1e-6);
  long double h = 0;
  for (long double x : pr) h += x > 0 ? -x * std::log(x) : 0;
  EXPECT_NEAR(rows.entropy(p).value, double(h), 1e-5 * double(h));
  for (Divergence d : {Divergence::kl_target_draft, Divergence::kl_draft_target, Divergence::js,
                       Divergence::js_fsd, Divergence::tv}) {
    long double expected = 0;
    for (std::int32_t v = 0; v < V; ++v) expected += reference_divergence_term(d, pr[v], qr[v]);
    const cpu::Checked<float> got = rows.divergence(d, p, &q, -1);
    EXPECT_TRUE(got.ok);
    if (std::isinf(expected)) {
      EXPECT_TRUE(std::isinf(got.value)) << int(d);
    } else {
      EXPECT_NEAR(got.value, double(expected), 1e-5 * double(expected) + 1e-6) << int(d);
    }
    // One-hot draft at x.
    const std::int32_t x = p.argmax;
    long double one_hot = 0;
    for (std::int32_t v = 0; v < V; ++v) one_hot += reference_divergence_term(d, pr[v], v == x ? 1.0L : 0.0L);
    const cpu::Checked<float> oh = rows.divergence(d, p, nullptr, x);
    if (std::isinf(one_hot)) {
      EXPECT_TRUE(std::isinf(oh.value)) << int(d);
    } else {
      EXPECT_NEAR(oh.value, double(one_hot), 1e-5 * double(one_hot) + 1e-6) << int(d);
    }
  }
}

// ------------------------------------------------------------------------------ draws

constexpr std::int64_t kDraws = repeats(200000);

/// Chi-square fit of counts to p; a distribution with a single token (df 0) must get every draw.
::testing::AssertionResult fits(const std::vector<std::int64_t>& counts, const std::vector<float>& p) {
  std::int32_t support = 0;
  for (float x : p) support += x > 0;
  if (support == 1) {
    const auto at = std::max_element(p.begin(), p.end()) - p.begin();
    const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
    if (counts[static_cast<std::size_t>(at)] == total) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "one-token distribution, draws elsewhere";
  }
  const ChiSquare fit = chi_square(counts, p);
  if (fit.fits()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "chi2 " << fit.statistic << " df " << fit.df;
}

std::vector<std::int64_t> count_draws(std::int32_t V, const std::function<std::int32_t(float)>& draw) {
  std::mt19937_64 rng(99);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(V));
  for (std::int64_t t = 0; t < kDraws; ++t) {
    const std::int32_t token = draw(uniform(rng));
    EXPECT_GE(token, 0);
    if (token < 0 || token >= V) return counts;
    ++counts[static_cast<std::size_t>(token)];
  }
  return counts;
}

std::vector<float> residual(const std::vector<long double>& p, const std::vector<long double>& q) {
  std::vector<float> r(p.size());
  for (std::size_t v = 0; v < p.size(); ++v) r[v] = static_cast<float>(std::max(p[v] - q[v], 0.0L));
  return r;
}

TEST(LogitDraws, TargetFollowsReference) {
  const std::int32_t V = 48;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const ReferenceRow row = random_row(V, 31, c.params, 1.0);
    std::vector<float> scratch;
    const View view = prepare_row(row, scratch);
    const cpu::LogitRows<> rows{V};
    const auto counts = count_draws(V, [&](float u) { return rows.draw_target(view, u).value; });
    EXPECT_TRUE(fits(counts, as_floats(reference_probs(row))));
  }
}

TEST(LogitDraws, NegativeControlSeesAWrongTemperatureOrFilter) {
  const std::int32_t V = 48;
  const ReferenceRow row = random_row(V, 31, {0.8f, 0, 1.0f, 0.0f}, 1.0);
  std::vector<float> scratch;
  const View view = prepare_row(row, scratch);
  const cpu::LogitRows<> rows{V};
  const auto counts = count_draws(V, [&](float u) { return rows.draw_target(view, u).value; });
  for (SamplingParams wrong : {SamplingParams{0.9f, 0, 1.0f, 0.0f}, SamplingParams{0.8f, 0, 0.95f, 0.0f}}) {
    ReferenceRow other = row;
    other.params = wrong;
    EXPECT_FALSE(chi_square(counts, as_floats(reference_probs(other))).fits());
  }
}

TEST(LogitDraws, ResidualFollowsReferenceWithAdversarialDrafts) {
  const std::int32_t V = 40;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const ReferenceRow target = random_row(V, 41, c.params, 1.0);
    ReferenceRow draft = target;  // reversed target, sampled with other parameters
    std::reverse(draft.logits.begin(), draft.logits.end());
    draft.params = {1.2f, 30, 0.97f, 0.0f};
    std::vector<float> s1, s2;
    const View p = prepare_row(target, s1), q = prepare_row(draft, s2);
    const std::vector<float> expected = residual(reference_probs(target), reference_probs(draft));
    if (std::accumulate(expected.begin(), expected.end(), 0.0) < 1e-3) continue;
    const cpu::LogitRows<> rows{V};
    const auto counts = count_draws(V, [&](float u) { return rows.draw_residual(p, &q, -1, u).value; });
    EXPECT_TRUE(fits(counts, expected));
    // One-hot draft at the target's argmax: p with that token removed.
    const std::int32_t x = p.argmax;
    std::vector<long double> one_hot(static_cast<std::size_t>(V), 0.0L);
    one_hot[static_cast<std::size_t>(x)] = 1.0L;
    const std::vector<float> expected_oh = residual(reference_probs(target), one_hot);
    if (std::accumulate(expected_oh.begin(), expected_oh.end(), 0.0) < 1e-3) continue;
    const auto counts_oh = count_draws(V, [&](float u) { return rows.draw_residual(p, nullptr, x, u).value; });
    EXPECT_TRUE(fits(counts_oh, expected_oh));
  }
}

TEST(LogitDraws, ResidualOverAReducedDraftVocabulary) {
  const std::int32_t V = 64, Vd = 24;
  const ReferenceRow target = random_row(V, 51, {0.9f, 0, 1.0f, 0.0f}, 1.0);
  // Draft ids map to every other target id from the top (reversed order: adversarial).
  std::vector<std::int32_t> draft_to_target(static_cast<std::size_t>(Vd)), target_to_draft(static_cast<std::size_t>(V));
  for (std::int32_t d = 0; d < Vd; ++d) draft_to_target[static_cast<std::size_t>(d)] = V - 1 - 2 * d;
  ASSERT_FALSE(core::build_target_to_draft(draft_to_target.data(), Vd, V, target_to_draft.data()));
  ReferenceRow draft = random_row(Vd, 52, {1.0f, 0, 0.95f, 0.0f}, 1.0);
  std::vector<float> s1, s2;
  const View p = prepare_row(target, s1), q = prepare_row(draft, s2, target_to_draft.data());
  const std::vector<long double> qd = reference_probs(draft);
  std::vector<long double> q_target(static_cast<std::size_t>(V), 0.0L);
  for (std::int32_t d = 0; d < Vd; ++d) q_target[static_cast<std::size_t>(draft_to_target[static_cast<std::size_t>(d)])] = qd[static_cast<std::size_t>(d)];
  for (std::int32_t v = 0; v < V; ++v) {
    EXPECT_NEAR(core::probability(q, v), double(q_target[static_cast<std::size_t>(v)]), 1e-6) << v;
  }
  const cpu::LogitRows<> rows{V};
  const auto counts = count_draws(V, [&](float u) { return rows.draw_residual(p, &q, -1, u).value; });
  EXPECT_TRUE(fits(counts, residual(reference_probs(target), q_target)));
}

TEST(LogitDraws, GreedyDraftIsOneHotAtItsArgmax) {
  const std::int32_t V = 30;
  const ReferenceRow target = random_row(V, 61, {1.0f, 0, 1.0f, 0.0f}, 1.0);
  ReferenceRow draft = random_row(V, 62, {0.0f, 0, 1.0f, 0.0f});
  std::vector<float> s1, s2, s3, s4;  // a view reads its scratch row: one each
  const View p = prepare_row(target, s1), q = prepare_row(draft, s2);
  const cpu::LogitRows<> rows{V};
  std::vector<long double> one_hot(static_cast<std::size_t>(V), 0.0L);
  one_hot[static_cast<std::size_t>(q.argmax)] = 1.0L;
  const auto counts = count_draws(V, [&](float u) { return rows.draw_residual(p, &q, -1, u).value; });
  EXPECT_TRUE(fits(counts, residual(reference_probs(target), one_hot)));
  // A greedy target against a draft holding all its mass on the same token: no residual mass.
  draft.params.temperature = 0.0f;
  ReferenceRow greedy_target = draft;
  const View pg = prepare_row(greedy_target, s3), qg = prepare_row(draft, s4);
  EXPECT_EQ(rows.draw_residual(pg, &qg, -1, 0.3f).value, -1);
  EXPECT_EQ(rows.draw_residual(pg, &p, -1, 0.3f).value, pg.argmax);
}

TEST(LogitDraws, LargeRowsDrawAcrossChunks) {
  // V = 128256 with top_k: the draw's chunk search with most chunks empty; T alone: every chunk.
  const std::int32_t V = 128256;
  // Dense (T alone), listed (few kept) and filtered but not listed (top_k 2000 > kMaxListed).
  for (SamplingParams params : {SamplingParams{0.8f, 0, 1.0f, 0.0f}, SamplingParams{0.8f, 8, 0.9f, 0.0f},
                                SamplingParams{1.0f, 2000, 1.0f, 0.0f}}) {
    const ReferenceRow row = random_row(V, 71, params, 1.5);
    std::vector<float> scratch;
    const View view = prepare_row(row, scratch);
    const std::vector<long double> p = reference_probs(row);
    const cpu::LogitRows<> rows{V};
    std::mt19937_64 rng(3);
    // Bucket the tokens into 64 groups of ids: a chi-square over groups at 20k draws.
    std::vector<std::int64_t> counts(64);
    std::vector<float> expected(64);
    for (std::int32_t v = 0; v < V; ++v) expected[static_cast<std::size_t>(v % 64)] += static_cast<float>(p[static_cast<std::size_t>(v)]);
    for (std::int64_t t = 0; t < repeats(20000); ++t) {
      const std::int32_t token = rows.draw_target(view, uniform(rng)).value;
      ASSERT_GE(token, 0);
      ASSERT_GT(p[static_cast<std::size_t>(token)], 0);
      ++counts[static_cast<std::size_t>(token % 64)];
    }
    EXPECT_TRUE(fits(counts, expected));
  }
}

TEST(LogitDraws, KeptWeightsGiveTheDefinitionsBitsAndDraws) {
  // The pre-pass keeps the weights in scratch (one weights pass after the read, for T alone, min_p
  // and large kept sets). Whatever is kept, value() is core::probability bit for bit, and the
  // draws are the library's draw over those floats as probability rows, token for token.
  for (const std::int32_t V : {5000, 128256}) {
    for (const std::int32_t at : {3, V / 2 + 17, V - 1}) {  // the max in the first, a middle, the last block
      for (const SamplingParams params : {SamplingParams{0.8f, 0, 1.0f, 0.0f}, SamplingParams{1.2f, 0, 1.0f, 1e-4f},
                                          SamplingParams{1.0f, 2000, 1.0f, 0.0f}}) {
        SCOPED_TRACE(::testing::Message() << "V " << V << " max at " << at << " T " << params.temperature);
        ReferenceRow target = random_row(V, 90 + std::uint64_t(at), params, 0.7);
        ReferenceRow draft = random_row(V, 190 + std::uint64_t(at), params, 0.7);
        target.logits[std::size_t(at)] = *std::max_element(target.logits.begin(), target.logits.end()) + 1.0f;
        std::vector<float> s1, s2;
        const View p = prepare_row(target, s1), q = prepare_row(draft, s2);
        ASSERT_TRUE(p.weights != nullptr) << "the view keeps its weights";
        const cpu::LogitRows<> rows{V};
        std::vector<float> pf(static_cast<std::size_t>(V)), qf(static_cast<std::size_t>(V));
        for (std::int32_t v = 0; v < V; ++v) {
          pf[std::size_t(v)] = rows.value(p, v);
          qf[std::size_t(v)] = rows.value(q, v);
          ASSERT_EQ(core::float_bits(pf[std::size_t(v)]), core::float_bits(core::probability(p, v))) << "token " << v;
          ASSERT_EQ(core::float_bits(qf[std::size_t(v)]), core::float_bits(core::probability(q, v))) << "token " << v;
        }
        std::mt19937_64 rng(7);
        for (std::int64_t t = 0; t < repeats(200); ++t) {
          const float u = uniform(rng);
          ASSERT_EQ(rows.draw_target(p, u).value, cpu::draw(cpu::Weights::target(pf.data(), V), u).value) << "u " << u;
          ASSERT_EQ(rows.draw_residual(p, &q, -1, u).value,
                    cpu::draw(cpu::Weights::residual(pf.data(), qf.data(), -1, V), u).value) << "u " << u;
          const std::int32_t x = at;  // a one-hot draft at the max: most of the residual's mass moves
          ASSERT_EQ(rows.draw_residual(p, nullptr, x, u).value,
                    cpu::draw(cpu::Weights::residual(pf.data(), nullptr, x, V), u).value) << "u " << u;
        }
      }
    }
  }
}

// ------------------------------------------------------------------------------ coupled sampling

TEST(Sample, FollowsReferenceOverPositions) {
  const std::int32_t V = 32;
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const ReferenceRow row = random_row(V, 81, c.params, 1.0);
    std::vector<std::int64_t> counts(static_cast<std::size_t>(V));
    for (std::int64_t position = 0; position < kDraws; ++position) {
      ++counts[static_cast<std::size_t>(specverify::sample(row.logits.data(), V, c.params, 12345, position))];
    }
    EXPECT_TRUE(fits(counts, as_floats(reference_probs(row))));
  }
}

TEST(Sample, OverSeedsAndAWideRow) {
  const std::int32_t V = 128256;
  const ReferenceRow row = random_row(V, 82, {1.0f, 40, 1.0f, 0.0f}, 2.0);
  const std::vector<long double> p = reference_probs(row);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(V));
  for (std::uint64_t seed = 0; seed < std::uint64_t(repeats(20000)); ++seed) {
    ++counts[static_cast<std::size_t>(specverify::sample(row.logits.data(), V, row.params, seed, 77))];
  }
  EXPECT_TRUE(fits(counts, as_floats(p)));
}

TEST(Sample, DeterministicInItsKeyAlone) {
  const ReferenceRow row = random_row(1000, 83, {1.0f, 0, 1.0f, 0.0f}, 0.5);
  std::int32_t differ = 0;
  for (std::int64_t position = 0; position < 200; ++position) {
    const std::int32_t a = specverify::sample(row.logits.data(), 1000, row.params, 7, position);
    EXPECT_EQ(a, specverify::sample(row.logits.data(), 1000, row.params, 7, position));
    differ += a != specverify::sample(row.logits.data(), 1000, row.params, 8, position);
  }
  EXPECT_GT(differ, 150);  // a flat row: another seed gives another token almost always
  // Greedy: the argmax whatever the key.
  const ReferenceRow greedy = random_row(1000, 84, {0.0f, 0, 1.0f, 0.0f});
  const std::int32_t top = static_cast<std::int32_t>(
      std::max_element(greedy.logits.begin(), greedy.logits.end()) - greedy.logits.begin());
  for (std::int64_t position = 0; position < 20; ++position) {
    EXPECT_EQ(specverify::sample(greedy.logits.data(), 1000, greedy.params, 99, position), top);
  }
}

TEST(Sample, RejectsBadInput) {
  std::vector<float> logits(10, 0.0f);
  EXPECT_THROW(specverify::sample(nullptr, 10, {}, 0, 0), invalid_input);
  EXPECT_THROW(specverify::sample(logits.data(), 0, {}, 0, 0), invalid_input);
  EXPECT_THROW(specverify::sample(logits.data(), 10, {1.0f, 0, 0.0f, 0.0f}, 0, 0), invalid_input);
  logits[3] = std::nanf("");
  try {
    specverify::sample(logits.data(), 10, {}, 0, 5);
    ADD_FAILURE() << "NaN logit accepted";
  } catch (const invalid_input& e) {
    EXPECT_NE(std::string(e.what()).find("token 3"), std::string::npos) << e.what();
  }
  std::vector<float> masked(10, -kInf);
  EXPECT_THROW(specverify::sample(masked.data(), 10, {}, 0, 0), invalid_input);
}

TEST(Sample, GumbelOverProbabilityRowsFollowsP) {
  const std::int32_t V = 32;
  std::mt19937_64 rng(91);
  std::vector<float> p = random_distribution(V, rng, 1.0);
  p[5] = 0.0f;  // never drawn
  std::vector<std::int64_t> counts(static_cast<std::size_t>(V));
  for (std::int64_t position = 0; position < kDraws; ++position) {
    const cpu::Checked<std::int32_t> t = cpu::gumbel_argmax(p.data(), V, 3, position);
    ASSERT_TRUE(t.ok);
    ++counts[static_cast<std::size_t>(t.value)];
  }
  EXPECT_EQ(counts[5], 0);
  EXPECT_TRUE(fits(counts, p));
  p[9] = -0.5f;
  EXPECT_FALSE(cpu::gumbel_argmax(p.data(), V, 3, 0).ok);
}

// ------------------------------------------------------------------------------ draft map

TEST(DraftMap, ValidOutOfRangeAndNotInjective) {
  std::vector<std::int32_t> inverse(10);
  const std::int32_t good[] = {9, 0, 4};
  EXPECT_FALSE(core::build_target_to_draft(good, 3, 10, inverse.data()));
  EXPECT_EQ(inverse[9], 0);
  EXPECT_EQ(inverse[4], 2);
  EXPECT_EQ(inverse[5], -1);
  const std::int32_t outside[] = {1, 10, 2};
  const core::DraftMapFault f1 = core::build_target_to_draft(outside, 3, 10, inverse.data());
  ASSERT_TRUE(f1);
  EXPECT_EQ(f1.entry, 1);
  EXPECT_EQ(f1.value, 10);
  const std::int32_t negative[] = {-1};
  EXPECT_EQ(core::build_target_to_draft(negative, 1, 10, inverse.data()).entry, 0);
  const std::int32_t twice[] = {3, 5, 3};
  const core::DraftMapFault f2 = core::build_target_to_draft(twice, 3, 10, inverse.data());
  ASSERT_TRUE(f2);
  EXPECT_EQ(f2.entry, 2);
  EXPECT_EQ(f2.value, 3);
  EXPECT_NE(std::string(f1.what), std::string(f2.what));
}

}  // namespace
}  // namespace specverify::testing
