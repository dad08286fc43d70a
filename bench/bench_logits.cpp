// verify(Standard) over a LogitsChainBatch at B = 64, K = 5, V = 128256, float logits, one thread,
// measured next to a read pass over the logits bytes the verifier must read and next to what
// engines do today: their own softmax with the same sampling parameters into float probability
// rows for all K + 1 target and K draft rows of every sequence (top-k / top-p by a full sort of
// the row, as PyTorch samplers do; exp vectorised), then verify on the ChainBatch of those rows.
//   rejected: every chain rejected at its first draft (reads target row 0 and draft row 0);
//   accepted: every draft accepted (reads every row once, then draws the bonus from the last).
// Sampling parameters: T = 0.8 alone, and T = 0.8 with top_k = 50, top_p = 0.9.
//
//   build/release/bench/bench_logits --benchmark_counters_tabular=true
//   build/release/bench/bench_logits_o2 ...   (the same at -O2, as RelWithDebInfo engines build)
// Ratios (issue 10): Verify/<params>/rejected over ReadPass/rejected (goals 2.0x at T = 0.8, 3.0x
// with top_k and top_p) and Engine/<params>/<path> over Verify/<params>/<path> (goal >= 2x).
// Penalties (issue 17): VerifyPenalised/temperature/rejected (a history of 2,000 tokens and 50
// bias entries per sequence) over Verify/penalties_baseline/temperature/rejected (goal <= 1.15x),
// and EnginePenalised (dense [rows, V] counts, penalties on every row, softmax, verify) over it;
// PenaltiesSideBySide times the two steps in turn within each iteration (its counter `ratio`);
// its accepted path has the history alone (q, a copy of p, must stay p) and opens all 11 rows of a
// sequence, each building its own overlay:
//   build/release/bench/bench_logits --benchmark_filter='penalties_baseline|Penalised|SideBySide'
// B = 1 (issue 21): VerifyOne/temperature/rejected/threads:2 over threads:1 (goal <= 0.6x: the
// rows split over the row team), next to ReadPassOne, the read of the same two rows; and
// VerifyOnePenalised, the same with one sequence's history and bias lists:
//   build/release/bench/bench_logits --benchmark_filter='One' --benchmark_repetitions=5
// Coupled: VerifyCoupled/<params>/rejected over ReadPass/rejected (it reads half those bytes),
// and the Gumbel noise through the shared log against libm's:
//   build/release/bench/bench_logits --benchmark_filter='Coupled|Gumbel|ReadPass/rejected'
#include <benchmark/benchmark.h>
#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "read_pass.hpp"
#include "specverify/specverify.hpp"

// g++ 12 reports the _mm512_undefined_* operands inside xsimd::exp's AVX-512 intrinsics as
// uninitialised (a false positive; the library's kernels avoid those intrinsics).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace specverify::bench {
namespace {

constexpr std::int32_t kB = 64, kK = 5, kV = 128256;
constexpr std::int32_t kTargetRows = kB * (kK + 1), kDraftRows = kB * kK;

const SamplingParams kTemperature{0.8f, 0, 1.0f, 0.0f};
const SamplingParams kTopKTopP{0.8f, 50, 0.9f, 0.0f};

std::size_t at(std::int32_t row) { return std::size_t(row) * kV; }
std::int32_t target_row(std::int32_t b, std::int32_t j) { return b * (kK + 1) + j; }
std::int32_t draft_row(std::int32_t b, std::int32_t j) { return b * kK + j; }

/// The logits of both paths. Target rows: Student-t (3 dof) logits clamped to +-12, scaled like an
/// LLM's (x 2), jittered, from a pool of 16 rows (each row its own memory). Draft rows: rejected path, the
/// target's plus N(0, 1) noise with the draft token lifted to the draft's top, the token being
/// the target row's lowest (p(x) ~ e^-60, or 0 where top_k cuts it): rejected whatever u is;
/// accepted path, a copy of the target row with the token at its argmax (q = p: always accepted).
struct Logits {
  std::vector<float> target, rejecting_draft, accepting_draft;
  std::vector<std::int32_t> offsets, rejecting_tokens, accepting_tokens;

