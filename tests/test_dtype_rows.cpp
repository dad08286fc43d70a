// Rows in the model's dtype on the CPU (docs/api.md): float16 and bfloat16 logits are widened as a
// pass reads them, every widening exact, so verify gives the bits of float rows holding the same
// values. The whole matrix of rules and parameters is tests/isa's (isa_float16_rows_agree,
// isa_bfloat16_rows_agree); here every 16-bit pattern through every instruction set's load, and
// the values that matrix lacks: subnormals, masked tokens, bad values.
#include <gtest/gtest.h>

#include <specverify/specverify.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace specverify {
namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

/// Every 16-bit pattern, W at a time, through Arch's load: the scalar widening's bits (NaN
/// payloads included).
template <class Arch, class Half>
void expect_every_pattern_widens_exactly(const char* arch) {
  constexpr std::size_t W = xsimd::batch<float, Arch>::size;
  std::vector<Half> all(0x10000);
  for (std::uint32_t b = 0; b < 0x10000; ++b) all[b] = Half{static_cast<std::uint16_t>(b)};
  std::int32_t wrong = 0;
  for (std::size_t i = 0; i < all.size(); i += W) {
    alignas(64) float lanes[W];
    cpu::load_widened<Arch>(all.data() + i).store_aligned(lanes);
    for (std::size_t l = 0; l < W; ++l) {
      const float want = static_cast<float>(all[i + l]);
      if (bits_of(lanes[l]) != bits_of(want) && ++wrong <= 5) {
        ADD_FAILURE() << arch << ": pattern 0x" << std::hex << (i + l) << " widened to 0x" << bits_of(lanes[l])
                      << ", not 0x" << bits_of(want);
      }
    }
  }
  EXPECT_EQ(wrong, 0) << arch;
}

template <class Half>
void expect_every_arch_widens_exactly() {
#if XSIMD_WITH_SSE2
  expect_every_pattern_widens_exactly<xsimd::sse2, Half>("sse2");
#endif
#if XSIMD_WITH_AVX
  expect_every_pattern_widens_exactly<xsimd::avx, Half>("avx");
#endif
#if XSIMD_WITH_AVX2
  expect_every_pattern_widens_exactly<xsimd::avx2, Half>("avx2");
#endif
#if XSIMD_WITH_AVX512F
  expect_every_pattern_widens_exactly<xsimd::avx512f, Half>("avx512f");
#endif
  expect_every_pattern_widens_exactly<cpu::DefaultArch, Half>("default");
}

TEST(Widen, EveryFloat16PatternOnEveryInstructionSet) { expect_every_arch_widens_exactly<float16>(); }
TEST(Widen, EveryBfloat16PatternOnEveryInstructionSet) { expect_every_arch_widens_exactly<bfloat16>(); }

TEST(Widen, ScalarValues) {
  EXPECT_EQ(static_cast<float>(float16{0x3c00}), 1.0f);
  EXPECT_EQ(static_cast<float>(float16{0x0001}), 5.9604644775390625e-8f);  // the least subnormal, 2^-24
  EXPECT_EQ(bits_of(static_cast<float>(float16{0x8000})), 0x80000000u);     // -0
  EXPECT_EQ(static_cast<float>(float16{0xfc00}), -__builtin_huge_valf());
  EXPECT_EQ(static_cast<float>(bfloat16{0x3f80}), 1.0f);
  EXPECT_EQ(bits_of(static_cast<float>(bfloat16{0x7fc1})), 0x7fc10000u);  // a NaN keeps its payload
}

/// x's float16 (x must be exact in float16) and bfloat16 (x must be exact in bfloat16) encodings.
float16 f16(float x) {
  const std::uint32_t u = bits_of(x), sign = (u >> 16) & 0x8000u, exponent = (u >> 23) & 0xffu;
  std::uint32_t h;
  if (exponent == 0xff) {
    h = sign | 0x7c00u | ((u >> 13) & 0x3ffu);
  } else if (exponent < 113) {  // zero or a float16 subnormal: x * 2^24 is its mantissa
    h = sign | static_cast<std::uint32_t>(std::fabs(x) * 16777216.0f);
  } else {
    h = sign | ((exponent - 112u) << 10) | ((u >> 13) & 0x3ffu);
  }
  const float16 r{static_cast<std::uint16_t>(h)};
  if (bits_of(static_cast<float>(r)) != u) ADD_FAILURE() << x << " is not a float16";
  return r;
}
bfloat16 bf16(float x) { return bfloat16{static_cast<std::uint16_t>(bits_of(x) >> 16)}; }

/// Logits that are exact in both 16-bit types and reach their corners: float16 subnormals, masked
/// tokens (-inf), values near float16's largest, ties.
struct Case {
  std::int32_t B = 6, V = 777, K = 3;
  std::vector<std::int32_t> offsets, tokens;
  std::vector<float> p, q;
  std::vector<SamplingParams> params;

