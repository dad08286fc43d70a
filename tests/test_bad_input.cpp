// The bad inputs other implementations mishandled (u = 0 accepting a token with p(x) = 0, a residual
// with no mass, NaN rows, ids outside the vocabulary used as indices) and the rest of docs/api.md
// "Errors": each gives the documented result, or invalid_input naming what is wrong, with the
// outputs untouched.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cmath>
#include <limits>
#include <string>

#include "bad_inputs.hpp"
#include "support.hpp"

namespace specverify {
namespace {

using ::testing::HasSubstr;
using testing::Chains;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Runs verify expecting invalid_input; checks the message and that no output changed.
template <class Rule = Standard>
void expect_rejected(Chains& c, const ChainBatch<float>& batch, const Randomness& r,
                     std::initializer_list<const char*> fragments, Rule rule = {}) {
  ChainOutput out = c.output();
  try {
    verify(rule, batch, r, out);
    ADD_FAILURE() << "no invalid_input";
  } catch (const invalid_input& e) {
    for (const char* f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
  for (auto t : c.out_tokens) ASSERT_EQ(t, 12345) << "output written before the error";
  for (auto n : c.accepted) ASSERT_EQ(n, 12345) << "output written before the error";
}

using testing::nan_in_residual_row;
using testing::two_sequences;
using testing::uniform_row;

TEST(BadInput, ZeroUniformNeverAcceptsATokenTheTargetExcludes) {
  constexpr std::int32_t V = 4;
  const std::vector<float> p{0.5f, 0.0f, 0.5f, 0.0f}, q{0.25f, 0.25f, 0.25f, 0.25f};
  for (const bool one_hot : {false, true}) {
    Chains c(V, one_hot);
    c.add({1}, {p, p}, {q});
    c.add({3}, {p, p}, {std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}});  // q(x) = 0 as well
    const float zeros[2] = {0.0f, 0.0f};
    Randomness r;
    r.accept_uniforms = zeros;
    ChainOutput out = c.output();
    verify(Standard{}, c.batch(), r, out);
    for (std::int32_t b = 0; b < 2; ++b) {
      EXPECT_EQ(c.accepted[b], 0) << "sequence " << b;
      EXPECT_TRUE(c.token(b, 0) == 0 || c.token(b, 0) == 2) << c.token(b, 0);
    }
  }
}

TEST(BadInput, ZeroMassResidualDrawsFromTarget) {
  // p <= q everywhere (unnormalised q): the residual is empty, so the token comes from p.
  constexpr std::int32_t V = 4;
  const std::vector<float> p{0.1f, 0.2f, 0.3f, 0.4f}, q{0.2f, 0.4f, 0.6f, 0.8f};
  std::vector<std::int64_t> counts(V);
  Chains c(V);
  for (int b = 0; b < 20000; ++b) c.add({0}, {p, p}, {q});
  std::vector<float> u(20000, 0.75f);  // u * q(0) = 0.15 >= p(0) = 0.1: always rejected
  Randomness r{11};
  r.accept_uniforms = u.data();
  ChainOutput out = c.output();
  verify(Standard{}, c.batch(), r, out);
  for (int b = 0; b < c.size(); ++b) {
    ASSERT_EQ(c.accepted[b], 0);
    ++counts[c.token(b, 0)];
  }
  EXPECT_TRUE(testing::chi_square(counts, p).fits());
}

TEST(BadInput, OneHotTargetOnTheRejectedTokenEmitsIt) {
  // p = e_x with q(x) = 2 (unnormalised): rejected when u >= 1/2, residual empty, p puts all mass
  // on x. Kernels once returned an arbitrary or padded index here.
  constexpr std::int32_t V = 1000;
  std::vector<float> p(V, 0.0f), q(V, 0.0f);
  p[777] = 1.0f;
  q[777] = 2.0f;
  Chains c(V);
  c.add({777}, {p, p}, {q});
  const float u = 0.9f;
  Randomness r;
  r.accept_uniforms = &u;
  ChainOutput out = c.output();
  verify(Standard{}, c.batch(), r, out);
  EXPECT_EQ(c.accepted[0], 0);
  EXPECT_EQ(c.token(0, 0), 777);
}

TEST(BadInput, NaNInAResidualRowIsNamed) {
  for (const bool all_nan : {false, true}) {
    Chains c = nan_in_residual_row(all_nan);
    expect_rejected(c, c.batch(), Randomness{}, {"sequence 1", "position 0", "nan"});
  }
}

TEST(BadInput, NaNInfOrNegativeProbabilityOfTheDraftIsNamed) {
  for (const float v : {kNaN, kInf, -0.5f}) {
    Chains c = two_sequences();
    c.p[c.V * 3 + 3] = v;  // sequence 1's first row, at its draft token 3
    expect_rejected(c, c.batch(), Randomness{}, {"sequence 1", "position 0", "token 3"});
  }
}

TEST(BadInput, AllZeroTargetRowToDrawFromIsNamed) {
  Chains c = two_sequences();
  std::fill(c.p.begin() + c.V * 4, c.p.begin() + c.V * 5, 0.0f);  // sequence 1's bonus row
  c.tokens[2] = 0;  // the argmax of a uniform row: Greedy accepts it and reaches the bonus row
  expect_rejected(c, c.batch(), Randomness{}, {"sequence 1", "position 1", "no mass"}, Greedy{});
}

TEST(BadInput, TokensOutsideTheVocabularyAreNamed) {
  for (const std::int32_t x : {-1, 8, 1 << 30}) {
    Chains c = two_sequences();
    c.tokens[1] = x;
    expect_rejected(c, c.batch(), Randomness{},
                    {"sequence 0", "position 1", std::to_string(x).c_str()});
  }
}

TEST(BadInput, OffsetsMustStartAtZeroAndNotDecrease) {
  Chains c = two_sequences();
  c.offsets = {1, 2, 3};
  expect_rejected(c, c.batch(), Randomness{}, {"draft_offsets[0] = 1"});
  c.offsets = {0, 2, 1};
  expect_rejected(c, c.batch(), Randomness{}, {"sequence 1", "decrease"});
}

TEST(BadInput, RowWidthMustHoldTheLongestChainPlusOne) {
  Chains c = two_sequences();
  c.width = 2;
  expect_rejected(c, c.batch(), Randomness{}, {"row_width = 2", "3"});
}

TEST(BadInput, CallerUniformsMustLieInHalfOpenUnitInterval) {
  for (const float u : {1.0f, -0.25f, kNaN}) {
    Chains c = two_sequences();
    float accept[3] = {0.5f, 0.5f, 0.5f};
    accept[2] = u;
    Randomness r;
    r.accept_uniforms = accept;
    expect_rejected(c, c.batch(), r, {"sequence 1", "position 0", "accept uniform"});
    const float sample[2] = {0.5f, u};
    Randomness s;
    s.sample_uniforms = sample;
    expect_rejected(c, c.batch(), s, {"sequence 1", "sample uniform"});
  }
}

TEST(BadInput, ShapesAndPointers) {
  Chains c = two_sequences();
  ChainBatch<float> b = c.batch();
  b.batch_size = -1;
  expect_rejected(c, b, Randomness{}, {"batch_size = -1"});
  b = c.batch();
  b.vocab_size = 0;
  expect_rejected(c, b, Randomness{}, {"vocab_size = 0"});
  b = c.batch();
  b.target_probs = nullptr;
  expect_rejected(c, b, Randomness{}, {"target_probs is null"});
  b = c.batch();
  b.draft_tokens = nullptr;
  expect_rejected(c, b, Randomness{}, {"draft_tokens is null"});
  b = c.batch();
  b.target_stride = 4;
  expect_rejected(c, b, Randomness{}, {"target_stride = 4"});
  b = c.batch();
  b.draft_stride = std::int64_t{1} << 62;
  expect_rejected(c, b, Randomness{}, {"draft_stride", "overflows"});
}

TEST(BadInput, DivergenceOutsideTheEnumIsARuleParameterOutOfRange) {
  // Once reported as "target row 0 holds 0 at token -1": the row pass found no such divergence.
  for (const int kind : {99, -1, 5}) {
    const auto d = static_cast<Divergence>(kind);
    const std::string named = "rule parameter divergence = " + std::to_string(kind) + " is out of range";
    Chains c = two_sequences();
    expect_rejected(c, c.batch(), Randomness{}, {named.c_str()}, Fsd{d, 0.3f});
    expect_rejected(c, c.batch(), Randomness{}, {named.c_str()}, ReducibleFsd{d, 0.1f});
    const float probs[3] = {0.5f, 0.5f, 0.5f};
    expect_rejected(c, c.batch(), Randomness{}, {named.c_str()}, SpecDecPP<Fsd>{0.3f, probs, Fsd{d, 0.3f}});
  }
  Chains c = two_sequences();  // the control: every divergence the enum names is accepted
  for (const auto d : {Divergence::kl_target_draft, Divergence::kl_draft_target, Divergence::js,
                       Divergence::js_fsd, Divergence::tv}) {
    EXPECT_NO_THROW(verify(Fsd{d, 0.3f}, c.batch(), Randomness{}, c.output()));
  }
}

TEST(BadInput, NegativeMaxThreadsIsInvalidForEveryBatchKind) {
  // Once read as 0 (every hardware thread) while Python refused it: an error in both now.
  Chains c = two_sequences();
  ChainOutput out = c.output();
  EXPECT_THAT([&] { verify(Standard{}, c.batch(), Randomness{}, out, CpuOptions{-1}); },
              ::testing::ThrowsMessage<invalid_input>(HasSubstr("max_threads = -1 must be >= 0")));
  for (auto t : c.out_tokens) ASSERT_EQ(t, 12345) << "output written before the error";
  ChainBatch<float> empty;
  empty.vocab_size = 5;
  EXPECT_THROW(verify(Standard{}, empty, Randomness{}, ChainOutput{}, CpuOptions{-3}), invalid_input);

  const std::vector<float> row = uniform_row(4);
  const std::int32_t offsets[2] = {0, 1}, parents[1] = {-1}, drafts[1] = {2};
  std::vector<float> rows(row);
  rows.insert(rows.end(), row.begin(), row.end());
  std::int32_t tokens[2] = {12345, 12345}, accepted = 12345;
  TreeBatch<float> tree;
  tree.batch_size = 1;
  tree.vocab_size = 4;
  tree.node_offsets = offsets;
  tree.parents = parents;
  tree.draft_tokens = drafts;
  tree.target_probs = rows.data();
  tree.drafted = Drafted::deterministic;
  EXPECT_THROW(verify(Standard{}, tree, Randomness{}, TreeOutput{tokens, 2, &accepted}, CpuOptions{-1}), invalid_input);
  const SamplingParams params;
  LogitsChainBatch<float> logits;
  logits.batch_size = 1;
  logits.vocab_size = 4;
  logits.draft_offsets = offsets;
  logits.draft_tokens = drafts;
  logits.target_logits = rows.data();
  logits.target_params = &params;
  EXPECT_THROW(verify(Standard{}, logits, Randomness{}, ChainOutput{tokens, 2, &accepted}, CpuOptions{-1}),
               invalid_input);
  EXPECT_EQ(tokens[0], 12345);
  EXPECT_EQ(accepted, 12345);
}

TEST(BadInput, EmptyBatchIsValidAndWritesNothing) {
  ChainBatch<float> b;
  b.vocab_size = 5;
  const VerifyStats s = verify(Standard{}, b, Randomness{}, ChainOutput{});
  EXPECT_EQ(s.drafted, 0);
  EXPECT_EQ(s.accepted, 0);
}

TEST(BadInput, ExtraTokenIsInVocabularyForEveryDrawAndPaddingIsNoToken) {
  // Tail-heavy rows whose last element holds the mass: a draw that ran off the end of the row
  // would return V.
  constexpr std::int32_t V = 37;
  std::vector<float> p(V, 0.0f), q(V, 0.0f);
  p[V - 1] = 1.0f;
  q[0] = 1.0f;
  Chains c(V);
  for (int b = 0; b < 500; ++b) c.add({0, 0, 0}, {p, p, p, p}, {q, q, q});
  ChainOutput out = c.output();
  verify(Standard{}, c.batch(), Randomness{3}, out);
  for (int b = 0; b < c.size(); ++b) {
    EXPECT_EQ(c.accepted[b], 0);
    EXPECT_EQ(c.token(b, 0), V - 1);
    for (int i = 1; i < c.width; ++i) EXPECT_EQ(c.token(b, i), kNoToken);
  }
}

}  // namespace
}  // namespace specverify
