// Extreme shapes: B = 0, V = 1, V = 1,000,000 with row strides, k_b = 0 next to chains of K = 64,
// B = 10,000; rows of logits at the largest vocabulary they allow and one past it; an all-zero
// target row; rows that are not normalised; and verify()'s own memory, which must grow with B
// (the output), never with V or the rows.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <sys/resource.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "heap_counter.hpp"
#include "support.hpp"
#include "typical_acceptance.hpp"

namespace specverify {
namespace {

using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// A batch laid out by hand, with row strides and NaN in the padding between rows (which nothing
/// may read). Chain positions are one-hot on their draft in both p and q, so every rule here
/// accepts them exactly when it reads the right rows; bonus rows are one-hot on a known token.
struct Layout {
  std::int32_t V = 0;
  std::int64_t t_stride = 0, d_stride = 0;
  std::vector<std::int32_t> offsets{0}, drafts, bonus;
  std::vector<float> p, q;
  std::vector<std::int32_t> tokens, accepted;
  std::int32_t width = 1;

  Layout(std::int32_t vocab, std::int64_t pad) : V(vocab), t_stride(vocab + pad), d_stride(vocab + 2 * pad) {}

  std::int32_t size() const { return static_cast<std::int32_t>(offsets.size()) - 1; }

  void add(const std::vector<std::int32_t>& xs, std::int32_t bonus_token) {
    offsets.push_back(offsets.back() + static_cast<std::int32_t>(xs.size()));
    drafts.insert(drafts.end(), xs.begin(), xs.end());
    bonus.push_back(bonus_token);
    width = std::max<std::int32_t>(width, static_cast<std::int32_t>(xs.size()) + 1);
  }

  /// Fills the rows once every sequence is added.
  void fill() {
    const std::int32_t B = size(), n = offsets.back();
    p.assign(static_cast<std::size_t>((n + B) * t_stride), kNaN);
    q.assign(static_cast<std::size_t>(n * d_stride), kNaN);
    for (std::int32_t b = 0; b < B; ++b) {
      for (std::int32_t j = 0; j <= offsets[b + 1] - offsets[b]; ++j) {
        float* row = p.data() + (std::int64_t{offsets[b]} + b + j) * t_stride;
        std::fill(row, row + V, 0.0f);
        const bool is_bonus = j == offsets[b + 1] - offsets[b];
        row[is_bonus ? bonus[b] : drafts[offsets[b] + j]] = 1.0f;
        if (is_bonus) continue;
        float* qrow = q.data() + std::int64_t{offsets[b] + j} * d_stride;
        std::fill(qrow, qrow + V, 0.0f);
        qrow[drafts[offsets[b] + j]] = 1.0f;
      }
    }
  }

  ChainBatch<float> batch() const {
    ChainBatch<float> c;
    c.batch_size = size();
    c.vocab_size = V;
    c.draft_offsets = offsets.data();
    c.draft_tokens = drafts.empty() ? nullptr : drafts.data();
    c.target_probs = p.data();
    c.draft_probs = q.empty() ? nullptr : q.data();
    c.target_stride = t_stride;
    c.draft_stride = d_stride;
    return c;
  }

  ChainOutput output() {
    tokens.assign(static_cast<std::size_t>(size()) * width, 12345);
    accepted.assign(static_cast<std::size_t>(size()), 12345);
    return {tokens.data(), width, accepted.data()};
  }