  explicit Case(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    offsets.push_back(0);
    for (std::int32_t b = 0; b < B; ++b) offsets.push_back(offsets.back() + static_cast<std::int32_t>(rng() % (K + 1)));
    const auto row = [&](std::vector<float>& out, std::size_t rows) {
      for (std::size_t i = 0; i < rows * std::size_t(V); ++i) {
        const std::uint64_t r = rng();
        float x = static_cast<float>(static_cast<std::int32_t>(r % 512u) - 256) / 32.0f;  // exact in both
        if (r % 97u == 0) x = -__builtin_huge_valf();                                       // masked
        if (r % 89u == 0) x = 5.9604644775390625e-8f * static_cast<float>(r % 7u + 1u);     // subnormal in float16
        if (r % 211u == 0) x = 65504.0f;                                                    // float16's largest
        out.push_back(x);
      }
    };
    row(p, std::size_t(offsets.back() + B));
    row(q, std::size_t(offsets.back()));
    for (std::int32_t j = 0; j < offsets.back(); ++j) tokens.push_back(static_cast<std::int32_t>(rng() % std::uint64_t(V)));
    for (std::int32_t b = 0; b < B; ++b) {
      params.push_back(b % 3 == 0 ? SamplingParams{0.7f, 0, 1.0f, 0.0f}
                                  : b % 3 == 1 ? SamplingParams{1.0f, 40, 0.9f, 0.0f} : SamplingParams{1.3f, 0, 1.0f, 0.05f});
    }
  }
};

template <class Logit, class Convert>
std::vector<Logit> converted(const std::vector<float>& rows, Convert to) {
  std::vector<Logit> out;
  for (const float x : rows) out.push_back(to(x));
  return out;
}

struct Outputs {
  std::vector<std::int32_t> tokens, accepted;
  std::vector<float> logprobs;
  VerifyStats stats;
  bool operator==(const Outputs& o) const {
    return tokens == o.tokens && accepted == o.accepted &&
           std::memcmp(logprobs.data(), o.logprobs.data(), logprobs.size() * sizeof(float)) == 0 &&
           stats.accepted == o.stats.accepted && stats.drafted == o.stats.drafted &&
           stats.target_checked == o.stats.target_checked && stats.relaxed == o.stats.relaxed;
  }
};

template <class Rule, class Logit>
Outputs run(const Rule& rule, const Case& c, const Logit* p, const Logit* q) {
  Outputs o;
  o.tokens.assign(std::size_t(c.B) * (c.K + 1), -7);
  o.accepted.assign(std::size_t(c.B), -7);
  o.logprobs.assign(o.tokens.size(), 0.5f);
  LogitsChainBatch<Logit> batch;
  batch.batch_size = c.B;
  batch.vocab_size = c.V;
  batch.draft_offsets = c.offsets.data();
  batch.draft_tokens = c.tokens.data();
  batch.target_logits = p;
  batch.draft_logits = q;
  batch.target_params = c.params.data();
  std::vector<std::int64_t> positions(std::size_t(c.B), 9);
  Randomness randomness{77, 4};
  randomness.positions = positions.data();
  o.stats = verify(rule, batch, randomness, ChainOutput{o.tokens.data(), c.K + 1, o.accepted.data(), o.logprobs.data()});
  return o;
}

template <class Rule>
void expect_same_bits(const Rule& rule, const char* name) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const Case c(seed);
    const Outputs want = run(rule, c, c.p.data(), c.q.data());
    const auto h = converted<float16>(c.p, f16), hq = converted<float16>(c.q, f16);
    const auto b = converted<bfloat16>(c.p, bf16), bq = converted<bfloat16>(c.q, bf16);
    EXPECT_TRUE(run(rule, c, h.data(), hq.data()) == want) << name << " float16, seed " << seed;
    EXPECT_TRUE(run(rule, c, b.data(), bq.data()) == want) << name << " bfloat16, seed " << seed;
    EXPECT_TRUE(run(rule, c, h.data(), static_cast<const float16*>(nullptr)) ==
                run(rule, c, c.p.data(), static_cast<const float*>(nullptr)))
        << name << " one-hot, seed " << seed;
  }
}

TEST(DtypeRows, VerifyGivesTheBitsOfFloatRowsHoldingTheSameValues) {
  expect_same_bits(Standard{}, "standard");
  expect_same_bits(Coupled{}, "coupled");
  expect_same_bits(Block{}, "block");
  expect_same_bits(Fsd{Divergence::js, 0.3f}, "fsd js");
}

TEST(DtypeRows, BadValuesAreNamedAsInFloatRows) {
  Case c(9);
  c.p[5] = __builtin_nanf("");  // sequence 0's first target row: always read
  std::string want;
  try {
    run(Standard{}, c, c.p.data(), c.q.data());
  } catch (const invalid_input& e) {
    want = e.what();
  }
  ASSERT_FALSE(want.empty());
  const std::vector<bfloat16> b = converted<bfloat16>(c.p, bf16), bq = converted<bfloat16>(c.q, bf16);
  try {
    run(Standard{}, c, b.data(), bq.data());
    ADD_FAILURE() << "a NaN in a bfloat16 row was accepted";
  } catch (const invalid_input& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

}  // namespace
}  // namespace specverify