  Logits()
      : target(at(kTargetRows)), rejecting_draft(at(kDraftRows)), accepting_draft(at(kDraftRows)),
        offsets(kB + 1), rejecting_tokens(kB * kK), accepting_tokens(kB * kK) {
    constexpr std::int32_t kPool = 16;
    std::mt19937_64 rng(17);
    std::student_t_distribution<float> heavy(3.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> pool(at(kPool)), noise(at(kPool));
    std::uniform_real_distribution<float> jitter(-0.05f, 0.05f);  // no ties at the clamp
    for (float& l : pool) l = 2.0f * std::clamp(heavy(rng), -12.0f, 12.0f) + jitter(rng);
    for (float& n : noise) n = normal(rng);
    for (std::int32_t r = 0; r < kTargetRows; ++r) {
      std::memcpy(&target[at(r)], &pool[at(r % kPool)], sizeof(float) * kV);
    }
    for (std::int32_t b = 0; b <= kB; ++b) offsets[b] = b * kK;
    for (std::int32_t b = 0; b < kB; ++b) {
      for (std::int32_t j = 0; j < kK; ++j) {
        const float* p = &target[at(target_row(b, j))];
        float* q = &rejecting_draft[at(draft_row(b, j))];
        const float* n = &noise[at((b * kK + j) % kPool)];
        for (std::int32_t v = 0; v < kV; ++v) q[v] = p[v] + n[v];
        const auto lowest = static_cast<std::int32_t>(std::min_element(p, p + kV) - p);
        q[lowest] = *std::max_element(q, q + kV) + 2.0f;
        rejecting_tokens[draft_row(b, j)] = lowest;
        std::memcpy(&accepting_draft[at(draft_row(b, j))], p, sizeof(float) * kV);
        accepting_tokens[draft_row(b, j)] = static_cast<std::int32_t>(std::max_element(p, p + kV) - p);
      }
    }
  }
};

const Logits& logits() {
  static const Logits l;
  return l;
}

/// One path's batch and outputs.
struct Path {
  bool accepted;
  std::vector<SamplingParams> params;
  std::vector<std::int32_t> out_tokens = std::vector<std::int32_t>(kB * (kK + 1)), num_accepted = std::vector<std::int32_t>(kB);

  Path(bool accepted_path, const SamplingParams& p) : accepted(accepted_path), params(kB, p) {}

  LogitsChainBatch<float> batch() const {
    const Logits& l = logits();
    LogitsChainBatch<float> batch;
    batch.batch_size = kB;
    batch.vocab_size = kV;
    batch.draft_offsets = l.offsets.data();
    batch.draft_tokens = accepted ? l.accepting_tokens.data() : l.rejecting_tokens.data();
    batch.target_logits = l.target.data();
    batch.draft_logits = accepted ? l.accepting_draft.data() : l.rejecting_draft.data();
    batch.target_params = params.data();
    return batch;
  }
  ChainOutput output() { return ChainOutput{out_tokens.data(), kK + 1, num_accepted.data()}; }
  std::int64_t expected_accepted() const { return accepted ? std::int64_t{kB} * kK : 0; }
};

/// Bytes of the logits rows the verifier must read: target row 0 and draft row 0 of every
/// sequence (rejected), or every row (accepted).
std::int64_t read_bytes(bool accepted) {
  return std::int64_t{kB} * kV * sizeof(float) * (accepted ? kK + 1 + kK : 2);
}

void set_bytes(benchmark::State& state, bool accepted) {
  state.SetBytesProcessed(state.iterations() * read_bytes(accepted));
  state.counters["MB/step"] = double(read_bytes(accepted)) / 1e6;
}

void ReadPass(benchmark::State& state, bool accepted) {
  const Logits& l = logits();
  const float* draft = accepted ? l.accepting_draft.data() : l.rejecting_draft.data();
  const std::int32_t rows = accepted ? kK : 1;
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      for (std::int32_t j = 0; j < rows; ++j) {
        sum += read_pass(&l.target[at(target_row(b, j))], kV) + read_pass(draft + at(draft_row(b, j)), kV);
      }
      if (accepted) sum += read_pass(&l.target[at(target_row(b, kK))], kV);
    }
    benchmark::DoNotOptimize(sum);
  }
  set_bytes(state, accepted);
}

