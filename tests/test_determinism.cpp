// Reproducibility: same inputs give the same tokens; per-sequence seeds make a sequence's tokens
// independent of its batch; thread count does not matter, for a batch spread over threads or a
// small batch's rows split over them (cpu/split_row.hpp); a new offset gives new draws.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include <sys/wait.h>
#include <unistd.h>

#include "specverify/core/overlay.hpp"
#include "support.hpp"
#include "trees.hpp"

namespace specverify {
namespace {

using testing::Chains;
using testing::draft_children;
using testing::Trees;

/// B sequences with aligned-but-different p and q over V, drafts sampled from q.
Chains random_chains(std::int32_t B, std::int32_t V, std::int32_t K, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Chains c(V);
  for (std::int32_t b = 0; b < B; ++b) testing::add_aligned_chain(c, 1 + b % K, 1.5, rng);
  return c;
}

template <class Rule>
std::vector<std::int32_t> run_rule(const Rule& rule, Chains& c, const Randomness& r, CpuOptions options = {}) {
  ChainOutput out = c.output();
  verify(rule, c.batch(), r, out, options);
  return c.out_tokens;
}

std::vector<std::int32_t> run(Chains& c, const Randomness& r, CpuOptions options = {}) {
  return run_rule(Standard{}, c, r, options);
}

TEST(Determinism, SameInputsSameTokens) {
  Chains c = random_chains(40, 300, 5, 1);
  EXPECT_EQ(run(c, Randomness{7, 3}), run(c, Randomness{7, 3}));
}

TEST(Determinism, DifferentOffsetsOrSeedsGiveDifferentDraws) {
  Chains c = random_chains(200, 300, 5, 2);
  const auto base = run(c, Randomness{7, 3});
  EXPECT_NE(base, run(c, Randomness{7, 4}));
  EXPECT_NE(base, run(c, Randomness{8, 3}));
}

TEST(Determinism, ThreadCountDoesNotChangeResults) {
  // Enough row work (64 chains of V = 32000) that two threads are really used.
  Chains c = random_chains(64, 32000, 5, 3);
  ASSERT_GE(cpu::detail::thread_count(64, 64, 32000, 2), 2);
  const auto one = run(c, Randomness{9, 1}, CpuOptions{1});
  const auto accepted_one = c.accepted;
  const auto two = run(c, Randomness{9, 1}, CpuOptions{2});
  EXPECT_EQ(one, two);
  EXPECT_EQ(accepted_one, c.accepted);
}

TEST(Determinism, PerSequenceSeedsMakeASequenceBatchInvariant) {
  // Sequence 0 of `alone` reappears as sequence 3 of a larger, differently seeded batch.
  Chains others = random_chains(6, 200, 4, 4);
  Chains alone = random_chains(1, 200, 4, 5);
  Chains mixed(200);
  std::vector<std::uint64_t> seeds;
  for (std::int32_t b = 0; b < 6; ++b) {
    if (b == 3) {
      mixed.offsets.push_back(mixed.offsets.back() + alone.offsets[1]);
      mixed.tokens.insert(mixed.tokens.end(), alone.tokens.begin(), alone.tokens.end());
      mixed.p.insert(mixed.p.end(), alone.p.begin(), alone.p.end());
      mixed.q.insert(mixed.q.end(), alone.q.begin(), alone.q.end());
      mixed.width = std::max(mixed.width, alone.width);
      seeds.push_back(4242);
    }
    const std::int32_t k = others.offsets[b + 1] - others.offsets[b];
    const std::int64_t first_row = others.offsets[b] + b;
    mixed.offsets.push_back(mixed.offsets.back() + k);
    mixed.tokens.insert(mixed.tokens.end(), others.tokens.begin() + others.offsets[b],
                        others.tokens.begin() + others.offsets[b + 1]);
    mixed.p.insert(mixed.p.end(), others.p.begin() + first_row * 200,
                   others.p.begin() + (first_row + k + 1) * 200);
    mixed.q.insert(mixed.q.end(), others.q.begin() + std::int64_t{others.offsets[b]} * 200,
                   others.q.begin() + std::int64_t{others.offsets[b + 1]} * 200);
    mixed.width = std::max(mixed.width, k + 1);
    seeds.push_back(100 + b);
  }
  const std::uint64_t alone_seed = 4242;
  for (std::uint64_t step = 0; step < 20; ++step) {
    Randomness r{1, step, &alone_seed};
    const auto solo = run(alone, r);
    const std::int32_t n = alone.accepted[0];
    const auto batch = run(mixed, Randomness{99, step, seeds.data()});
    ASSERT_EQ(mixed.accepted[3], n) << "step " << step;
    for (std::int32_t i = 0; i <= n; ++i) {
      ASSERT_EQ(mixed.token(3, i), solo[std::size_t(i)]) << "step " << step << " token " << i;
    }
  }
}

// ---------------------------------------------------------------- rows split over the row team

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

constexpr Divergence kDivergences[] = {Divergence::kl_target_draft, Divergence::kl_draft_target, Divergence::js,
                                       Divergence::js_fsd, Divergence::tv};

/// An unsplit statistic a and its split b: the same validity and, where valid, the same bits.
void expect_same_statistic(cpu::Checked<float> a, cpu::Checked<float> b, const char* what, std::int32_t parts) {
  EXPECT_EQ(a.ok, b.ok) << what << " parts " << parts;
  if (a.ok) {
    EXPECT_EQ(bits(a.value), bits(b.value)) << what << " parts " << parts;
  }
}

/// The statistics EARS and FSD read (entropy, every divergence) of rows p and q, unsplit by
/// `whole` and split by `split` (of p's and q's own views ps and qs): the same bits.
template <class Rows, class View>
void expect_same_statistics(const Rows& whole, const Rows& split, const View& p, const View& q, const View& ps,
                            const View& qs, std::int32_t parts) {
  const auto same = [&](cpu::Checked<float> a, cpu::Checked<float> b, const char* what) {
    expect_same_statistic(a, b, what, parts);
  };
  same(whole.entropy(p), split.entropy(ps), "entropy");
  for (const Divergence d : kDivergences) same(whole.divergence(d, p, &q, -1), split.divergence(d, ps, &qs, -1), "divergence");
}

/// A probability row of n with its mass in a few clumps placed across part boundaries, zeros
/// elsewhere (so the crossing lands near a boundary for some u), and optionally unnormalised
/// values up to 2^12 (the draw's rescaled sums).
std::vector<float> clumped_row(std::int32_t n, std::mt19937_64& rng, float scale) {
  std::vector<float> p(static_cast<std::size_t>(n), 0.0f);
  std::uniform_int_distribution<std::int32_t> at(0, n - 1);
  std::uniform_real_distribution<float> value(0.0f, 1.0f);
  for (std::int32_t c = 0; c < 12; ++c) {
    const std::int32_t start = at(rng);
    for (std::int32_t i = start; i < std::min(n, start + 200); ++i) p[std::size_t(i)] = scale * value(rng);
  }
  for (std::int32_t i = 0; i < n; i += 997) p[std::size_t(i)] = scale * value(rng) * 1e-3f;
  return p;
}

/// clumped_row at scale 1, normalised: a distribution whose mass lies all over the row.
std::vector<float> normalised_clumped_row(std::int32_t n, std::mt19937_64& rng) {
  std::vector<float> row = clumped_row(n, rng, 1.0f);
  double total = 0.0;
  for (const float v : row) total += v;
  for (float& v : row) v = static_cast<float>(v / total);
  return row;
}

TEST(CpuSplitRows, DrawsMatchTheUnsplitRowForAnyNumberOfParts) {
  const cpu::TeamLease lease(cpu::RowTeam::instance());
  ASSERT_NE(lease.team(), nullptr);
  cpu::RowTeam& team = *lease.team();
  std::mt19937_64 rng(11);
  std::int64_t draws = 0;
  const std::vector<std::int32_t> lengths = testing::row_lengths({32768, 70001, 128256});
  for (const std::int32_t n : lengths) {
    for (const float scale : {1e-4f, 4096.0f}) {
      const std::vector<float> p = clumped_row(n, rng, scale), q = clumped_row(n, rng, scale);
      const cpu::Rows<> whole{n};
      for (const std::int32_t parts : {2, 3, 5, 7, 16}) {
        cpu::Rows<> split{n};
        split.split = cpu::RowSplit{&team, parts};
        for (const float u : {0.0f, 1e-7f, 0.25f, 0.5f, 0.999f, 0.99999994f}) {
          const std::int32_t x = static_cast<std::int32_t>(rng() % std::uint64_t(n));
          const auto a = whole.draw_residual(p.data(), nullptr, x, u), b = split.draw_residual(p.data(), nullptr, x, u);
          ASSERT_EQ(a.value, b.value) << "one-hot residual, n " << n << " parts " << parts << " u " << u;
          const float* qp = q.data();
          const auto d = whole.draw_residual(p.data(), &qp, -1, u), e = split.draw_residual(p.data(), &qp, -1, u);
          ASSERT_EQ(d.value, e.value) << "residual, n " << n << " parts " << parts << " u " << u;
          ASSERT_EQ(d.ok, e.ok);
          const auto f = whole.draw_target(p.data(), u), g = split.draw_target(p.data(), u);
          ASSERT_EQ(f.value, g.value) << "target, n " << n << " parts " << parts << " u " << u;
          draws += 3;
        }
      }
    }
  }
  EXPECT_EQ(draws, std::int64_t{3 * 2 * 5 * 6} * static_cast<std::int64_t>(lengths.size()));
}

TEST(CpuSplitRows, StatisticsMatchTheUnsplitRowForAnyNumberOfParts) {
  // Max, argmax, entropy and every divergence (EARS and FSD read them): the same bits split or not,
  // on rows that sum to about 1 and on unnormalised ones whose terms leave FixedSum's domain (the
  // sums then rescale from the merged largest term), with the max tied across parts and with a
  // NaN in one part.
  const cpu::TeamLease lease(cpu::RowTeam::instance());
  ASSERT_NE(lease.team(), nullptr);
  cpu::RowTeam& team = *lease.team();
  std::mt19937_64 rng(19);
  std::int64_t compared = 0, rescaled = 0;
  // Every length under the sanitizers too (not testing::row_lengths): no row of the first leaves
  // FixedSum's domain.
  for (const std::int32_t n : {32768, 70001, 128256}) {
    for (const float scale : {1e-4f, 4096.0f}) {
      for (const bool bad : {false, true}) {
        std::vector<float> p = clumped_row(n, rng, scale), q = clumped_row(n, rng, scale);
        p[std::size_t(n - 70)] = p[std::size_t(70)] = 2.0f * scale;  // the max, tied in the first and last parts
        if (bad) q[std::size_t(n / 2 + 3)] = p[std::size_t(n / 2 + 3)] = std::numeric_limits<float>::quiet_NaN();
        const cpu::Rows<> whole{n};
        for (const std::int32_t parts : {2, 3, 5, 7, 16}) {
          cpu::Rows<> split{n};
          split.split = cpu::RowSplit{&team, parts};
          const auto expect_same = [&](cpu::Checked<float> a, cpu::Checked<float> b, const char* what) {
            SCOPED_TRACE(n);
            expect_same_statistic(a, b, what, parts);
            EXPECT_EQ(a.ok, !bad) << what;
            ++compared;
          };
          expect_same(whole.max(p.data()), split.max(p.data()), "max");
          const auto a = whole.argmax(p.data()), b = split.argmax(p.data());
          EXPECT_EQ(a.ok, b.ok);
          EXPECT_EQ(a.value, b.value) << "argmax n " << n << " parts " << parts;
          if (!bad) {
            EXPECT_EQ(b.value, 70);
          }
          expect_same_statistics(whole, split, p.data(), q.data(), p.data(), q.data(), parts);
          for (const Divergence d : kDivergences) {
            expect_same(whole.divergence(d, p.data(), nullptr, 70), split.divergence(d, p.data(), nullptr, 70), "one-hot");
          }
          EXPECT_EQ(whole.entropy(p.data()).ok, !bad);
        }
        double factor;
        const auto sum = cpu::detail::divergence_sum<cpu::DefaultArch>(Divergence::kl_target_draft, p.data(), q.data(), n, factor);
        rescaled += sum.ok && sum.scale != 1.0;
      }
    }
  }
  EXPECT_EQ(compared, 3 * 2 * 2 * 5 * (1 + 5));
  EXPECT_GT(rescaled, 0) << "some rows' sums left FixedSum's domain";
}

/// Logits of n with a few high tokens, guidance, a bitmask forbidding every 5th token, and a part
/// of the row masked whole.
struct SplitLogits {
  std::vector<float> logits, unconditional;
  std::vector<std::uint32_t> allowed;

