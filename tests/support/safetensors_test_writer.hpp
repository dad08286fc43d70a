// Test-side safetensors files, written independently of the library's writer: the JSON header is
// built by string, tensors are raw bytes, so tests can also write every kind of malformed file.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace specverify::testing {

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;
};

inline std::vector<unsigned char> f32_bytes(const std::vector<float>& v) {
  std::vector<unsigned char> out;
  for (const float f : v) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<unsigned char>(u >> (8 * b)));
  }
  return out;
}

inline std::vector<unsigned char> u16_bytes(const std::vector<std::uint16_t>& v) {
  std::vector<unsigned char> out;
  for (const std::uint16_t u : v) {
    out.push_back(static_cast<unsigned char>(u & 0xff));
    out.push_back(static_cast<unsigned char>(u >> 8));
  }
  return out;
}

/// IEEE half -> double from the textbook formula (independent of the library's bit twiddling).
inline double f16_reference(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = s ? -1.0 : 1.0;
  if (e == 0) return sign * std::ldexp(m / 1024.0, -14);
  if (e == 31) return m ? std::nan("") : sign * INFINITY;
  return sign * std::ldexp(1.0 + m / 1024.0, e - 15);
}

/// float -> half by truncation of the mantissa, for finite values in the normal half range.
inline std::uint16_t f16_truncate(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const int e = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  if (e <= 0) return static_cast<std::uint16_t>(sign);  // tiny: signed zero is fine for weights
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(e) << 10) | ((u >> 13) & 0x3ffu));
}

inline std::uint16_t bf16_truncate(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<std::uint16_t>(u >> 16);
}

/// Encodes `values` in `dtype` ("F32", "F16", "BF16") and returns the bytes; `decoded` gets the
/// exact values the file then holds (the reference uses those).
inline std::vector<unsigned char> encode(const std::vector<float>& values, const std::string& dtype,
                                         std::vector<double>& decoded) {
  decoded.clear();
  if (dtype == "F32") {
    for (const float f : values) decoded.push_back(f);
    return f32_bytes(values);
  }
  std::vector<std::uint16_t> bits;
  for (const float f : values) {
    if (dtype == "F16") {
      bits.push_back(f16_truncate(f));
      decoded.push_back(f16_reference(bits.back()));
    } else {
      bits.push_back(bf16_truncate(f));
      const std::uint32_t u = static_cast<std::uint32_t>(bits.back()) << 16;
      float g;
      std::memcpy(&g, &u, 4);
      decoded.push_back(g);
    }
  }
  return u16_bytes(bits);
}

inline std::string shape_json(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

/// The header for tensors laid out back to back in the given order.
inline std::string header_for(const std::vector<RawTensor>& tensors, const std::string& metadata = "") {
  std::string h = "{";
  if (!metadata.empty()) h += "\"__metadata__\":" + metadata;
  std::size_t offset = 0;
  for (const RawTensor& t : tensors) {
    if (h.size() > 1) h += ",";
    h += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape_json(t.shape) +
         ",\"data_offsets\":[" + std::to_string(offset) + "," +
         std::to_string(offset + t.bytes.size()) + "]}";
    offset += t.bytes.size();
  }
  return h + "}";
}

inline std::vector<unsigned char> data_for(const std::vector<RawTensor>& tensors) {
  std::vector<unsigned char> data;
  for (const RawTensor& t : tensors) data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  return data;
}

/// Writes length + header + data; `declared_length` overrides the length field.
inline void write_raw(const std::string& path, const std::string& header,
                      const std::vector<unsigned char>& data, std::uint64_t declared_length = ~0ull) {
  const std::uint64_t len = declared_length == ~0ull ? header.size() : declared_length;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

inline void write_file(const std::string& path, const std::vector<RawTensor>& tensors) {
  write_raw(path, header_for(tensors), data_for(tensors));
}

/// A path in the temporary directory unique to this process and name (ctest runs tests, and the
/// release and debug builds, in parallel).
inline std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/specverify_" + std::to_string(::getpid()) + "_" +
         name + ".safetensors";
}

}  // namespace specverify::testing
