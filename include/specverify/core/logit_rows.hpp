// A row of logits as a row source: the row before its pre-pass (LogitRow), the prepared view a
// backend reads values through (LogitView), and the per-element arithmetic every backend shares
// (host and device), so CPU and CUDA compute bit-identical weights.
//
// docs/api.md ("Logits and sampling parameters") fixes the nine steps. Per element:
//   g(v) = u(v) + s (l(v) - u(v))        step 1, only with guidance; one fused multiply-add
//   g(v) = penalised(g(v), entry)         steps 2-3 (bias, penalties) for the few tokens the
//                                        overlay lists (core/penalties.hpp); others unchanged
//   g(v) = -inf where the bitmask forbids v (step 4)
//   a(v) = (g(v) - max g) * (1/T)        the weight's argument, a <= 0 (two roundings, in this order)
//   w(v) = exp_weight(a(v))               the shared exp below, on kept tokens; 0 elsewhere
//   p(v) = w(v) * inv_norm                inv_norm = float(1 / norm), norm = sum of kept w, a
//                                        core::FixedSum on its coarse grid (the same in any order)
// T = 0 (greedy) makes p one-hot on the lowest index of max g. Steps 6-8 (top_k, top_p, min_p)
// reduce to one value threshold on g: kept(v) <=> g(v) >= threshold. That is exact because
// exp_weight is non-decreasing (checked over every float argument), so each step's set of kept
// tokens is an upper set in g: top_k keeps g >= the k-th largest value; top_p keeps the highest
// values down to the first whose cumulative mass (in double) reaches top_p of the kept mass, ties
// included; min_p keeps w >= min_p (max p = 1 / norm, so p >= min_p max p <=> w >= min_p; w at the
// max is exactly 1). The backend's pre-pass finds the threshold (cpu/logit_kernels.hpp).
//
// Accuracy of p(v) against exact arithmetic on the same logits: a = (g - max) / T carries three
// roundings proportional to |a| (the difference, 1/T, the product), exp_weight 1.02 ulp, the
// normaliser the weights' errors averaged under p, then inv_norm and the product one rounding each:
//   |p(v) / p_exact(v) - 1| <= 2e-7 (|a(v)| + sum_u p(u) |a(u)|) + 4e-7
// (tests/test_logit_rows.cpp asserts it). So the top tokens are within ~1e-6, a token e^-20 below
// the top within ~5e-6; the output distribution is within ~1e-6 in total variation. Holding a as
// a float is the limit: a two-float a would cost a third more per weight.
// Kept tokens more than e^87 below the top get weight 0 (see kExpCutoff).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "specverify/config.hpp"
#include "specverify/core/fused.hpp"
#include "specverify/core/penalties.hpp"
#include "specverify/core/shared_log.hpp"
#include "specverify/philox.hpp"
#include "specverify/sampling.hpp"

