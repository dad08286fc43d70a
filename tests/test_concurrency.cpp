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
#include <thread>
#include <vector>

#include "specverify/heads.hpp"
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
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();  // start together
      for (int round = 0; round < 3; ++round) {
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
    EXPECT_EQ(calls[t], 3 * static_cast<int>(jobs.size())) << "thread " << t;
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
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
