// The safetensors reader and writer: exact dtype conversion, header parsing, and every malformed
// file refused with a message naming the file and the tensor.
#include "specverify/heads/safetensors.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "safetensors_test_writer.hpp"

namespace specverify {
namespace {

using ::testing::HasSubstr;
using namespace specverify::testing;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Opens `path` and reads every tensor; returns the invalid_input message ("" if none was thrown).
std::string load_error(const std::string& path) {
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& entry : f.tensors()) f.read(entry.first);
  } catch (const invalid_input& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, F16KnownBitPatterns) {
  const float inf = std::numeric_limits<float>::infinity();
  const struct {
    std::uint16_t bits;
    float value;
  } cases[] = {
      {0x0000, 0.0f},          {0x0001, 0x1p-24f},           // smallest subnormal
      {0x0002, 0x1p-23f},      {0x03ff, 1023 * 0x1p-24f},    // largest subnormal
      {0x0400, 0x1p-14f},      {0x3c00, 1.0f},               // smallest normal, one
      {0x3555, 0.333251953125f}, {0xc000, -2.0f},
      {0x7bff, 65504.0f},      {0x7c00, inf},
      {0xfc00, -inf},          {0x8001, -0x1p-24f},
  };
  std::vector<std::uint16_t> all;
  for (const auto& c : cases) {
    EXPECT_EQ(f16_to_float(c.bits), c.value) << std::hex << c.bits;
    EXPECT_EQ(f16_to_float(c.bits), static_cast<float>(f16_reference(c.bits))) << std::hex << c.bits;
    all.push_back(c.bits);
  }
  EXPECT_TRUE(std::signbit(f16_to_float(0x8000)));
  EXPECT_EQ(f16_to_float(0x8000), 0.0f);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0xfc01)));

  // Every one of the 65536 patterns against the textbook formula.
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const double ref = f16_reference(static_cast<std::uint16_t>(b));
    const float got = f16_to_float(static_cast<std::uint16_t>(b));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got)) << b;
    } else {
      ASSERT_EQ(static_cast<double>(got), ref) << b;
    }
  }

  // And through a file.
  const std::string path = temp_path("f16_known");
  write_file(path, {{"x", "F16", {static_cast<std::int64_t>(all.size())}, u16_bytes(all)}});
  const std::vector<float> got = SafetensorsFile::open(path).read("x");
  ASSERT_EQ(got.size(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(got[i], cases[i].value) << i;
  std::remove(path.c_str());
}

TEST(Safetensors, BF16KnownBitPatterns) {
  const float inf = std::numeric_limits<float>::infinity();
  const struct {
    std::uint16_t bits;
    float value;
  } cases[] = {
      {0x0000, 0.0f},   {0x0001, 0x1p-133f},  // smallest subnormal
      {0x007f, 127 * 0x1p-133f},              // largest subnormal
      {0x0080, 0x1p-126f}, {0x3f80, 1.0f},    {0x4049, 3.140625f},
      {0xc000, -2.0f},  {0x7f7f, 0x1.fep127f}, {0x7f80, inf}, {0xff80, -inf},
  };
  std::vector<std::uint16_t> all;
  for (const auto& c : cases) {
    EXPECT_EQ(bf16_to_float(c.bits), c.value) << std::hex << c.bits;
    all.push_back(c.bits);
  }
  EXPECT_TRUE(std::signbit(bf16_to_float(0x8000)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7fc0)));
  const std::string path = temp_path("bf16_known");
  write_file(path, {{"x", "BF16", {2, 5}, u16_bytes(all)}});
  const std::vector<float> got = SafetensorsFile::open(path).read("x");
  ASSERT_EQ(got.size(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(got[i], cases[i].value) << i;
  std::remove(path.c_str());
}

TEST(Safetensors, F32ExactAndLittleEndian) {
  const std::vector<float> v = {1.5f, -0.0f, 0x1p-149f, 3.0e38f, -7.25f, 0.1f};
  const std::string path = temp_path("f32");
  write_file(path, {{"a", "F32", {2, 3}, f32_bytes(v)}});
  // 1.5f is 0x3fc00000: little-endian bytes 00 00 c0 3f right after the header.
  const std::string raw = read_all(path);
  const std::size_t data = 8 + header_for({{"a", "F32", {2, 3}, f32_bytes(v)}}).size();
  EXPECT_EQ(static_cast<unsigned char>(raw[data + 2]), 0xc0);
  EXPECT_EQ(static_cast<unsigned char>(raw[data + 3]), 0x3f);
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.info("a").shape, (std::vector<std::int64_t>{2, 3}));
  const std::vector<float> got = f.read("a");
  ASSERT_EQ(got.size(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(got[i], v[i]);
    EXPECT_EQ(std::signbit(got[i]), std::signbit(v[i]));
  }
  std::remove(path.c_str());
}

TEST(Safetensors, ParsesWhitespaceEscapesMetadataPaddingAndScalars) {
  const std::string path = temp_path("json");
  const std::vector<unsigned char> data = f32_bytes({1, 2, 3, 4});
  // Names with escapes: "q\"x" and "\u00e9\ud83d\ude00" (e-acute, then an emoji as a surrogate pair).
  const std::string header =
      " { \"__metadata__\" : { \"format\" : \"pt\", \"note\" : \"a\\nb\" } ,\n"
      "  \"q\\\"x\" : { \"shape\" : [ 2 ] , \"dtype\" : \"F32\", \"data_offsets\" : [ 0 , 8 ] },\r\n"
      "\t\"\\u00e9\\ud83d\\ude00\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]},"
      "\"empty\":{\"dtype\":\"F32\",\"shape\":[0, 3],\"data_offsets\":[12,12]}}      ";
  write_raw(path, header, data);
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "a\nb");
  EXPECT_EQ(f.read("q\"x"), (std::vector<float>{1, 2}));
  EXPECT_EQ(f.read("\xc3\xa9\xf0\x9f\x98\x80"), (std::vector<float>{3}));  // scalar: shape []
  EXPECT_TRUE(f.read("empty").empty());
  EXPECT_FALSE(f.contains("absent"));
  std::remove(path.c_str());
}

TEST(Safetensors, WriterRoundTripsAndPadsTheHeader) {
  const std::string path = temp_path("writer");
  const std::vector<float> a = {1, -2, 3.5f, 0x1p-140f, 6, 7};
  const std::vector<float> b = {42};
  save_safetensors(path, {{"model.0.linear.weight", {2, 3}, a.data()}, {"odd\"name\n", {1}, b.data()}});
  const std::string raw = read_all(path);
  std::uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(raw[static_cast<std::size_t>(i)]);
  EXPECT_EQ(len % 8, 0u);  // data section stays 8-byte aligned
  EXPECT_EQ(raw.size(), 8 + len + 4 * (a.size() + b.size()));
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.read("model.0.linear.weight"), a);
  EXPECT_EQ(f.read("odd\"name\n"), b);
  EXPECT_EQ(f.info("model.0.linear.weight").dtype, Dtype::F32);
  std::remove(path.c_str());
}

