// Trees on CUDA against the CPU: identical tokens, accepted nodes, logprobs, counts and statistics
// on random ragged trees, for every rule with a tree form and every Drafted (float rows, and
// __half / bf16 against the CPU on the converted rows); every malformed tree of trees.hpp
// reported by check() in the CPU's words with nothing written; and sequence-level exactness of
// Standard on trees on the GPU, with a negative control that must fail. The CPU halves run
// anywhere; the device halves skip where there is no CUDA device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "device_support.cuh"
#include "support.hpp"
#include "trees.hpp"
#include "typical_acceptance.hpp"

namespace specverify {
namespace {

using ::testing::HasSubstr;
using testing::convert;
using testing::cuda_ok;
using testing::DeviceArray;
using testing::Probe;
using testing::rounded;
using testing::Scored;
using testing::Trees;
using testing::upload;

/// A Trees batch on the device as Prob, its randomness arrays, outputs (filled as Trees::output
/// fills them) and workspace.
template <class Prob = float>
struct DeviceTrees {
  DeviceArray<std::int32_t> offsets, parents, tokens, out_tokens, accepted, nodes;
  DeviceArray<Prob> p, q;
  DeviceArray<float> logprobs, accept_u, sample_u;
  DeviceArray<std::uint64_t> seeds;
  DeviceArray<std::int64_t> positions;
  DeviceArray<unsigned char> workspace_data;
  TreeBatch<Prob> batch;
  TreeOutput out;
  cuda::Workspace workspace;

  explicit DeviceTrees(const Trees& t) {
    offsets.assign(t.offsets);
    parents.assign(t.parents);
    tokens.assign(t.tokens);
    p.assign(convert<Prob>(t.p));
    q.assign(convert<Prob>(t.q));
    batch.batch_size = t.size();
    batch.vocab_size = t.V;
    batch.node_offsets = offsets.get();
    batch.parents = parents.get();
    batch.draft_tokens = tokens.get();
    batch.target_probs = p.get();
    batch.draft_probs = t.with_q ? q.get() : nullptr;
    batch.drafted = t.drafted;
    Trees filled = t;
    filled.output();
    out_tokens.assign(filled.out_tokens);
    accepted.assign(filled.accepted);
    nodes.assign(filled.nodes);
    logprobs.assign(filled.logprobs);
    out = TreeOutput{out_tokens.get(), t.width, accepted.get(), nodes.get(), logprobs.get()};
    const std::size_t bytes = cuda::workspace_bytes(Standard{}, batch, out);
    workspace_data.assign(std::vector<unsigned char>(bytes));
    workspace = cuda::Workspace{workspace_data.get(), bytes};
  }

  Randomness on_device(const Randomness& r, const Trees& t) {
    Randomness d = r;
    const auto B = std::size_t(t.size());
    d.sequence_seeds = upload(seeds, r.sequence_seeds, B);
    d.accept_uniforms = upload(accept_u, r.accept_uniforms, t.tokens.size());
    d.sample_uniforms = upload(sample_u, r.sample_uniforms, B);
    d.positions = upload(positions, r.positions, B);
    return d;
  }

