// CPU row work for a tree node's residual after rejected siblings (core/residual.hpp), with
// xsimd: its mass, and the inverse-CDF draw from it. Every element's weight is computed in double
// lanes with the scalar definition's operations (core::Residual::after), so the weights are those
// of the scalar path and only the order of summation differs; the draw is cpu::draw's: the
// smallest i with w_0 + ... + w_i > u * sum(w), chunked by core::chunk_length, every value read
// validated, nothing written but the chunk sums on the stack.
//
// Speed: the siblings' tokens matter only in the few vectors that hold them; they take the
// definition's steps literally. Everywhere else q_s = c_s q (c_s = 1 sampled, the rescale without
// replacement, 0 one-hot), and the steps collapse: with r_s = max(p - S_s q, 0) * P_s,
//   max(r_s - c_s q, 0) / Z_s = max(p - (S_s + c_s / P_s) q, 0) * (P_s / Z_s),
// so whatever the number of siblings absorbed, an element costs one multiply-subtract, a compare
// and a multiply. The two forms agree to rounding (a few ulps of each weight).
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specverify/core/residual.hpp"
#include "specverify/core/row_math.hpp"
#include "specverify/cpu/row_kernels.hpp"

namespace specverify::cpu {

namespace detail {

/// How the siblings' q_s are made: one-hot on the sibling, q, or q without earlier siblings.
enum class SiblingDraft { one_hot, sampled, without_replacement };

/// The weights max(r(v) - q_current(v), 0) (or r(v) when the current sibling is kNoToken) of a
/// residual whose siblings c_1 .. c_steps were absorbed, W elements at a time.
template <class Arch, SiblingDraft M>
class ResidualWeights {
 public:
  using F = xsimd::batch<float, Arch>;
  using D = xsimd::batch<double, Arch>;
  using Mask = xsimd::batch_bool<double, Arch>;
  static constexpr std::int32_t WF = F::size, W = D::size;
  static constexpr bool kOneHot = M == SiblingDraft::one_hot;
  static constexpr bool kWithoutReplacement = M == SiblingDraft::without_replacement;
  static_assert(WF == 2 * W, "a float vector widens into two double vectors");

  ResidualWeights(const ResidualWeights&) = delete;  // special_ may point at alone_
  ResidualWeights& operator=(const ResidualWeights&) = delete;
  ResidualWeights(const core::Residual<const float*>& r, std::int32_t current, std::int32_t n)
      : r_(r), current_(current), n_(n), q_(M == SiblingDraft::one_hot ? nullptr : r.q), special_(r.steps > 0 ? r.siblings.sorted : &alone_) {
    alignas(64) double lanes[W];
    for (std::int32_t l = 0; l < W; ++l) lanes[l] = l;
    iota_ = D::load_aligned(lanes);
    // Tokens whose vectors need the general path: every sibling for one-hot drafts (q_s is 1
    // there), the absorbed ones without replacement (q_s is 0 there), none for sampled.
    if (M != SiblingDraft::sampled) {
      for (std::int32_t s = 0; s < r.steps; ++s) special_[specials_++] = r.siblings.token[s];
      if (M == SiblingDraft::one_hot && current >= 0) special_[specials_++] = current;
      std::sort(special_, special_ + specials_);
    }
    // The collapsed steps: S and P after the absorbed siblings, then the current one's step.
    for (std::int32_t s = 0; s < r.steps; ++s) {
      if (M != SiblingDraft::one_hot) shift_ += (M == SiblingDraft::sampled ? 1.0 : r.siblings.scale[s]) / scale_;
      scale_ *= r.siblings.inv_mass[s];
    }
    if (current >= 0 && M != SiblingDraft::one_hot) {
      shift_ += (M == SiblingDraft::sampled ? 1.0 : r.current_scale()) / scale_;
    }
    finite_ = scale_ > 0.0 && scale_ <= 1.7976931348623157e308 && shift_ <= 1.7976931348623157e308;
  }

  std::int32_t size() const { return n_; }
  const float* p() const { return r_.p; }
  const float* q() const { return q_; }

