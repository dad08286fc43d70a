// A small, strict reader and writer for the safetensors format (what PyTorch heads ship in).
//
// Layout: 8-byte little-endian header length N, N bytes of JSON, then the data section. The JSON
// is an object mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" object of string -> string.
// Every malformed input is an invalid_input naming the file (and the tensor where there is one);
// nothing is read outside the file or outside a buffer, whatever the file says.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "specverify/types.hpp"

namespace specverify {

/// Element types a head's weights may have. Other safetensors dtypes are understood well enough to
/// validate a file's layout (a head may sit inside a larger checkpoint), but not read.
enum class Dtype { F32, F16, BF16, other };

/// IEEE binary16 -> float, exact for every value (subnormals, infinities, NaN payloads).
inline float f16_to_float(std::uint16_t bits) { return static_cast<float>(float16{bits}); }

/// bfloat16 -> float: the upper half of a float, exact by construction.
inline float bf16_to_float(std::uint16_t bits) { return static_cast<float>(bfloat16{bits}); }

/// One tensor's header entry. Offsets are relative to the start of the data section.
struct TensorInfo {
  std::string dtype_name;
  Dtype dtype = Dtype::other;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  std::int64_t num_elements() const {
    std::int64_t n = 1;
    for (const std::int64_t s : shape) n *= s;  // checked against the byte count when parsed
    return n;
  }
};

namespace detail {

[[noreturn]] inline void safetensors_error(const std::string& path, const std::string& tensor,
                                           const std::string& what) {
  std::string msg = "safetensors file '" + path + "'";
  if (!tensor.empty()) msg += ", tensor '" + tensor + "'";
  throw invalid_input(msg + ": " + what);
}

inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Bytes per element of every dtype the format defines; 0 for a name it does not define.
inline std::uint64_t dtype_size(const std::string& name) {
  static const std::pair<const char*, std::uint64_t> sizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
      {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},    {"U32", 4},     {"F32", 4},
      {"I64", 8},  {"U64", 8}, {"F64", 8}};
  for (const auto& s : sizes)
    if (name == s.first) return s.second;
  return 0;
}

inline Dtype dtype_from_name(const std::string& name) {
  if (name == "F32") return Dtype::F32;
  if (name == "F16") return Dtype::F16;
  if (name == "BF16") return Dtype::BF16;
  return Dtype::other;
}

/// A schema-directed JSON parser for exactly the safetensors header: no general value type, no
/// recursion, so no input can make it allocate without bound or overflow the stack.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), s_(text) {}

