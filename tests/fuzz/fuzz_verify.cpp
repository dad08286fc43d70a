// libFuzzer target: verify() with every rule on whatever bytes come in.
//
// The input decodes into a rule with edge-case parameters, a batch (shape, ragged offsets, good or
// bad, strides, tokens, rows drawn from a palette of NaN, inf, negative, subnormal and ordinary
// values), optional caller uniforms, scores and target_row_max. Buffers are sized exactly to what
// the batch describes, so ASan sees any read past them. The invariants (docs/api.md "Errors" and
// "Layout"): either invalid_input is thrown with every output untouched, or each sequence's row is
// its n_b <= k_b accepted drafts (equal to the input), one extra token in [0, V) that the row it
// came from gives positive mass, then kNoToken; no accepted draft has p(x) = 0; the statistics add
// up. Input the harness knows is malformed must throw; input it knows is well formed must not.
// Some cases are padded chains (core/padded_chain.hpp): each sequence walks the first
// num_draft_tokens[b] of its slots, sometimes a count outside them; what lies past a count (bad
// tokens, uniforms, scores) is never read.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "fuzz_check.hpp"
#include "specverify/core/padded_chain.hpp"
#include "specverify/specverify.hpp"
#include "typical_acceptance.hpp"

namespace {

using namespace specverify;
using fuzz::kBelowOne;
using fuzz::kInf;
using fuzz::kNaN;

/// A probability-like value: mostly ordinary, sometimes every edge the library must handle.
float edge_value(FuzzedDataProvider& in, bool allow_bad) {
  static const float good[] = {0.0f, -0.0f, 1.0f, 0.5f, 1e-3f, FLT_MIN, 0x1p-149f, 0x1p-140f,
                               FLT_MAX, 1e30f, kBelowOne, 2.0f, 1e-30f};
  static const float bad[] = {kNaN, -kNaN, kInf, -kInf, -1.0f, -FLT_MIN, -0x1p-149f, -FLT_MAX};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 128) return static_cast<float>(pick) / 127.0f;  // ordinary weights, many zeros-ish
  if (pick < 200) return good[pick % (sizeof good / sizeof *good)];
  if (pick < 220 || !allow_bad) return in.ConsumeFloatingPointInRange<float>(0.0f, 4.0f);
  if (pick < 240) return bad[pick % (sizeof bad / sizeof *bad)];
  std::uint32_t bits = in.ConsumeIntegral<std::uint32_t>();  // any float at all
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

bool valid_value(float v) { return v >= 0.0f && v <= FLT_MAX; }

/// A uniform for a caller-supplied stream: 0, the largest below 1, ordinary, or out of range.
float edge_uniform(FuzzedDataProvider& in, bool allow_bad) {
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 64) return 0.0f;
  if (pick < 128) return kBelowOne;
  if (pick < 230 || !allow_bad) return static_cast<float>(pick - 128) / 102.0f * kBelowOne;
  static const float bad[] = {1.0f, -0.0f, -1e-30f, kNaN, kInf, 2.0f, -kInf};
  return bad[pick % (sizeof bad / sizeof *bad)];  // -0.0f is in range: 0 <= -0.0
}

/// A rule parameter (beta, threshold, eta, epsilon, delta) at or past its edges.
float edge_parameter(FuzzedDataProvider& in, float top) {
  static const float edges[] = {0.0f, -0.0f, 1.0f, kBelowOne, 1e-30f, 0x1p-149f, FLT_MAX, kInf,
                                kNaN, -1e-30f, -1.0f, 3.4e38f, 0.69314718f, 1.0000001f};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 160) return static_cast<float>(pick) / 159.0f * top;
  return edges[pick % (sizeof edges / sizeof *edges)];
}