/// The same logits in bfloat16, as LM heads emit them (each rounded to nearest, ties to even).
struct Bf16Logits {
  std::vector<bfloat16> target, rejecting_draft, accepting_draft;

  static std::vector<bfloat16> rounded(const std::vector<float>& rows) {
    std::vector<bfloat16> out(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::uint32_t u;
      std::memcpy(&u, &rows[i], sizeof u);
      out[i] = bfloat16{static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
    }
    return out;
  }
  Bf16Logits()
      : target(rounded(logits().target)), rejecting_draft(rounded(logits().rejecting_draft)),
        accepting_draft(rounded(logits().accepting_draft)) {}
};

const Bf16Logits& bf16_logits() {
  static const Bf16Logits l;
  return l;
}

/// A read pass over the bfloat16 rows' bytes (read as floats: the same bytes, half the elements).
void ReadPassBf16(benchmark::State& state, bool accepted) {
  const Bf16Logits& l = bf16_logits();
  const bfloat16* draft = accepted ? l.accepting_draft.data() : l.rejecting_draft.data();
  const auto floats = [](const bfloat16* row) { return reinterpret_cast<const float*>(row); };
  const std::int32_t rows = accepted ? kK : 1;
  for (auto _ : state) {
    float sum = 0;
    for (std::int32_t b = 0; b < kB; ++b) {
      for (std::int32_t j = 0; j < rows; ++j) {
        sum += read_pass(floats(&l.target[at(target_row(b, j))]), kV / 2) +
               read_pass(floats(draft + at(draft_row(b, j))), kV / 2);
      }
      if (accepted) sum += read_pass(floats(&l.target[at(target_row(b, kK))]), kV / 2);
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * read_bytes(accepted) / 2);
}

/// The library on the bfloat16 rows, widened as read.
void VerifyBf16(benchmark::State& state, SamplingParams params, bool accepted) {
  Path path(accepted, params);
  const LogitsChainBatch<float> floats = path.batch();
  const Bf16Logits& l = bf16_logits();
  LogitsChainBatch<bfloat16> batch;
  batch.batch_size = floats.batch_size;
  batch.vocab_size = floats.vocab_size;
  batch.draft_offsets = floats.draft_offsets;
  batch.draft_tokens = floats.draft_tokens;
  batch.target_logits = l.target.data();
  batch.draft_logits = accepted ? l.accepting_draft.data() : l.rejecting_draft.data();
  batch.target_params = floats.target_params;
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, batch, Randomness{1, step++}, path.output(), CpuOptions{1});
    if (stats.accepted != path.expected_accepted()) state.SkipWithError("not the path this measures");
  }
  state.SetBytesProcessed(state.iterations() * read_bytes(accepted) / 2);
}

/// The library: verify straight from the logits.
void Verify(benchmark::State& state, SamplingParams params, bool accepted) {
  Path path(accepted, params);
  const LogitsChainBatch<float> batch = path.batch();
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, batch, Randomness{1, step++}, path.output(), CpuOptions{1});
    if (stats.accepted != path.expected_accepted()) state.SkipWithError("not the path this measures");
  }
  set_bytes(state, accepted);
}

/// B = 1 (issue 21): sequence b alone, b cycling over the 64 so that each call reads its rows
/// from memory, as an engine's freshly written logits are; `threads` = state.range(0) (1: one
/// thread; more: the rows split over the row team).
LogitsChainBatch<float> sequence(const LogitsChainBatch<float>& all, std::int32_t b) {
  LogitsChainBatch<float> one = all;
  one.batch_size = 1;
  one.draft_tokens = all.draft_tokens + b * kK;
  one.target_logits = all.target_logits + at(target_row(b, 0));
  one.draft_logits = all.draft_logits + at(draft_row(b, 0));
  return one;
}

void ReadPassOne(benchmark::State& state) {
  const Logits& l = logits();
  std::int32_t b = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(read_pass(&l.target[at(target_row(b, 0))], kV) +
                             read_pass(&l.rejecting_draft[at(draft_row(b, 0))], kV));
    b = (b + 1) % kB;
  }
  state.SetBytesProcessed(state.iterations() * read_bytes(false) / kB);
}