// ---- malformed files: invalid_input naming the file and the tensor -------------------------------

class Malformed : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = temp_path(std::string("bad_") +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  /// Expects invalid_input whose message names the file and, if given, the tensor.
  void expect_error(const std::string& tensor, const std::string& what) const {
    const std::string msg = load_error(path_);
    ASSERT_FALSE(msg.empty()) << "no invalid_input for " << what;
    EXPECT_THAT(msg, HasSubstr(path_));
    if (!tensor.empty()) {
      EXPECT_THAT(msg, HasSubstr("'" + tensor + "'"));
    }
    EXPECT_THAT(msg, HasSubstr(what));
  }
  std::string path_;
  const std::vector<unsigned char> four_floats_ = f32_bytes({1, 2, 3, 4});
};

TEST_F(Malformed, TruncatedData) {
  const std::vector<RawTensor> t = {{"w", "F32", {2}, f32_bytes({1, 2})},
                                    {"b", "F32", {2}, f32_bytes({3, 4})}};
  std::vector<unsigned char> data = data_for(t);
  data.resize(data.size() - 1);  // the file ends one byte early
  write_raw(path_, header_for(t), data);
  expect_error("b", "truncated");
}

TEST_F(Malformed, OffsetsOutOfOrder) {
  write_raw(path_, R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", four_floats_);
  expect_error("w", "out of order");
}

TEST_F(Malformed, OffsetsOutOfBounds) {
  write_raw(path_, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})", four_floats_);
  expect_error("w", "data section has 16 bytes");
}

