// core::FixedSum and its lane form cpu::FixedLanes: every term rounded to the nearest multiple of
// 2^-80, the multiples added exactly. Checked against an independent 128-bit reference term by
// term, against long double sums, and under random splits of a row (1 to 64 parts, merged in
// random order), where every split must give the same words. The lane form is run at every
// SIMD width this build has (SSE2, AVX2, AVX-512), which must all agree with the scalar one.
#include <gtest/gtest.h>

#include <specverify/core/fixed_sum.hpp>
#include <specverify/cpu/draw.hpp>
#include <specverify/cpu/fixed_lanes.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace sv = specverify;
using sv::core::FixedSum;

namespace {

__extension__ typedef __int128 i128;  // exact reference arithmetic

/// round(t 2^80), ties to even, from t's exact binary form: the reference FixedSum must match.
i128 reference_units(double t) {
  if (t == 0.0) return 0;
  int e = 0;
  const double m = std::frexp(std::fabs(t), &e);           // |t| = m 2^e, m in [1/2, 1)
  const auto mant = static_cast<i128>(std::ldexp(m, 53));  // exact: 53-bit integer
  const int shift = e - 53 + 80;                           // |t| 2^80 = mant 2^shift
  i128 r;
  if (shift >= 0) {
    r = mant << shift;
  } else if (shift < -60) {
    r = 0;
  } else {
    const i128 q = mant >> -shift, rem = mant - (q << -shift), half = i128{1} << (-shift - 1);
    r = rem > half || (rem == half && (q & 1)) ? q + 1 : q;
  }
  return t < 0 ? -r : r;
}

i128 units(const FixedSum& s) { return static_cast<i128>(s.hi) * (i128{1} << 40) + s.lo; }  // hi may be negative

/// Terms of every kind a row sum meets: probabilities, softmax-like heavy tails, tiny and
/// subnormal values, values near the domain's edge, and signed terms (divergences).
std::vector<double> terms(std::mt19937_64& rng, int kind, std::size_t n) {
  std::vector<double> t(n);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  std::normal_distribution<double> normal(0.0, 3.0);
  for (double& x : t) {
    switch (kind) {
      case 0: x = u01(rng) / static_cast<double>(n); break;
      case 1: x = static_cast<float>(std::exp(normal(rng) - 12.0)); break;
      case 2: x = std::ldexp(u01(rng), -static_cast<int>(rng() % 140)); break;
      case 3: x = u01(rng) * 1023.0 / 8.0; break;
      default: x = normal(rng) * std::ldexp(1.0, -static_cast<int>(rng() % 30)); break;
    }
  }
  return t;
}

}  // namespace

TEST(FixedSum, EachTermIsRoundedOnceToTwoToTheMinus80) {
  std::mt19937_64 rng(1);
  for (int kind = 0; kind < 5; ++kind) {
    for (double t : terms(rng, kind, 20000)) {
      FixedSum s;
      s.add(t);
      ASSERT_EQ(units(s), reference_units(t)) << "t " << t;
    }
  }
  // Ties go to even: 2^-81 rounds to 0, 3 2^-81 to 2 2^-80 (units 2), and halves of odd units up.
  for (const double t : {0x1p-81, 3 * 0x1p-81, 5 * 0x1p-81, -3 * 0x1p-81, 0x1p-41 + 0x1p-81}) {
    FixedSum s;
    s.add(t);
    EXPECT_EQ(units(s), reference_units(t)) << "t " << t;
  }
}

TEST(FixedSum, SumsAreExactIntegersAndNearTheLongDoubleSum) {
  std::mt19937_64 rng(2);
  for (int kind = 0; kind < 5; ++kind) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{128256}}) {
      const std::vector<double> t = terms(rng, kind, n);
      FixedSum s;
      i128 expected = 0;
      long double exact = 0.0L;
      for (double x : t) {
        s.add(x);
        expected += reference_units(x);
        exact += static_cast<long double>(x);
      }
      EXPECT_EQ(units(s), expected);
      // n roundings of at most 2^-81 each, then value()'s own (relative 2^-52 at most).
      const long double bound = static_cast<long double>(n) * 0x1p-81L + std::fabs(exact) * 0x1p-52L;
      EXPECT_LE(std::fabs(static_cast<long double>(s.value()) - exact), bound) << "kind " << kind << " n " << n;
    }
  }
}