void VerifyOne(benchmark::State& state, SamplingParams params) {
  Path path(false, params);
  const LogitsChainBatch<float> all = path.batch();
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, sequence(all, static_cast<std::int32_t>(step % kB)),
                                     Randomness{1, step}, path.output(), options);
    ++step;
    if (stats.accepted != 0) state.SkipWithError("not the rejected path");
  }
  state.SetBytesProcessed(state.iterations() * read_bytes(false) / kB);
}

/// An engine's softmax with sampling parameters into a probability row: temperature (exp
/// vectorised), then top-k and top-p on a full sort of the row (as PyTorch samplers do; ties at
/// the k-th value kept), then normalise.
void engine_softmax(const float* logits, const SamplingParams& s, float* out,
                    std::vector<std::pair<float, std::int32_t>>& order) {
  using F = xsimd::batch<float>;
  constexpr std::int32_t W = F::size;
  const float inv_t = 1.0f / s.temperature;
  const float top = *std::max_element(logits, logits + kV);
  std::int32_t v = 0;
  for (; v + W <= kV; v += W) xsimd::exp((F::load_unaligned(logits + v) - F(top)) * F(inv_t)).store_unaligned(out + v);
  for (; v < kV; ++v) out[v] = std::exp((logits[v] - top) * inv_t);
  if (s.top_k > 0 || s.top_p < 1.0f) {
    order.resize(kV);
    for (v = 0; v < kV; ++v) order[v] = {logits[v], v};
    std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::int32_t keep = kV;
    if (s.top_k > 0 && s.top_k < kV) {
      const float kth = order[s.top_k - 1].first;
      while (keep > 0 && order[keep - 1].first < kth) --keep;
    }
    double total = 0;
    for (std::int32_t r = 0; r < keep; ++r) total += out[order[r].second];
    if (s.top_p < 1.0f) {
      double mass = 0;
      std::int32_t r = 0;
      while (r < keep && mass < s.top_p * total) mass += out[order[r++].second];
      keep = r;
    }
    for (std::int32_t r = keep; r < kV; ++r) out[order[r].second] = 0.0f;
  }
  double sum = 0;
  for (v = 0; v < kV; ++v) sum += out[v];
  const float inv = static_cast<float>(1.0 / sum);
  for (v = 0; v < kV; ++v) out[v] *= inv;
}

/// What engines do today: probability rows for every row of every sequence, written to memory,
/// then verify on them.
void Engine(benchmark::State& state, SamplingParams params, bool accepted) {
  const Logits& l = logits();
  Path path(accepted, params);
  const LogitsChainBatch<float> logits_batch = path.batch();
  std::vector<float> p(at(kTargetRows)), q(at(kDraftRows));
  std::vector<std::pair<float, std::int32_t>> order;
  const ChainBatch<float> batch{kB, kV, l.offsets.data(), logits_batch.draft_tokens, p.data(), q.data()};
  std::uint64_t step = 0;
  for (auto _ : state) {
    for (std::int32_t r = 0; r < kTargetRows; ++r) engine_softmax(&l.target[at(r)], params, &p[at(r)], order);
    for (std::int32_t r = 0; r < kDraftRows; ++r) {
      engine_softmax(logits_batch.draft_logits + at(r), params, &q[at(r)], order);
    }
    const VerifyStats stats = verify(Standard{}, batch, Randomness{1, step++}, path.output(), CpuOptions{1});
    if (stats.accepted != path.expected_accepted()) state.SkipWithError("not the path this measures");
  }
  set_bytes(state, accepted);
}

// ------------------------------------------------------------------ penalties and logit bias

/// Per sequence a history of kHistory tokens (ascending, counts 0 .. 3) and kBias biased tokens,
/// with repetition 1.1, presence 0.3, frequency 0.2 (issue 17's benchmark).
constexpr std::int32_t kHistory = 2000, kBias = 50;