struct Case {
  ChainBatch<float> batch;
  Randomness randomness;
  ChainOutput out;
  bool known_bad = false;   // structurally malformed: verify must throw
  bool values_ok = true;    // every value the harness wrote is a valid probability, row max, ...
  bool scores_ok = true;    // verifier scores / acceptance probabilities all in [0, 1]
  bool padded = false;      // verified as padded chains of `counts`
  std::vector<std::int32_t> offsets, tokens, out_tokens, accepted, counts;
  std::vector<bool> used;   // per draft slot: within its sequence's count (all, unless padded)
  std::vector<float> p, q, row_max, accept_u, sample_u, scores;
  std::vector<std::uint64_t> seeds;
  std::int64_t target_rows = 0, t_stride = 0, d_stride = 0;
};

constexpr std::int32_t kSentinel = 0x5eed5eed;

void build(FuzzedDataProvider& in, Case& c) {
  const std::uint8_t shape = in.ConsumeIntegral<std::uint8_t>();
  std::int32_t B = in.ConsumeIntegralInRange<std::int32_t>(0, 6);
  std::int32_t V = in.ConsumeIntegralInRange<std::int32_t>(1, 40);
  if (shape % 16 == 0) V = in.ConsumeIntegralInRange<std::int32_t>(1000, 2600);  // several draw chunks
  if (shape % 23 == 1) {  // sizes out of range
    c.known_bad = true;
    if (in.ConsumeBool()) B = -in.ConsumeIntegralInRange<std::int32_t>(1, 1 << 30);
    else V = -in.ConsumeIntegralInRange<std::int32_t>(0, 1 << 30);
  }
  c.batch.batch_size = B;
  c.batch.vocab_size = V;
  const std::int32_t Bn = B > 0 ? B : 0;

  // Ragged offsets; some malformed (not starting at 0, decreasing).
  c.offsets.assign(static_cast<std::size_t>(Bn) + 1, 0);
  for (std::int32_t b = 0; b < Bn; ++b) {
    const std::uint8_t k = in.ConsumeIntegral<std::uint8_t>();
    c.offsets[b + 1] = c.offsets[b] + (k < 200 ? k % 6 : k % 40);
  }
  const std::uint8_t offset_fault = in.ConsumeIntegral<std::uint8_t>();
  if (Bn > 0 && offset_fault >= 240) {
    c.known_bad = true;
    const std::int32_t at = in.ConsumeIntegralInRange<std::int32_t>(0, Bn);
    const std::int32_t by = in.ConsumeIntegralInRange<std::int32_t>(1, std::numeric_limits<std::int32_t>::max());
    // Offset 0 moved, or a later one moved below its predecessor (offsets[at - 1] >= 0, so the
    // difference cannot overflow): either is invalid.
    c.offsets[at] = at == 0 ? (in.ConsumeBool() ? by : -by) : c.offsets[at - 1] - by;
  }
  std::int64_t drafts = 0, longest = 0;
  if (!c.known_bad && Bn > 0) {
    drafts = c.offsets[Bn];
    for (std::int32_t b = 0; b < Bn; ++b)
      longest = std::max<std::int64_t>(longest, c.offsets[b + 1] - c.offsets[b]);
  }
  const bool sized = !c.known_bad;  // buffers only make sense for a well-formed shape
  c.batch.draft_offsets = B > 0 || in.ConsumeBool() ? c.offsets.data() : nullptr;

  // Padded: a count per sequence, mostly within its slots, sometimes outside (invalid).
  c.used.assign(static_cast<std::size_t>(drafts), true);
  if (sized && in.ConsumeIntegral<std::uint8_t>() < 64) {
    c.padded = true;
    for (std::int32_t b = 0; b < Bn; ++b) {
      const std::int32_t slots = c.offsets[b + 1] - c.offsets[b];
      std::int32_t n = in.ConsumeIntegralInRange<std::int32_t>(0, slots);
      if (in.ConsumeIntegral<std::uint8_t>() >= 250) {
        n = in.ConsumeBool() ? -in.ConsumeIntegralInRange<std::int32_t>(1, 3) : slots + in.ConsumeIntegralInRange<std::int32_t>(1, 3);
        c.known_bad = true;
      }
      c.counts.push_back(n);
      for (std::int32_t j = std::max(n, 0); j < slots; ++j) c.used[c.offsets[b] + j] = false;
    }
  }

  // Strides: 0 (= V), padded, or smaller than V (invalid where there are rows: an empty batch
  // reads nothing, and is checked only for its sizes and the rule's parameters).
  const auto stride = [&](std::int64_t& s) {
    const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
    if (pick < 150) s = 0;
    else if (pick < 240) s = std::int64_t{V} + pick % 9;
    else if (V > 1) s = in.ConsumeIntegralInRange<std::int64_t>(1, V - 1), c.known_bad |= B > 0;
    else if (pick == 255) s = -1, c.known_bad |= B > 0;
  };
  stride(c.batch.target_stride);
  stride(c.batch.draft_stride);
  c.t_stride = c.batch.target_stride ? c.batch.target_stride : V;
  c.d_stride = c.batch.draft_stride ? c.batch.draft_stride : V;

  // Tokens: in range, or any int32 (out of range is invalid).
  if (sized) {
    c.tokens.resize(static_cast<std::size_t>(drafts));
    for (std::size_t i = 0; i < c.tokens.size(); ++i) {
      std::int32_t& x = c.tokens[i];
      const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
      if (pick < 250) {
        x = pick % V;
      } else {
        x = in.ConsumeIntegral<std::int32_t>();
        if ((x < 0 || x >= V) && c.used[i]) c.known_bad = true;
      }
    }
  }
  c.batch.draft_tokens = c.tokens.empty() ? nullptr : c.tokens.data();

  // Rows: one palette per row, so whole rows can be zero, tiny, huge or broken. Sized exactly to
  // (rows - 1) * stride + V elements; padding between rows holds NaN, which nothing may read.
  const auto rows = [&](std::vector<float>& data, std::int64_t count, std::int64_t s, bool target) {
    if (!sized || count == 0) return;
    s = std::max<std::int64_t>(s, V);  // an invalid stride is rejected before any row is read
    data.assign(static_cast<std::size_t>((count - 1) * s + V), kNaN);
    const bool allow_bad = in.ConsumeIntegral<std::uint8_t>() >= 224;
    for (std::int64_t r = 0; r < count; ++r) {
      float* row = data.data() + r * s;
      const std::uint8_t mode = in.ConsumeIntegral<std::uint8_t>();
      const float fill = mode < 32 ? 0.0f : mode < 48 ? 0x1p-149f : mode < 56 ? FLT_MAX : 1.0f / V;
      for (std::int32_t v = 0; v < V; ++v) {
        // Wide rows take values from the input sparsely, so a short input can still touch them.
        const bool explicit_value = V <= 64 || in.ConsumeIntegral<std::uint8_t>() < 8;
        row[v] = explicit_value && mode >= 16 ? edge_value(in, allow_bad) : fill;
        if (!valid_value(row[v])) c.values_ok = false;
      }
      if (target) {
        bool mass = false;
        for (std::int32_t v = 0; v < V; ++v) mass = mass || row[v] > 0.0f;
        if (!mass) c.values_ok = false;  // an all-zero row to draw from is invalid input
      }
    }
  };
  c.target_rows = drafts + Bn;
  rows(c.p, c.target_rows, c.t_stride, true);
  c.batch.target_probs = c.p.empty() ? (in.ConsumeBool() ? nullptr : &kNaN) : c.p.data();
  if (B > 0 && !c.batch.target_probs) c.known_bad = true;
  if (in.ConsumeBool()) {
    rows(c.q, drafts, c.d_stride, false);
    if (!c.q.empty()) c.batch.draft_probs = c.q.data();
  }

  if (sized && c.target_rows > 0 && in.ConsumeIntegral<std::uint8_t>() < 64) {
    c.row_max.resize(static_cast<std::size_t>(c.target_rows));
    for (auto& m : c.row_max) {
      m = edge_value(in, in.ConsumeIntegral<std::uint8_t>() >= 240);
      if (!valid_value(m)) c.values_ok = false;
    }
    c.batch.target_row_max = c.row_max.data();
  }

  // Randomness: built-in streams, per-sequence seeds, caller uniforms (edges and bad ones).
  c.randomness.seed = in.ConsumeIntegral<std::uint64_t>();
  c.randomness.offset = in.ConsumeIntegral<std::uint64_t>();
  if (sized && in.ConsumeBool()) {
    c.seeds.resize(static_cast<std::size_t>(Bn));
    for (auto& s : c.seeds) s = in.ConsumeIntegral<std::uint64_t>();
    c.randomness.sequence_seeds = c.seeds.empty() ? nullptr : c.seeds.data();
  }
  if (sized && drafts > 0 && in.ConsumeBool()) {
    const bool allow_bad = in.ConsumeIntegral<std::uint8_t>() >= 200;
    c.accept_u.resize(static_cast<std::size_t>(drafts));
    for (std::size_t i = 0; i < c.accept_u.size(); ++i) {
      c.accept_u[i] = edge_uniform(in, allow_bad);
      if (!(c.accept_u[i] >= 0.0f && c.accept_u[i] < 1.0f) && c.used[i]) c.known_bad = true;
    }
    c.randomness.accept_uniforms = c.accept_u.data();
  }
  if (sized && Bn > 0 && in.ConsumeBool()) {
    const bool allow_bad = in.ConsumeIntegral<std::uint8_t>() >= 200;
    c.sample_u.resize(static_cast<std::size_t>(Bn));
    for (auto& u : c.sample_u) {
      u = edge_uniform(in, allow_bad);
      if (!(u >= 0.0f && u < 1.0f)) c.known_bad = true;
    }
    c.randomness.sample_uniforms = c.sample_u.data();
  }

  // Output: exactly B rows of row_width, which may be too small (invalid).
  std::int64_t width = longest + 1 + in.ConsumeIntegralInRange<std::int32_t>(0, 2);
  if (in.ConsumeIntegral<std::uint8_t>() >= 245) {
    width = in.ConsumeIntegralInRange<std::int32_t>(-3, static_cast<std::int32_t>(longest));
    if (B > 0 && (width < longest + 1)) c.known_bad = true;
  }
  c.out.row_width = static_cast<std::int32_t>(width);
  if (sized) {
    c.out_tokens.assign(static_cast<std::size_t>(Bn * std::max<std::int64_t>(width, 0)), kSentinel);
    c.accepted.assign(static_cast<std::size_t>(Bn), kSentinel);
  }
  c.out.tokens = c.out_tokens.data();
  c.out.num_accepted = c.accepted.data();
  if (B > 0 && (!c.out.tokens || !c.out.num_accepted)) c.known_bad = true;
}