  /// Weights of elements i .. i+W-1 (i a multiple of W); elements past the row weigh 0.
  D block(std::int32_t i) const {
    if (i + W <= n_) return at(r_.p + i, q_ ? q_ + i : nullptr, i);
    float p[W] = {}, q[W] = {};  // p = 0 past the row: r = 0 there, so the weight is 0
    for (std::int32_t l = 0; i + l < n_; ++l) {
      p[l] = r_.p[i + l];
      if (q_) q[l] = q_[i + l];
    }
    return at(p, q_ ? q : nullptr, i);
  }

  /// The first vector start at or after i (a multiple of W) whose vector needs the definition's
  /// steps: the vector of the next sibling token; n when there is none.
  std::int32_t clean_until(std::int32_t i) const {
    if (!finite_) return i;
    const std::int32_t* next = std::lower_bound(special_, special_ + specials_, i);
    return next == special_ + specials_ ? n_ : *next - *next % W;
  }
  /// Weights of elements i .. i+W-1 of a vector clean_until() vouched for.
  D clean_block(std::int32_t i) const { return clean(r_.p + i, q_ ? q_ + i : nullptr); }
  /// Whether [begin, end) holds a sibling token (or the collapsed steps cannot be used).
  bool holds_special(std::int32_t begin, std::int32_t end) const { return clean_until(begin) < end; }
  /// P, the factor a one-hot node's weights off its siblings carry: they are P p.
  double scale() const { return scale_; }

  /// Whether every value the weights of elements [begin, end) read is a valid probability.
  bool valid(std::int32_t begin, std::int32_t end) const {
    for (std::int32_t v = begin; v < end; ++v) {
      if (!valid_probability(r_.p[v]) || (q_ && !valid_probability(q_[v]))) return false;
    }
    return true;
  }

 private:
  D at(const float* p, const float* q, std::int32_t i) const {
    return holds_special(i) || !finite_ ? general(p, q, i) : clean(p, q);
  }

  /// Whether a special token lies in [i, i + W). Blocks come mostly in increasing order, so a
  /// cursor into the sorted tokens makes this O(1); it restarts when a caller goes back.
  bool holds_special(std::int32_t i) const {
    if (specials_ == 0) return false;
    if (cursor_ > 0 && special_[cursor_ - 1] >= i) cursor_ = 0;
    while (cursor_ < specials_ && special_[cursor_] < i) ++cursor_;
    return cursor_ < specials_ && special_[cursor_] < i + W;
  }

  /// Elements that are no sibling: max(p - S q, 0) * P, the steps collapsed.
  D clean(const float* p, const float* q) const {
    const D zero(0.0);
    const D r = M == SiblingDraft::one_hot ? D::load_unaligned(p)
                                           : D::load_unaligned(p) - D(shift_) * D::load_unaligned(q);
    return xsimd::select(r > zero, r * D(scale_), zero);
  }

  /// r_1 = p; r_{s+1} = (r_s - q_s > 0 ? (r_s - q_s) / Z_s : 0); then the current sibling's step.
  /// The same double operations, in the same order, as core::Residual::at and ::after.
  D general(const float* p, const float* q, std::int32_t i) const {
    const D zero(0.0);
    const D index = D(static_cast<double>(i)) + iota_;
    const D qv = q ? D::load_unaligned(q) : zero;
    D r = D::load_unaligned(p);
    Mask removed(false);  // c_1 .. c_{s-1} (without replacement)
    for (std::int32_t s = 0; s < r_.steps; ++s) {
      const Mask sibling = index == D(static_cast<double>(r_.siblings.token[s]));
      const D d = r - step_q(qv, sibling, removed, r_.siblings.scale[s]);
      removed = removed | sibling;
      r = xsimd::select(d > zero, d * D(r_.siblings.inv_mass[s]), zero);
    }
    if (current_ < 0) return r;
    const Mask sibling = index == D(static_cast<double>(current_));
    const D d = r - step_q(qv, sibling, removed, r_.current_scale());
    return xsimd::select(d > zero, d, zero);
  }

