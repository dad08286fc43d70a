// Verifies one batch with a rule defined here, outside the library (typical_acceptance.hpp), and
// with Standard for comparison.
//
//   build/release/examples/custom_rule
#include <cmath>
#include <cstdio>
#include <vector>

#include <specverify/specverify.hpp>

#include "typical_acceptance.hpp"

int main() {
  // Two sequences over a 4-token vocabulary: one drafts two tokens, the other one.
  constexpr std::int32_t V = 4;
  const std::vector<std::int32_t> offsets{0, 2, 3}, drafts{2, 1, 3};
  const std::vector<float> p{
      0.10f, 0.20f, 0.60f, 0.10f,  // sequence 0, before draft 0
      0.05f, 0.05f, 0.10f, 0.80f,  // sequence 0, before draft 1 (the draft, 1, is atypical)
      0.25f, 0.25f, 0.25f, 0.25f,  // sequence 0, bonus row
      0.40f, 0.10f, 0.10f, 0.40f,  // sequence 1, before draft 0
      0.70f, 0.10f, 0.10f, 0.10f,  // sequence 1, bonus row
  };
  const specverify::ChainBatch<float> batch{2, V, offsets.data(), drafts.data(), p.data(), nullptr};
  std::vector<std::int32_t> tokens(2 * 3), accepted(2);
  const specverify::ChainOutput out{tokens.data(), 3, accepted.data()};

  const auto show = [&](const char* name, const specverify::VerifyStats& stats) {
    std::printf("%-20s accepted %lld of %lld drafts\n", name, static_cast<long long>(stats.accepted),
                static_cast<long long>(stats.drafted));
    for (int b = 0; b < 2; ++b) {
      std::printf("  sequence %d keeps %d:", b, accepted[b]);
      for (int i = 0; i <= accepted[b]; ++i) std::printf(" %d", tokens[b * 3 + i]);
      std::printf("\n");
    }
  };
  show("TypicalAcceptance", specverify::verify(TypicalAcceptance{}, batch, {7, 0}, out));
  show("Standard", specverify::verify(specverify::Standard{}, batch, {7, 0}, out));
  return 0;
}
