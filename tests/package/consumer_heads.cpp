// The learned heads over specverify::heads alone (Eigen, no xsimd): a SPRINTER verifier saved to
// safetensors and loaded back scores a batch of hidden states as the original does, bit for bit.
#include <specverify/heads.hpp>

#include <cstdio>
#include <string>

#if defined(CONSUMER_LAYER_ALONE) && defined(XSIMD_VERSION_MAJOR)
#error "specverify::heads included xsimd, the CPU backend's dependency"
#endif

int main(int argc, char** argv) {
  const std::string path = std::string(argc > 0 ? argv[0] : "consumer") + ".safetensors";
  const specverify::LinearVerifier verifier(16, 7);
  verifier.save(path);
  const specverify::LinearVerifier loaded = specverify::LinearVerifier::load(path);
  const Eigen::MatrixXf hidden = Eigen::MatrixXf::Random(4, 16);
  const Eigen::VectorXf want = verifier.scores(hidden), got = loaded.scores(hidden);
  std::remove(path.c_str());
  std::printf("scores %g %g %g %g\n", got(0), got(1), got(2), got(3));
  const bool in_range = (got.array() > 0.0f).all() && (got.array() < 1.0f).all();
  return got.size() == 4 && (got.array() == want.array()).all() && in_range ? 0 : 1;
}
