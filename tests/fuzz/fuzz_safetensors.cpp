// libFuzzer target: the safetensors reader and both heads' loaders on arbitrary file contents.
//
// The loaders read files (there is no in-memory API), so each input is written to a private
// temporary file. Only specverify::invalid_input may escape a load; anything else (another
// exception, a crash, a sanitizer report, an allocation past -malloc_limit_mb) is a finding. A head
// that loads is evaluated, saved and loaded back, and must give the same results.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "specverify/heads.hpp"

namespace {

using namespace specverify;

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_safetensors invariant broken: %s\n", what);
  std::abort();
}

std::string temp_path(const char* tag) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/specverify_fuzz_" + tag + "_" +
         std::to_string(static_cast<long>(getpid())) + ".safetensors";
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  check(f != nullptr, "cannot create the temporary file");
  check(size == 0 || std::fwrite(data, 1, size, f) == size, "cannot write the temporary file");
  std::fclose(f);
}

/// Same values, NaN equal to NaN (scores of weights whose products overflow may be NaN).
bool same(const Eigen::VectorXf& a, const Eigen::VectorXf& b) {
  if (a.size() != b.size()) return false;
  for (Eigen::Index i = 0; i < a.size(); ++i) {
    if (!(a(i) == b(i) || (std::isnan(a(i)) && std::isnan(b(i))))) return false;
  }
  return true;
}

bool probabilities(const Eigen::VectorXf& v) {
  for (Eigen::Index i = 0; i < v.size(); ++i) {
    if (v(i) < 0.0f || v(i) > 1.0f) return false;  // NaN passes: overflowed products are allowed
  }
  return true;
}

/// Hidden states for a head of size d: small, mixed-sign, deterministic.
Eigen::MatrixXf hidden(Eigen::Index d) {
  Eigen::MatrixXf H(2, d);
  for (Eigen::Index j = 0; j < d; ++j) {
    H(0, j) = 0.25f * static_cast<float>(j % 7) - 0.5f;
    H(1, j) = j % 2 ? 1.0f : -1.0f;
  }
  return H;
}

void file_and_tensors(const std::string& path) {
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& [name, info] : f.tensors()) {
      try {
        const std::vector<float> v = f.read(name);
        check(static_cast<std::uint64_t>(v.size()) * (info.dtype == Dtype::F32 ? 4 : 2) ==
                  info.end - info.begin,
              "a tensor read back with a different byte count");
      } catch (const invalid_input&) {  // a non-float dtype
        check(info.dtype == Dtype::other, "a float tensor of a validated file failed to read");
      }
    }
  } catch (const invalid_input&) {
  }
}

void linear_verifier(const std::string& path, const std::string& prefix, const std::string& copy) {
  try {
    const LinearVerifier v = LinearVerifier::load(path, prefix);
    check(v.dim() >= 1, "a verifier of size 0");
    if (v.dim() > 4096) return;  // evaluating is not what is under test; keep iterations fast
    const Eigen::MatrixXf H = hidden(v.dim());
    const Eigen::VectorXf s = v.scores(H);
    check(probabilities(s), "a verifier score outside [0, 1]");
    v.save(copy, prefix);
    check(same(LinearVerifier::load(copy, prefix).scores(H), s), "save and load changed a verifier");
  } catch (const invalid_input&) {
  }
}

void acceptance_head(const std::string& path, const std::string& prefix, std::int32_t blocks,
                     const std::string& copy) {
  try {
    AcceptanceHead head = AcceptanceHead::load(path, prefix, blocks);
    check(head.dim() >= 1, "a head of size 0");
    if (head.dim() > 256 || head.num_blocks() > 64) return;
    const Eigen::MatrixXf H = hidden(head.dim());
    const Eigen::VectorXf a = head.accept_probs(H);
    check(probabilities(a), "an acceptance probability outside [0, 1]");
    head.save(copy, prefix);
    AcceptanceHead back = AcceptanceHead::load(copy, prefix, head.tied() ? head.num_blocks() : 0);
    check(same(back.accept_probs(H), a), "save and load changed a head");
  } catch (const invalid_input&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = temp_path("in"), copy = temp_path("copy");
  write_file(path, data, size);
  file_and_tensors(path);
  linear_verifier(path, "", copy);
  linear_verifier(path, "model.", copy);
  acceptance_head(path, "", 0, copy);
  acceptance_head(path, "", 3, copy);
  acceptance_head(path, "model.", 0, copy);
  return 0;
}