  D step_q(const D& q, const Mask& sibling, const Mask& removed, double scale) const {
    const D zero(0.0);
    if (M == SiblingDraft::one_hot) return xsimd::select(sibling, D(1.0), zero);
    if (M == SiblingDraft::sampled) return q;
    return xsimd::select(removed, zero, D(scale) * q);
  }

  const core::Residual<const float*>& r_;
  std::int32_t current_;
  std::int32_t n_;
  const float* q_;
  D iota_;
  std::int32_t alone_ = 0;  // the one special token before any sibling was absorbed
  std::int32_t* special_;  // tokens in order: in alone_, or in the residual's siblings.sorted
  std::int32_t specials_ = 0;
  mutable std::int32_t cursor_ = 0;
  double shift_ = 0.0;  // S: how many q's the collapsed steps subtract from p
  double scale_ = 1.0;  // P: the product of the absorbed steps' 1 / Z_s
  bool finite_ = true;
};

/// One pass: the weights' sum per chunk of core::chunk_length(n) elements (into sums, which has
/// room for kMaxChunks), their total, and whether every value read was valid. With `raw_out`,
/// also each chunk's sum of p; with `raw_in` (one-hot drafts, a node's later siblings), a chunk
/// without a sibling token is P times its sum of p from the node's first pass, unread.
template <class Weights>
Checked<double> chunk_sums(const Weights& w, double* sums, std::int32_t& chunks,
                           const double* raw_in = nullptr, double* raw_out = nullptr,
                           double* q_total_out = nullptr) {
  using F = typename Weights::F;
  using D = typename Weights::D;
  constexpr std::int32_t WF = Weights::WF, W = Weights::W;
  const std::int32_t n = w.size(), chunk = core::chunk_length(n);
  const float* p = w.p();
  const float* q = w.q();
  BitsMax<typename F::arch_type> check;  // bits of p | q: at or above +inf's when a value may be invalid
  bool ok_tail = true;
  double total = 0.0;
  chunks = 0;
  for (std::int32_t begin = 0; begin < n; begin += chunk, ++chunks) {
    const std::int32_t end = n - begin > chunk ? begin + chunk : n;
    if (raw_in && !w.holds_special(begin, end)) {
      sums[chunks] = raw_in[chunks] * w.scale();
      total += sums[chunks];
      continue;
    }
    D lo(0.0), hi(0.0), raw_lo(0.0), raw_hi(0.0), q_lo(0.0), q_hi(0.0);  // two accumulators each:
                                                                            // they break the add chain
    std::int32_t i = begin, stop = w.clean_until(begin);
    for (; i + WF <= end; i += WF) {
      check.add(q ? F::load_unaligned(p + i) | F::load_unaligned(q + i) : F::load_unaligned(p + i));
      if (i + WF <= stop) {
        lo += w.clean_block(i);
        hi += w.clean_block(i + W);
      } else {
        lo += w.block(i);
        hi += w.block(i + W);
        stop = w.clean_until(i + WF);
      }
      if (raw_out) {
        raw_lo += D::load_unaligned(p + i);
        raw_hi += D::load_unaligned(p + i + W);
      }
      if (q_total_out) {
        q_lo += D::load_unaligned(q + i);
        q_hi += D::load_unaligned(q + i + W);
      }
    }
    double raw_tail = 0.0;
    if (i < end) {  // the row's ragged end (chunks are whole vectors)
      ok_tail = ok_tail && w.valid(i, end);
      lo += w.block(i);
      if (i + W < end) hi += w.block(i + W);
      for (std::int32_t v = i; v < end; ++v) raw_tail += p[v];
      if (q_total_out) {  // as a pass over q as one-hot weights adds it: zero-padded vectors
        alignas(64) double lanes[2 * W] = {};
        for (std::int32_t v = i; v < end; ++v) lanes[v - i] = q[v];
        q_lo += D::load_aligned(lanes);
        if (i + W < end) q_hi += D::load_aligned(lanes + W);
      }
    }
    sums[chunks] = lane_sum(lo + hi);
    if (raw_out) raw_out[chunks] = lane_sum(raw_lo + raw_hi) + raw_tail;
    if (q_total_out) *q_total_out += lane_sum(q_lo + q_hi);
    total += sums[chunks];
  }
  // OR-ed bits reach +inf's only if a value is negative, inf or NaN (or two values above 1
  // combine so): the exact check then decides. Chunks taken from raw_in were checked by the pass
  // that made them.
  const bool ok = ok_tail && (check.value() < BitsMax<typename F::arch_type>::kInfBits || w.valid(0, n));
  return {total, ok};
}

/// Per thread: the chunk sums of p from a one-hot node's first pass (its first rejected sibling,
/// steps 0), for the passes of its later siblings. The walk calls a node's passes one after
/// another, the first with steps 0, and no other pass runs on the thread in between: so sums are
/// used only by the residual object that made them, on the same row, with the siblings recorded
/// since; any other call drops them.
struct OneHotSums {
  const void* residual = nullptr;
  const float* p = nullptr;
  std::int32_t n = 0, steps = 0, chunks = 0, first = -1;
  double first_mass = 0;  // the first pass's mass: the walk absorbs that sibling with 1 / it
  std::vector<std::int32_t> token;  // the siblings recorded so far, grown as a node absorbs them
  std::vector<double> inv_mass;
  double raw[kMaxChunks]{};