struct Lists {
  std::vector<std::int32_t> h_offsets{0}, h_tokens, h_counts, b_offsets{0}, b_tokens;
  std::vector<float> b_values;
  Lists() {
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<std::int32_t> token(0, kV - 1), count(0, 3);
    std::uniform_real_distribution<float> bias(-2.0f, 2.0f);
    for (std::int32_t b = 0; b < kB; ++b) {
      std::set<std::int32_t> h;
      while (static_cast<std::int32_t>(h.size()) < kHistory) h.insert(token(rng));
      for (const std::int32_t t : h) {
        h_tokens.push_back(t);
        h_counts.push_back(count(rng));
      }
      h_offsets.push_back(static_cast<std::int32_t>(h_tokens.size()));
      std::vector<std::int32_t> biased;
      while (static_cast<std::int32_t>(biased.size()) < kBias) {
        const std::int32_t t = token(rng);
        if (std::find(biased.begin(), biased.end(), t) == biased.end()) biased.push_back(t);
      }
      for (const std::int32_t t : biased) {
        b_tokens.push_back(t);
        b_values.push_back(bias(rng));
      }
      b_offsets.push_back(static_cast<std::int32_t>(b_tokens.size()));
    }
  }
};

const Lists& lists() {
  static const Lists l;
  return l;
}

SamplingParams penalised(SamplingParams p) {
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.2f;
  return p;
}

/// path's batch with every sequence's history and bias lists.
LogitsChainBatch<float> with_lists(const Path& path) {
  const Lists& l = lists();
  LogitsChainBatch<float> batch = path.batch();
  batch.history_offsets = l.h_offsets.data();
  batch.history_tokens = l.h_tokens.data();
  batch.history_counts = l.h_counts.data();
  batch.bias_offsets = l.b_offsets.data();
  batch.bias_tokens = l.b_tokens.data();
  batch.bias_values = l.b_values.data();
  return batch;
}

/// The library with the lists: the overlay merged into the passes that read each row.
void VerifyPenalised(benchmark::State& state, SamplingParams params, bool accepted) {
  Path path(accepted, penalised(params));
  const LogitsChainBatch<float> batch = with_lists(path);
  std::uint64_t step = 0;
  for (auto _ : state) {
    const VerifyStats stats = verify(Standard{}, batch, Randomness{1, step++}, path.output(), CpuOptions{1});
    if (stats.accepted != path.expected_accepted()) state.SkipWithError("not the path this measures");
  }
  set_bytes(state, accepted);
}

/// The same two steps as Verify/penalties_baseline and VerifyPenalised, one after the other in
/// every iteration, each timed on its own: on a machine whose speed drifts between runs (a shared
/// VM: either benchmark alone moves by 20% from run to run) the drift falls on both alike, and the
/// counter `ratio` is the penalised step's time over the plain one's, summed over the iterations.
void PenaltiesSideBySide(benchmark::State& state, SamplingParams params, bool accepted) {
  Path plain_path(accepted, params), penalised_path(accepted, penalised(params));
  const LogitsChainBatch<float> plain = plain_path.batch();
  LogitsChainBatch<float> penalised_batch = with_lists(penalised_path);
  // Accepted: the history alone, so that q (a copy of p, without p's bias) stays p and every draft passes.
  if (accepted) penalised_batch.bias_offsets = nullptr;
  using Clock = std::chrono::steady_clock;
  Clock::duration plain_time{}, penalised_time{};
  // Once untimed: the first touch of the rows' pages would otherwise weigh on the plain step alone.
  verify(Standard{}, plain, Randomness{1, 0}, plain_path.output(), CpuOptions{1});
  verify(Standard{}, penalised_batch, Randomness{1, 0}, penalised_path.output(), CpuOptions{1});
  std::uint64_t step = 0;
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    const VerifyStats a = verify(Standard{}, plain, Randomness{1, step}, plain_path.output(), CpuOptions{1});
    const Clock::time_point middle = Clock::now();
    const VerifyStats b = verify(Standard{}, penalised_batch, Randomness{1, step}, penalised_path.output(), CpuOptions{1});
    penalised_time += Clock::now() - middle;
    plain_time += middle - start;
    ++step;
    if (a.accepted != plain_path.expected_accepted() || b.accepted != a.accepted) state.SkipWithError("not the path this measures");
  }
  const auto us = [&](Clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count() / static_cast<double>(state.iterations());
  };
  state.counters["plain_us"] = us(plain_time);
  state.counters["penalised_us"] = us(penalised_time);
  state.counters["ratio"] = us(penalised_time) / us(plain_time);
}