/// Per-draft inputs of Sprinter and SpecDec++: in [0, 1], with edges and (sometimes) bad values.
void per_draft(FuzzedDataProvider& in, Case& c) {
  c.scores.resize(c.tokens.size());
  const bool allow_bad = in.ConsumeIntegral<std::uint8_t>() >= 220;
  for (std::size_t i = 0; i < c.scores.size(); ++i) {
    float& s = c.scores[i];
    const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
    s = pick < 64 ? 0.0f : pick < 128 ? 1.0f : pick < 240 || !allow_bad ? (pick - 128) / 112.0f
        : (pick % 3 == 0 ? kNaN : pick % 3 == 1 ? 1.0000001f : -1e-30f);
    if (!(s >= 0.0f && s <= 1.0f) && c.used[i]) c.scores_ok = false;
  }
}

const Case* current = nullptr;

/// The decoded case, so a finding can be turned into a regression test.
void describe_current_case() {
  if (!current) return;
  const Case& c = *current;
  const auto& b = c.batch;
  std::fprintf(stderr, "B=%d V=%d strides=%lld,%lld known_bad=%d values_ok=%d row_width=%d q=%d row_max=%d\n",
               b.batch_size, b.vocab_size, static_cast<long long>(b.target_stride),
               static_cast<long long>(b.draft_stride), c.known_bad, c.values_ok, c.out.row_width,
               b.draft_probs != nullptr, b.target_row_max != nullptr);
  std::fprintf(stderr, "offsets:");
  for (auto o : c.offsets) std::fprintf(stderr, " %d", o);
  std::fprintf(stderr, "\npadded=%d counts:", c.padded);
  for (auto n : c.counts) std::fprintf(stderr, " %d", n);
  std::fprintf(stderr, "\ntokens:");
  for (auto t : c.tokens) std::fprintf(stderr, " %d", t);
  const auto floats = [](const char* name, const std::vector<float>& v) {
    std::fprintf(stderr, "\n%s:", name);
    for (std::size_t i = 0; i < v.size() && i < 200; ++i) std::fprintf(stderr, " %a", static_cast<double>(v[i]));
  };
  floats("p", c.p);
  floats("q", c.q);
  floats("row_max", c.row_max);
  floats("accept_u", c.accept_u);
  floats("sample_u", c.sample_u);
  floats("scores", c.scores);
  std::fprintf(stderr, "\nout:");
  for (auto t : c.out_tokens) std::fprintf(stderr, " %d", t);
  std::fprintf(stderr, "\naccepted:");
  for (auto t : c.accepted) std::fprintf(stderr, " %d", t);
  std::fprintf(stderr, "\n");
}