  /// Every draft kept, then the bonus token, then kNoToken.
  void expect_all_accepted(const VerifyStats& s, const char* rule) const {
    std::int64_t total = 0;
    for (std::int32_t b = 0; b < size(); ++b) {
      const std::int32_t k = offsets[b + 1] - offsets[b];
      total += k;
      ASSERT_EQ(accepted[b], k) << rule << " sequence " << b;
      const std::int32_t* row = tokens.data() + std::int64_t{b} * width;
      for (std::int32_t j = 0; j < k; ++j) ASSERT_EQ(row[j], drafts[offsets[b] + j]) << rule << " " << b;
      ASSERT_EQ(row[k], bonus[b]) << rule << " sequence " << b;
      for (std::int32_t i = k + 1; i < width; ++i) ASSERT_EQ(row[i], kNoToken) << rule << " " << b;
    }
    EXPECT_EQ(s.drafted, total) << rule;
    EXPECT_EQ(s.accepted, total) << rule;
  }
};

/// Runs `check(rule, name)` for one rule of every family (and the example's user rule).
template <class Check>
void for_each_rule(const std::vector<float>& scores, Check check) {
  check(Standard{}, "Standard");
  check(Greedy{}, "Greedy");
  check(Ears{0.5f}, "Ears");
  check(Fsd{Divergence::tv, 0.0f}, "Fsd");
  check(ReducibleFsd{Divergence::js, 0.1f}, "ReducibleFsd");
  check(Sprinter{0.5f, scores.data()}, "Sprinter");
  check(SpecDecPP<Standard>{1.0f, scores.data(), {}}, "SpecDecPP");  // threshold 1: never cuts
  check(TypicalAcceptance{}, "TypicalAcceptance");
}

TEST(ExtremeSizes, EmptyBatchWritesNothingAndNeedsNoArrays) {
  ChainBatch<float> batch;
  batch.vocab_size = 7;
  const float score = 1.0f;
  for_each_rule({score}, [&](const auto& rule, const char* name) {
    const VerifyStats s = verify(rule, batch, Randomness{}, ChainOutput{});
    EXPECT_EQ(s.drafted, 0) << name;
    EXPECT_EQ(s.accepted, 0) << name;
  });
  batch.vocab_size = 0;  // but the sizes are still checked
  EXPECT_THROW(verify(Standard{}, batch, Randomness{}, ChainOutput{}), invalid_input);
}

TEST(ExtremeSizes, VocabularyOfOneToken) {
  // Weights as given: p(0) = 0.25 against q(0) = 1 is rejected 3 times in 4, and the residual
  // max(p - q, 0) is then empty, so the token comes from p: always token 0.
  const std::int32_t V = 1;
  const std::vector<std::int32_t> offsets{0, 0, 3, 4};
  const std::vector<std::int32_t> drafts(4, 0);
  const std::vector<float> p(7, 0.25f), q(4, 1.0f), scores(4, 0.25f);
  ChainBatch<float> batch{3, V, offsets.data(), drafts.data(), p.data(), q.data()};
  std::vector<std::int32_t> tokens(12), accepted(3);
  std::int64_t kept = 0;
  for_each_rule(scores, [&](const auto& rule, const char* name) {
    for (std::uint64_t step = 0; step < 50; ++step) {
      const VerifyStats s = verify(rule, batch, {9, step}, {tokens.data(), 4, accepted.data()});
      kept += s.accepted;
      for (std::int32_t b = 0; b < 3; ++b) {
        const std::int32_t k = offsets[b + 1] - offsets[b];
        ASSERT_LE(accepted[b], k) << name;
        for (std::int32_t i = 0; i <= accepted[b]; ++i) ASSERT_EQ(tokens[b * 4 + i], 0) << name;
        for (std::int32_t i = accepted[b] + 1; i < 4; ++i) ASSERT_EQ(tokens[b * 4 + i], kNoToken) << name;
      }
    }
  });
  EXPECT_GT(kept, 0);
  // A bonus row with no mass has nothing to draw from.
  std::vector<float> zero_bonus = p;
  zero_bonus[0] = 0.0f;  // sequence 0 (k = 0) owns target row 0, its bonus row
  batch.target_probs = zero_bonus.data();
  EXPECT_THROW(verify(Standard{}, batch, {9, 0}, {tokens.data(), 4, accepted.data()}), invalid_input);
}

TEST(ExtremeSizes, MillionTokenVocabularyWithRowStrides) {
  const std::int32_t V = 1000000;
  Layout l(V, 17);
  l.add({V - 1, 3, 999983}, V - 1);  // the last index, twice
  l.add({}, 500001);                // k_b = 0: only its bonus row
  l.add({0}, 777777);               // rejected below
  l.fill();
  // Sequence 2's draft: p gives it nothing (masked), so every rule rejects; the extra token is
  // the only one p has mass on, whichever row the rule draws from (p, or the residual p - q).
  const std::int64_t row = std::int64_t{l.offsets[2]} + 2;  // sequence 2, position 0
  std::fill(l.p.data() + row * l.t_stride, l.p.data() + row * l.t_stride + V, 0.0f);
  l.p[row * l.t_stride + 777777] = 1.0f;
  const std::vector<float> scores(4, 0.0f);
  for_each_rule(scores, [&](const auto& rule, const char* name) {
    const VerifyStats s = verify(rule, l.batch(), {5, 1}, l.output());
    EXPECT_EQ(s.drafted, 4) << name;
    EXPECT_EQ(s.accepted, 3) << name;
    EXPECT_EQ(l.accepted, (std::vector<std::int32_t>{3, 0, 0})) << name;
    EXPECT_EQ(l.tokens, (std::vector<std::int32_t>{V - 1, 3, 999983, V - 1, 500001, kNoToken,
                                                   kNoToken, kNoToken, 777777, kNoToken,
                                                   kNoToken, kNoToken}))
        << name;
  });
}

TEST(ExtremeSizes, EmptyChainsNextToChainsOfSixtyFour) {
  const std::int32_t V = 50;
  Layout l(V, 3);
  const std::int32_t ks[] = {0, 64, 0, 1, 33, 0, 64, 0};
  for (std::int32_t b = 0; b < 8; ++b) {
    std::vector<std::int32_t> xs;
    for (std::int32_t j = 0; j < ks[b]; ++j) xs.push_back((b * 13 + j * 7) % V);
    l.add(xs, (b * 31 + 5) % V);
  }
  l.fill();
  ASSERT_EQ(l.width, 65);
  const std::vector<float> scores(static_cast<std::size_t>(l.offsets.back()), 0.75f);
  for_each_rule(scores, [&](const auto& rule, const char* name) {
    l.expect_all_accepted(verify(rule, l.batch(), {1, 2}, l.output()), name);
  });
  // The same with per-sequence seeds and caller uniforms at their edges (0 and just below 1).
  std::vector<std::uint64_t> seeds(8);
  for (std::size_t b = 0; b < seeds.size(); ++b) seeds[b] = 1000 + b;
  std::vector<float> u(scores.size());
  for (std::size_t g = 0; g < u.size(); ++g) u[g] = g % 2 ? 0.0f : 0x1.fffffep-1f;
  const std::vector<float> su(8, 0x1.fffffep-1f);
  Randomness r{1, 2, seeds.data(), u.data(), su.data()};
  for_each_rule(scores, [&](const auto& rule, const char* name) {
    l.expect_all_accepted(verify(rule, l.batch(), r, l.output()), name);
  });
}

TEST(ExtremeSizes, TenThousandSequences) {
  const std::int32_t V = 8, B = 10000;
  Layout l(V, 1);
  for (std::int32_t b = 0; b < B; ++b) {
    std::vector<std::int32_t> xs;
    for (std::int32_t j = 0; j < b % 6; ++j) xs.push_back((b + 3 * j) % V);
    l.add(xs, (b * 5 + 1) % V);
  }
  l.fill();
  const std::vector<float> scores(static_cast<std::size_t>(l.offsets.back()), 1.0f);
  for_each_rule(scores, [&](const auto& rule, const char* name) {
    l.expect_all_accepted(verify(rule, l.batch(), {4, 4}, l.output()), name);
  });
}

TEST(ExtremeSizes, AllZeroTargetRowIsInvalidForEveryRule) {
  // Sequence 1's bonus row is all zero: nothing to draw, nothing to take the argmax of.
  Layout l(16, 0);
  l.add({1, 2}, 3);
  l.add({4}, 5);
  l.fill();
  const std::int64_t bonus_row = std::int64_t{l.offsets[1]} + 1 + 1;
  std::fill(l.p.begin() + bonus_row * l.t_stride, l.p.begin() + bonus_row * l.t_stride + 16, 0.0f);
  const std::vector<float> scores(3, 1.0f);
  for_each_rule(scores, [&](const auto& rule, const char* name) {
    try {
      verify(rule, l.batch(), {7, 0}, l.output());
      ADD_FAILURE() << name << ": no invalid_input";
    } catch (const invalid_input& e) {
      EXPECT_THAT(e.what(), HasSubstr("sequence 1")) << name;
      EXPECT_THAT(e.what(), HasSubstr("no mass")) << name;
    }
    for (auto t : l.tokens) ASSERT_EQ(t, 12345) << name << ": output written before the error";
    for (auto n : l.accepted) ASSERT_EQ(n, 12345) << name << ": output written before the error";
  });
  // A rejection at a zero row: the residual is empty and so is p.
  Layout r(16, 0);
  r.add({1}, 3);
  r.fill();
  std::fill(r.p.begin(), r.p.begin() + 16, 0.0f);
  EXPECT_THROW(verify(Standard{}, r.batch(), {7, 0}, r.output()), invalid_input);
}

TEST(ExtremeSizes, UnnormalisedRowsAreWeightsUsedAsGiven) {
  // Standard compares u q(x) with p(x) as given and draws in proportion to the weights. Scaling
  // p and q by the same power of two is exact in float, so the tokens are the same bit for bit.
  std::mt19937_64 rng(77);
  const std::int32_t V = 37;
  testing::Chains unit(V), scaled(V);
  std::vector<float> u;
  for (int b = 0; b < 400; ++b) {
    std::vector<std::vector<float>> ps, qs;
    for (int j = 0; j < 4; ++j) {
      ps.push_back(testing::random_distribution(V, rng));
      qs.push_back(testing::random_distribution(V, rng));
    }
    std::vector<std::int32_t> xs;
    for (int j = 0; j < 3; ++j) xs.push_back(testing::sample(qs[j], rng));
    unit.add(xs, ps, qs);
    for (auto& row : ps) for (auto& v : row) v *= 4.0f;
    for (auto& row : qs) for (auto& v : row) v *= 4.0f;
    scaled.add(xs, ps, qs);
  }
  ChainOutput a = unit.output(), b = scaled.output();
  const VerifyStats sa = verify(Standard{}, unit.batch(), {21, 0}, a);
  const VerifyStats sb = verify(Standard{}, scaled.batch(), {21, 0}, b);
  EXPECT_EQ(unit.out_tokens, scaled.out_tokens);
  EXPECT_EQ(sa.accepted, sb.accepted);
  EXPECT_GT(sa.accepted, 0);
  EXPECT_LT(sa.accepted, sa.drafted);

  // A draw from weights (1, 3) gives token 1 three times in four: no normalised copy is needed;
  // likewise from (1, 3) times 1e-30, far below the fixed-point grid of the sums (a row of tiny
  // weights is summed at a scale that brings its max near 1).
  for (const float unit : {1.0f, 1e-30f}) {
    const std::vector<float> w{unit, 3.0f * unit};
    testing::Chains bonus(2, true);
    for (int i = 0; i < 40000; ++i) bonus.add({}, {w});
    ChainOutput out = bonus.output();
    verify(Standard{}, bonus.batch(), {8, 0}, out);
    std::vector<std::int64_t> counts(2);
    for (int i = 0; i < bonus.size(); ++i) ++counts[bonus.token(i, 0)];
    EXPECT_TRUE(testing::chi_square(counts, w).fits()) << unit << ": " << counts[0] << " " << counts[1];
  }
}

/// Bytes operator new gives out during one verify call (all threads).
template <class Rule>
std::int64_t verify_heap_bytes(const Rule& rule, Layout& l, std::int32_t threads) {
  ChainOutput out = l.output();
  const ChainBatch<float> batch = l.batch();
  testing::heap::bytes = 0;
  testing::heap::counting = true;
  verify(rule, batch, Randomness{3, 3}, out, CpuOptions{threads});
  testing::heap::counting = false;
  return testing::heap::bytes.load();
}

Layout memory_case(std::int32_t B, std::int32_t V) {
  Layout l(V, 0);
  for (std::int32_t b = 0; b < B; ++b) l.add({b % V, (b + 1) % V}, (b + 2) % V);
  l.fill();
  return l;
}

TEST(ExtremeSizes, MemoryGrowsWithTheOutputNotTheRows) {
  // The same 64 sequences at V = 64 and at V = 16384 (rows 256x larger): verify's own heap use
  // must not change with V, and must stay within a small record per sequence. (One thread: more
  // threads add one small allocation each, and how many start depends on the rows' size.)
  constexpr std::int32_t B = 64;
  Layout small = memory_case(B, 64), large = memory_case(B, 16384);
  const std::int64_t a = verify_heap_bytes(Standard{}, small, 1);
  EXPECT_GT(a, 0);
  EXPECT_EQ(verify_heap_bytes(Standard{}, large, 1), a);
  EXPECT_EQ(verify_heap_bytes(Ears{0.3f}, large, 1), a);  // row statistics: no buffers either
  EXPECT_EQ(verify_heap_bytes(Fsd{Divergence::js, 0.1f}, large, 1), a);
  EXPECT_LE(a, 128 * B + 4096);
  // With threads: a few hundred bytes per thread on top.
  EXPECT_LE(verify_heap_bytes(Standard{}, large, 2), a + 2 * 1024);
  // 16x the sequences: at most 16x the bytes.
  Layout more = memory_case(16 * B, 64);
  const std::int64_t m = verify_heap_bytes(Standard{}, more, 1);
  EXPECT_GT(m, a);
  EXPECT_LE(m, 16 * a);

  // Peak RSS across a call whose rows (20 MiB) are resident before it; reported, for the record
  // (the peak may already be higher from earlier tests, so the counter above is the assertion).
  rusage before{}, after{};
  ChainOutput out = large.output();
  getrusage(RUSAGE_SELF, &before);
  verify(Ears{0.3f}, large.batch(), Randomness{3, 3}, out);
  getrusage(RUSAGE_SELF, &after);
  RecordProperty("rows_KiB", std::to_string((large.p.size() + large.q.size()) * 4 / 1024));
  RecordProperty("peak_rss_growth_KiB", std::to_string(after.ru_maxrss - before.ru_maxrss));
  std::printf("rows %zu KiB, heap during verify %lld bytes (B = %d), peak RSS growth %ld KiB\n",
              (large.p.size() + large.q.size()) * 4 / 1024, static_cast<long long>(a), B,
              after.ru_maxrss - before.ru_maxrss);
}

/// A logits batch of B chains of two drafts over V (distinct values, the max at a row's end so the
/// streaming pre-pass runs its whole path), optionally with a reduced draft vocabulary of V / 2.
struct LogitsMemoryCase {
  std::int32_t B, V, DV;
  std::vector<float> target, draft;
  std::vector<std::int32_t> offsets, tokens, d2t, out, accepted;
  std::vector<SamplingParams> params;
  LogitsMemoryCase(std::int32_t b, std::int32_t v, bool reduced)
      : B(b), V(v), DV(reduced ? v / 2 : v), target(std::size_t(b) * 3 * v), draft(std::size_t(b) * 2 * DV),
        out(std::size_t(b) * 3), accepted(std::size_t(b)), params(std::size_t(b), SamplingParams{0.8f, 0, 1.0f, 0.0f}) {
    for (std::size_t i = 0; i < target.size(); ++i) target[i] = float(i % std::size_t(V)) * 1e-3f;
    for (std::size_t i = 0; i < draft.size(); ++i) draft[i] = float((i * 7) % std::size_t(DV)) * 1e-3f;
    for (std::int32_t s = 0; s <= B; ++s) offsets.push_back(2 * s);
    for (std::int32_t s = 0; s < 2 * B; ++s) tokens.push_back((s * 5) % (DV < V ? DV : V));
    if (reduced) {
      for (std::int32_t d = 0; d < DV; ++d) d2t.push_back(d);  // the first half of the target's ids
    }
  }
  LogitsChainBatch<float> batch() const {
    LogitsChainBatch<float> b;
    b.batch_size = B;
    b.vocab_size = V;
    b.draft_offsets = offsets.data();
    b.draft_tokens = tokens.data();
    b.target_logits = target.data();
    b.draft_logits = draft.data();
    b.target_params = params.data();
    if (!d2t.empty()) {
      b.draft_vocab_size = DV;
      b.draft_to_target = d2t.data();
    }
    return b;
  }
};

std::int64_t verify_heap_bytes(LogitsMemoryCase& c, std::int32_t threads) {
  const LogitsChainBatch<float> batch = c.batch();
  const ChainOutput out{c.out.data(), 3, c.accepted.data()};
  testing::heap::bytes = 0;
  testing::heap::counting = true;
  verify(Standard{}, batch, Randomness{3, 3}, out, CpuOptions{threads});
  testing::heap::counting = false;
  return testing::heap::bytes.load();
}

TEST(ExtremeSizes, LogitsScratchIsTwoRowsPerThread) {
  // verify over logits may keep two rows of scratch per thread (the pre-pass of p and of q, each
  // holding its weights), never a row per sequence or per row read: from V = 64 to V = 16384 its
  // heap use grows by exactly two rows per thread, and with 16x the sequences by their records.
  constexpr std::int32_t B = 64, small = 64, large = 16384;
  constexpr std::int64_t kRow = sizeof(float);
  LogitsMemoryCase s(B, small, false), l(B, large, false);
  const std::int64_t a = verify_heap_bytes(s, 1);
  EXPECT_GT(a, 0);
  EXPECT_LE(a, 128 * B + 2 * small * kRow + 4096);
  EXPECT_EQ(verify_heap_bytes(l, 1), a + 2 * (large - small) * kRow);
  // Two threads (the row work is enough to start both): two rows each, and a thread's own record.
  EXPECT_LE(verify_heap_bytes(l, 2), a + 2 * 2 * large * kRow + 2 * 1024);
  LogitsMemoryCase more(16 * B, small, false);
  EXPECT_LE(verify_heap_bytes(more, 1), 16 * a);
  // A reduced draft vocabulary adds the inverse map, one int per target id, once per batch.
  LogitsMemoryCase rs(B, small, true), rl(B, large, true);
  const std::int64_t r = verify_heap_bytes(rs, 1);
  EXPECT_EQ(verify_heap_bytes(rl, 1), r + 2 * (large - small) * kRow + (large - small) * std::int64_t(sizeof(std::int32_t)));
}

/// One chain of one one-hot draft (the last token) over flat rows of logits: p is uniform, 1 / V.
struct FlatLogits {
  std::int32_t V;
  std::vector<float> logits;
  std::int32_t offsets[2] = {0, 1}, draft = 0;
  SamplingParams params;
  std::vector<std::int32_t> tokens{12345, 12345};
  std::vector<float> logprobs{12345.0f, 12345.0f};
  std::int32_t accepted = 12345;