namespace specverify::core {

SPECVERIFY_HD inline std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint32_t>(__float_as_int(x));
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

SPECVERIFY_HD inline float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __int_as_float(static_cast<int>(u));
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// The shared exp. Method (Cody and Waite range reduction, Cephes' expf polynomial):
//   n = round(a log2 e)            as t = fma(a, log2 e, 1.5 * 2^23), n = t - 1.5 * 2^23 (exact)
//   r = a - n ln 2                 two fmas with ln 2 in two parts, |r| <= 0.35
//   e^r = 1 + r + r^2 P(r)         P of degree 5
//   e^a = e^r * 2^n                2^n built from t's bits (n in [-126, 0]: a normal float)
// Arguments below kExpCutoff give 0: e^-87 = 1.6e-38 is the last weight that stays a normal float,
// so no backend ever meets a subnormal (which costs microcode assists on the CPU, and which
// flush-to-zero builds would treat differently). A token that far below the top has p < 2e-38.
// Accuracy, measured over every float a in [-87, 0] against exp in long double
// (tests/test_logit_rows.cpp re-checks a dense sweep): at most kExpMaxUlp units in the last place,
// and non-decreasing in a (which the kept-set thresholds rely on).
inline constexpr float kExpCutoff = -87.0f;
inline constexpr double kExpMaxUlp = 1.02;  // measured: 1.0103 ulp, at a = -5.87788439
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float kExpLn2Hi = 0.693359375f;   // 9 significant bits
inline constexpr float kExpLn2Lo = -2.12194440e-4f;
inline constexpr float kExpP0 = 1.9875691500e-4f, kExpP1 = 1.3981999507e-3f,
                       kExpP2 = 8.3334519073e-3f, kExpP3 = 4.1665795894e-2f,
                       kExpP4 = 1.6666665459e-1f, kExpP5 = 5.0000001201e-1f;

/// e^a for a <= 0 as the fixed sequence of float operations above; 0 below kExpCutoff (and for
/// -inf or NaN). cpu/logit_kernels.hpp runs the same operations lane by lane.
SPECVERIFY_HD inline float exp_weight(float a) {
  if (!(a >= kExpCutoff)) return 0.0f;
  const float t = fused(a, kLog2e, kRoundMagic);
  const float n = t - kRoundMagic;
  float r = fused(n, -kExpLn2Hi, a);
  r = fused(n, -kExpLn2Lo, r);
  float poly = kExpP0;
  poly = fused(poly, r, kExpP1);
  poly = fused(poly, r, kExpP2);
  poly = fused(poly, r, kExpP3);
  poly = fused(poly, r, kExpP4);
  poly = fused(poly, r, kExpP5);
  const float y = fused(poly, r * r, r) + 1.0f;
  // t's bits are those of 1.5 * 2^23 plus n (one binade, unit spacing): 2^n's exponent field.
  const std::uint32_t scale = (float_bits(t) - float_bits(kRoundMagic) + 127u) << 23;
  return y * bits_float(scale);
}

/// The row before its pre-pass. Indices the row operations take and return are row indices
/// (0..n-1), except through `target_to_draft`: a draft row over a reduced vocabulary is read at
/// target ids v as row index target_to_draft[v] (-1: not in the draft vocabulary, q(v) = 0).
template <class Logit>
struct LogitRow {
  const Logit* logits{};                  // [n]
  std::int32_t n = 0;                     // row length (a reduced draft: draft_vocab_size)
  const Logit* unconditional{};           // classifier-free guidance companion [n], or nullptr
  float guidance_scale = 1.0f;            // s (finite), read only with `unconditional`
  const std::uint32_t* allowed{};         // bitmask [ceil(n / 32)]: bit v % 32 of word v / 32; nullptr: all
  const std::int32_t* target_to_draft{};  // [target V], or nullptr: the row is indexed by target ids
  SamplingParams params;
  PenaltyLists lists;                     // what the overlay is built from (core/overlay.hpp)
  Overlay overlay;                        // built by the host backend when the row opens (size 0: none)
  mutable std::int32_t overlay_cursor = 0;  // where the last vector read left off (a hint only)
  // Without an overlay (the device), steps 2-3 read `lists` element by element (core::listed):
  bool read_lists = false;
  const std::int32_t* row_to_target{};    // a reduced draft row's target ids [n] (lists hold target ids)
  const std::uint32_t* may_be_listed{};   // [kListFilterWords], or nullptr: bit i % kListFilterBits set
                                          //   for every row index i the lists name (others skip the read)
};

/// The largest vocabulary a row of logits may have. Its normaliser sums up to V weights of at
/// most 1 (the max weighs exactly 1) on FixedSum's coarse grid at scale 1, as every backend and
/// every rank's slice sums it: FixedSum's hi word overflows at 2^23, and 2^22 keeps the sum in
/// FixedSum's domain. Each weight rounds by at most 2^-41, so the normaliser (at least 1) is
/// within V 2^-41 relative: 4.8e-7 at V = 2^20, 1.9e-6 at this limit. Larger rows are refused on
/// every backend, never summed past the word.
inline constexpr std::int32_t kMaxLogitsVocab = std::int32_t{1} << 22;

/// The size of a row's list filter (LogitRow::may_be_listed): a few thousand listed tokens leave
/// most bits clear.
inline constexpr std::int32_t kListFilterWords = 1024, kListFilterBits = 32 * kListFilterWords;

/// Whether row index i may be named by the row's lists (a filter: false means it is not).
template <class Logit>
SPECVERIFY_HD bool may_be_listed(const LogitRow<Logit>& row, std::int32_t i) {
  if (!row.may_be_listed) return true;
  const std::int32_t bit = i & (kListFilterBits - 1);
  return (row.may_be_listed[bit >> 5] >> (bit & 31)) & 1u;
}

/// What the pre-pass found; every read goes through it. `ok` is false when the pre-pass read a NaN
/// or +inf logit (or guidance overflowed): nothing else in the view is meaningful then.
template <class Logit>
struct LogitView {
  LogitRow<Logit> row;
  bool ok = true;
  bool greedy = false;             // T = 0: p is one-hot on argmax
  float max = 0;                   // max g; -inf when every token is masked
  std::int32_t argmax = -1;        // lowest row index holding max g; -1 when every token is masked
  float inv_temperature = 1.0f;    // 1/T, at most FLT_MAX (so a subnormal T acts as 1/FLT_MAX)
  float threshold = 0;             // kept(v) <=> g(v) >= threshold (always finite)
  double norm = 0;                 // sum of w over kept tokens, a FixedSum's value (1 for greedy rows)
  float inv_norm = 0;              // float(1 / norm)
  // Small kept sets (top_k, top_p) are listed: their row indices in increasing order, so draws
  // and sums visit those tokens alone. listed = -1: the kept set is not listed (the device never
  // lists: a block reads the whole row as fast). The list lives where the backend keeps it (the
  // CPU: in its scratch row, as `weights`), so a view is a few words wherever it is held.
  static constexpr std::int32_t kMaxListed = 256;
  std::int32_t listed = -1;
  const std::int32_t* kept{};      // [listed]
  // The weights w(i) of every row index (0 off the kept set), where the backend keeps them (the
  // CPU: in its scratch row, valid until that is reused); without `weights` they are computed from
  // the logits on demand. The same bits either way: p(i) = weights[i] * inv_norm =
  // probability_at(view, i).
  const float* weights{};