bool in_range(float v, float lo, float hi) { return v >= lo && v <= hi; }

/// is_standard: the rule decides exactly as Standard (checked against u q(x) < p(x)).
template <class Rule>
void run(const Rule& rule, Case& c, bool params_ok, bool is_standard) {
  const ChainBatch<float>& batch = c.batch;
  const std::int32_t B = batch.batch_size;
  const auto call = [&] {
    if (!c.padded) return verify(rule, batch, c.randomness, c.out);
    return verify(rule, core::padded(batch, c.counts.data()), c.randomness, c.out);
  };
  VerifyStats stats;
  bool threw = false;
  try {
    stats = call();
  } catch (const invalid_input&) {
    threw = true;
  }
  if (threw) {
    for (auto t : c.out_tokens) CHECK(t == kSentinel, t);
    for (auto n : c.accepted) CHECK(n == kSentinel, n);
    CHECK(!(params_ok && !c.known_bad && c.values_ok));  // well-formed input must not throw
    return;
  }
  CHECK(!c.known_bad && params_ok);
  const std::int32_t V = batch.vocab_size;
  std::int64_t drafted = 0, accepted = 0, decisions = 0;
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t first = c.offsets[b], k = c.padded ? c.counts[b] : c.offsets[b + 1] - first;
    const std::int32_t kept = rule_traits<Rule>::cut(rule, first, k);
    CHECK(kept >= 0 && kept <= k, kept, k);
    const std::int32_t n = c.accepted[b];
    CHECK(n >= 0 && n <= kept, n, kept);
    const std::int32_t* row = c.out_tokens.data() + std::int64_t{b} * c.out.row_width;
    const std::int64_t first_row = std::int64_t{first} + b;
    for (std::int32_t j = 0; j < n; ++j) {
      CHECK(row[j] == c.tokens[first + j], row[j], c.tokens[first + j]);
      // No rule accepts a token the target excludes (Standard cannot: u q(x) < 0 never holds).
      CHECK(c.p[(first_row + j) * c.t_stride + row[j]] > 0.0f, b, j);
    }
    const std::int32_t extra = row[n];
    CHECK(extra >= 0 && extra < V, extra, V);
    // The extra token comes from the row where the chain stopped, and that row gives it mass.
    CHECK(c.p[(first_row + n) * c.t_stride + extra] > 0.0f, b, extra);
    for (std::int32_t i = n + 1; i < c.out.row_width; ++i) CHECK(row[i] == kNoToken, i, row[i]);
    if constexpr (rule_traits<Rule>::on_bonus == Draw::argmax) {  // Greedy: decisions and token
      const auto argmax = [&](std::int64_t r) {
        const float* p = c.p.data() + r * c.t_stride;
        return static_cast<std::int32_t>(std::max_element(p, p + V) - p);  // lowest index of the max
      };
      for (std::int32_t j = 0; j < std::min(n + 1, kept); ++j) {
        CHECK((c.tokens[first + j] == argmax(first_row + j)) == (j < n), b, j);
      }
      CHECK(extra == argmax(first_row + n), extra, argmax(first_row + n));
    }
    if (is_standard && c.randomness.accept_uniforms) {  // Standard's decisions, recomputed exactly
      for (std::int32_t j = 0; j < std::min(n + 1, kept); ++j) {
        const float px = c.p[(first_row + j) * c.t_stride + c.tokens[first + j]];
        const float qx = c.q.empty() ? 1.0f : c.q[(first + j) * c.d_stride + c.tokens[first + j]];
        CHECK((c.accept_u[first + j] * qx < px) == (j < n), b, j);
      }
    }
    drafted += k;
    accepted += n;
    decisions += std::min(n + 1, kept);
  }
  CHECK(stats.drafted == drafted, stats.drafted, drafted);
  CHECK(stats.accepted == accepted, stats.accepted, accepted);
  CHECK(stats.relaxed >= 0 && stats.relaxed <= accepted, stats.relaxed, accepted);
  CHECK(stats.target_checked >= 0 && stats.target_checked <= decisions, stats.target_checked, decisions);
  if (is_standard) CHECK(stats.relaxed == 0, stats.relaxed);

  // Same input, same output (no hidden state between calls).
  std::vector<std::int32_t> first_tokens = c.out_tokens, first_accepted = c.accepted;
  const VerifyStats again = call();
  CHECK(first_tokens == c.out_tokens && first_accepted == c.accepted);
  CHECK(again.accepted == stats.accepted && again.relaxed == stats.relaxed &&
        again.target_checked == stats.target_checked);
}