  /// Whether the sums belong to r's node; records r's siblings when they do.
  bool serve(const core::Residual<const float*>& r, std::int32_t size) {
    const core::Siblings& given = r.siblings;
    if (residual != &r || p != r.p || n != size || r.steps < steps || r.steps < 1 || given.token[0] != first ||
        given.inv_mass[0] != 1.0 / first_mass) {
      return false;
    }
    for (std::int32_t s = 0; s < steps; ++s) {
      if (token[std::size_t(s)] != given.token[s] || inv_mass[std::size_t(s)] != given.inv_mass[s]) return false;
    }
    token.resize(std::size_t(r.steps));
    inv_mass.resize(std::size_t(r.steps));
    for (std::int32_t s = steps; s < r.steps; ++s) {
      token[std::size_t(s)] = given.token[s], inv_mass[std::size_t(s)] = given.inv_mass[s];
    }
    steps = r.steps;
    return true;
  }
};

inline OneHotSums& one_hot_sums() {
  static thread_local OneHotSums sums;
  return sums;
}

/// Per thread: sum_v q(v) from a without-replacement node's first pass, for the call right after
/// it: core::Residual::absorb then asks for the mass of q (as a one-hot residual over q, steps
/// 0) to renormalise q without the siblings. The sum is added in the lanes and order that pass
/// would use, so the value is the one it would return. Any other call drops it.
struct QTotal {
  const float* q = nullptr;
  std::int32_t n = 0;
  double total = 0;
};

inline QTotal& q_total_stash() {
  static thread_local QTotal stash;
  return stash;
}

/// chunk_sums, reusing a one-hot node's first pass where the walk allows it.
template <class Weights>
Checked<double> node_chunk_sums(const Weights& w, const core::Residual<const float*>& r, std::int32_t x,
                                double* sums, std::int32_t& chunks) {
  OneHotSums& reuse = one_hot_sums();
  if (!Weights::kOneHot) {
    reuse.residual = nullptr;
    if (!Weights::kWithoutReplacement || r.steps > 0 || x < 0) return chunk_sums(w, sums, chunks);
    double q_total = 0.0;
    const Checked<double> total = chunk_sums(w, sums, chunks, nullptr, nullptr, &q_total);
    if (total.ok) q_total_stash() = {r.q, w.size(), q_total};
    return total;
  }
  if (r.steps > 0 && reuse.serve(r, w.size())) return chunk_sums(w, sums, chunks, reuse.raw);
  reuse.residual = nullptr;
  if (r.steps > 0 || x < 0) return chunk_sums(w, sums, chunks);
  const Checked<double> total = chunk_sums(w, sums, chunks, nullptr, reuse.raw);
  if (total.ok) {
    reuse.residual = &r;
    reuse.p = r.p;
    reuse.n = w.size();
    reuse.steps = 0;
    reuse.chunks = chunks;
    reuse.first = x;
    reuse.first_mass = total.value;
  }
  return total;
}

template <class Weights>
Checked<double> mass(const Weights& w, const core::Residual<const float*>& r, std::int32_t x) {
  const QTotal stashed = q_total_stash();
  q_total_stash().q = nullptr;
  if (Weights::kOneHot && r.steps == 0 && x < 0 && stashed.q == r.p && stashed.n == w.size()) {
    one_hot_sums().residual = nullptr;
    return {stashed.total, true};
  }
  double sums[kMaxChunks];
  std::int32_t chunks = 0;
  return node_chunk_sums(w, r, x, sums, chunks);
}

/// The crossing's chunk is rescanned with the same lane arithmetic, so the rescan sees the
/// weights the sums were made of.
template <class Weights>
Checked<std::int32_t> draw(const Weights& w, const core::Residual<const float*>& r, std::int32_t x, float u) {
  constexpr std::int32_t W = Weights::W;
  q_total_stash().q = nullptr;
  const std::int32_t n = w.size();
  double sums[kMaxChunks];
  std::int32_t chunks = 0;
  const Checked<double> total = node_chunk_sums(w, r, x, sums, chunks);
  if (!total.ok) return {-1, false};
  if (!(total.value > 0.0)) return {-1, true};

  const double threshold = static_cast<double>(u) * total.value;
  const std::int32_t chunk = core::chunk_length(n);
  double before = 0.0;
  std::int32_t c = 0;
  while (c + 1 < chunks && !(before + sums[c] > threshold)) before += sums[c++];
  const std::int32_t begin = c * chunk, end = std::min(n, begin + chunk);
  alignas(64) double lanes[W];
  std::int32_t last_positive = -1;
  for (std::int32_t i = begin; i < end; i += W) {
    w.block(i).store_aligned(lanes);
    for (std::int32_t l = 0; l < W && i + l < end; ++l) {
      if (lanes[l] > 0.0) {
        before += lanes[l];
        last_positive = i + l;
        if (before > threshold) return {i + l, true};
      }
    }
  }
  // Rounding put the crossing past the chunk: its last positive weight, or (when rounding made
  // the chosen chunk empty) the last positive weight before it.
  for (std::int32_t i = begin - W; last_positive < 0 && i >= 0; i -= W) {
    w.block(i).store_aligned(lanes);
    for (std::int32_t l = W - 1; l >= 0 && last_positive < 0; --l) {
      if (lanes[l] > 0.0) last_positive = i + l;
    }
  }
  return {last_positive, true};
}

/// Calls f with the weights of this residual's kind.
template <class Arch, class Body>
auto with_weights(const core::Residual<const float*>& r, std::int32_t x, std::int32_t n, const Body& f) {
  if (!r.has_q) return f(ResidualWeights<Arch, SiblingDraft::one_hot>(r, x, n));
  if (r.drafted == Drafted::sampled_without_replacement) {
    return f(ResidualWeights<Arch, SiblingDraft::without_replacement>(r, x, n));
  }
  return f(ResidualWeights<Arch, SiblingDraft::sampled>(r, x, n));
}

}  // namespace detail

/// Mass of the residual after rejecting sibling x (kNoToken: the residual itself).
template <class Arch = DefaultArch>
Checked<double> residual_mass(const core::Residual<const float*>& r, std::int32_t x, std::int32_t n) {
  return detail::with_weights<Arch>(r, x, n, [&](const auto& w) { return detail::mass(w, r, x); });
}

/// Draws from the weights residual_mass sums: the smallest v with w_0 + ... + w_v > u * sum(w),
/// -1 when there is no mass.
template <class Arch = DefaultArch>
Checked<std::int32_t> residual_draw(const core::Residual<const float*>& r, std::int32_t x, float u,
                                    std::int32_t n) {
  return detail::with_weights<Arch>(r, x, n, [&](const auto& w) { return detail::draw(w, r, x, u); });
}

}  // namespace specverify::cpu
