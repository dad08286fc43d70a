// The rule comparison: verifies the same synthetic batches with each rule and prints acceptance
// rate, mean accepted drafts per verification and verify time per step.
//
//   build/release/bench/compare_rules [--steps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "specverify/specverify.hpp"
#include "synthetic.hpp"

namespace specverify::bench {
namespace {

struct Row {
  std::string rule;
  double acceptance_rate, mean_accepted, step_us;
};

template <class Rule>
Row measure(const char* name, const Rule& rule, std::vector<SyntheticBatch>& batches) {
  VerifyStats total;
  std::vector<double> times;
  std::uint64_t step = 0;
  for (SyntheticBatch& s : batches) {
    const auto start = std::chrono::steady_clock::now();
    const VerifyStats stats = verify(rule, s.batch(), Randomness{2026, step++}, s.output());
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    total.drafted += stats.drafted;
    total.accepted += stats.accepted;
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  const double chains = double(batches.size()) * batches.front().B;
  return {name, double(total.accepted) / total.drafted, total.accepted / chains, times[times.size() / 2]};
}

}  // namespace
}  // namespace specverify::bench

int main(int argc, char** argv) {
  using namespace specverify;
  std::int32_t steps = 20;
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps")) steps = std::max(1, std::atoi(argv[i + 1]));
  }
  constexpr std::int32_t B = 64, K = 5, V = 32000;
  constexpr double kMisalignment = 1.0;
  std::printf("specverify rule comparison: synthetic batch, B = %d, K = %d, V = %d, draft logits =\n"
              "target logits + N(0, %.1f^2), %d steps\n\n", B, K, V, kMisalignment, steps);
  std::vector<bench::SyntheticBatch> batches;
  for (std::int32_t s = 0; s < steps; ++s) batches.push_back(bench::make_batch(B, K, V, kMisalignment, false, 100 + s));

  const bench::Row rows[] = {bench::measure("Standard", Standard{}, batches),
                             bench::measure("Greedy", Greedy{}, batches)};
  std::printf("%-12s %16s %22s %16s\n", "rule", "acceptance rate", "accepted drafts/verify", "verify us/step");
  for (const auto& r : rows) {
    std::printf("%-12s %16.3f %22.2f %16.1f\n", r.rule.c_str(), r.acceptance_rate, r.mean_accepted, r.step_us);
  }
  return 0;
}