  explicit FlatLogits(std::int32_t vocab, std::int32_t rows = 2)
      : V(vocab), logits(static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab), 0.0f), draft(vocab - 1) {}

  LogitsChainBatch<float> batch() const {
    LogitsChainBatch<float> b;
    b.batch_size = 1;
    b.vocab_size = V;
    b.draft_offsets = offsets;
    b.draft_tokens = &draft;
    b.target_logits = logits.data();
    b.target_params = &params;
    return b;
  }
  ChainOutput output() { return {tokens.data(), 2, &accepted, logprobs.data()}; }
};

TEST(ExtremeSizes, LogitsAtTheLargestVocabularyAreExact) {
  // Every weight of a flat row is exactly 1, so its normaliser is V itself, 2^22: the largest sum
  // the rows of logits allow (core::kMaxLogitsVocab). p(x) = 2^-22 rejects the one-hot draft at
  // these seeds (u < 2^-22 at none of them), and the extra token's log p is -22 ln 2.
  ASSERT_EQ(core::kMaxLogitsVocab, 1 << 22);
  FlatLogits f(core::kMaxLogitsVocab);
  const float log_p = static_cast<float>(-22.0 * std::log(2.0));
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    const VerifyStats s = verify(Standard{}, f.batch(), {seed, 0}, f.output());
    EXPECT_EQ(s.accepted, 0) << seed;
    EXPECT_EQ(f.accepted, 0) << seed;
    EXPECT_GE(f.tokens[0], 0) << seed;
    EXPECT_LT(f.tokens[0], f.draft) << seed;  // the residual has no mass at the rejected draft
    EXPECT_NEAR(f.logprobs[0], log_p, 1e-6 * std::fabs(log_p)) << seed;
  }
  const std::int32_t sampled = sample(f.logits.data(), f.V, SamplingParams{}, 7, 3);
  EXPECT_GE(sampled, 0);
  EXPECT_LT(sampled, f.V);
}