/// VerifyOne with the lists: one sequence's history and bias (the row's overlay) at B = 1.
void VerifyOnePenalised(benchmark::State& state, SamplingParams params) {
  Path path(false, penalised(params));
  const LogitsChainBatch<float> all = path.batch();
  const Lists& l = lists();
  const std::int32_t history[] = {0, kHistory}, bias[] = {0, kBias};
  const CpuOptions options{static_cast<std::int32_t>(state.range(0))};
  std::uint64_t step = 0;
  for (auto _ : state) {
    const auto b = static_cast<std::int32_t>(step % kB);
    LogitsChainBatch<float> one = sequence(all, b);
    one.history_offsets = history;
    one.history_tokens = l.h_tokens.data() + b * kHistory;
    one.history_counts = l.h_counts.data() + b * kHistory;
    one.bias_offsets = bias;
    one.bias_tokens = l.b_tokens.data() + b * kBias;
    one.bias_values = l.b_values.data() + b * kBias;
    const VerifyStats stats = verify(Standard{}, one, Randomness{1, step}, path.output(), options);
    ++step;
    if (stats.accepted != 0) state.SkipWithError("not the rejected path");
  }
  state.SetBytesProcessed(state.iterations() * read_bytes(false) / kB);
}

/// What engines do: dense [rows, V] count tensors (history plus the drafts before each row),
/// the penalties and bias applied to every element of every row, the softmax, then verify.
void EnginePenalised(benchmark::State& state, SamplingParams params, bool accepted) {
  const Logits& lg = logits();
  const Lists& l = lists();
  const SamplingParams pen = penalised(params);
  Path path(accepted, params);
  const LogitsChainBatch<float> logits_batch = path.batch();
  std::vector<float> p(at(kTargetRows)), q(at(kDraftRows)), row(kV);
  std::vector<std::int32_t> target_counts(at(kTargetRows)), draft_counts(at(kDraftRows));
  std::vector<std::uint8_t> target_seen(at(kTargetRows)), draft_seen(at(kDraftRows));
  std::vector<std::pair<float, std::int32_t>> order;
  const ChainBatch<float> batch{kB, kV, lg.offsets.data(), logits_batch.draft_tokens, p.data(), q.data()};
  const auto fill_counts = [&](std::int32_t b, std::int32_t j, std::int32_t* counts, std::uint8_t* seen) {
    std::fill(counts, counts + kV, 0);
    std::fill(seen, seen + kV, std::uint8_t{0});
    for (std::int32_t e = l.h_offsets[b]; e < l.h_offsets[b + 1]; ++e) {
      counts[l.h_tokens[e]] = l.h_counts[e];
      seen[l.h_tokens[e]] = 1;
    }
    for (std::int32_t d = 0; d < j; ++d) {
      const std::int32_t t = logits_batch.draft_tokens[b * kK + d];
      ++counts[t];
      seen[t] = 1;
    }
  };
  const auto penalise = [&](const float* logits, const std::int32_t* counts, const std::uint8_t* seen,
                            std::int32_t b, bool bias) {
    for (std::int32_t v = 0; v < kV; ++v) {
      float x = logits[v];
      if (seen[v]) {
        x = x > 0.0f ? x / pen.repetition_penalty : x * pen.repetition_penalty;
        x -= pen.frequency_penalty * static_cast<float>(counts[v]) + (counts[v] > 0 ? pen.presence_penalty : 0.0f);
      }
      row[std::size_t(v)] = x;
    }
    if (bias) {
      for (std::int32_t e = l.b_offsets[b]; e < l.b_offsets[b + 1]; ++e) row[std::size_t(l.b_tokens[e])] += l.b_values[e];
    }
  };
  std::uint64_t step = 0;
  for (auto _ : state) {
    for (std::int32_t b = 0; b < kB; ++b) {
      for (std::int32_t j = 0; j <= kK; ++j) {
        fill_counts(b, j, &target_counts[at(target_row(b, j))], &target_seen[at(target_row(b, j))]);
        if (j < kK) fill_counts(b, j, &draft_counts[at(draft_row(b, j))], &draft_seen[at(draft_row(b, j))]);
      }
    }
    for (std::int32_t b = 0; b < kB; ++b) {
      for (std::int32_t j = 0; j <= kK; ++j) {
        const std::int32_t r = target_row(b, j);
        penalise(&lg.target[at(r)], &target_counts[at(r)], &target_seen[at(r)], b, true);
        engine_softmax(row.data(), params, &p[at(r)], order);
        if (j == kK) continue;
        const std::int32_t d = draft_row(b, j);
        penalise(logits_batch.draft_logits + at(d), &draft_counts[at(d)], &draft_seen[at(d)], b, false);
        engine_softmax(row.data(), params, &q[at(d)], order);
      }
    }
    const VerifyStats stats = verify(Standard{}, batch, Randomness{1, step++}, path.output(), CpuOptions{1});
    if (stats.accepted != path.expected_accepted()) state.SkipWithError("not the path this measures");
  }
  set_bytes(state, accepted);
}