TEST(FixedSum, AnySplitMergedInAnyOrderGivesTheSameWords) {
  std::mt19937_64 rng(3);
  for (int kind = 0; kind < 5; ++kind) {
    const std::vector<double> t = terms(rng, kind, 50000);
    FixedSum whole;
    for (double x : t) whole.add(x);
    for (int trial = 0; trial < 40; ++trial) {
      const int parts = 1 + static_cast<int>(rng() % 64);
      std::vector<std::size_t> cuts{0, t.size()};
      for (int c = 1; c < parts; ++c) cuts.push_back(rng() % t.size());
      std::sort(cuts.begin(), cuts.end());
      std::vector<FixedSum> slices;
      for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
        FixedSum s;
        for (std::size_t i = cuts[c]; i < cuts[c + 1]; ++i) s.add(t[i]);
        slices.push_back(s);
      }
      std::shuffle(slices.begin(), slices.end(), rng);
      FixedSum merged;
      for (const FixedSum& s : slices) merged.merge(s);
      ASSERT_EQ(merged, whole) << "kind " << kind << ", " << parts << " parts";
      ASSERT_EQ(merged.value(), whole.value());
    }
  }
}

TEST(FixedSum, TermsOutsideTheDomainAreNotAdded) {
  for (const double t : {1024.0, -1e300, HUGE_VAL, std::nan("")}) {
    FixedSum s, coarse;
    s.add(0.5);
    s.add(t);
    EXPECT_EQ(s.value(), 0.5) << t;
    coarse.add_coarse(0.5);
    coarse.add_coarse(t);
    EXPECT_EQ(coarse.value(), 0.5) << t;
  }
  EXPECT_TRUE(sv::core::fixed_in_domain(1.0, 128256));
  EXPECT_FALSE(sv::core::fixed_in_domain(1.0, 1 << 22));
  EXPECT_FALSE(sv::core::fixed_in_domain(1024.0, 1));
  // The scale brings any bound back inside (down, or up for tiny rows), and is 1 where no scaling
  // is needed.
  EXPECT_EQ(sv::core::fixed_scale(1.0, 128256), 1.0);
  EXPECT_FALSE(sv::core::fixed_in_domain(1e-30, 100)) << "a row of tiny weights is scaled up";
  EXPECT_TRUE(sv::core::fixed_in_domain(0.0, 100)) << "a row of zeros is summed as it is";
  for (const double max : {1e-30, 1e-12, 1.0, 1000.0, 1e6, 3e38}) {
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{128256}, std::int64_t{1} << 26}) {
      const double scale = sv::core::fixed_scale(max, n);
      EXPECT_TRUE(sv::core::fixed_in_domain(max * scale, n)) << max << " " << n;
      int e = 0;
      EXPECT_EQ(std::frexp(scale, &e), 0.5) << "a power of two";
    }
  }
}

TEST(FixedSum, GarbageWordsWrapInsteadOfOverflowing) {
  // fuzz_verify and fuzz_trees found it (UBSan): an invalid row's lanes, summed before its caller
  // refuses it, held words near the int64 range. Words wrap; the caller discards the sum.
  FixedSum s;
  s.add_units(std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min());
  s.merge(s);
  s.add_repeated(1000.0 - 1e-9, std::numeric_limits<std::int64_t>::max());
  EXPECT_TRUE(s.lo >= 0 && s.lo < (std::int64_t{1} << 40)) << "still canonical";
}

