// verify() on the CPU: validate, walk every chain (on several threads for large batches), then
// write the outputs. Results do not depend on the thread count: each chain is walked by one
// thread with the same arithmetic, and the statistics are integer sums.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "specverify/core/validate.hpp"
#include "specverify/core/walk.hpp"
#include "specverify/cpu/rows.hpp"
#include "specverify/types.hpp"

namespace specverify {

/// How the CPU backend may run. `max_threads` 0 uses every hardware thread, but only once the
/// batch holds enough row work to pay for starting them.
struct CpuOptions {
  std::int32_t max_threads = 0;
};

namespace cpu::detail {

/// Rows of V floats the walk reads for sure (one per chain) or, with statistics, at every
/// position; below about a megabyte of such reads a second thread costs more than it saves.
inline std::int32_t thread_count(std::int32_t batch_size, std::int64_t row_reads,
                                 std::int32_t vocab_size, std::int32_t max_threads) {
  constexpr std::int64_t kFloatsPerThread = std::int64_t{1} << 18;
  const std::int64_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const std::int64_t allowed = max_threads > 0 ? max_threads : hardware;
  const std::int64_t useful = row_reads * vocab_size / kFloatsPerThread;
  return static_cast<std::int32_t>(std::max<std::int64_t>(
      1, std::min({allowed, useful, std::int64_t{batch_size}})));
}

template <class Body>
void parallel_for(std::int32_t count, std::int32_t threads, const Body& body) {
  std::atomic<std::int32_t> next{0};
  const auto work = [&] {
    for (std::int32_t i = next++; i < count; i = next++) body(i);
  };
  std::vector<std::thread> pool;
  for (std::int32_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
}

}  // namespace cpu::detail

/// Verifies a batch of draft chains with `rule`: writes n_b accepted drafts, one more token and
/// kNoToken padding per sequence, and returns the batch's statistics. Throws invalid_input, before
/// writing anything, when the input is malformed.
///
///   specverify::ChainBatch<float> batch{B, V, offsets, drafts, p, q};
///   specverify::ChainOutput out{tokens, K + 1, accepted};
///   auto stats = specverify::verify(specverify::Standard{}, batch, {seed, step}, out);
template <class Rule>
VerifyStats verify(const Rule& rule, const ChainBatch<float>& batch, const Randomness& randomness,
                   const ChainOutput& out, const CpuOptions& options) {
  core::validate(rule, batch, randomness, out);
  const std::int32_t B = batch.batch_size;
  std::vector<core::ChainResult> results(static_cast<std::size_t>(B));
  const bool per_position = rule_traits<Rule>::stats(rule).any();
  const std::int64_t row_reads = B > 0 ? B + (per_position ? batch.draft_offsets[B] : 0) : 0;
  const std::int32_t threads =
      cpu::detail::thread_count(B, row_reads, batch.vocab_size, options.max_threads);
  cpu::detail::parallel_for(B, threads, [&](std::int32_t b) {
    cpu::Rows<> rows{batch.vocab_size};
    results[b] = core::walk_chain(rule, batch, randomness, b, rows);
  });

  VerifyStats total;
  for (std::int32_t b = 0; b < B; ++b) {
    if (results[b].fault.kind != core::FaultKind::none) core::report(results[b].fault, b, batch);
  }
  for (std::int32_t b = 0; b < B; ++b) {
    const core::ChainResult& r = results[b];
    std::int32_t* row = out.tokens + std::int64_t{b} * out.row_width;
    std::copy_n(batch.draft_tokens + batch.draft_offsets[b], r.accepted, row);
    row[r.accepted] = r.extra;
    std::fill(row + r.accepted + 1, row + out.row_width, kNoToken);
    out.num_accepted[b] = r.accepted;
    total.drafted += r.drafted;
    total.accepted += r.accepted;
    total.relaxed += r.relaxed;
    total.target_checked += r.target_checked;
  }
  return total;
}

template <class Rule>
VerifyStats verify(const Rule& rule, const ChainBatch<float>& batch, const Randomness& randomness,
                   const ChainOutput& out) {
  return verify(rule, batch, randomness, out, CpuOptions{});
}

}  // namespace specverify