Divergence pick_divergence(std::uint8_t v) { return static_cast<Divergence>(v % 5); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::describe_case = describe_current_case;
  FuzzedDataProvider in(data, size);
  const std::uint8_t which = in.ConsumeIntegral<std::uint8_t>() % 9;
  const std::uint8_t kind = in.ConsumeIntegral<std::uint8_t>();
  const float a = edge_parameter(in, 2.0f), b = edge_parameter(in, 1.0f);
  Case c;
  current = &c;
  build(in, c);
  per_draft(in, c);
  const float* scores = c.scores.empty() ? (in.ConsumeBool() ? nullptr : &kNaN) : c.scores.data();
  const bool scores_ok = scores && c.scores_ok;  // only the rules that read them care
  // A rule's own parameters: valid when the documented range holds (NaN never does).
  const bool nonneg_a = in_range(a, 0.0f, 3.4e38f);
  switch (which) {
    case 0: run(Standard{}, c, true, true); break;
    case 1: run(Greedy{}, c, true, false); break;
    case 2: run(Ears{a}, c, nonneg_a, false); break;
    case 3: run(Fsd{pick_divergence(kind), a}, c, nonneg_a, false); break;
    case 4: run(ReducibleFsd{pick_divergence(kind), a}, c, nonneg_a, false); break;
    case 5: run(Sprinter{b, scores}, c, in_range(b, 0.0f, 1.0f) && scores_ok, false); break;
    case 6: {
      const bool ok = in_range(a, 0.0f, 1.0f) && scores_ok;  // a stop threshold lies in [0, 1]
      switch (kind % 4) {
        case 0: run(SpecDecPP<Standard>{a, scores, {}}, c, ok, true); break;
        case 1: run(SpecDecPP<Greedy>{a, scores, {}}, c, ok, false); break;
        case 2: run(SpecDecPP<Ears>{a, scores, Ears{b}}, c, ok && in_range(b, 0.0f, 3.4e38f), false); break;
        default: run(SpecDecPP<Fsd>{a, scores, Fsd{pick_divergence(kind / 4), b}}, c,
                     ok && in_range(b, 0.0f, 3.4e38f), false);
      }
      break;
    }
    case 7: run(TypicalAcceptance{b, a}, c, in_range(b, 0.0f, 1.0f) && nonneg_a, false); break;
    default: run(ReducibleFsd{pick_divergence(kind), 0.0f}, c, true, true); break;  // is Standard
  }
  current = nullptr;
  return 0;
}