namespace {

/// FixedLanes over `t` at one SIMD width, as the draw uses it (flushed every `flush_every` vectors).
template <class Arch>
FixedSum lane_sum(const std::vector<double>& t, std::size_t flush_every) {
  using D = xsimd::batch<double, Arch>;
  constexpr std::size_t W = D::size;
  sv::cpu::FixedLanes<Arch> lanes;
  FixedSum s;
  std::size_t i = 0, vectors = 0;
  for (; i + W <= t.size(); i += W) {
    lanes.add(D::load_unaligned(t.data() + i));
    if (++vectors % flush_every == 0) lanes.flush(s);
  }
  lanes.flush(s);
  for (; i < t.size(); ++i) s.add(t[i]);
  return s;
}

template <class Arch>
void expect_lanes_match_scalar(const char* name) {
  std::mt19937_64 rng(4);
  for (int kind = 0; kind < 5; ++kind) {
    for (const std::size_t n : {std::size_t{3}, std::size_t{1001}, std::size_t{128256}}) {
      const std::vector<double> t = terms(rng, kind, n);
      FixedSum scalar;
      for (double x : t) scalar.add(x);
      for (const std::size_t flush_every : {std::size_t{1}, std::size_t{7}, std::size_t{1} << 20}) {
        ASSERT_EQ(lane_sum<Arch>(t, flush_every), scalar) << name << " kind " << kind << " n " << n;
      }
    }
  }
}

}  // namespace

TEST(FixedLanes, EverySimdWidthGivesTheScalarWords) {
#if XSIMD_WITH_SSE2
  expect_lanes_match_scalar<xsimd::sse2>("sse2");
#endif
#if XSIMD_WITH_AVX2
  expect_lanes_match_scalar<xsimd::avx2>("avx2");
#endif
#if XSIMD_WITH_AVX512BW
  expect_lanes_match_scalar<xsimd::avx512bw>("avx512bw");
#endif
  expect_lanes_match_scalar<xsimd::default_arch>("default");
}

TEST(FixedLanes, FlushAddsEveryLanesTerms) {
  using D = xsimd::batch<double, xsimd::default_arch>;
  sv::cpu::FixedLanes<xsimd::default_arch> lanes;
  lanes.add(D(0.25));
  lanes.add(D(-3.0));
  FixedSum s;
  lanes.flush(s);
  EXPECT_EQ(s.value(), static_cast<double>(D::size) * -2.75);
  lanes.flush(s);
  EXPECT_EQ(s.value(), static_cast<double>(D::size) * -2.75) << "a flush starts the lanes again";
}

TEST(FixedLanes, ACoarseTermTakenBackLeavesTheWordsOfTheRest) {
  // The logits weights pass sums a row as it reads it, then takes back the terms of its penalised
  // tokens (which may exceed 1, or be infinite) and adds their own: the sum must be the words of
  // the kept terms alone, whatever the terms taken back were.
  using D = xsimd::batch<double, xsimd::default_arch>;
  constexpr std::size_t W = D::size;
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> weight(0.0, 1.0);
  const double taken[] = {0.0, 0.5, 1.0, 3.0e38, std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN(), -1.0e300};
  for (const double odd : taken) {
    sv::cpu::FixedLanes<xsimd::default_arch> lanes;
    FixedSum kept;
    alignas(64) double v[W], back[W];
    for (int vectors = 0; vectors < 100; ++vectors) {
      for (std::size_t l = 0; l < W; ++l) {
        v[l] = static_cast<float>(weight(rng));
        kept.add_coarse(v[l]);
      }
      lanes.add_coarse(D::load_aligned(v));
    }
    for (std::size_t l = 0; l < W; ++l) back[l] = l % 2 ? odd : static_cast<float>(weight(rng));
    lanes.add_coarse(D::load_aligned(back));
    lanes.add_coarse(D(0.25));
    kept.add_repeated(0.25, W, true);
    lanes.remove_coarse(D::load_aligned(back));
    FixedSum lane_words;
    lanes.flush(lane_words);
    EXPECT_EQ(lane_words, kept) << "taken back: " << odd;
  }
}