  SPECVERIFY_HD bool has_mass() const { return argmax >= 0; }
};

/// Whether the pre-pass read only valid logits (core::walk checks each view it opens).
template <class Logit>
SPECVERIFY_HD bool view_ok(const LogitView<Logit>& view) {
  return view.ok;
}

/// Whether the row keeps a token: a draft row that keeps none cannot have been sampled from, so
/// the walk refuses one it must read (docs/api.md: invalid when it must be read).
template <class Logit>
SPECVERIFY_HD bool view_has_mass(const LogitView<Logit>& view) {
  return view.has_mass();
}

/// One element of the row: its processed logit g, and whether the inputs were valid (l and u not
/// NaN or +inf, and a guided value that did not overflow). -inf inputs are masked tokens.
struct Processed {
  float g;
  bool valid;
};

inline constexpr float kFloatMax = 3.402823466e+38f;
inline constexpr float kInf = __builtin_huge_valf();

/// What processed_logit reads from memory at row index i: the logit, the unconditional logit
/// (guidance rows) and the bitmask's word. Read apart from their use, so that a backend can have
/// many elements' reads in flight before it processes any (cuda/block_logit_rows.cuh).
struct RawLogit {
  float logit;
  float unconditional;
  std::uint32_t allowed_word;
};

template <class Logit>
SPECVERIFY_HD RawLogit raw_logit(const LogitRow<Logit>& row, std::int32_t i) {
  RawLogit r{static_cast<float>(row.logits[i]), 0.0f, ~0u};
  if (row.unconditional) r.unconditional = static_cast<float>(row.unconditional[i]);
  if (row.allowed) r.allowed_word = row.allowed[i >> 5];
  return r;
}

/// Step 1 from the raw values: the logit, guided where the row has guidance.
template <class Logit>
SPECVERIFY_HD Processed guided_logit(const LogitRow<Logit>& row, const RawLogit& raw) {
  const float l = raw.logit;
  Processed r{l, l < kInf};
  if (row.unconditional) {
    const float u = raw.unconditional;
    const bool masked = l == -kInf || u == -kInf;
    const float guided = fused(row.guidance_scale, l - u, u);
    r.valid = r.valid && u < kInf && (masked || (guided >= -kFloatMax && guided <= kFloatMax));
    r.g = masked ? -kInf : guided;
  }
  return r;
}

/// Step 1 at row index i.
template <class Logit>
SPECVERIFY_HD Processed guided_logit(const LogitRow<Logit>& row, std::int32_t i) {
  return guided_logit(row, raw_logit(row, i));
}

SPECVERIFY_HD inline bool finite(float x) { return x >= -kFloatMax && x <= kFloatMax; }

/// Steps 1-4 at row index i from its raw values: guidance, the overlay's bias and penalties
/// (invalid where they overflow a finite value), the bitmask.
template <class Logit>
SPECVERIFY_HD Processed processed_logit(const LogitRow<Logit>& row, std::int32_t i, const RawLogit& raw) {
  Processed r = guided_logit(row, raw);
  if (row.overlay.size) {
    if (const std::int32_t k = row.overlay.find(i); k >= 0) {
      const float x = penalised(r.g, row.overlay, k, row.params);
      r.valid = r.valid && (finite(x) || !finite(r.g));
      r.g = x;
    }
  } else if (row.read_lists && may_be_listed(row, i)) {
    float bias, count;
    bool in;
    if (listed(row.lists, row.row_to_target ? row.row_to_target[i] : i, bias, in, count)) {
      const float x = penalised(r.g, bias, in, count, row.params);
      r.valid = r.valid && (finite(x) || !finite(r.g));
      r.g = x;
    }
  }
  if (row.allowed && !((raw.allowed_word >> (i & 31)) & 1u)) r.g = -kInf;
  return r;
}

/// Steps 1-4 at row index i.
template <class Logit>
SPECVERIFY_HD Processed processed_logit(const LogitRow<Logit>& row, std::int32_t i) {
  return processed_logit(row, i, raw_logit(row, i));
}

/// The weight's argument (g - max) / T as the view computes it.
SPECVERIFY_HD inline float weight_argument(float g, float max, float inv_temperature) {
  return (g - max) * inv_temperature;
}

/// The row index of target id v (-1: outside a reduced draft vocabulary).
template <class Logit>
SPECVERIFY_HD std::int32_t row_index(const LogitView<Logit>& view, std::int32_t v) {
  return view.row.target_to_draft ? view.row.target_to_draft[v] : v;
}

/// p at row index i (a prepared, ok view) from its raw values.
template <class Logit>
SPECVERIFY_HD float probability_at(const LogitView<Logit>& view, std::int32_t i, const RawLogit& raw) {
  if (view.greedy) return i == view.argmax ? 1.0f : 0.0f;
  const float g = processed_logit(view.row, i, raw).g;
  if (!(g >= view.threshold)) return 0.0f;
  return exp_weight(weight_argument(g, view.max, view.inv_temperature)) * view.inv_norm;
}

/// p at row index i (a prepared, ok view).
template <class Logit>
SPECVERIFY_HD float probability_at(const LogitView<Logit>& view, std::int32_t i) {
  if (view.greedy) return i == view.argmax ? 1.0f : 0.0f;
  return probability_at(view, i, raw_logit(view.row, i));
}

/// p(v) at target id v.
template <class Logit>
SPECVERIFY_HD float probability(const LogitView<Logit>& view, std::int32_t v) {
  const std::int32_t i = row_index(view, v);
  return i < 0 ? 0.0f : probability_at(view, i);
}

// ------------------------------------------------------------------- coupled (Gumbel) noise

/// Gumbel noise keyed by (seed, position, token) alone, for `sample` and the `Coupled` rule.
/// Philox counter: word 0 = token / 4, words 1-2 = position (low, high), word 3 = kGumbelTag;
/// key = seed; token v takes output word v % 4. The uniform streams of philox.hpp put the step
/// offset's high word in word 3, so they meet this counter only at offsets >= 0x47554d42 * 2^32.
inline constexpr std::uint32_t kGumbelTag = 0x47554d42u;  // "GUMB"

/// The four words of token block `block` (tokens 4 block .. 4 block + 3).
SPECVERIFY_HD inline void gumbel_words(std::uint64_t seed, std::int64_t position, std::uint32_t block,
                                       std::uint32_t out[4]) {
  const auto pos = static_cast<std::uint64_t>(position);
  const std::uint32_t counter[4] = {block, static_cast<std::uint32_t>(pos),
                                    static_cast<std::uint32_t>(pos >> 32), kGumbelTag};
  const std::uint32_t key[2] = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  philox4x32_10(counter, key, out);
}

/// Gumbel(0, 1) from a 32-bit word: u = (word + 1/2) 2^-32 lies in (0, 1), G = -log(-log u), in
/// double with the shared log (the same bits on every backend and C library). G lies in
/// [-3.1, kGumbelMax].
SPECVERIFY_HD inline double gumbel(std::uint32_t word) {
  const double u = (static_cast<double>(word) + 0.5) * 0x1p-32;
  return -shared_log(-shared_log(u));
}
/// At least -log(-log(1 - 2^-33)) = 22.874: a token more than this below the best key cannot win.
inline constexpr double kGumbelMax = 22.875;

// ------------------------------------------------------------------- reduced draft vocabulary

/// Why a draft_to_target map was refused: `entry` is the draft id at fault, `value` its target id.
struct DraftMapFault {
  const char* what = nullptr;
  std::int32_t entry = -1;
  std::int64_t value = 0;
  explicit operator bool() const { return what != nullptr; }
};

/// Builds the inverse map target_to_draft [vocab_size] (-1: not in the draft vocabulary) from
/// draft_to_target [draft_vocab_size], which must be injective into [0, vocab_size). Called once
/// per batch; on a fault target_to_draft holds partial contents.
inline DraftMapFault build_target_to_draft(const std::int32_t* draft_to_target,
                                           std::int32_t draft_vocab_size, std::int32_t vocab_size,
                                           std::int32_t* target_to_draft) {
  for (std::int32_t v = 0; v < vocab_size; ++v) target_to_draft[v] = -1;
  for (std::int32_t d = 0; d < draft_vocab_size; ++d) {
    const std::int32_t v = draft_to_target[d];
    if (v < 0 || v >= vocab_size) return {"draft_to_target entry outside the target vocabulary", d, v};
    if (target_to_draft[v] >= 0) return {"draft_to_target maps two draft ids to one target id", d, v};
    target_to_draft[v] = d;
  }
  return {};
}

}  // namespace specverify::core
