// A backend of one's own over specverify::core alone (no xsimd, no Eigen): plain loops for the row
// work, core::walk for the decisions and the draw. Walks one chain whose p puts all mass on the
// drafted token and then on token 2; exits non-zero unless that is what it emits.
#include <specverify/core.hpp>
#include <specverify/core/chain_layout.hpp>
#include <specverify/core/prob_source.hpp>
#include <specverify/core/walk.hpp>

#include <cmath>
#include <cstdio>

#ifdef XSIMD_VERSION_MAJOR
#error "specverify::core included xsimd, the CPU backend's dependency"
#endif
#if __has_include(<Eigen/Dense>)
#error "specverify::core put Eigen, the heads' dependency, on the include path"
#endif

namespace sv = specverify;
template <class T>
using R = sv::core::Scalar<T>;  // what the walk asks of a row: a value, and whether its pass read valid input

/// Probability rows of n floats, read in index order.
struct PlainRows {
  using View = const float*;
  std::int32_t n;
  sv::core::FixedSiblings<8> room{};

  View open(View row) const { return row; }
  float value(View row, std::int32_t v) const { return row[v]; }
  R<std::int32_t> argmax(View p) const {
    std::int32_t best = 0;
    for (std::int32_t v = 1; v < n; ++v) best = p[v] > p[best] ? v : best;
    return {best, true};
  }
  R<float> max(View p) const { return {p[argmax(p).value], true}; }
  R<float> entropy(View p) const {
    double h = 0.0;
    for (std::int32_t v = 0; v < n; ++v) h += sv::core::entropy_term(p[v]);
    return {static_cast<float>(h), true};
  }
  R<float> divergence(sv::Divergence d, View p, const View* q, std::int32_t x) const {
    double sum = 0.0;
    for (std::int32_t v = 0; v < n; ++v) sum += sv::core::divergence_term(d, p[v], q ? (*q)[v] : (v == x ? 1.0 : 0.0));
    return {static_cast<float>(sum), true};
  }
  /// The smallest v whose cumulative weight exceeds u times the total; -1 without mass.
  template <class Weight>
  R<std::int32_t> inverse_cdf(Weight w, float u) const {
    double total = 0.0;
    for (std::int32_t v = 0; v < n; ++v) total += w(v);
    double before = 0.0;
    for (std::int32_t v = 0; total > 0.0 && v < n; ++v) {
      before += w(v);
      if (w(v) > 0.0 && before > u * total) return {v, true};
    }
    return {-1, true};
  }
  R<std::int32_t> draw_residual(View p, const View* q, std::int32_t x, float u) const {
    return inverse_cdf([&](std::int32_t v) { return sv::core::residual_weight(p[v], q ? (*q)[v] : (v == x ? 1.0 : 0.0)); }, u);
  }
  R<std::int32_t> draw_target(View p, float u) const {
    return inverse_cdf([&](std::int32_t v) { return double(p[v]); }, u);
  }
  R<double> mass(const sv::core::Residual<View>& r, std::int32_t x) { return sv::core::residual_mass(*this, r, x); }
  R<std::int32_t> draw(const sv::core::Residual<View>& r, std::int32_t x, float u) {
    return sv::core::residual_draw(*this, r, x, u);
  }
  sv::core::Siblings siblings(std::int32_t) { return room.room(); }
};

/// Walks sequence 0 of a one-draft chain batch with Standard.
sv::core::WalkResult walk_one(const sv::ChainBatch<float>& batch) {
  PlainRows rows{batch.vocab_size};
  return sv::core::walk(sv::Standard{}, sv::core::ChainLayout::of(batch), sv::core::ProbSource<float>::of(batch),
                        sv::Randomness{1, 0}, 0, rows);
}

int main() {
  // Kept: p puts all mass on the drafted token 1, then on token 2.
  const std::int32_t offsets[2] = {0, 1}, drafts[1] = {1};
  const float p[2][3] = {{0.0f, 1.0f, 0.0f}, {0.0f, 0.0f, 1.0f}};
  const sv::core::WalkResult kept = walk_one({1, 3, offsets, drafts, &p[0][0], nullptr});
  // Rejected: q drafted token 1, which p never emits; the residual max(p - q, 0) is all on token 0.
  const float p_rejects[2][3] = {{0.5f, 0.0f, 0.5f}, {0.0f, 0.0f, 1.0f}};
  const float q_rejects[1][3] = {{0.0f, 0.5f, 0.5f}};
  const sv::core::WalkResult rejected = walk_one({1, 3, offsets, drafts, &p_rejects[0][0], &q_rejects[0][0]});
  std::printf("kept: accepted %d, extra %d; rejected: accepted %d, extra %d\n", kept.accepted, kept.extra,
              rejected.accepted, rejected.extra);
  const bool ok = kept.fault.kind == sv::core::FaultKind::none && kept.accepted == 1 && kept.extra == 2 &&
                  rejected.fault.kind == sv::core::FaultKind::none && rejected.accepted == 0 && rejected.extra == 0;
  return ok ? 0 : 1;
}
