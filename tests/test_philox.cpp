// Philox4x32-10 against Random123's published known-answer vectors, and the stream layout.
#include <gtest/gtest.h>

#include <set>

#include "specverify/philox.hpp"

namespace specverify {
namespace {

struct KnownAnswer {
  std::uint32_t counter[4];
  std::uint32_t key[2];
  std::uint32_t expected[4];
};

TEST(Philox, ReproducesRandom123KnownAnswers) {
  const KnownAnswer cases[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& c : cases) {
    std::uint32_t out[4];
    philox4x32_10(c.counter, c.key, out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], c.expected[i]) << "word " << i;
  }
}

TEST(Philox, UniformsLieInHalfOpenUnitInterval) {
  for (std::uint32_t i = 0; i < 100000; ++i) {
    const float u = philox_uniform(7, 3, i % 5, Stream::accept, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
  }
}

TEST(Philox, StreamsSequencesAndOffsetsDrawDistinctBlocks) {
  std::set<float> seen;
  for (Stream s : {Stream::accept, Stream::sample}) {
    for (std::uint64_t offset : {0ull, 1ull, 1ull << 32}) {
      for (std::uint32_t seq = 0; seq < 4; ++seq) {
        for (std::uint32_t index = 0; index < 4; ++index) {
          seen.insert(philox_uniform(42, offset, seq, s, index));
        }
      }
    }
  }
  // 96 draws of 24 bits: a collision would be a 1-in-30000 event, a reused block certain.
  EXPECT_EQ(seen.size(), 96u);
}

}  // namespace
}  // namespace specverify