  SplitLogits(std::int32_t n, std::mt19937_64& rng) {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    for (std::int32_t i = 0; i < n; ++i) {
      logits.push_back(normal(rng));
      unconditional.push_back(normal(rng));
    }
    for (std::int32_t c = 0; c < 5; ++c) logits[rng() % std::uint64_t(n)] = 14.0f;
    allowed.assign(std::size_t(n + 31) / 32, 0xffffffffu);
    for (std::int32_t i = 0; i < n; i += 5) allowed[std::size_t(i / 32)] &= ~(1u << (i % 32));
    for (std::int32_t i = n / 3; i < n / 3 + 20000 && i < n; ++i) allowed[std::size_t(i / 32)] &= ~(1u << (i % 32));
  }
};

TEST(CpuSplitRows, LogitsPrePassAndDrawsMatchTheUnsplitRow) {
  const cpu::TeamLease lease(cpu::RowTeam::instance());
  ASSERT_NE(lease.team(), nullptr);
  cpu::RowTeam& team = *lease.team();
  std::mt19937_64 rng(12);
  // T alone, min_p, greedy, top_k (listed), top_p (dense), and both with min_p.
  const SamplingParams params[] = {{0.8f, 0, 1.0f, 0.0f},  {1.3f, 0, 1.0f, 0.05f}, {0.0f, 0, 1.0f, 0.0f},
                                   {0.8f, 50, 1.0f, 0.0f}, {1.0f, 0, 0.9f, 0.0f},   {0.7f, 400, 0.95f, 0.02f}};
  std::int32_t compared = 0, listed = 0, dense = 0;
  const std::vector<std::int32_t> lengths = testing::row_lengths({32768, 100003});
  for (const std::int32_t n : lengths) {
    const SplitLogits l(n, rng), m(n, rng);
    for (const bool guided : {false, true}) {
      for (const bool masked : {false, true}) {
        for (const SamplingParams& sp : params) {
          const auto row_of = [&](const SplitLogits& s) {
            core::LogitRow<float> row;
            row.logits = s.logits.data();
            row.n = n;
            row.params = sp;
            if (guided) {
              row.unconditional = s.unconditional.data();
              row.guidance_scale = 1.5f;
            }
            if (masked) row.allowed = s.allowed.data();
            return row;
          };
          std::vector<float> scratch_a(std::size_t(2) * n), scratch_b(std::size_t(2) * n);
          const cpu::LogitRows<> whole{n};
          const auto p = cpu::prepare(row_of(l), scratch_a.data()), q = cpu::prepare(row_of(m), scratch_a.data() + n);
          for (const std::int32_t parts : {2, 3, 6}) {
            const cpu::LogitRows<> split{n, cpu::RowSplit{&team, parts}};
            const auto ps = cpu::prepare(row_of(l), scratch_b.data(), split.split);
            const auto qs = cpu::prepare(row_of(m), scratch_b.data() + n, split.split);
            for (const auto* pair : {&p, &q}) {
              const auto& a = *pair;
              const auto& b = pair == &p ? ps : qs;
              ASSERT_EQ(a.ok, b.ok);
              ASSERT_EQ(a.argmax, b.argmax) << "n " << n << " parts " << parts;
              ASSERT_EQ(bits(a.max), bits(b.max));
              ASSERT_EQ(bits(a.threshold), bits(b.threshold)) << "min_p " << sp.min_p;
              ASSERT_EQ(a.norm, b.norm) << "n " << n << " parts " << parts << " T " << sp.temperature;
              ASSERT_EQ(bits(a.inv_norm), bits(b.inv_norm));
              ASSERT_EQ(a.weights == nullptr, b.weights == nullptr);
              ASSERT_EQ(a.listed, b.listed);
              (a.listed >= 0 ? listed : dense) += 1;
              for (std::int32_t i = 0; i < a.listed; ++i) ASSERT_EQ(a.kept[i], b.kept[i]) << "kept " << i;
              if (a.weights) {
                ASSERT_EQ(0, std::memcmp(a.weights, b.weights, sizeof(float) * std::size_t(n)));
              }
            }
            for (const float u : {0.0f, 0.3f, 0.7f, 0.99999994f}) {
              ASSERT_EQ(whole.draw_residual(p, &q, -1, u).value, split.draw_residual(ps, &qs, -1, u).value);
              ASSERT_EQ(whole.draw_residual(p, nullptr, q.argmax, u).value, split.draw_residual(ps, nullptr, q.argmax, u).value);
              ASSERT_EQ(whole.draw_target(p, u).value, split.draw_target(ps, u).value);
            }
            expect_same_statistics(whole, split, p, q, ps, qs, parts);
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 2 * 2 * 6 * 3 * static_cast<std::int32_t>(lengths.size()));
  EXPECT_GT(listed, 0) << "kept sets listed (top_k)";
  EXPECT_GT(dense, 0) << "kept sets as weights";
}

/// A row's penalty and bias lists (core/penalties.hpp) at n: a long history that holds every 7th
/// token near the row's end (the last n % 64 elements, which a split row's parts leave) and tokens
/// everywhere else, two drafts on the path, and a bias that makes token `tie` exactly 14 (the
/// high tokens' logit: the max is held by an entry and by the row, and the lowest index wins).
struct SplitLists {
  std::vector<std::int32_t> history, counts, bias_tokens{}, bias_order{}, drafts;
  std::vector<float> bias_values;

  SplitLists(std::int32_t n, std::int32_t tie, std::vector<float>& logits, std::mt19937_64& rng) {
    for (std::int32_t v = 0; v < n; v += 1 + static_cast<std::int32_t>(rng() % 97)) {
      if (v != tie) history.push_back(v);
    }
    for (std::int32_t v = n / 64 * 64; v < n; ++v) {
      if (v % 7 == 0 && v != tie && !std::binary_search(history.begin(), history.end(), v)) history.push_back(v);
    }
    std::sort(history.begin(), history.end());
    for (std::size_t k = 0; k < history.size(); ++k) counts.push_back(static_cast<std::int32_t>(rng() % 4));
    drafts = {history[history.size() / 2], static_cast<std::int32_t>(rng() % std::uint64_t(n)), 3};
    logits[std::size_t(tie)] = 2.0f;  // 2 + 12 = 14 exactly; not in the history, so no penalty
    bias_tokens = {n - 1, tie, 5};
    bias_values = {-3.0f, 12.0f, 2.5f};
    bias_order = {2, 1, 0};  // token order
  }

  core::PenaltyLists of() const {
    core::PenaltyLists l;
    l.history_tokens = history.data();
    l.history_counts = counts.data();
    l.history_size = static_cast<std::int32_t>(history.size());
    l.bias_tokens = bias_tokens.data();
    l.bias_values = bias_values.data();
    l.bias_order = bias_order.data();
    l.bias_size = static_cast<std::int32_t>(bias_tokens.size());
    l.drafts = drafts.data();
    l.path_end = 2;
    l.penalise = true;
    return l;
  }
};

TEST(CpuSplitRows, PenalisedRowsPrePassAndDrawsMatchTheUnsplitRow) {
  const cpu::TeamLease lease(cpu::RowTeam::instance());
  ASSERT_NE(lease.team(), nullptr);
  cpu::RowTeam& team = *lease.team();
  std::mt19937_64 rng(14);
  // repetition, presence, frequency with T alone, min_p, greedy, top_k (listed), top_p (dense).
  SamplingParams params[] = {{0.8f, 0, 1.0f, 0.0f}, {1.3f, 0, 1.0f, 0.05f}, {0.0f, 0, 1.0f, 0.0f},
                             {0.8f, 50, 1.0f, 0.0f}, {1.0f, 0, 0.9f, 0.0f}};
  for (SamplingParams& sp : params) {
    sp.repetition_penalty = 1.3f;
    sp.presence_penalty = 0.5f;
    sp.frequency_penalty = 0.25f;
  }
  std::int32_t compared = 0, entry_argmax = 0, row_argmax = 0;
  const std::vector<std::int32_t> lengths = testing::row_lengths({32768 + 45, 100003});
  for (const std::int32_t n : lengths) {
    for (const bool early : {true, false}) {  // the tied entry before or after the row's high tokens
      SplitLogits l(n, rng), m(n, rng);
      const std::int32_t tie = early ? 7 : n - 3;
      const SplitLists lp(n, tie, l.logits, rng), lq(n, tie, m.logits, rng);
      for (const bool masked : {false, true}) {
        for (const SamplingParams& sp : params) {
          core::OverlayRoom rooms[2];
          const auto row_of = [&](const SplitLogits& s, const SplitLists& lists, core::OverlayRoom& room) {
            core::LogitRow<float> row;
            row.logits = s.logits.data();
            row.n = n;
            row.params = sp;
            row.lists = lists.of();
            if (masked) row.allowed = s.allowed.data();
            room.build(row);
            return row;
          };
          const core::LogitRow<float> rp = row_of(l, lp, rooms[0]), rq = row_of(m, lq, rooms[1]);
          ASSERT_GT(rp.overlay.size, n / 100);
          std::vector<float> scratch_a(std::size_t(2) * n), scratch_b(std::size_t(2) * n);
          const cpu::LogitRows<> whole{n};
          const auto p = cpu::prepare(rp, scratch_a.data()), q = cpu::prepare(rq, scratch_a.data() + n);
          ASSERT_TRUE(p.ok && p.has_mass());
          (rp.overlay.find(p.argmax) >= 0 ? entry_argmax : row_argmax) += 1;
          for (const std::int32_t parts : {2, 3, 6}) {
            const cpu::LogitRows<> split{n, cpu::RowSplit{&team, parts}};
            const auto ps = cpu::prepare(rp, scratch_b.data(), split.split);
            const auto qs = cpu::prepare(rq, scratch_b.data() + n, split.split);
            for (const auto* pair : {&p, &q}) {
              const auto& a = *pair;
              const auto& b = pair == &p ? ps : qs;
              ASSERT_EQ(a.ok, b.ok);
              ASSERT_EQ(a.argmax, b.argmax) << "n " << n << " parts " << parts << " early " << early;
              ASSERT_EQ(bits(a.max), bits(b.max));
              ASSERT_EQ(bits(a.threshold), bits(b.threshold)) << "min_p " << sp.min_p << " top_p " << sp.top_p;
              ASSERT_EQ(a.norm, b.norm) << "n " << n << " parts " << parts << " T " << sp.temperature;
              ASSERT_EQ(a.listed, b.listed);
              for (std::int32_t i = 0; i < a.listed; ++i) ASSERT_EQ(a.kept[i], b.kept[i]) << "kept " << i;
              ASSERT_EQ(a.weights == nullptr, b.weights == nullptr);
              if (a.weights) {
                ASSERT_EQ(0, std::memcmp(a.weights, b.weights, sizeof(float) * std::size_t(n)));
              }
            }
            for (const float u : {0.0f, 0.3f, 0.7f, 0.99999994f}) {
              ASSERT_EQ(whole.draw_residual(p, &q, -1, u).value, split.draw_residual(ps, &qs, -1, u).value);
              ASSERT_EQ(whole.draw_target(p, u).value, split.draw_target(ps, u).value);
            }
            expect_same_statistics(whole, split, p, q, ps, qs, parts);
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 2 * 2 * 5 * 3 * static_cast<std::int32_t>(lengths.size()));
  EXPECT_GT(entry_argmax, 0) << "the max held first by an entry";
  EXPECT_GT(row_argmax, 0) << "the max held first by the row";
}

TEST(CpuSplitRows, APrePassFindsABadValueInAnyPart) {
  const cpu::TeamLease lease(cpu::RowTeam::instance());
  ASSERT_NE(lease.team(), nullptr);
  cpu::RowTeam& team = *lease.team();
  std::mt19937_64 rng(13);
  const std::int32_t n = 65536;
  SplitLogits l(n, rng);
  for (const std::int32_t at : {5, n / 2 + 7, n - 1}) {
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> logits = l.logits;
      logits[std::size_t(at)] = bad;
      core::LogitRow<float> row;
      row.logits = logits.data();
      row.n = n;
      row.params = {0.8f, 0, 1.0f, 0.0f};
      std::vector<float> scratch(static_cast<std::size_t>(n));
      EXPECT_FALSE(cpu::prepare(row, scratch.data()).ok);
      EXPECT_FALSE(cpu::prepare(row, scratch.data(), cpu::RowSplit{&team, 4}).ok) << "bad value at " << at;
    }
  }
}

TEST(CpuSplitRows, ASplitWithoutATeamReadsTheRowUnsplit) {
  // RowSplit's contract: without a team the row is read unsplit (parts alone once made the
  // prepare hand parts to a null team).
  std::mt19937_64 rng(17);
  const std::int32_t n = 65536;
  SplitLogits l(n, rng);
  core::LogitRow<float> row;
  row.logits = l.logits.data();
  row.n = n;
  row.params = {0.8f, 0, 1.0f, 0.0f};
  EXPECT_FALSE((cpu::RowSplit{nullptr, 4}.active()));
  std::vector<float> unsplit(static_cast<std::size_t>(n)), teamless(static_cast<std::size_t>(n));
  const auto a = cpu::prepare(row, unsplit.data());
  const auto b = cpu::prepare(row, teamless.data(), cpu::RowSplit{nullptr, 4});
  ASSERT_TRUE(a.ok && b.ok);
  EXPECT_EQ(a.argmax, b.argmax);
  EXPECT_EQ(a.norm, b.norm);
  EXPECT_EQ(unsplit, teamless);
}

/// One sequence's logits chain (K drafts from the draft rows' argmax or a random token) at V.
struct SplitChain {
  std::int32_t V, K;
  std::vector<float> target, draft;
  std::vector<std::int32_t> offsets{0}, tokens, out_tokens, accepted;
  std::vector<float> logprobs;
  std::vector<SamplingParams> params;  // per sequence

  SplitChain(std::int32_t B, std::int32_t vocab, std::int32_t k, SamplingParams sp, std::mt19937_64& rng)
      : V(vocab), K(k), params(std::size_t(B), sp) {
    std::normal_distribution<float> normal(0.0f, 2.5f);
    for (std::int32_t b = 0; b < B; ++b) {
      for (std::int32_t j = 0; j <= K; ++j) {
        for (std::int32_t v = 0; v < V; ++v) target.push_back(normal(rng));
      }
      for (std::int32_t j = 0; j < K; ++j) {
        const std::size_t row = draft.size();
        for (std::int32_t v = 0; v < V; ++v) draft.push_back(0.7f * target[std::size_t(b * (K + 1) + j) * V + v] + normal(rng));
        tokens.push_back(static_cast<std::int32_t>(std::max_element(draft.begin() + row, draft.end()) - (draft.begin() + row)));
      }
      offsets.push_back(offsets.back() + K);
    }
    out_tokens.assign(std::size_t(B) * (K + 1), -7);
    accepted.assign(std::size_t(B), -7);
    logprobs.assign(std::size_t(B) * (K + 1), 0.0f);
  }

  LogitsChainBatch<float> batch() {
    LogitsChainBatch<float> b;
    b.batch_size = static_cast<std::int32_t>(accepted.size());
    b.vocab_size = V;
    b.draft_offsets = offsets.data();
    b.draft_tokens = tokens.data();
    b.target_logits = target.data();
    b.draft_logits = draft.data();
    b.target_params = params.data();
    return b;
  }
  ChainOutput output() {
    ChainOutput out{out_tokens.data(), K + 1, accepted.data()};
    out.logprobs = logprobs.data();
    return out;
  }
};

TEST(CpuSplitRows, VerifyGivesOneThreadsBitsAtAnyThreadCount) {
  // One or two sequences walk on one thread, whose rows split over the team.
  ASSERT_EQ(cpu::detail::thread_count(2, 2, 128256, 2), 1);
  ASSERT_EQ(cpu::detail::SplitRows(1, 128256, 2).split().parts, 2);
  ASSERT_EQ(cpu::detail::SplitRows(1, 128256, 7).split().parts, 7);
  std::mt19937_64 rng(14);
  const SamplingParams params[] = {{0.8f, 0, 1.0f, 0.0f}, {1.0f, 0, 1.0f, 0.1f}, {0.8f, 50, 0.9f, 0.0f}};
  std::int32_t calls = 0;
  for (const std::int32_t B : {1, 2}) {
    for (const SamplingParams& sp : params) {
      SplitChain c(B, 128256, 3, sp, rng);
      for (std::uint64_t step = 0; step < 6; ++step) {
        VerifyStats one_stats = verify(Standard{}, c.batch(), Randomness{5, step}, c.output(), CpuOptions{1});
        const auto tokens = c.out_tokens;
        const auto accepted = c.accepted;
        const auto logprobs = c.logprobs;
        for (const std::int32_t threads : {2, 3, 7, 0}) {
          const VerifyStats stats = verify(Standard{}, c.batch(), Randomness{5, step}, c.output(), CpuOptions{threads});
          ASSERT_EQ(tokens, c.out_tokens) << "B " << B << " threads " << threads << " step " << step;
          ASSERT_EQ(accepted, c.accepted);
          ASSERT_EQ(0, std::memcmp(logprobs.data(), c.logprobs.data(), sizeof(float) * logprobs.size()));
          ASSERT_EQ(one_stats.accepted, stats.accepted);
          ++calls;
        }
      }
    }
  }
  EXPECT_EQ(calls, 2 * 3 * 6 * 4);
}

TEST(CpuSplitRows, ProbabilityChainsGiveOneThreadsBitsAtAnyThreadCount) {
  // Clumped rows spread their mass over the whole row, so the draws cross in every part.
  std::mt19937_64 rng(15);
  const std::int32_t V = 70001, K = 3;
  const auto normalised = [&] { return normalised_clumped_row(V, rng); };
  for (const std::int32_t B : {1, 3}) {
    Chains c(V);
    for (std::int32_t b = 0; b < B; ++b) {
      std::vector<std::vector<float>> ps, qs;
      std::vector<std::int32_t> xs;
      for (std::int32_t j = 0; j < K; ++j) {
        ps.push_back(normalised());
        qs.push_back(normalised());
        // A token q favours (accepted with probability p/q < 1 at times), clumps being random.
        xs.push_back(static_cast<std::int32_t>(std::max_element(qs.back().begin(), qs.back().end()) - qs.back().begin()));
      }
      ps.push_back(normalised());
      c.add(xs, ps, qs);
    }
    std::set<std::int32_t> parts_hit;
    for (std::uint64_t step = 0; step < 16; ++step) {
      const auto one = run(c, Randomness{9, step}, CpuOptions{1});
      const auto accepted = c.accepted;
      parts_hit.insert(one[std::size_t(accepted[0])] / (V / 2));
      for (const std::int32_t threads : {2, 4, 0}) {
        ASSERT_EQ(one, run(c, Randomness{9, step}, CpuOptions{threads})) << "B " << B << " threads " << threads;
        ASSERT_EQ(accepted, c.accepted);
      }
    }
    EXPECT_EQ(parts_hit.size(), 2u) << "draws in both halves of the row";
  }
}

TEST(CpuSplitRows, TreeResidualsAndBlockGiveOneThreadsBitsAtAnyThreadCount) {
  // A root with four children drafted from a q clumped apart from p (so siblings are rejected and
  // absorbed, each one a residual pass over the row), one grandchild; and Block's scaled residual
  // on a chain. Clumped rows spread the residual's mass over the whole row.
  std::mt19937_64 rng(17);
  const std::int32_t V = 70001;
  const auto normalised = [&] { return normalised_clumped_row(V, rng); };
  std::set<std::int32_t> halves;
  for (const Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    Trees t(V, how);
    std::vector<std::vector<float>> ps, qs;
    for (std::int32_t r = 0; r < 6; ++r) {
      ps.push_back(normalised());
      qs.push_back(normalised());
    }
    std::vector<std::int32_t> xs = draft_children(qs[0], 4, how, rng);
    xs.push_back(draft_children(qs[1], 1, how, rng)[0]);
    t.add({-1, -1, -1, -1, 0}, xs, ps, qs);
    for (std::uint64_t step = 0; step < 12; ++step) {
      verify(Standard{}, t.batch(), Randomness{5, step}, t.output(), CpuOptions{1});
      const auto tokens = t.out_tokens, nodes = t.nodes, accepted = t.accepted;
      const auto logprobs = t.logprobs;
      halves.insert(tokens[std::size_t(accepted[0])] / (V / 2 + 1));
      for (const std::int32_t threads : {2, 4, 0}) {
        verify(Standard{}, t.batch(), Randomness{5, step}, t.output(), CpuOptions{threads});
        ASSERT_EQ(tokens, t.out_tokens) << "drafted " << int(how) << " threads " << threads;
        ASSERT_EQ(nodes, t.nodes);
        ASSERT_EQ(accepted, t.accepted);
        ASSERT_EQ(0, std::memcmp(logprobs.data(), t.logprobs.data(), sizeof(float) * logprobs.size()));
      }
    }
  }
  EXPECT_EQ(halves.size(), 2u) << "draws in both halves of the row";
  Chains c(V);
  std::vector<std::vector<float>> ps, qs;
  std::vector<std::int32_t> xs;
  for (std::int32_t j = 0; j < 3; ++j) {
    ps.push_back(normalised());
    qs.push_back(normalised());
    xs.push_back(static_cast<std::int32_t>(std::max_element(qs.back().begin(), qs.back().end()) - qs.back().begin()));
  }
  ps.push_back(normalised());
  c.add(xs, ps, qs);
  for (std::uint64_t step = 0; step < 12; ++step) {
    const auto one = run_rule(Block{}, c, Randomness{6, step}, CpuOptions{1});
    const auto accepted = c.accepted;
    for (const std::int32_t threads : {2, 4, 0}) {
      ASSERT_EQ(one, run_rule(Block{}, c, Randomness{6, step}, CpuOptions{threads})) << "Block, threads " << threads;
      ASSERT_EQ(accepted, c.accepted);
    }
  }
}

TEST(CpuSplitRows, AChildMadeByForkSplitsItsRowsAlone) {
  // The parent's team has started (and its workers may hold its lock when fork() copies it): the
  // child must neither wait for them nor touch the lock, and gets the same bits.
  std::mt19937_64 rng(16);
  SplitChain c(1, 65536, 2, SamplingParams{0.8f, 0, 1.0f, 0.0f}, rng);
  verify(Standard{}, c.batch(), Randomness{3, 1}, c.output(), CpuOptions{2});
  const auto tokens = c.out_tokens;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);  // a hang fails the test instead of stalling it
    bool same = true;
    for (int call = 0; call < 20; ++call) {
      verify(Standard{}, c.batch(), Randomness{3, 1}, c.output(), CpuOptions{2});
      same = same && c.out_tokens == tokens;
    }
    _exit(same ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's tokens differ";
}
}  // namespace
}  // namespace specverify
