// Verifies one chain through the CPU umbrella header; exits non-zero unless the result is the only
// possible one (p puts all mass on the drafted token, then on token 2).
#include <specverify/specverify.hpp>

#include <cstdio>

#if defined(CONSUMER_LAYER_ALONE) && __has_include(<Eigen/Dense>)
#error "specverify::cpu put Eigen, the heads' dependency, on the include path"
#endif

int main() {
  const std::int32_t offsets[2] = {0, 1}, drafts[1] = {1};
  const float p[2][3] = {{0.0f, 1.0f, 0.0f}, {0.0f, 0.0f, 1.0f}};
  const specverify::ChainBatch<float> batch{1, 3, offsets, drafts, &p[0][0], nullptr};
  std::int32_t tokens[2], accepted;
  specverify::verify(specverify::Standard{}, batch, {1, 0}, {tokens, 2, &accepted});
  std::printf("accepted %d, tokens %d %d\n", accepted, tokens[0], tokens[1]);
  return accepted == 1 && tokens[0] == 1 && tokens[1] == 2 ? 0 : 1;
}