TEST_F(Malformed, OverlappingTensors) {
  write_raw(path_,
            R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]},)"
            R"("c":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
            four_floats_);
  expect_error("c", "overlaps tensor 'a'");
}

TEST_F(Malformed, OverlapHiddenBehindAShortTensor) {
  // a spans everything; b starts inside a and ends before it; c starts after b but still inside a.
  write_raw(path_,
            R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
            R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
            four_floats_);
  const std::string msg = load_error(path_);
  EXPECT_THAT(msg, HasSubstr("overlaps tensor 'a'"));
  EXPECT_THAT(msg, HasSubstr(path_));
}

TEST_F(Malformed, UnknownDtype) {
  write_raw(path_, R"({"w":{"dtype":"F17","shape":[4],"data_offsets":[0,16]}})", four_floats_);
  expect_error("w", "unknown dtype 'F17'");
}

TEST_F(Malformed, KnownButNonFloatDtypeIsRefusedOnlyWhenRead) {
  write_raw(path_,
            R"({"ids":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
            R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            four_floats_);
  const SafetensorsFile f = SafetensorsFile::open(path_);
  EXPECT_EQ(f.read("w"), (std::vector<float>{3, 4}));
  expect_error("ids", "dtype I32 is not a float type");
}

TEST_F(Malformed, ShapeAndByteCountDisagree) {
  write_raw(path_, R"({"w":{"dtype":"F16","shape":[2,2],"data_offsets":[0,16]}})", four_floats_);
  expect_error("w", "needs 8 bytes but data_offsets span 16");
}

TEST_F(Malformed, ShapeOverflowsBytes) {
  write_raw(path_,
            R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})",
            four_floats_);
  expect_error("w", "too large");
}

TEST_F(Malformed, HeaderLengthBeyondTheFile) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  write_raw(path_, header, four_floats_, header.size() + 17);
  expect_error("", "runs past the end of the file");
  write_raw(path_, header, four_floats_, ~0ull - 1);  // would overflow 8 + length
  expect_error("", "runs past the end of the file");
}

TEST_F(Malformed, ShorterThanTheLengthField) {
  std::ofstream(path_, std::ios::binary) << "abc";
  expect_error("", "shorter than the 8-byte header length");
}

TEST_F(Malformed, MissingFile) { expect_error("", "cannot open"); }

TEST_F(Malformed, MissingTensor) {
  write_file(path_, {{"w", "F32", {4}, four_floats_}});
  const SafetensorsFile f = SafetensorsFile::open(path_);
  try {
    f.read("bias");
    FAIL() << "no throw";
  } catch (const invalid_input& e) {
    EXPECT_THAT(e.what(), HasSubstr(path_));
    EXPECT_THAT(e.what(), HasSubstr("'bias'"));
    EXPECT_THAT(e.what(), HasSubstr("missing tensor"));
  }
}

TEST_F(Malformed, WrongShapeAskedFor) {
  write_file(path_, {{"w", "F32", {2, 2}, four_floats_}});
  const std::vector<std::int64_t> want = {4, 1};
  try {
    SafetensorsFile::open(path_).read("w", &want);
    FAIL() << "no throw";
  } catch (const invalid_input& e) {
    EXPECT_THAT(e.what(), HasSubstr("'w'"));
    EXPECT_THAT(e.what(), HasSubstr("shape [2, 2], expected [4, 1]"));
  }
}

