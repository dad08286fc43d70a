// The messages of the sharded verify (cpu/sharded_verify.hpp): plain values written in a fixed
// order that every rank shares, gathered from every rank through the caller's all_gather, and
// read back with every value a peer sent checked before use.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "specverify/core/fixed_sum.hpp"
#include "specverify/core/validate.hpp"

namespace specverify::cpu::shard {

/// A message of plain values in a fixed order; every rank writes the same layout.
class Message {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>, "messages hold plain values");
    // resize and copy, not a range insert: g++ 12 warns falsely of a null memmove inside the
    // insert where it inlines deeply (-Wnonnull, the Python module's sharded verify of Block).
    const std::size_t at = data_.size();
    data_.resize(at + sizeof(T));
    std::memcpy(data_.data() + at, &v, sizeof(T));
  }
  const unsigned char* data() const { return data_.data(); }
  std::size_t size() const { return data_.size(); }

 private:
  std::vector<unsigned char> data_;
};

/// Rank r's part of a gathered message, read in the order it was written. Nothing a peer sent
/// is trusted (a communicator may hand back anything): every read stays inside the part, and each
/// value that indexes, sizes or names something is checked (expect) before it is used. Every rank
/// reads the same gathered bytes, so a malformed part is the same invalid_input on every rank.
class Reader {
 public:
  Reader(const unsigned char* data, std::size_t bytes, std::int32_t rank, const char* phase)
      : at_(data), left_(bytes), rank_(rank), phase_(phase) {}

  /// A plain value with no invalid bit patterns (no bool, no enum without a fixed type).
  template <class T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>, "messages hold plain values");
    expect(left_ >= sizeof(T), "a short message");
    T v;
    std::memcpy(&v, at_, sizeof(T));
    at_ += sizeof(T);
    left_ -= sizeof(T);
    return v;
  }
  void skip(std::size_t bytes) {
    expect(left_ >= bytes, "a short message");
    at_ += bytes;
    left_ -= bytes;
  }
  /// A flag sent as one byte: 0 or 1.
  bool flag() {
    const auto v = get<std::uint8_t>();
    expect(v <= 1, "a flag");
    return v != 0;
  }
  /// A FixedSum, in the canonical form every rank sends (lo in [0, 2^40)).
  core::FixedSum sum() {
    const auto s = get<core::FixedSum>();
    expect(s.canonical(), "a fixed-point sum");
    return s;
  }
  /// A token the sender may name: -1 (none) or one of its slice [start, start + size).
  std::int32_t token(std::int32_t t, std::int32_t start, std::int32_t size) const {
    expect(t == -1 || (t >= start && std::int64_t{t} < std::int64_t{start} + size), "a token outside its slice");
    return t;
  }
  void expect(bool ok, const char* what) const {
    if (!ok) core::detail::reject("rank ", rank_, " sent a malformed message in phase ", phase_, " (", what, ")");
  }

 private:
  const unsigned char* at_;
  std::size_t left_;
  std::int32_t rank_;
  const char* phase_;
};

/// Rank r's part of what a phase of messages like `m` gathered (`all`).
inline Reader part(const std::vector<unsigned char>& all, const Message& m, std::int32_t r, const char* phase) {
  return Reader(all.data() + std::size_t(r) * m.size(), m.size(), r, phase);
}

/// What every rank receives of one phase: ranks messages of `bytes` each. A phase with nothing to
/// send (its layout, the same on every rank, is empty) makes no call: collectives such as gloo's
/// fail on empty buffers.
template <class Comm>
std::vector<unsigned char> gather(const Comm& comm, const Message& m, std::int32_t ranks) {
  std::vector<unsigned char> all(m.size() * static_cast<std::size_t>(ranks));
  if (m.size() > 0) comm.all_gather(m.data(), m.size(), all.data());
  return all;
}

}  // namespace specverify::cpu::shard