TEST(ExtremeSizes, LogitsPastTheLargestVocabularyAreRefused) {
  // Past 2^22 a flat row's normaliser would leave FixedSum's domain (and at 2^23 its word): the
  // batch is refused by its size, before a row is read, and no output changes.
  const std::int32_t V = core::kMaxLogitsVocab + 1;
  FlatLogits f(1);  // rows of one logit: the refusal reads none past them
  f.V = V;
  f.draft = V - 1;
  const std::string expected = "vocab_size = 4194305 exceeds 4194304";
  try {
    verify(Standard{}, f.batch(), {1, 0}, f.output());
    ADD_FAILURE() << "V = 2^22 + 1 was accepted";
  } catch (const invalid_input& e) {
    EXPECT_THAT(e.what(), HasSubstr(expected));
  }
  EXPECT_EQ(f.tokens, (std::vector<std::int32_t>{12345, 12345}));
  EXPECT_EQ(f.accepted, 12345);
  try {
    sample(f.logits.data(), V, SamplingParams{}, 7, 3);
    ADD_FAILURE() << "sample() took V = 2^22 + 1";
  } catch (const invalid_input& e) {
    EXPECT_THAT(e.what(), HasSubstr("sample: " + expected));
  }
}

}  // namespace
}  // namespace specverify
