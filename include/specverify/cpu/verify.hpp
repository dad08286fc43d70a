// verify() on the CPU: validate, walk every sequence (on several threads for large batches, or one
// thread whose rows split over the row team for small ones), then write the outputs. Results do not
// depend on the thread count: each sequence is walked by one thread with the same arithmetic, a
// split row's summaries merge exactly, and the statistics are integer sums.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

#include "specverify/core/chain_layout.hpp"
#include "specverify/core/output.hpp"
#include "specverify/core/padded_chain.hpp"
#include "specverify/core/prob_source.hpp"
#include "specverify/core/tree_layout.hpp"
#include "specverify/core/logit_source.hpp"
#include "specverify/core/validate.hpp"
#include "specverify/core/validate_logits.hpp"
#include "specverify/core/walk.hpp"
#include "specverify/cpu/row_team.hpp"
#include "specverify/cpu/rows.hpp"
#include "specverify/cpu/split_row.hpp"
#include "specverify/types.hpp"

namespace specverify {

/// How the CPU backend may run. `max_threads` 0 uses every hardware thread: over sequences once
/// the batch holds enough row work to pay for starting them, else over the parts of each row (the
/// process's row team, started on first use); 1 keeps the call on the calling thread; a negative
/// value is invalid_input.
struct CpuOptions {
  std::int32_t max_threads = 0;
};

namespace cpu::detail {

inline void check_options(const CpuOptions& options) {
  if (options.max_threads < 0) {
    core::detail::reject("max_threads = ", options.max_threads, " must be >= 0 (0: every hardware thread)");
  }
}

/// The threads a call may use: max_threads, or with 0 every hardware thread.
inline std::int32_t allowed_threads(std::int32_t max_threads) {
  // Read once: glibc answers hardware_concurrency() by reading a file, a cost small batches
  // called step after step would pay every time.
  static const std::int32_t hardware = static_cast<std::int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  return max_threads > 0 ? max_threads : hardware;
}

/// Rows of V floats the walk reads for sure (one per sequence) or, with statistics, at every
/// node; below about a megabyte of such reads a second thread costs more than it saves.
inline std::int32_t thread_count(std::int32_t batch_size, std::int64_t row_reads,
                                 std::int32_t vocab_size, std::int32_t max_threads) {
  constexpr std::int64_t kFloatsPerThread = std::int64_t{1} << 18;
  const std::int64_t useful = row_reads * vocab_size / kFloatsPerThread;
  if (useful <= 1 || max_threads == 1) return 1;
  return static_cast<std::int32_t>(std::max<std::int64_t>(
      1, std::min({std::int64_t{allowed_threads(max_threads)}, useful, std::int64_t{batch_size}})));
}

/// A call walked on one thread spreads its rows over the row team instead (B = 1 uses every
/// core), when the rows are long enough to split and the team is free.
class SplitRows {
 public:
  SplitRows(std::int32_t threads, std::int32_t vocab_size, std::int32_t max_threads) {
    if (threads > 1 || max_threads == 1) return;
    const std::int32_t parts = RowSplit::parts_for(vocab_size, allowed_threads(max_threads));
    if (parts <= 1) return;
    lease_.take(RowTeam::instance());
    if (lease_.team()) split_ = RowSplit{lease_.team(), parts};
  }
  const RowSplit& split() const { return split_; }

