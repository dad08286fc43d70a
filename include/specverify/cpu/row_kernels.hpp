// CPU row work with xsimd: row maximum and argmax, and the inverse-CDF draw over nonnegative
// weights (the residual max(p - q, 0), or p itself). Each kernel reads its rows once, validates
// every value it reads, and never writes a normalised copy.
//
// Kernels are templates over an xsimd architecture with one generic body; the default is the best
// instruction set the caller's compile flags enable (-march=native: AVX-512 on our machines).
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>

#include "specverify/core/logit_rows.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/cpu/arch/avx/widen_double.hpp"
#include "specverify/cpu/arch/avx512f/widen_double.hpp"
#include "specverify/cpu/arch/sse2/widen_double.hpp"
#include "specverify/cpu/draw.hpp"
#include "specverify/cpu/fused.hpp"
#include "specverify/cpu/inlining.hpp"

namespace specverify::cpu {

using DefaultArch = xsimd::default_arch;

/// A probability is valid when finite and nonnegative; NaN fails both comparisons.
inline bool valid_probability(float v) { return v >= 0.0f && v <= FLT_MAX; }

template <class T, class Arch>
inline xsimd::batch_bool<T, Arch> valid_probability(const xsimd::batch<T, Arch>& v) {
  return (v >= xsimd::batch<T, Arch>(T(0))) & (v <= xsimd::batch<T, Arch>(T(FLT_MAX)));
}

/// max(a, b) lane by lane. Not xsimd::max: g++ 12 (-O2, AVX-512) reports a false -Wmaybe-uninitialized inside
/// its AVX-512 intrinsic (_mm512_undefined_ps), which users building with -Werror would inherit.
template <class T, class Arch>
inline xsimd::batch<T, Arch> lane_max(const xsimd::batch<T, Arch>& a, const xsimd::batch<T, Arch>& b) {
  return xsimd::select(a > b, a, b);
}

namespace kernel {

/// Other architectures (NEON, ...): W/2 lanes of v from `first` on, as doubles, through memory.
template <class Arch>
inline xsimd::batch<double, Arch> widen_through_memory(const xsimd::batch<float, Arch>& v, std::size_t first) {
  alignas(64) float lanes[xsimd::batch<float, Arch>::size];
  alignas(64) double wide[xsimd::batch<double, Arch>::size];
  v.store_aligned(lanes);
  for (std::size_t i = 0; i < xsimd::batch<double, Arch>::size; ++i) wide[i] = lanes[first + i];
  return xsimd::batch<double, Arch>::load_aligned(wide);
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_low(const xsimd::batch<float, Arch>& v,
                                                              xsimd::kernel::requires_arch<xsimd::generic>) {
  return widen_through_memory(v, 0);
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_high(const xsimd::batch<float, Arch>& v,
                                                               xsimd::kernel::requires_arch<xsimd::generic>) {
  return widen_through_memory(v, xsimd::batch<double, Arch>::size);
}

}  // namespace kernel

/// Float lanes [0, W/2) and [W/2, W) of v as doubles, in registers where the instruction set
/// converts them (cpu/arch/<arch>/widen_double.hpp). Not xsimd's converting load
/// (batch<double>::load_unaligned(const float*)): xsimd 8.1 converts through a stack buffer, and
/// at -O2 g++ keeps it: two half-width stores, then a full-width load they cannot forward to,
/// every vector (the residual draw ran 6x slower than at -O3).
template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_low(const xsimd::batch<float, Arch>& v) {
  return kernel::widen_low(v, Arch{});
}

template <class Arch>
SPECVERIFY_ALWAYS_INLINE xsimd::batch<double, Arch> widen_high(const xsimd::batch<float, Arch>& v) {
  return kernel::widen_high(v, Arch{});
}

// Lane-wise unsigned max. xsimd::max, because xsimd 8.1's integer select does not compile on
// AVX-512BW at -O0; and g++ 12 reports a false -Wmaybe-uninitialized inside the AVX-512
// intrinsic it inlines (_mm512_undefined_epi32), silenced here alone so -Werror users stay clean.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
template <class Arch>
inline xsimd::batch<std::uint32_t, Arch> unsigned_max(const xsimd::batch<std::uint32_t, Arch>& a,
                                                      const xsimd::batch<std::uint32_t, Arch>& b) {
  return xsimd::max(a, b);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// Validity and maximum from the bits alone: as unsigned integers, the bits of every finite
/// nonnegative float lie below those of +inf and keep the floats' order, while negative values
/// (sign bit), inf and NaN lie at or above. So one unsigned max per vector tracks both; a row
/// whose max bits are not below +inf's goes to an exact scalar pass (which also accepts -0).
template <class Arch>
struct BitsMax {
  using U = xsimd::batch<std::uint32_t, Arch>;
  static constexpr std::uint32_t kInfBits = 0x7f800000u;
  U bits = U(0u);

  void add(const xsimd::batch<float, Arch>& v) { bits = unsigned_max(bits, xsimd::bitwise_cast<U>(v)); }
  std::uint32_t value() const {
    alignas(64) std::uint32_t lanes[U::size];
    bits.store_aligned(lanes);
    return *std::max_element(lanes, lanes + U::size);
  }
};

/// The exact scalar pass: every value valid, and the largest.
inline Checked<float> scalar_max(const float* p, std::int32_t n) {
  Checked<float> r;
  for (std::int32_t i = 0; i < n; ++i) {
    r.ok = r.ok && valid_probability(p[i]);
    r.value = std::max(r.value, p[i]);
  }
  return r;
}

template <class Arch = DefaultArch>
SPECVERIFY_FLATTEN Checked<float> row_max(const float* p, std::int32_t n) {
  using B = xsimd::batch<float, Arch>;
  constexpr std::int32_t W = B::size;
  BitsMax<Arch> m;
  std::int32_t i = 0;
  for (; i + W <= n; i += W) m.add(B::load_unaligned(p + i));
  const Checked<float> tail = scalar_max(p + i, n - i);
  std::uint32_t bits = m.value();
  if (bits >= BitsMax<Arch>::kInfBits || !tail.ok) return scalar_max(p, n);
  float body;
  std::memcpy(&body, &bits, sizeof body);
  return {std::max(body, tail.value), true};
}

/// What a draw's pass over p (and q) learns of them, for its bound (cpu/draw.hpp's check()): the
/// largest p's bits, and the bits of p | q, at or above +inf's when a value may be invalid (or
/// -0, whose bits lie above every positive float's).
template <class Arch>
struct PairScreen {
  BitsMax<Arch> largest, screen;

  SPECVERIFY_ALWAYS_INLINE void add(const xsimd::batch<float, Arch>& p) { largest.add(p); }
  SPECVERIFY_ALWAYS_INLINE void add(const xsimd::batch<float, Arch>& p, const xsimd::batch<float, Arch>& q) {
    largest.add(p);
    screen.add(p | q);
  }

  /// After the pass over the vectors of p[0..n) (and q, or nullptr): whether every value is valid,
  /// and the largest p. The tail of n % W values is read here; a row whose bits say a value may be
  /// invalid is checked value by value.
  Checked<float> largest_p(const float* p, const float* q, std::int32_t n) const {
    constexpr std::int32_t W = xsimd::batch<float, Arch>::size;
    std::uint32_t big = largest.value(), any = q ? screen.value() : big;
    for (std::int32_t i = n - n % W; i < n; ++i) {
      big = std::max(big, core::float_bits(p[i]));
      any = std::max(any, core::float_bits(p[i]) | (q ? core::float_bits(q[i]) : 0u));
    }
    if (any < BitsMax<Arch>::kInfBits) return {core::bits_float(big), true};
    for (std::int32_t i = 0; i < n; ++i) {
      if (!valid_probability(p[i]) || (q && !valid_probability(q[i]))) return {0.0f, false};
    }
    return {scalar_max(p, n).value, true};
  }
};

/// Lowest index holding max p. A row without mass has no argmax: value is -1.
template <class Arch = DefaultArch>
SPECVERIFY_FLATTEN Checked<std::int32_t> row_argmax(const float* p, std::int32_t n) {
  using B = xsimd::batch<float, Arch>;
  constexpr std::int32_t W = B::size;
  const Checked<float> m = row_max<Arch>(p, n);
  if (!m.ok || !(m.value > 0.0f)) return {-1, m.ok};
  const B target(m.value);
  std::int32_t i = 0;
  for (; i + W <= n; i += W) {
    if (xsimd::any(B::load_unaligned(p + i) == target)) break;
  }
  for (; i < n; ++i) {
    if (p[i] == m.value) return {i, true};
  }
  return {-1, true};  // unreachable: the max was read from this row
}

/// Weights for a draw. `residual` reads w = max(p - q, 0); a one-hot draft (q == nullptr) is
/// q = e_x, so w = p except w_x = max(p_x - 1, 0). `target` reads w = p.
struct Weights {
  const float* p{};
  const float* q{};            // nullptr: one-hot at x (residual) or no draft at all (target)
  std::int32_t x = -1;         // the rejected draft for a one-hot residual, else -1
  std::int32_t n = 0;

  static Weights target(const float* p, std::int32_t n) { return {p, nullptr, -1, n}; }
  static Weights residual(const float* p, const float* q, std::int32_t x, std::int32_t n) {
    return {p, q, q ? -1 : x, n};
  }

  /// w_i before the one-hot override: what the vector pass sums. Weights live in double, where
  /// p - q of two floats is (nearly always) exact.
  double base(std::int32_t i) const { return q ? core::residual_weight(p[i], q[i]) : double{p[i]}; }
  double at(std::int32_t i) const { return i == x ? core::residual_weight(p[i], 1.0) : base(i); }
};

/// Elements per chunk of the two-level draw (shared with the CUDA backend): the chunk sums live on
/// the stack and the rescan touches one short, cache-hot stretch.
using core::chunk_length;
using core::kMaxChunks;

/// Sum of the lanes, in lane order. Not xsimd::hadd: g++ 12's false warning again (AVX-512 extract).
template <class Arch>
inline double lane_sum(const xsimd::batch<double, Arch>& v) {
  alignas(64) double lanes[xsimd::batch<double, Arch>::size];
  v.store_aligned(lanes);
  double s = 0.0;
  for (double lane : lanes) s += lane;
  return s;
}

/// A pass over the weights `w` for cpu/draw.hpp: their vectors, computed in double (where p - q of
/// two floats is nearly always exact), one weight, and after a pass the bound check() gives.
template <class Arch>
struct WeightsPass {
  using F = xsimd::batch<float, Arch>;
  using D = xsimd::batch<double, Arch>;
  static constexpr std::int32_t WF = F::size;
  static_assert(WF == 2 * D::size, "a float vector widens into two double vectors");

  const Weights& w;
  PairScreen<Arch> screen{};

  SPECVERIFY_ALWAYS_INLINE void operator()(std::int32_t i, D& lo, D& hi) {
    const F p = F::load_unaligned(w.p + i);
    if (w.q) {
      const F q = F::load_unaligned(w.q + i);
      screen.add(p, q);
      lo = lane_max(widen_low(p) - widen_low(q), D(0.0));
      hi = lane_max(widen_high(p) - widen_high(q), D(0.0));
    } else {
      screen.add(p);
      lo = widen_low(p);
      hi = widen_high(p);
    }
    if (static_cast<std::uint32_t>(w.x - i) < static_cast<std::uint32_t>(WF)) patch_lane(lo, hi, w.x - i, w.at(w.x));  // one-hot residual
  }
  double operator()(std::int32_t i) const { return w.at(i); }
  /// The weights lie below p, so below the power of two above the largest p over the row: a
  /// function of the row alone, whatever part of it the vectors read.
  Checked<double> check() const {
    const Checked<float> largest = screen.largest_p(w.p, w.q, w.n);
    return {largest.ok ? core::fixed_bound(largest.value) : 0.0, largest.ok};
  }
};

/// Inverse-CDF draw (cpu/draw.hpp) from the weights `w`. Returns -1 when sum(w) == 0 (the caller
/// decides what that means); any index returned has w_i > 0, so it is in [0, n).
template <class Arch = DefaultArch>
SPECVERIFY_FLATTEN Checked<std::int32_t> draw(const Weights& w, float u) {
  WeightsPass<Arch> pass{w};
  const auto vec = [&](std::int32_t i, auto& lo, auto& hi) SPECVERIFY_LAMBDA_INLINE { pass(i, lo, hi); };
  const auto one = [&](std::int32_t i) { return pass(i); };
  return cpu::draw<Arch>(vec, one, [&] { return pass.check(); }, w.n, u);
}

}  // namespace specverify::cpu