/// Coupled on the rejected path's batch: no sequence's first draft is its coupled sample, so each
/// reads target row 0 alone (the pre-pass, then the Gumbel race over the kept tokens, pruned by
/// the largest noise), half of ReadPass/rejected's bytes.
void VerifyCoupled(benchmark::State& state, SamplingParams params) {
  Path path(false, params);
  const LogitsChainBatch<float> batch = path.batch();
  const std::vector<std::int64_t> positions(std::size_t(kB), 1000);
  std::uint64_t seed = 0;
  for (auto _ : state) {
    Randomness r{seed++};
    r.positions = positions.data();
    const VerifyStats stats = verify(Coupled{}, batch, r, path.output(), CpuOptions{1});
    if (stats.accepted != 0) state.SkipWithError("not the path this measures");
  }
  state.SetBytesProcessed(state.iterations() * read_bytes(false) / 2);
}

/// The Gumbel noise -log(-log u) of 2^16 uniforms through the shared log (core/shared_log.hpp),
/// and through libm's log, which engines use (and which differs between C libraries).
template <bool kShared>
void GumbelNoise(benchmark::State& state) {
  std::vector<double> u(1 << 16);
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = (double(i) * 65521.0 + 0.5) * 0x1p-32;
  for (auto _ : state) {
    double sum = 0.0;
    for (const double x : u) sum += kShared ? -core::shared_log(-core::shared_log(x)) : -std::log(-std::log(x));
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * std::int64_t(u.size()));
}

BENCHMARK_CAPTURE(VerifyCoupled, temperature/rejected, kTemperature)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(VerifyCoupled, top_k_top_p/rejected, kTopKTopP)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(GumbelNoise, true)->Name("GumbelNoise/shared_log")->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(GumbelNoise, false)->Name("GumbelNoise/libm_log")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(Verify, penalties_baseline/temperature/rejected, kTemperature, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(VerifyPenalised, temperature/rejected, kTemperature, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(EnginePenalised, temperature/rejected, kTemperature, false)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(PenaltiesSideBySide, temperature/rejected, kTemperature, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(PenaltiesSideBySide, temperature/accepted, kTemperature, true)->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(ReadPass, rejected, false)->Unit(benchmark::kMicrosecond);
BENCHMARK(ReadPassOne)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(VerifyOne, temperature/rejected, kTemperature)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(VerifyOne, top_k_top_p/rejected, kTopKTopP)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(VerifyOnePenalised, temperature/rejected, kTemperature)->ArgName("threads")->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(Verify, temperature/rejected, kTemperature, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(Verify, top_k_top_p/rejected, kTopKTopP, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(ReadPass, accepted, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(Verify, temperature/accepted, kTemperature, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(Verify, top_k_top_p/accepted, kTopKTopP, true)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(ReadPassBf16, rejected, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(VerifyBf16, temperature/rejected, kTemperature, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(VerifyBf16, top_k_top_p/rejected, kTopKTopP, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(Engine, temperature/rejected, kTemperature, false)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(Engine, top_k_top_p/rejected, kTopKTopP, false)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(Engine, temperature/accepted, kTemperature, true)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(Engine, top_k_top_p/accepted, kTopKTopP, true)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace specverify::bench