  /// The device's outputs into t's output arrays.
  void read_into(Trees& t) const {
    t.out_tokens = out_tokens.read();
    t.accepted = accepted.read();
    t.nodes = nodes.read();
    t.logprobs = logprobs.read();
  }
};

/// Runs `cpu_rule` on the CPU (on `cpu_trees`) and `gpu_rule` on the GPU (on `gpu_trees` as Prob)
/// (rows split as `launch` says) and expects the same tokens, accepted nodes, counts, logprobs and
/// statistics.
template <class Prob = float, class Rule>
void expect_same(const Rule& cpu_rule, const Rule& gpu_rule, Trees& cpu_trees, const Trees& gpu_trees,
                 const Randomness& r, const cuda::Launch& launch = {}) {
  const VerifyStats cpu_stats = verify(cpu_rule, cpu_trees.batch(), r, cpu_trees.output());
  DeviceTrees<Prob> d(gpu_trees);
  cuda_ok(cuda::verify(gpu_rule, d.batch, d.on_device(r, gpu_trees), d.out, d.workspace, nullptr, launch));
  cuda::check(d.workspace, nullptr);
  const VerifyStats gpu_stats = cuda::read_stats(d.workspace, nullptr);
  Trees gpu = gpu_trees;
  d.read_into(gpu);
  EXPECT_EQ(gpu.out_tokens, cpu_trees.out_tokens);
  EXPECT_EQ(gpu.accepted, cpu_trees.accepted);
  EXPECT_EQ(gpu.nodes, cpu_trees.nodes);
  testing::expect_same_logprobs(gpu.logprobs, cpu_trees.logprobs);
  EXPECT_EQ(gpu_stats.drafted, cpu_stats.drafted);
  EXPECT_EQ(gpu_stats.accepted, cpu_stats.accepted);
  EXPECT_EQ(gpu_stats.relaxed, cpu_stats.relaxed);
  EXPECT_EQ(gpu_stats.target_checked, cpu_stats.target_checked);
  for (const std::int32_t token : gpu.out_tokens) {
    ASSERT_GE(token, kNoToken);
    ASSERT_LT(token, gpu_trees.V);
  }
}

template <class Rule>
void expect_same(const Rule& rule, Trees& t, const Randomness& r) {
  expect_same<float>(rule, rule, t, t, r);
}

struct Shape {
  std::int32_t B, V, max_nodes;
};

class TreeCpuMatch : public ::testing::TestWithParam<Shape> {};

/// Every rule with a tree form (SpecDecPP cuts chains and has none; Traversal needs sampled
/// children), for each Drafted, with seeds, per-sequence seeds and caller uniforms.
TEST_P(TreeCpuMatch, EveryRuleAndEveryDraftedGivesTheCpuTokens) {
  REQUIRE_DEVICE();
  const Shape s = GetParam();
  std::mt19937_64 rng(std::uint64_t(s.V) * 31 + std::uint64_t(s.B));
  for (const Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    SCOPED_TRACE(static_cast<int>(how));
    Trees t = testing::random_trees(s.B, s.V, s.max_nodes, how, rng);
    std::vector<std::uint64_t> seeds(std::size_t(t.size()));
    for (auto& seed : seeds) seed = rng();
    std::uniform_real_distribution<float> unit(0.0f, 0.999f);
    std::vector<float> accept(t.tokens.size()), sample(std::size_t(t.size()));
    for (auto& u : accept) u = unit(rng);
    for (auto& u : sample) u = unit(rng);
    std::vector<float> scores(t.tokens.size());
    for (auto& v : scores) v = unit(rng);
    DeviceArray<float> d_scores(scores);
    std::vector<std::int64_t> positions(std::size_t(t.size()));
    for (auto& position : positions) position = std::int64_t(rng() % 100000);
    for (std::uint64_t step = 0; step < 3; ++step) {
      Randomness r{4321, step};
      r.positions = positions.data();  // Coupled keys its samples by them; the other rules ignore them
      if (step == 1) r.sequence_seeds = seeds.data();
      if (step == 2) {
        r.accept_uniforms = accept.data();
        r.sample_uniforms = sample.data();
      }
      expect_same(Standard{}, t, r);
      expect_same(Greedy{}, t, r);
      for (const Divergence d : {Divergence::kl_target_draft, Divergence::kl_draft_target,
                                 Divergence::js, Divergence::js_fsd, Divergence::tv}) {
        expect_same(Probe{d, 0.3f}, t, r);
      }
      expect_same<float>(Scored{scores.data(), 0.6f}, Scored{d_scores.get(), 0.6f}, t, t, r);
      expect_same(Ears{0.3f}, t, r);
      expect_same(TypicalAcceptance{}, t, r);
      for (const Divergence d : {Divergence::kl_draft_target, Divergence::js, Divergence::tv}) {
        expect_same(Fsd{d, 0.3f}, t, r);
        expect_same(ReducibleFsd{d, 0.1f}, t, r);
      }
      expect_same<float>(Sprinter{0.6f, scores.data()}, Sprinter{0.6f, d_scores.get()}, t, t, r);
      if (how == Drafted::sampled) expect_same(Traversal{}, t, r);  // i.i.d. children only
      expect_same(Coupled{}, t, r);  // the Gumbel race over p, with the shared log
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TreeCpuMatch,
                         ::testing::Values(Shape{5, 1, 3}, Shape{37, 7, 8}, Shape{40, 1000, 12},
                                           Shape{16, 70000, 6}, Shape{3, 300000, 4}),
                         [](const auto& info) {
                           return "B" + std::to_string(info.param.B) + "_V" + std::to_string(info.param.V) +
                                  "_N" + std::to_string(info.param.max_nodes);
                         });

// A tree's rows split over 1, 2, 4 or 8 blocks (a cluster, on GPUs that have them) give the CPU's
// tokens every time: the residual masses and draws after rejected siblings merge exactly.
TEST(TreeSplitRows, EverySplitGivesTheCpuTokens) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(79);
  for (const Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    Trees t = testing::random_trees(6, 40000, 12, how, rng);
    for (const std::int32_t blocks : {1, 2, 4, 8}) {
      SCOPED_TRACE(blocks);
      const cuda::Launch launch{blocks};
      const std::vector<std::int64_t> positions(6, 900);
      Randomness r{2026, std::uint64_t(blocks)};
      r.positions = positions.data();
      expect_same(Standard{}, Standard{}, t, t, r, launch);
      expect_same(Probe{Divergence::js}, Probe{Divergence::js}, t, t, r, launch);
      expect_same(Ears{0.3f}, Ears{0.3f}, t, t, r, launch);
      if (how == Drafted::sampled) expect_same(Traversal{}, Traversal{}, t, t, r, launch);
      expect_same(Coupled{}, Coupled{}, t, t, r, launch);
    }
  }
}

template <class Prob>
void expect_low_precision_matches_cpu() {
  std::mt19937_64 rng(78);
  for (const Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    const Trees t = testing::random_trees(32, 5000, 10, how, rng);
    Trees cpu = t;
    cpu.p = rounded<Prob>(t.p);
    cpu.q = rounded<Prob>(t.q);
    for (std::uint64_t step = 0; step < 3; ++step) {
      expect_same<Prob>(Standard{}, Standard{}, cpu, t, Randomness{99, step});
      expect_same<Prob>(Greedy{}, Greedy{}, cpu, t, Randomness{99, step});
      expect_same<Prob>(Probe{Divergence::js}, Probe{Divergence::js}, cpu, t, Randomness{99, step});
    }
  }
}

TEST(TreeLowPrecision, HalfRowsGiveTheCpuTokensOnTheConvertedRows) {
  REQUIRE_DEVICE();
  expect_low_precision_matches_cpu<__half>();
}

TEST(TreeLowPrecision, Bfloat16RowsGiveTheCpuTokensOnTheConvertedRows) {
  REQUIRE_DEVICE();
  expect_low_precision_matches_cpu<__nv_bfloat16>();
}

TEST(TreeOutputs, AcceptedNodesAndLogprobsAreOptional) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(5);
  Trees t = testing::random_trees(20, 300, 9, Drafted::sampled, rng);
  Trees cpu = t;
  TreeOutput cpu_out = cpu.output();
  cpu_out.accepted_nodes = nullptr;
  cpu_out.logprobs = nullptr;
  verify(Standard{}, cpu.batch(), Randomness{8, 1}, cpu_out);
  DeviceTrees<float> d(t);
  TreeOutput out = d.out;
  out.accepted_nodes = nullptr;
  out.logprobs = nullptr;
  const cuda::Workspace small{d.workspace.data, cuda::workspace_bytes(Standard{}, d.batch)};
  cuda_ok(cuda::verify(Standard{}, d.batch, Randomness{8, 1}, out, small, nullptr));
  cuda::check(small, nullptr);
  EXPECT_EQ(d.out_tokens.read(), cpu.out_tokens);
  EXPECT_EQ(d.accepted.read(), cpu.accepted);
  for (const std::int32_t n : d.nodes.read()) {
    ASSERT_EQ(n, Trees::kSentinel) << "accepted_nodes written without a pointer";
  }
  for (const float l : d.logprobs.read()) {
    ASSERT_EQ(l, Trees::kSentinelLogprob) << "logprobs written without a pointer";
  }
}

// ---- Bad trees: the CPU's message, word for word, and nothing written ----

/// The CPU's message for a case, after checking its fragments and that nothing was written.
std::string cpu_message(testing::BadTree& c) {
  const TreeOutput out = c.trees.output();
  const std::string message =
      testing::message_of([&] { verify(Standard{}, c.batch(), c.trees.randomness(), out); });
  EXPECT_NE(message, "") << c.name << ": no invalid_input";
  for (const auto& f : c.fragments) EXPECT_THAT(message, HasSubstr(f)) << c.name;
  EXPECT_TRUE(c.trees.untouched()) << c.name << ": written despite the fault";
  return message;
}

TEST(BadTrees, TheCpuNamesEveryCaseAndWritesNothing) {
  for (auto& c : testing::bad_trees()) cpu_message(c);
}

TEST(BadTrees, TheDeviceGivesTheCpusMessageAndWritesNothing) {
  REQUIRE_DEVICE();
  for (auto& c : testing::bad_trees()) {
    const std::string expected = cpu_message(c);
    DeviceTrees<float> d(c.trees);
    TreeBatch<float> batch = d.batch;
    c.edit(batch);
    const Randomness r = d.on_device(c.trees.randomness(), c.trees);
    // Shape faults throw from verify, the rest from check: the message is the same either way.
    const std::string got = testing::message_of([&] {
      cuda_ok(cuda::verify(Standard{}, batch, r, d.out, d.workspace, nullptr));
      cuda::check(d.workspace, nullptr);
    });
    EXPECT_EQ(got, expected) << c.name;
    Trees gpu = c.trees;
    d.read_into(gpu);
    EXPECT_TRUE(gpu.untouched()) << c.name << ": written despite the fault";
    EXPECT_EQ(cuda::read_stats(d.workspace, nullptr).drafted, 0) << c.name;
  }
}

TEST(BadTrees, TheDeviceRefusesAWideNodeTheCpuWalks) {
  Trees t = testing::wide_root();
  const TreeOutput out = t.output();
  verify(Standard{}, t.batch(), Randomness{5, 0}, out);
  EXPECT_EQ(t.accepted[0], 0);
  EXPECT_EQ(t.out_tokens[0], 0);  // all of p's mass
  REQUIRE_DEVICE();
  Trees wide = testing::wide_root();
  DeviceTrees<float> d(wide);
  const Randomness r = d.on_device(Randomness{5, 0}, wide);
  const std::string got = testing::message_of([&] {
    cuda_ok(cuda::verify(Standard{}, d.batch, r, d.out, d.workspace, nullptr));
    cuda::check(d.workspace, nullptr);
  });
  EXPECT_THAT(got, HasSubstr("sequence 0, node 64: more than 64 rejected children kept at once"));
  Trees gpu = wide;
  d.read_into(gpu);
  EXPECT_TRUE(gpu.untouched()) << "written despite the refusal";
}

TEST(BadTrees, ADeterministicTreeNeedsNoDraftRows) {
  Trees t = testing::two_trees(Drafted::deterministic);
  ASSERT_EQ(t.batch().draft_probs, nullptr);
  EXPECT_NO_THROW(verify(Standard{}, t.batch(), Randomness{1}, t.output()));
  if (!testing::has_device()) GTEST_SKIP() << "no CUDA device (the CPU half passed)";
  Trees cpu = t;
  expect_same(Standard{}, cpu, Randomness{1});
}

/// Thrown by the host half of cuda::verify before any device work, so this runs anywhere.
TEST(BadTrees, RuleParametersThrowFromVerifyAsOnTheCpu) {
  Trees t = testing::two_trees();
  const cuda::Workspace workspace{&t, std::size_t{1} << 30};  // never reached
  const auto expect_thrown = [&](const auto& rule, const char* fragment) {
    const std::string expected = testing::message_of([&] { verify(rule, t.batch(), Randomness{}, t.output()); });
    EXPECT_THAT(expected, HasSubstr(fragment));
    EXPECT_EQ(testing::message_of([&] {
                (void)cuda::verify(rule, t.batch(), Randomness{}, t.output(), workspace, nullptr);
              }),
              expected);
  };
  expect_thrown(Fsd{static_cast<Divergence>(99), 0.3f}, "rule parameter divergence = 99 is out of range");
  expect_thrown(ReducibleFsd{static_cast<Divergence>(-3), 0.3f}, "rule parameter divergence = -3 is out of range");
  expect_thrown(Sprinter{0.5f, nullptr}, "rule parameter verifier_scores is null");
  EXPECT_TRUE(t.untouched()) << "written despite the fault";
}

TEST(BadTrees, PerNodeRuleInputsAreCheckedWhereTheDataLives) {
  Trees t = testing::two_trees();
  const std::vector<float> scores{0.5f, 0.5f, 0.5f, 1.5f, 0.5f, 0.5f, 0.5f};
  const std::string expected = testing::message_of(
      [&] { verify(Sprinter{0.5f, scores.data()}, t.batch(), Randomness{}, t.output()); });
  EXPECT_EQ(expected, "specverify::verify: sequence 1, node 0: verifier score = 1.5 is out of range");
  if (!testing::has_device()) GTEST_SKIP() << "no CUDA device (the CPU half passed)";
  DeviceArray<float> d_scores(scores);
  DeviceTrees<float> d(t);
  EXPECT_EQ(testing::message_of([&] {
              cuda_ok(cuda::verify(Sprinter{0.5f, d_scores.get()}, d.batch, Randomness{}, d.out, d.workspace, nullptr));
              cuda::check(d.workspace, nullptr);
            }),
            expected);
}

// ---- Exactness on the GPU: a decode loop of tree steps follows the target ----

/// The joint of the first three tokens of decode loops whose every step verifies one tree with
/// Standard through `run`: 3 children per node, 2 levels, drafted as `how` says and declared as
/// `declared`. The target is position-dependent and memoryless (token t ~ P[t] whatever came
/// before), so the exact joint is P[0] x P[1] x P[2]; the draft is Q[t] (reversed P[t] where
/// adversarial, so most mass goes through the residual). Returns the chi-square against it.
template <class Run>
testing::ChiSquare tree_decode_chi_square(Drafted how, Drafted declared, bool adversarial, const Run& run) {
  constexpr std::int32_t V = 5, kWidth = 3, kBatch = 10000, kTokens = 3;
  constexpr std::int64_t kTrials = 200000;
  std::mt19937_64 rng(21);
  std::vector<std::vector<float>> P, Q;
  for (std::int32_t t = 0; t < kTokens + 2; ++t) {
    P.push_back(testing::softmax(testing::random_logits(V, rng, 1.5)));
    auto q = adversarial ? P.back() : testing::softmax(testing::random_logits(V, rng, 1.5));
    if (adversarial) std::reverse(q.begin(), q.end());
    Q.push_back(q);
  }
  std::vector<float> exact;
  for (std::int32_t a = 0; a < V; ++a) {
    for (std::int32_t b = 0; b < V; ++b) {
      for (std::int32_t c = 0; c < V; ++c) exact.push_back(P[0][a] * P[1][b] * P[2][c]);
    }
  }
  std::vector<std::int64_t> counts(exact.size());
  std::uint64_t call = 0;
  for (std::int64_t done = 0; done < kTrials; done += kBatch) {
    std::vector<std::vector<std::int32_t>> emitted(kBatch);
    for (;;) {
      std::vector<std::int32_t> active;
      for (std::int32_t b = 0; b < kBatch; ++b) {
        if (std::int32_t(emitted[b].size()) < kTokens) active.push_back(b);
      }
      if (active.empty()) break;
      Trees t(V, declared);
      for (const std::int32_t b : active) {
        const std::size_t at = emitted[b].size();
        std::vector<std::int32_t> parents, xs;
        std::vector<std::vector<float>> ps{P[at]}, qs{Q[at]};
        for (const std::int32_t x : testing::draft_children(Q[at], kWidth, how, rng)) {
          parents.push_back(-1);
          xs.push_back(x);
          ps.push_back(P[at + 1]);
          qs.push_back(Q[at + 1]);
        }
        for (std::int32_t level1 = 0; level1 < kWidth; ++level1) {
          for (const std::int32_t x : testing::draft_children(Q[at + 1], kWidth, how, rng)) {
            parents.push_back(level1);
            xs.push_back(x);
            ps.push_back(P[at + 2]);
            qs.push_back(Q[at + 2]);
          }
        }
        t.add(parents, xs, ps, qs);
      }
      run(t, Randomness{99, call++});
      for (std::size_t i = 0; i < active.size(); ++i) {
        auto& e = emitted[active[i]];
        for (std::int32_t j = 0; j <= t.accepted[i]; ++j) e.push_back(t.out_tokens[i * std::size_t(t.width) + j]);
      }
    }
    for (const auto& e : emitted) ++counts[std::size_t((e[0] * V + e[1]) * V + e[2])];
  }
  return testing::chi_square(counts, exact);
}

void cpu_run(Trees& t, const Randomness& r) { verify(Standard{}, t.batch(), r, t.output()); }

void gpu_run(Trees& t, const Randomness& r) {
  DeviceTrees<float> d(t);
  cuda_ok(cuda::verify(Standard{}, d.batch, r, d.out, d.workspace, nullptr));
  cuda::check(d.workspace, nullptr);
  d.read_into(t);
}

/// The harness on the CPU, whose tokens the GPU must reproduce: every Drafted declared as drafted
/// passes, and the negative control (deterministic top-k children declared sampled) fails, so the
/// GPU test below is known to see a bias.
TEST(TreeExactness, TheHarnessOnTheCpuPassesEveryDraftedAndSeesAWrongOne) {
  for (const bool adversarial : {false, true}) {
    for (const Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
      const auto chi = tree_decode_chi_square(how, how, adversarial, cpu_run);
      EXPECT_TRUE(chi.fits()) << "Drafted " << int(how) << (adversarial ? " adversarial" : "") << ": chi2 "
                              << chi.statistic << " df " << chi.df;
    }
  }
  const auto wrong = tree_decode_chi_square(Drafted::deterministic, Drafted::sampled, false, cpu_run);
  EXPECT_FALSE(wrong.fits()) << "negative control: chi2 " << wrong.statistic << " df " << wrong.df;
  ::testing::Test::RecordProperty("negative_control_chi2", std::to_string(wrong.statistic));
}

TEST(TreeExactness, GpuStandardFollowsTheTargetForEveryDrafted) {
  REQUIRE_DEVICE();
  for (const bool adversarial : {false, true}) {
    for (const Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
      const auto chi = tree_decode_chi_square(how, how, adversarial, gpu_run);
      EXPECT_TRUE(chi.fits()) << "Drafted " << int(how) << (adversarial ? " adversarial" : "") << ": chi2 "
                              << chi.statistic << " df " << chi.df;
    }
  }
  const auto wrong = tree_decode_chi_square(Drafted::deterministic, Drafted::sampled, false, gpu_run);
  EXPECT_FALSE(wrong.fits()) << "negative control: chi2 " << wrong.statistic << " df " << wrong.df;
}

}  // namespace
}  // namespace specverify