/// Invalid JSON: each header is refused; where the fault lies inside a tensor's entry, the message
/// names that tensor.
TEST_F(Malformed, InvalidJson) {
  const struct {
    const char* header;
    const char* tensor;
  } cases[] = {
      {"", ""},
      {"[]", ""},
      {"{", ""},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]})", ""},    // unclosed object
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}} x)", ""},  // trailing junk
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},})", ""},   // trailing comma
      {R"({"w":{"dtype":"F32","shape":[4.0],"data_offsets":[0,16]}})", "w"},
      {R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", "w"},
      {R"({"w":{"dtype":"F32","shape":[04],"data_offsets":[0,16]}})", "w"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16,20]}})", "w"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,99999999999999999999]}})", "w"},
      {R"({"w":{"dtype":"F32","shape":[4]}})", "w"},                         // missing field
      {R"({"w":{"dtype":"F32","dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "w"},
      {R"({"w":{"dtype":F32,"shape":[4],"data_offsets":[0,16]}})", "w"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1}})", "w"},
      {R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"w":{"dtype":"F32","shape":[0],"data_offsets":[16,16]}})", "w"},
      {R"({"w":{"dtype":"F3\2","shape":[4],"data_offsets":[0,16]}})", "w"},  // bad escape
      {R"({"w":{"dtype":"\ud800","shape":[4],"data_offsets":[0,16]}})", "w"},  // lone surrogate
      {R"({"w":{"dtype":"\u12","shape":[4],"data_offsets":[0,16]}})", "w"},
      {"{\"w\":{\"dtype\":\"F\n32\",\"shape\":[4],\"data_offsets\":[0,16]}}", "w"},  // raw newline
      {R"({"w":[1,2]})", "w"},
      {R"({"__metadata__":{"format":1}})", "__metadata__"},
      {R"({"__metadata__":[]})", "__metadata__"},
      {R"({"__metadata__":{},"__metadata__":{}})", "__metadata__"},
      {R"({"w)", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    write_raw(path_, c.header, four_floats_);
    const std::string msg = load_error(path_);
    ASSERT_FALSE(msg.empty());
    EXPECT_THAT(msg, HasSubstr(path_));
    EXPECT_THAT(msg, HasSubstr("invalid JSON"));
    if (*c.tensor) {
      EXPECT_THAT(msg, HasSubstr(std::string("tensor '") + c.tensor + "'"));
    }
  }
}

/// Every truncation of a valid file, and every single-byte corruption of its header, is either
/// read correctly or refused with invalid_input, never anything else (ASan checks the reads).
TEST_F(Malformed, EveryTruncationAndHeaderByteCorruption) {
  const std::vector<RawTensor> t = {{"a", "F16", {3}, u16_bytes({0x3c00, 0x4000, 0x4200})},
                                    {"b", "F32", {2}, f32_bytes({5, 6})}};
  const std::string header = header_for(t);
  std::vector<unsigned char> good(8, 0);
  good[0] = static_cast<unsigned char>(header.size());
  good.insert(good.end(), header.begin(), header.end());
  const std::vector<unsigned char> data = data_for(t);
  good.insert(good.end(), data.begin(), data.end());
  const auto write_bytes = [&](const std::vector<unsigned char>& bytes, std::size_t n) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
  };
  for (std::size_t n = 0; n < good.size(); ++n) {
    write_bytes(good, n);
    EXPECT_FALSE(load_error(path_).empty()) << "truncated to " << n << " bytes";
  }
  int refused = 0, read_ok = 0;
  for (std::size_t i = 0; i < 8 + header.size(); ++i) {
    for (const unsigned char v : {0x00, 0x22, 0x2c, 0x39, 0x5c, 0x7b, 0xff}) {
      std::vector<unsigned char> bad = good;
      if (bad[i] == v) continue;
      bad[i] = v;
      write_bytes(bad, bad.size());
      try {
        const SafetensorsFile f = SafetensorsFile::open(path_);
        for (const auto& entry : f.tensors()) f.read(entry.first);
        ++read_ok;
      } catch (const invalid_input&) {
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 100);  // most corruptions break the JSON or the layout
  EXPECT_GT(read_ok, 0);    // some only rename a tensor or pad with a byte the parser accepts
}

}  // namespace
}  // namespace specverify
