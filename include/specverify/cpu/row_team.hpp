// The process's persistent row workers: one row's passes split into parts (cpu/split_row.hpp)
// and run by the calling thread and these workers together (issue 21: B = 1 uses every core).
//
// A small batch's whole call takes ~0.1 ms, so starting threads per call cannot pay; these
// workers start when a call first needs them and live until the process exits. Between tasks they spin for
// kSpin, then sleep on a condition variable: a call made step after step finds them spinning,
// one made after a pause pays a notify (the caller never waits for a worker to wake: it takes
// parts itself, so a sleeping or absent worker costs no more than doing the parts alone). A child
// made by fork() has none of the workers: its team runs every part on the caller and never touches
// the parent's lock or threads. One caller holds the team at a time (TeamLease); another
// concurrent verify call runs its rows unsplit, with the same bits.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

namespace specverify::cpu {

class RowTeam {
 public:
  static constexpr std::int32_t kMaxParts = 0xffff;  // a task's parts fit the ticket's 16 bits

  /// The process's team. Its workers start as tasks first ask for them: parts - 1 at most, and
  /// one per hardware thread but the caller's (so a process whose calls cap max_threads at 2 keeps
  /// one worker, not one per core spinning after every call).
  static RowTeam& instance() {
    static RowTeam team(static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency())) - 1);
    return team;
  }

  RowTeam(const RowTeam&) = delete;
  RowTeam& operator=(const RowTeam&) = delete;

  ~RowTeam() {
    if (forked()) {  // the threads are the parent's: their handles are left alone
      new std::vector<std::thread>(std::move(workers_));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
  }

  /// Runs job(part) for every part in [0, parts) on the caller and the workers; returns when every
  /// part is done. Parts are taken in any order by any thread: a job's parts must be independent.
  template <class Job>
  void run(std::int32_t parts, const Job& job) {
    if (parts > 1 && !forked()) grow(std::min(parts - 1, most_workers_));
    if (parts <= 1 || workers_.empty() || forked()) {
      for (std::int32_t part = 0; part < parts; ++part) job(part);
      return;
    }
    job_.store(&job);
    call_.store(&call<Job>);
    done_.store(0);
    // The ticket publishes the task: its generation, the next part to take, the part count.
    generation_ = (generation_ + 1) & 0xffffffffu;
    ticket_.store(generation_ << 32 | std::uint64_t(parts));
    if (sleeping_.load() > 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      wake_.notify_all();
    }
    take_parts(generation_);
    while (done_.load() < parts) pause();
  }

  /// The workers started so far (read by the lease holder).
  std::int32_t workers() const { return static_cast<std::int32_t>(workers_.size()); }

  /// Taken by one verify call at a time: false when another holds the team.
  bool try_acquire() { return !busy_.test_and_set(std::memory_order_acquire); }
  void release() { busy_.clear(std::memory_order_release); }

 private:
  // How long an idle worker spins before it sleeps: longer than the gaps inside one verify call
  // (the walk's work between two split passes) and than a benchmark's loop between calls.
  static constexpr std::chrono::microseconds kSpin{200};

  explicit RowTeam(std::int32_t most_workers) : most_workers_(most_workers) {
#if defined(__unix__) || defined(__APPLE__)
    pthread_atfork(nullptr, nullptr, [] { forked_flag().store(true); });
#endif
  }

  /// Starts workers up to `wanted` (by the lease holder alone). A worker that cannot be started
  /// caps the team where it is: the caller does the parts a missing worker would have.
  void grow(std::int32_t wanted) {
    while (static_cast<std::int32_t>(workers_.size()) < wanted) {
      try {
        workers_.emplace_back([this] { work(); });
      } catch (const std::system_error&) {
        most_workers_ = static_cast<std::int32_t>(workers_.size());
        return;
      }
    }
  }

  static std::atomic<bool>& forked_flag() {
    static std::atomic<bool> flag{false};
    return flag;
  }
  static bool forked() { return forked_flag().load(std::memory_order_relaxed); }

  template <class Job>
  static void call(const void* job, std::int32_t part) {
    (*static_cast<const Job*>(job))(part);
  }

  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  static std::uint64_t generation_of(std::uint64_t ticket) { return ticket >> 32; }

  /// Takes parts of task `generation` until none is left. A part is claimed by a compare-exchange
  /// on the whole ticket, so a thread that read a task's job just as the next task was published
  /// claims nothing from it: every part run is one of the task whose job it read.
  void take_parts(std::uint64_t generation) {
    for (;;) {
      std::uint64_t ticket = ticket_.load();
      const auto job = job_.load();
      const auto fn = call_.load();
      const auto next = static_cast<std::int32_t>((ticket >> 16) & 0xffffu);
      const auto parts = static_cast<std::int32_t>(ticket & 0xffffu);
      if (generation_of(ticket) != generation || next >= parts) return;
      if (!ticket_.compare_exchange_weak(ticket, ticket + (std::uint64_t{1} << 16))) continue;
      fn(job, next);
      done_.fetch_add(1);
    }
  }

  void work() {
    std::uint64_t seen = generation_of(ticket_.load());
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      std::int32_t spins = 0;
      while (generation_of(ticket_.load()) == seen && !stop_.load()) {
        pause();
        if (++spins % 64 == 0 && std::chrono::steady_clock::now() > until) {
          std::unique_lock<std::mutex> lock(mutex_);
          sleeping_.fetch_add(1);
          wake_.wait(lock, [&] { return generation_of(ticket_.load()) != seen || stop_.load(); });
          sleeping_.fetch_sub(1);
        }
      }
      if (stop_.load()) return;
      seen = generation_of(ticket_.load());
      take_parts(seen);
    }
  }

  // Every shared field is an atomic with sequentially consistent operations: a worker's
  // `sleeping_` increment and the caller's read of it after publishing a ticket cannot both miss
  // each other, so no wake is lost.
  std::atomic<std::uint64_t> ticket_{0};
  std::atomic<const void*> job_{nullptr};
  std::atomic<void (*)(const void*, std::int32_t)> call_{nullptr};
  std::atomic<std::int32_t> done_{0};
  std::atomic<std::int32_t> sleeping_{0};
  std::atomic<bool> stop_{false};
  std::atomic_flag busy_ = ATOMIC_FLAG_INIT;
  std::uint64_t generation_ = 0;  // the lease holder's alone, as are most_workers_ and workers_
  std::int32_t most_workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> workers_;
};

/// One verify call's hold on the team: empty when the team is held by another call (or when one
/// thread is all there is), so the rows are read unsplit.
class TeamLease {
 public:
  TeamLease() = default;
  explicit TeamLease(RowTeam& team) { take(team); }
  TeamLease(const TeamLease&) = delete;
  TeamLease& operator=(const TeamLease&) = delete;
  ~TeamLease() {
    if (team_) team_->release();
  }
  RowTeam* team() const { return team_; }
  /// Takes the team if it is free; a lease holds at most one.
  void take(RowTeam& team) {
    if (!team_ && team.try_acquire()) team_ = &team;
  }

 private:
  RowTeam* team_ = nullptr;
};

}  // namespace specverify::cpu