 private:
  TeamLease lease_;  // not a std::optional: g++ 12 warns its destructor reads an unset pointer
  RowSplit split_;
};

/// Calls body(state, i) for i in [0, count) on `threads` threads; each thread makes its own
/// state once (a backend's rows with their scratch).
template <class MakeState, class Body>
void parallel_for(std::int32_t count, std::int32_t threads, const MakeState& make_state, const Body& body) {
  std::atomic<std::int32_t> next{0};
  const auto work = [&] {
    auto state = make_state();
    for (std::int32_t i = next++; i < count; i = next++) body(state, i);
  };
  std::vector<std::thread> pool;
  for (std::int32_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& thread : pool) thread.join();
}

/// Walks every sequence of a validated batch, reports the lowest faulting sequence (report(fault,
/// b) throws), and only then writes every output. Layout and source say what the batch is; the
/// rows each thread makes do the row work.
template <class Rule, class Layout, class Source, class MakeRows, class Report, class Batch, class Output>
VerifyStats run(const Rule& rule, const Layout& layout, const Source& source, const Batch& batch,
                const Randomness& randomness, const Output& output, const CpuOptions& options,
                const MakeRows& make_rows, const Report& report) {
  const std::int32_t B = batch.batch_size;
  const core::OutputRows out = core::OutputRows::of(output);
  std::vector<core::WalkResult> results(static_cast<std::size_t>(B));
  std::vector<float> staged(out.logprobs ? std::size_t(B) * std::size_t(out.row_width) : 0);
  const bool per_node = rule_traits<Rule>::stats(rule).any();
  std::int64_t row_reads = B;
  for (std::int32_t b = 0; per_node && b < B; ++b) row_reads += layout.count(b);
  const std::int32_t threads = thread_count(B, row_reads, batch.vocab_size, options.max_threads);
  const SplitRows split(threads, batch.vocab_size, options.max_threads);
  const auto make_split_rows = [&] {
    auto rows = make_rows();
    rows.split = split.split();
    return rows;
  };
  parallel_for(B, threads, make_split_rows, [&](auto& rows, std::int32_t b) {
    float* stage = staged.empty() ? nullptr : staged.data() + std::size_t(b) * out.row_width;
    results[b] = core::walk(rule, layout, source, randomness, b, rows, stage);
  });
  for (std::int32_t b = 0; b < B; ++b) {
    if (results[b].fault.kind != core::FaultKind::none) report(results[b].fault, b);
  }
  VerifyStats total;
  for (std::int32_t b = 0; b < B; ++b) {
    core::write_sequence(layout, b, results[b], out,
                         staged.empty() ? nullptr : staged.data() + std::size_t(b) * out.row_width);
    core::add_stats(total, results[b]);
  }
  return total;
}

/// verify() over a batch of probability rows walked by `layout`: the batch's own, or one that walks
/// fewer of its drafts (Python's padded chains); faults are worded by the batch's layout,
/// `Reported`.
template <class Reported, class Rule, class Batch, class Layout, class Output>
VerifyStats verify_probs(const Rule& rule, const Batch& batch, const Layout& layout, const Randomness& randomness,
                         const Output& out, const CpuOptions& options) {
  core::validate(rule, batch, randomness, out);
  core::check_positions<Rule>(randomness);
  check_options(options);
  if (batch.batch_size == 0) return {};
  return run(rule, layout, core::ProbSource<float>::of(batch), batch, randomness, out, options,
             [&] { return Rows<>{batch.vocab_size}; },
             [&](const core::Fault& f, std::int32_t b) { core::report<Reported>(f, b, batch); });
}

/// verify() over a batch of logits walked by `layout` (as verify_probs): validation, the logits
/// source over the inverted draft map, and rows that run each row's pre-pass into one row of
/// scratch per thread.
template <class Reported, class Rule, class Batch, class Layout, class Output>
VerifyStats verify_logits(const Rule& rule, const Batch& batch, const Layout& layout, const Randomness& randomness,
                          const Output& out, const CpuOptions& options) {
  using Logit = std::remove_cv_t<std::remove_pointer_t<decltype(batch.target_logits)>>;
  static_assert(is_cpu_row_type<Logit>,
                "the CPU backend reads logits rows of float, specverify::float16 or specverify::bfloat16");
  std::vector<std::int32_t> target_to_draft, bias_order;
  core::validate_logits(rule, batch, randomness, out, target_to_draft, bias_order);
  check_options(options);
  if (batch.batch_size == 0) return {};
  const auto source = core::LogitSource<Logit>::of(batch, layout.offsets,
                                                   target_to_draft.empty() ? nullptr : target_to_draft.data(),
                                                   bias_order.data());
  const std::int32_t longest = std::max(batch.vocab_size, source.draft_vocab_size);
  return run(rule, layout, source, batch, randomness, out, options,
             [&] { return OpenedLogitRows<DefaultArch, Logit>{batch.vocab_size, longest}; },
             [&](const core::Fault& f, std::int32_t b) { core::report_logits<Reported>(f, b, batch, source); });
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
  return cpu::detail::verify_probs<core::ChainLayout>(rule, batch, core::ChainLayout::of(batch), randomness, out,
                                                      options);
}

template <class Rule>
VerifyStats verify(const Rule& rule, const ChainBatch<float>& batch, const Randomness& randomness,
                   const ChainOutput& out) {
  return verify(rule, batch, randomness, out, CpuOptions{});
}

/// Verifies a batch of draft trees with `rule`: at each node the children are tried in index
/// order and the first accepted is followed (docs/api.md "Trees"); writes the accepted path's tokens
/// (and nodes), one more token and kNoToken padding per sequence.
///
///   specverify::TreeBatch<float> batch{B, V, node_offsets, parents, drafts, p, q};
///   batch.drafted = specverify::Drafted::sampled;  // how the children were drafted
///   specverify::TreeOutput out{tokens, depth + 1, accepted, accepted_nodes};
///   auto stats = specverify::verify(specverify::Standard{}, batch, {seed, step}, out);
template <class Rule>
VerifyStats verify(const Rule& rule, const TreeBatch<float>& batch, const Randomness& randomness,
                   const TreeOutput& out, const CpuOptions& options) {
  static_assert(!specverify::detail::has_cut<Rule>::value,
                "a rule that cuts chains (SpecDecPP) decides chain lengths: it has no tree form");
  return cpu::detail::verify_probs<core::TreeLayout>(rule, batch, core::TreeLayout::of(batch), randomness, out,
                                                     options);
}

template <class Rule>
VerifyStats verify(const Rule& rule, const TreeBatch<float>& batch, const Randomness& randomness,
                   const TreeOutput& out) {
  return verify(rule, batch, randomness, out, CpuOptions{});
}

/// Verifies a batch of draft chains given as logits: each sequence's sampling parameters (and
/// guidance, bitmask, reduced draft vocabulary) are applied on the fly, row by row, exactly as
/// docs/api.md's nine steps say; no probability row is written anywhere.
///
///   specverify::SamplingParams params[B];                   // per sequence: temperature, top_k, ...
///   specverify::LogitsChainBatch<float> batch{B, V, offsets, drafts, target_logits, draft_logits};
///   // rows in the model's dtype: LogitsChainBatch<specverify::bfloat16> (or float16), widened as read
///   batch.target_params = params;                           // draft_params: what the drafter used
///   auto stats = specverify::verify(specverify::Standard{}, batch, {seed, step}, out);
template <class Rule, class Logit>
VerifyStats verify(const Rule& rule, const LogitsChainBatch<Logit>& batch, const Randomness& randomness,
                   const ChainOutput& out, const CpuOptions& options) {
  return cpu::detail::verify_logits<core::ChainLayout>(rule, batch, core::ChainLayout::of(batch), randomness, out,
                                                       options);
}

template <class Rule, class Logit>
VerifyStats verify(const Rule& rule, const LogitsChainBatch<Logit>& batch, const Randomness& randomness,
                   const ChainOutput& out) {
  return verify(rule, batch, randomness, out, CpuOptions{});
}

/// Verifies a padded batch of chains (core::padded(batch, num_draft_tokens)): sequence b owns its
/// draft slots and rows as in `batch` but walks only its first num_draft_tokens[b] drafts, as an
/// engine's fixed-shape step holds them; what lies past a count is never read. Probability rows
/// or logits (core::PaddedLogitsChainBatch), with the unpadded overloads' outputs and faults.
///
///   const auto padded = specverify::core::padded(batch, num_draft_tokens);  // [B] counts
///   auto stats = specverify::verify(specverify::Standard{}, padded, {seed, step}, out);
template <class Rule>
VerifyStats verify(const Rule& rule, const core::PaddedChainBatch<float>& batch, const Randomness& randomness,
                   const ChainOutput& out, const CpuOptions& options = {}) {
  return cpu::detail::verify_probs<core::ChainLayout>(rule, batch, core::PaddedChainLayout::of(batch), randomness,
                                                      out, options);
}

template <class Rule, class Logit>
VerifyStats verify(const Rule& rule, const core::PaddedLogitsChainBatch<Logit>& batch, const Randomness& randomness,
                   const ChainOutput& out, const CpuOptions& options = {}) {
  return cpu::detail::verify_logits<core::ChainLayout>(rule, batch, core::PaddedChainLayout::of(batch), randomness,
                                                       out, options);
}

/// Verifies a batch of draft trees given as logits (LogitsChainBatch's parameters, TreeBatch's
/// layout).
template <class Rule, class Logit>
VerifyStats verify(const Rule& rule, const LogitsTreeBatch<Logit>& batch, const Randomness& randomness,
                   const TreeOutput& out, const CpuOptions& options) {
  static_assert(!specverify::detail::has_cut<Rule>::value,
                "a rule that cuts chains (SpecDecPP) decides chain lengths: it has no tree form");
  return cpu::detail::verify_logits<core::TreeLayout>(rule, batch, core::TreeLayout::of(batch), randomness, out,
                                                      options);
}

template <class Rule, class Logit>
VerifyStats verify(const Rule& rule, const LogitsTreeBatch<Logit>& batch, const Randomness& randomness,
                   const TreeOutput& out) {
  return verify(rule, batch, randomness, out, CpuOptions{});
}

}  // namespace specverify
