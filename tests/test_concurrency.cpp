// Many threads calling verify() at once, each on its own outputs, over shared read-only inputs and
// shared rule objects: every call gives the tokens a serial call gives. The only global mutable
// state is the row team (cpu/row_team.hpp), leased by one call at a time; its own tests are below.
// The tsan preset builds this test with ThreadSanitizer to show there is no race:
//   cmake --preset tsan && cmake --build --preset tsan -j2 && ctest --preset tsan
// (clang++: with a function-local static ChainResult shared by the threads planted in verify(),
// clang's TSan reports the race and g++ 12's does not, as it misses the writes walk_chain makes
// through its return slot; the mismatch count below catches that plant either way.)
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "specverify/heads.hpp"
#include "penalty_lists.hpp"
#include "support.hpp"
#include "typical_acceptance.hpp"

namespace specverify {
namespace {

using testing::Chains;

constexpr int kThreads = 8;

/// One verify call to repeat: a batch shared by every thread, and its serial result.
struct Job {
  std::function<VerifyStats(ChainOutput, const CpuOptions&)> run;
  std::int32_t batch_size = 0, width = 0;
  std::vector<std::int32_t> tokens, accepted;
  VerifyStats stats;
};

struct Inputs {
  Chains chains;
  std::vector<float> scores, accept_probs;
  std::vector<std::uint64_t> seeds;
  explicit Inputs(std::int32_t V) : chains(V) {}
};

Inputs make_inputs(std::int32_t B, std::int32_t V, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in(V);
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t k = static_cast<std::int32_t>(rng() % 6);
    std::vector<std::vector<float>> ps, qs;
    std::vector<std::int32_t> xs;
    for (std::int32_t j = 0; j <= k; ++j) ps.push_back(testing::random_distribution(V, rng));
    for (std::int32_t j = 0; j < k; ++j) {
      qs.push_back(testing::random_distribution(V, rng));
      xs.push_back(testing::sample(qs.back(), rng));
    }
    in.chains.add(xs, ps, qs);
  }
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (std::size_t g = 0; g < in.chains.tokens.size(); ++g) {
    in.scores.push_back(unit(rng));
    in.accept_probs.push_back(unit(rng));
  }
  for (std::int32_t b = 0; b < B; ++b) in.seeds.push_back(rng());
  return in;
}

template <class Rule>
Job job(const Rule& rule, const Inputs& in, Randomness r) {
  Job j;
  const ChainBatch<float> batch = in.chains.batch();
  j.batch_size = batch.batch_size;
  j.width = in.chains.width;
  j.run = [rule, batch, r](ChainOutput out, const CpuOptions& options) {
    return verify(rule, batch, r, out, options);
  };
  j.tokens.assign(static_cast<std::size_t>(j.batch_size) * j.width, 0);
  j.accepted.assign(static_cast<std::size_t>(j.batch_size), 0);
  j.stats = j.run({j.tokens.data(), j.width, j.accepted.data()}, CpuOptions{1});
  return j;
}

TEST(Concurrency, ThreadsCallingVerifyAtOnceMatchSerialCalls) {
  // Small batches (one internal thread each), one large enough for verify's own threads, and one
  // of two sequences whose rows split over the row team (which one call holds at a time).
  const Inputs small = make_inputs(24, 64, 1), large = make_inputs(48, 32768, 2), split = make_inputs(2, 65536, 3);
  Randomness seeded{5, 9};
  Randomness per_sequence{5, 9, small.seeds.data()};
  std::vector<Job> jobs;
  for (const Inputs* in : {&small, &large, &split}) {
    jobs.push_back(job(Standard{}, *in, seeded));
    jobs.push_back(job(Greedy{}, *in, seeded));
    jobs.push_back(job(Ears{0.4f}, *in, seeded));
    jobs.push_back(job(Fsd{Divergence::js, 0.2f}, *in, seeded));
    jobs.push_back(job(ReducibleFsd{Divergence::kl_draft_target, 0.3f}, *in, seeded));
    jobs.push_back(job(Sprinter{0.5f, in->scores.data()}, *in, seeded));
    jobs.push_back(job(SpecDecPP<Ears>{0.6f, in->accept_probs.data(), Ears{0.2f}}, *in, seeded));
    jobs.push_back(job(TypicalAcceptance{}, *in, seeded));
  }
  jobs.push_back(job(Standard{}, small, per_sequence));

  // Counts are per thread, read after join: shared atomics would order the threads' calls for
  // ThreadSanitizer (each read-modify-write synchronises) and could hide a race between them.
  std::vector<int> mismatches(kThreads, 0), calls(kThreads, 0);
  std::atomic<bool> go{false};
  const int rounds = static_cast<int>(testing::repeats(3));  // under ASan one; ThreadSanitizer's three
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();  // start together
      for (int round = 0; round < rounds; ++round) {
        for (std::size_t i = 0; i < jobs.size(); ++i) {
          const Job& j = jobs[(i + static_cast<std::size_t>(t) * 5) % jobs.size()];  // different orders
          std::vector<std::int32_t> tokens(j.tokens.size(), 7), accepted(j.accepted.size(), 7);
          const VerifyStats s = j.run({tokens.data(), j.width, accepted.data()},
                                      CpuOptions{(t + round) % 3});  // 0: hardware threads
          ++calls[t];
          if (tokens != j.tokens || accepted != j.accepted || s.accepted != j.stats.accepted ||
              s.relaxed != j.stats.relaxed || s.target_checked != j.stats.target_checked) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  go = true;
  for (auto& thread : pool) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(calls[t], rounds * static_cast<int>(jobs.size())) << "thread " << t;
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  }
}

TEST(Concurrency, SplitPenalisedRowsAndTreeResidualsMatchOneThread) {
  // Under ThreadSanitizer, the team's parts beside the work they leave (a penalised row's entries
  // and last elements) and residual passes whose parts each copy one pass (probability and logits
  // trees whose root children are rejected): every output as one thread gives it.
  constexpr std::int32_t V = 65536, N = 4;
  std::mt19937_64 rng(21);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> target(std::size_t(N + 1) * V), draft(std::size_t(N + 1) * V), p_rows, q_rows;
  for (std::size_t i = 0; i < target.size(); ++i) {
    target[i] = normal(rng);
    draft[i] = target[i] + normal(rng);
  }
  const std::vector<std::int32_t> parents{-1, -1, -1, 0}, tokens{11, 22222, 33333, 7};
  for (std::int32_t c = 0; c < 3; ++c) target[std::size_t(tokens[std::size_t(c)])] = -1e30f;  // p = 0: rejected
  testing::PenaltyListArrays lists;
  for (std::int32_t v = 0; v < V; v += 1 + static_cast<std::int32_t>(rng() % 29)) {
    lists.h_tokens.push_back(v);
    lists.h_counts.push_back(static_cast<std::int32_t>(rng() % 3));
  }
  lists.b_tokens = {V - 2, 5};
  lists.b_values = {9.0f, -1.0f};
  lists.end_sequence();
  SamplingParams params{0.9f, 0, 1.0f, 0.0f};
  params.repetition_penalty = 1.2f;
  params.frequency_penalty = 0.3f;
  const std::int32_t chain_offsets[] = {0, 2}, tree_offsets[] = {0, N};
  for (const Drafted how : {Drafted::sampled, Drafted::sampled_without_replacement}) {
    LogitsTreeBatch<float> tree;
    tree.batch_size = 1;
    tree.vocab_size = V;
    tree.node_offsets = tree_offsets;
    tree.parents = parents.data();
    tree.draft_tokens = tokens.data();
    tree.target_logits = target.data();
    tree.draft_logits = draft.data();
    tree.target_params = &params;
    tree.drafted = how;
    lists.attach(tree);
    LogitsChainBatch<float> chain;
    chain.batch_size = 1;
    chain.vocab_size = V;
    chain.draft_offsets = chain_offsets;
    chain.draft_tokens = tokens.data();
    chain.target_logits = target.data();
    chain.draft_logits = draft.data();
    chain.target_params = &params;
    lists.attach(chain);
    // The probability tree: the logits' softmax, row by row.
    p_rows.clear();
    q_rows.clear();
    for (std::int32_t r = 0; r <= N; ++r) {
      for (auto* rows : {&p_rows, &q_rows}) {
        const float* l = (rows == &p_rows ? target.data() : draft.data()) + std::size_t(r) * V;
        const auto p = testing::softmax(std::vector<double>(l, l + V));
        rows->insert(rows->end(), p.begin(), p.end());
      }
    }
    TreeBatch<float> prob_tree{1, V, tree_offsets, parents.data(), tokens.data(), p_rows.data(), q_rows.data()};
    prob_tree.drafted = how;
    for (std::uint64_t step = 0; step < 4; ++step) {
      std::vector<std::int32_t> out[2][3], accepted[2][3];
      for (const std::int32_t threads : {1, 2}) {
        const int t = threads - 1;
        for (int kind = 0; kind < 3; ++kind) {
          out[t][kind].assign(N + 1, -1);
          accepted[t][kind].assign(1, -1);
        }
        verify(Standard{}, chain, Randomness{4, step}, ChainOutput{out[t][0].data(), 3, accepted[t][0].data()}, CpuOptions{threads});
        verify(Standard{}, tree, Randomness{4, step}, TreeOutput{out[t][1].data(), N + 1, accepted[t][1].data()}, CpuOptions{threads});
        verify(Standard{}, prob_tree, Randomness{4, step}, TreeOutput{out[t][2].data(), N + 1, accepted[t][2].data()},
               CpuOptions{threads});
      }
      for (int kind = 0; kind < 3; ++kind) {
        EXPECT_EQ(out[0][kind], out[1][kind]) << "kind " << kind << " drafted " << int(how) << " step " << step;
        EXPECT_EQ(accepted[0][kind], accepted[1][kind]);
      }
      EXPECT_EQ(accepted[0][1][0], 0) << "every child of the root rejected";
    }
  }
}

TEST(Concurrency, TheRowTeamRunsEveryPartOnce) {
  // Each part writes its own plain int: a part run twice, or a write the caller does not see
  // when run() returns, shows in the counts (and to ThreadSanitizer as a race).
  const cpu::TeamLease lease(cpu::RowTeam::instance());
  ASSERT_NE(lease.team(), nullptr);
  std::vector<int> counts(64, 0);
  int expected = 0;
  for (int task = 0; task < 3000; ++task) {
    const std::int32_t parts = 1 + task % 37;
    lease.team()->run(parts, [&](std::int32_t part) { ++counts[static_cast<std::size_t>(part)]; });
    for (std::int32_t part = 0; part < parts; ++part) {
      if (counts[static_cast<std::size_t>(part)] != expected + 1) FAIL() << "task " << task << " part " << part;
    }
    for (std::int32_t part = parts; part < 64; ++part) counts[static_cast<std::size_t>(part)] = expected + 1;
    ++expected;
    if (task % 500 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // let the workers sleep
  }
  const cpu::TeamLease second(cpu::RowTeam::instance());
  EXPECT_EQ(second.team(), nullptr) << "one call holds the team at a time";
}

TEST(Concurrency, TheRowTeamStartsOnlyTheWorkersATaskAsksFor) {
  const cpu::TeamLease lease(cpu::RowTeam::instance());
  ASSERT_NE(lease.team(), nullptr);
  const std::int32_t most = static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency())) - 1;
  std::int32_t expected = lease.team()->workers();  // 0 in a process of its own, as ctest runs it
  for (const std::int32_t parts : {1, 2, 3, 2, 40, 5}) {
    std::vector<int> ran(static_cast<std::size_t>(parts), 0);
    lease.team()->run(parts, [&](std::int32_t part) { ++ran[static_cast<std::size_t>(part)]; });
    expected = std::max(expected, std::min(parts - 1, most));
    EXPECT_EQ(lease.team()->workers(), expected) << "after a task of " << parts << " parts";
    EXPECT_EQ(ran, std::vector<int>(static_cast<std::size_t>(parts), 1));
  }
}

TEST(Concurrency, SharedHeadsEvaluateAtOnce) {
  // LinearVerifier::scores is const; AcceptanceHead's const overload takes caller scratch.
  const Eigen::Index d = 16;
  const LinearVerifier verifier(d, 3);
  std::mt19937_64 rng(4);
  Eigen::MatrixXf H(32, d);
  std::normal_distribution<float> normal;
  for (Eigen::Index i = 0; i < H.size(); ++i) H.data()[i] = normal(rng);
  const Eigen::VectorXf scores = verifier.scores(H);
  const AcceptanceHead head(d, 3, /*tied=*/true, 5);
  AcceptanceHead::Scratch serial_scratch;
  Eigen::VectorXf accept;
  head.accept_probs(H, accept, serial_scratch);
  std::vector<int> mismatches(kThreads, 0);  // per thread, as above
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      AcceptanceHead::Scratch scratch;  // one per thread
      Eigen::VectorXf a;
      for (int round = 0; round < 20; ++round) {
        if (verifier.scores(H) != scores) ++mismatches[t];
        head.accept_probs(H, a, scratch);
        if (a != accept) ++mismatches[t];
      }
    });
  }
  for (auto& thread : pool) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace specverify
