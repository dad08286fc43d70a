// Counter-based Philox4x32-10 (Salmon et al., SC'11) and the library's uniform streams.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"

namespace specverify {

/// One Philox4x32-10 block: 128 random bits from a 128-bit counter and a 64-bit key.
/// Reproduces Random123's known-answer vectors (tests/test_philox.cpp).
SPECVERIFY_HD inline void philox4x32_10(const std::uint32_t counter[4], const std::uint32_t key[2],
                                        std::uint32_t out[4]) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  std::uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  std::uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = std::uint64_t{kM0} * c0;
    const std::uint64_t p1 = std::uint64_t{kM1} * c2;
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/// The two independent uniform streams: a stream is the top bit of the first counter word, so
/// acceptance uniforms and extra-token uniforms never share a Philox block.
enum class Stream : std::uint32_t { accept = 0, sample = 1 };

/// The 24 high bits of a Philox word as a float in [0, 1): every value is exact, 1 is unreachable.
SPECVERIFY_HD inline float philox_uniform(std::uint64_t seed, std::uint64_t offset,
                                          std::uint32_t sequence, Stream stream,
                                          std::uint32_t index) {
  const std::uint32_t counter[4] = {(static_cast<std::uint32_t>(stream) << 31) | index, sequence,
                                    static_cast<std::uint32_t>(offset),
                                    static_cast<std::uint32_t>(offset >> 32)};
  const std::uint32_t key[2] = {static_cast<std::uint32_t>(seed),
                                static_cast<std::uint32_t>(seed >> 32)};
  std::uint32_t out[4];
  philox4x32_10(counter, key, out);
  return static_cast<float>(out[0] >> 8) * 0x1p-24f;
}

}  // namespace specverify