  void parse(std::map<std::string, TensorInfo>& tensors,
             std::map<std::string, std::string>& metadata) {
    skip_ws();
    expect('{', "the header must be a JSON object");
    skip_ws();
    if (!consume('}')) {
      do {
        skip_ws();
        std::string key = parse_string();
        context_ = key;
        skip_ws();
        expect(':', "expected ':'");
        skip_ws();
        if (key == "__metadata__") {
          if (seen_metadata_) fail("duplicate __metadata__");
          seen_metadata_ = true;
          parse_metadata(metadata);
        } else {
          if (tensors.count(key)) fail("duplicate tensor name");
          tensors.emplace(key, parse_tensor());
        }
        context_.clear();
        skip_ws();
      } while (consume(','));
      expect('}', "expected ',' or '}'");
    }
    skip_ws();  // writers pad the header with spaces to an 8-byte boundary
    if (pos_ != s_.size()) fail("unexpected content after the header object");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    safetensors_error(path_, context_, "invalid JSON header at byte " + std::to_string(pos_) +
                                           ": " + what);
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  bool consume(char c) {
    if (at_end() || s_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  void expect(char c, const char* what) {
    if (!consume(c)) fail(what);
  }
  void skip_ws() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  unsigned hex4() {
    if (s_.size() - pos_ < 4) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<unsigned>(c - 'A' + 10);
      else fail("bad hex digit in \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  std::string parse_string() {
    expect('"', "expected a string");
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xd800 && cp <= 0xdbff) {  // a high surrogate needs its low half
            if (!consume('\\') || !consume('u')) fail("unpaired surrogate");
            const unsigned lo = hex4();
            if (lo < 0xdc00 || lo > 0xdfff) fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
          } else if (cp >= 0xdc00 && cp <= 0xdfff) {
            fail("unpaired surrogate");
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("invalid escape");
      }
    }
  }

  /// A non-negative JSON integer (no sign, fraction or exponent: sizes and offsets are counts).
  std::uint64_t parse_count() {
    if (at_end() || peek() < '0' || peek() > '9') fail("expected a non-negative integer");
    if (peek() == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9')
      fail("leading zero in a number");
    std::uint64_t v = 0;
    while (!at_end() && peek() >= '0' && peek() <= '9') {
      const auto digit = static_cast<std::uint64_t>(s_[pos_++] - '0');
      if (v > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) fail("number too large");
      v = v * 10 + digit;
    }
    if (peek() == '.' || peek() == 'e' || peek() == 'E') fail("expected an integer");
    return v;
  }

  std::vector<std::uint64_t> parse_count_array() {
    expect('[', "expected an array");
    std::vector<std::uint64_t> out;
    skip_ws();
    if (consume(']')) return out;
    do {
      skip_ws();
      out.push_back(parse_count());
      skip_ws();
    } while (consume(','));
    expect(']', "expected ',' or ']'");
    return out;
  }

  TensorInfo parse_tensor() {
    expect('{', "a tensor entry must be an object");
    TensorInfo t;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    skip_ws();
    if (!consume('}')) {
      do {
        skip_ws();
        const std::string field = parse_string();
        skip_ws();
        expect(':', "expected ':'");
        skip_ws();
        if (field == "dtype" && !has_dtype) {
          t.dtype_name = parse_string();
          has_dtype = true;
        } else if (field == "shape" && !has_shape) {
          for (const std::uint64_t s : parse_count_array()) {
            if (s > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
              fail("dimension too large");
            t.shape.push_back(static_cast<std::int64_t>(s));
          }
          has_shape = true;
        } else if (field == "data_offsets" && !has_offsets) {
          const auto offsets = parse_count_array();
          if (offsets.size() != 2) fail("data_offsets must hold exactly [begin, end]");
          t.begin = offsets[0];
          t.end = offsets[1];
          has_offsets = true;
        } else {
          fail("unexpected or repeated field '" + field + "'");
        }
        skip_ws();
      } while (consume(','));
      expect('}', "expected ',' or '}'");
    }
    if (!has_dtype || !has_shape || !has_offsets)
      fail("a tensor entry needs dtype, shape and data_offsets");
    t.dtype = dtype_from_name(t.dtype_name);
    return t;
  }

  void parse_metadata(std::map<std::string, std::string>& metadata) {
    expect('{', "__metadata__ must be an object");
    skip_ws();
    if (consume('}')) return;
    do {
      skip_ws();
      std::string key = parse_string();
      skip_ws();
      expect(':', "expected ':'");
      skip_ws();
      if (peek() != '"') fail("__metadata__ values must be strings");
      std::string value = parse_string();
      if (!metadata.emplace(std::move(key), std::move(value)).second)
        fail("duplicate __metadata__ key");
      skip_ws();
    } while (consume(','));
    expect('}', "expected ',' or '}'");
  }

  const std::string& path_;
  const std::string& s_;
  std::size_t pos_ = 0;
  std::string context_;  // the tensor being parsed, for messages
  bool seen_metadata_ = false;
};

inline std::uint64_t read_le(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace detail

/// An opened safetensors file: the validated header, with tensors read on demand (a head can sit
/// inside a multi-gigabyte checkpoint; only the tensors asked for are read).
///
///   auto file = specverify::SafetensorsFile::open("head.safetensors");
///   std::vector<float> w = file.read("0.linear.weight");   // row-major, converted to float
class SafetensorsFile {
 public:
  /// Headers beyond this size are refused (the reference implementation's limit), so a corrupt
  /// length cannot make us allocate gigabytes.
  static constexpr std::uint64_t kMaxHeaderBytes = 100u << 20;

  static SafetensorsFile open(const std::string& path) {
    SafetensorsFile f;
    f.path_ = path;
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    if (!in) detail::safetensors_error(path, "", "cannot open the file");
    const std::streamoff size = in.tellg();
    if (size < 8) detail::safetensors_error(path, "", "shorter than the 8-byte header length");
    const auto file_size = static_cast<std::uint64_t>(size);
    unsigned char len_bytes[8];
    in.seekg(0);
    in.read(reinterpret_cast<char*>(len_bytes), 8);
    const std::uint64_t header_len = detail::read_le(len_bytes, 8);
    if (header_len > file_size - 8)
      detail::safetensors_error(path, "", "header length " + std::to_string(header_len) +
                                              " runs past the end of the file (" +
                                              std::to_string(file_size) + " bytes)");
    if (header_len > kMaxHeaderBytes)
      detail::safetensors_error(path, "", "header length " + std::to_string(header_len) +
                                              " exceeds the limit");
    std::string header(static_cast<std::size_t>(header_len), '\0');
    if (!in.read(header.data(), static_cast<std::streamsize>(header_len)))
      detail::safetensors_error(path, "", "cannot read the header");
    detail::HeaderParser(path, header).parse(f.tensors_, f.metadata_);
    f.data_start_ = 8 + header_len;
    f.data_size_ = file_size - f.data_start_;
    f.validate_layout();
    return f;
  }

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }

  /// The entry for `name`; invalid_input if the file has no such tensor.
  const TensorInfo& info(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) detail::safetensors_error(path_, name, "missing tensor");
    return it->second;
  }

  /// The tensor's elements in row-major order, converted to float exactly. If `expected_shape` is
  /// given, a different shape is an invalid_input.
  std::vector<float> read(const std::string& name,
                          const std::vector<std::int64_t>* expected_shape = nullptr) const {
    const TensorInfo& t = info(name);
    if (expected_shape && t.shape != *expected_shape)
      detail::safetensors_error(path_, name, "shape " + detail::shape_string(t.shape) +
                                                 ", expected " +
                                                 detail::shape_string(*expected_shape));
    if (t.dtype == Dtype::other)
      detail::safetensors_error(path_, name,
                                "dtype " + t.dtype_name + " is not a float type (F32, F16, BF16)");
    const std::uint64_t bytes = t.end - t.begin;  // layout validated at open
    std::vector<unsigned char> raw(static_cast<std::size_t>(bytes));
    std::ifstream in(path_, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
    if (!in || !in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(bytes)))
      detail::safetensors_error(path_, name, "truncated data (the file changed since it was opened?)");
    const int width = t.dtype == Dtype::F32 ? 4 : 2;
    std::vector<float> out(static_cast<std::size_t>(bytes) / static_cast<std::size_t>(width));
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto bits = detail::read_le(raw.data() + i * static_cast<std::size_t>(width), width);
      if (t.dtype == Dtype::F32) {
        const auto u = static_cast<std::uint32_t>(bits);
        std::memcpy(&out[i], &u, sizeof u);
      } else if (t.dtype == Dtype::F16) {
        out[i] = f16_to_float(static_cast<std::uint16_t>(bits));
      } else {
        out[i] = bf16_to_float(static_cast<std::uint16_t>(bits));
      }
    }
    return out;
  }

 private:
  SafetensorsFile() = default;

  /// Known dtype, byte count = elements * element size, inside the data section, no overlaps.
  void validate_layout() const {
    std::vector<std::pair<const std::string*, const TensorInfo*>> by_begin;
    for (const auto& [name, t] : tensors_) {
      const std::uint64_t width = detail::dtype_size(t.dtype_name);
      if (width == 0) detail::safetensors_error(path_, name, "unknown dtype '" + t.dtype_name + "'");
      std::uint64_t bytes = width;
      for (const std::int64_t s : t.shape) {
        const auto dim = static_cast<std::uint64_t>(s);
        if (dim != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / dim)
          detail::safetensors_error(path_, name, "shape " + detail::shape_string(t.shape) +
                                                     " is too large");
        bytes *= dim;
      }
      if (t.begin > t.end)
        detail::safetensors_error(path_, name, "data_offsets out of order [" +
                                                   std::to_string(t.begin) + ", " +
                                                   std::to_string(t.end) + "]");
      if (t.end - t.begin != bytes)
        detail::safetensors_error(path_, name, "shape " + detail::shape_string(t.shape) + " of " +
                                                   t.dtype_name + " needs " + std::to_string(bytes) +
                                                   " bytes but data_offsets span " +
                                                   std::to_string(t.end - t.begin));
      if (t.end > data_size_)
        detail::safetensors_error(path_, name, "truncated data: data_offsets end at " +
                                                   std::to_string(t.end) +
                                                   " but the data section has " +
                                                   std::to_string(data_size_) + " bytes");
      by_begin.emplace_back(&name, &t);
    }
    std::sort(by_begin.begin(), by_begin.end(),
              [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
    // Compare with the furthest-reaching tensor so far, not just the previous one: a long tensor
    // can overlap several that start after it.
    const std::pair<const std::string*, const TensorInfo*>* reach = nullptr;
    for (const auto& cur : by_begin) {
      if (cur.second->begin == cur.second->end) continue;  // empty tensors occupy no bytes
      if (reach && cur.second->begin < reach->second->end)
        detail::safetensors_error(path_, *cur.first, "overlaps tensor '" + *reach->first + "'");
      if (!reach || cur.second->end > reach->second->end) reach = &cur;
    }
  }

  std::string path_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  std::uint64_t data_start_ = 0;
  std::uint64_t data_size_ = 0;
};

/// A float tensor to write: row-major `data` of the given shape.
struct TensorView {
  std::string name;
  std::vector<std::int64_t> shape;
  const float* data{};
};

/// Writes F32 tensors as a safetensors file that PyTorch's `safetensors.torch.load_file` reads.
/// Tensors are laid out in the order given; the header is space-padded to 8 bytes as the
/// reference writer does, so the data section stays aligned.
inline void save_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                             const std::map<std::string, std::string>& metadata = {{"format", "pt"}}) {
  const auto quote = [](const std::string& s) {
    std::string out = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        static const char hex[] = "0123456789abcdef";
        out += "\\u00";
        out += hex[(c >> 4) & 0xf];
        out += hex[c & 0xf];
      } else {
        out += c;
      }
    }
    return out + "\"";
  };
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      header += (first ? "" : ",") + quote(k) + ":" + quote(v);
      first = false;
    }
    header += "}";
  }
  const auto count_of = [](const TensorView& t) {
    std::uint64_t count = 1;
    for (const std::int64_t s : t.shape) count *= static_cast<std::uint64_t>(s);
    return count;
  };
  std::uint64_t offset = 0;
  for (const TensorView& t : tensors) {
    const std::uint64_t count = count_of(t);
    header += (header.size() > 1 ? "," : "") + quote(t.name) + ":{\"dtype\":\"F32\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i)
      header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + 4 * count) + "]}";
    offset += 4 * count;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) detail::safetensors_error(path, "", "cannot open the file for writing");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  std::vector<unsigned char> bytes;
  for (const TensorView& t : tensors) {
    const std::uint64_t count = count_of(t);
    bytes.resize(static_cast<std::size_t>(4 * count));
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t u;
      std::memcpy(&u, &t.data[i], sizeof u);
      for (int b = 0; b < 4; ++b) bytes[4 * i + static_cast<std::size_t>(b)] = static_cast<unsigned char>(u >> (8 * b));
    }
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  if (!out) detail::safetensors_error(path, "", "write failed");
}

}  // namespace specverify
