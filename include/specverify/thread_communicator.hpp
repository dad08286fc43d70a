// An in-process communicator for the sharded verify (docs/api.md "Sharded vocabulary"): the ranks are
// threads of one process. For tests and examples; an engine passes its own collective (MPI: mpi.hpp).
//
//   specverify::ThreadGroup group(4);
//   // on the thread of rank r:
//   specverify::verify(rule, batch_r, randomness, out_r, group.communicator(r));
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace specverify {

/// `ranks` threads that gather from each other. Every rank makes the same sequence of calls
/// with the same byte counts (the sharded verify guarantees it).
class ThreadGroup {
 public:
  explicit ThreadGroup(std::int32_t ranks) : ranks_(ranks), staged_(static_cast<std::size_t>(ranks)) {
    if (ranks < 1) throw std::invalid_argument("ThreadGroup: ranks must be >= 1");
  }

  class Communicator {
   public:
    Communicator(ThreadGroup& group, std::int32_t rank) : group_(&group), rank_(rank) {}
    /// recv receives ranks * bytes: rank r's `bytes` at offset r * bytes.
    void all_gather(const void* send, std::size_t bytes, void* recv) const {
      group_->all_gather(rank_, send, bytes, recv);
    }

   private:
    ThreadGroup* group_;
    std::int32_t rank_;
  };

  Communicator communicator(std::int32_t rank) { return Communicator(*this, rank); }
  std::int32_t ranks() const { return ranks_; }
  /// all_gather calls completed by every rank, and the bytes one rank sent in them.
  std::int64_t calls() const { return calls_; }
  std::int64_t bytes_per_rank() const { return bytes_; }

 private:
  // Two barriers per call: every rank has staged its send before any copies out, and every rank
  // has copied out before a later call restages.
  void all_gather(std::int32_t rank, const void* send, std::size_t bytes, void* recv) {
    auto& mine = staged_[static_cast<std::size_t>(rank)];
    mine.assign(static_cast<const unsigned char*>(send), static_cast<const unsigned char*>(send) + bytes);
    barrier();
    for (std::int32_t r = 0; r < ranks_; ++r) {
      const auto& theirs = staged_[static_cast<std::size_t>(r)];
      if (theirs.size() != bytes) throw std::logic_error("ThreadGroup: ranks gathered different byte counts");
      if (bytes) std::memcpy(static_cast<unsigned char*>(recv) + std::size_t(r) * bytes, theirs.data(), bytes);
    }
    if (rank == 0) {
      ++calls_;
      bytes_ += static_cast<std::int64_t>(bytes);
    }
    barrier();
  }

  void barrier() {
    std::unique_lock<std::mutex> lock(mutex_);
    const std::uint64_t generation = generation_;
    if (++waiting_ == ranks_) {
      waiting_ = 0;
      ++generation_;
      arrived_.notify_all();
    } else {
      arrived_.wait(lock, [&] { return generation_ != generation; });
    }
  }

  std::int32_t ranks_;
  std::vector<std::vector<unsigned char>> staged_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::int32_t waiting_ = 0;
  std::uint64_t generation_ = 0;
  std::int64_t calls_ = 0, bytes_ = 0;
};

}  // namespace specverify
