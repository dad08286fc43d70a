// Findings of the libFuzzer targets (tests/fuzz/), each reduced to the case that exposed it.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support.hpp"

namespace specverify {
namespace {

using testing::Chains;

constexpr Divergence kAll[] = {Divergence::kl_target_draft, Divergence::kl_draft_target,
                               Divergence::js, Divergence::js_fsd, Divergence::tv};

// fuzz_verify: rFSD with threshold 0 accepted drafts that Standard rejects, counting them as
// relaxed. Rows that are not normalised (here q sums to 1.8) give D(p, q) < 0 for the KL forms, and
// `D < 0` held; rounding can do the same to a normalised pair that is nearly equal. Threshold 0
// must be exactly Standard, whatever D comes out as.
TEST(FuzzRegression, ReducibleFsdAtZeroThresholdIsStandardWhenTheDivergenceIsNegative) {
  const std::vector<float> p{0.5f, 0.5f}, q{0.9f, 0.9f};  // KL(p||q) = ln(5/9) < 0
  Chains c(2);
  c.add({0, 1}, {p, p, p}, {q, q});
  const float u[2] = {0.99f, 0.99f};  // u q(x) = 0.891 >= p(x) = 0.5: Standard rejects
  Randomness r{3};
  r.accept_uniforms = u;
  ChainOutput out = c.output();
  const VerifyStats standard = verify(Standard{}, c.batch(), r, out);
  const std::vector<std::int32_t> expected = c.out_tokens;
  ASSERT_EQ(standard.accepted, 0);
  for (const Divergence d : kAll) {
    out = c.output();
    const VerifyStats s = verify(ReducibleFsd{d, 0.0f}, c.batch(), r, out);
    EXPECT_EQ(s.accepted, 0) << static_cast<int>(d);
    EXPECT_EQ(s.relaxed, 0) << static_cast<int>(d);
    EXPECT_EQ(c.out_tokens, expected) << static_cast<int>(d);
  }
  // A positive threshold still relaxes (the divergence is below it).
  out = c.output();
  EXPECT_EQ(verify(ReducibleFsd{Divergence::kl_target_draft, 0.1f}, c.batch(), r, out).relaxed, 2);
}

}  // namespace
}  // namespace specverify
