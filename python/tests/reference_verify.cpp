// The C++ side of python/tests/test_against_cpp.py: runs one rule on a batch read from raw files
// and writes the tokens, so the Python module can be compared with the library token for token.
//
//   reference_verify DIR    reads DIR/spec.txt and the arrays beside it, writes DIR/out_*
//
// spec.txt: "B V row_width seed offset has_q has_seeds" then the rule: standard | greedy |
// ears BETA | fsd DIV THRESHOLD | ... (reference_rules.hpp; no coupled: it needs positions)
// Arrays: offsets.i32 [B+1], tokens.i32 [N], p.f32 [N+B][V], q.f32 [N][V], seeds.u64 [B],
// scores.f32 [N] (sprinter), accept.f32 [N] (specdecpp), all native-endian and contiguous.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <specverify/specverify.hpp>

#include "reference_rules.hpp"

namespace {

namespace sv = specverify;

template <class T>
std::vector<T> read(const std::string& path, std::size_t count) {
  std::vector<T> v(count);
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(T)))) {
    throw std::runtime_error("cannot read " + path);
  }
  return v;
}

template <class T>
void write(const std::string& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: reference_verify DIR\n";
    return 2;
  }
  const std::string dir = std::string(argv[1]) + "/";
  try {
    std::ifstream spec(dir + "spec.txt");
    std::int32_t B = 0, V = 0, width = 0;
    std::uint64_t seed = 0, offset = 0;
    int has_q = 0, has_seeds = 0;
    spec >> B >> V >> width >> seed >> offset >> has_q >> has_seeds;
    if (!spec) throw std::runtime_error("bad spec.txt");
    const auto offsets = read<std::int32_t>(dir + "offsets.i32", B + 1);
    const std::size_t N = offsets[B];
    const auto tokens = read<std::int32_t>(dir + "tokens.i32", N);
    const auto p = read<float>(dir + "p.f32", (N + B) * V);
    const auto q = has_q ? read<float>(dir + "q.f32", N * V) : std::vector<float>{};
    const auto seeds = has_seeds ? read<std::uint64_t>(dir + "seeds.u64", B) : std::vector<std::uint64_t>{};
    std::string rule_line;
    std::getline(spec >> std::ws, rule_line);
    std::istringstream words(rule_line);
    const bool sprinter = rule_line.find("sprinter") != std::string::npos;
    const bool specdecpp = rule_line.find("specdecpp") != std::string::npos;
    const auto scores = sprinter ? read<float>(dir + "scores.f32", N) : std::vector<float>{};
    const auto accept = specdecpp ? read<float>(dir + "accept.f32", N) : std::vector<float>{};

    sv::ChainBatch<float> batch{B, V, offsets.data(), tokens.data(), p.data(), has_q ? q.data() : nullptr};
    sv::Randomness randomness{seed, offset, has_seeds ? seeds.data() : nullptr};
    std::vector<std::int32_t> out_tokens(static_cast<std::size_t>(B) * width), out_accepted(B);
    sv::ChainOutput out{out_tokens.data(), width, out_accepted.data()};
    reference::with_rule<true>(words, reference::RuleInputs{scores.data(), accept.data()}, [&](const auto& rule) {
      const sv::VerifyStats s = sv::verify(rule, batch, randomness, out);
      std::ofstream(dir + "out_stats.txt") << s.drafted << ' ' << s.accepted << ' ' << s.relaxed
                                           << ' ' << s.target_checked << '\n';
    });
    write(dir + "out_tokens.i32", out_tokens);
    write(dir + "out_accepted.i32", out_accepted);
  } catch (const std::exception& e) {
    std::cerr << "reference_verify: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
