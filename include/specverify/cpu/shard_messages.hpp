// The messages of the sharded verify (cpu/sharded_verify.hpp): plain values written in a fixed
// order that every rank shares, gathered from every rank through the caller's all_gather.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

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

/// Rank r's part of a gathered message, read in the order it was written.
class Reader {
 public:
  Reader(const unsigned char* data) : at_(data) {}
  template <class T>
  T get() {
    T v;
    std::memcpy(&v, at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }

 private:
  const unsigned char* at_;
};

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
