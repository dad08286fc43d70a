// The verify-and-resample core: one chain, walked position by position.
//
// walk_chain is the only place that knows how a chain is laid out and when the extra token is
// drawn. It is generic over the rule (what to decide, what to draw on rejection) and over the
// backend's row operations, and compiles for host and device alike:
//
//   struct Rows {                                // what a backend provides (see cpu/rows.hpp)
//     float value(const Prob* row, std::int32_t v);
//     R<float> max(const Prob* p);               // R<T>: {T value; bool ok;}, ok == false when
//     R<std::int32_t> argmax(const Prob* p);     //   the pass read a NaN, inf or negative value
//     R<float> entropy(const Prob* p);
//     R<float> divergence(Divergence, const Prob* p, const Prob* q_or_null, std::int32_t x);
//     R<std::int32_t> draw_residual(const Prob* p, const Prob* q_or_null, std::int32_t x, float u);
//     R<std::int32_t> draw_target(const Prob* p, float u);  // value -1: no mass to draw from
//   };
//
// Nothing is written here: the chain's outcome is returned, so the host can validate a whole batch
// before any output changes.
#pragma once

#include <cstdint>

#include "specverify/config.hpp"
#include "specverify/philox.hpp"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify::core {

/// Bad data found while walking (a value the rule read). `column` is -1 when a row pass only
/// knows the row is bad; the host then scans it to name the value.
enum class FaultKind : std::uint8_t {
  none,
  bad_value,        // NaN, infinite or negative probability in a row that was read
  bad_row_max,      // target_row_max entry that is NaN, infinite or negative
  target_no_mass,   // a target row to draw from (or take the argmax of) sums to zero
};

struct Fault {
  FaultKind kind = FaultKind::none;
  std::int32_t position = 0;      // j within the chain
  std::int64_t target_row = -1;   // row of target_probs involved
  std::int64_t draft_row = -1;    // row of draft_probs involved, -1 if none
  std::int32_t column = -1;       // vocabulary index, -1 if not known
  float value = 0;
};

/// The outcome of one chain: n_b, the extra token, the sequence's share of VerifyStats.
struct ChainResult {
  std::int32_t accepted = 0;
  std::int32_t extra = kNoToken;
  std::int32_t drafted = 0;
  std::int32_t relaxed = 0;
  std::int32_t target_checked = 0;
  Fault fault;
};

template <class Prob>
SPECVERIFY_HD const Prob* target_row(const ChainBatch<Prob>& batch, std::int64_t row) {
  const std::int64_t stride = batch.target_stride ? batch.target_stride : batch.vocab_size;
  return batch.target_probs + row * stride;
}

template <class Prob>
SPECVERIFY_HD const Prob* draft_row(const ChainBatch<Prob>& batch, std::int64_t row) {
  if (!batch.draft_probs) return nullptr;
  const std::int64_t stride = batch.draft_stride ? batch.draft_stride : batch.vocab_size;
  return batch.draft_probs + row * stride;
}

/// Acceptance uniform of draft position j (chain-relative) of sequence b, drawn index g overall.
/// With per-sequence seeds the counter omits b, so a sequence's draws ignore the rest of the batch.
SPECVERIFY_HD inline float accept_uniform(const Randomness& r, std::int32_t b, std::int32_t j,
                                          std::int32_t g) {
  if (r.accept_uniforms) return r.accept_uniforms[g];
  return r.sequence_seeds
             ? philox_uniform(r.sequence_seeds[b], r.offset, 0, Stream::accept, std::uint32_t(j))
             : philox_uniform(r.seed, r.offset, std::uint32_t(b), Stream::accept, std::uint32_t(j));
}

/// The uniform for sequence b's one extra token, from a stream independent of acceptance.
SPECVERIFY_HD inline float sample_uniform(const Randomness& r, std::int32_t b) {
  if (r.sample_uniforms) return r.sample_uniforms[b];
  return r.sequence_seeds ? philox_uniform(r.sequence_seeds[b], r.offset, 0, Stream::sample, 0)
                          : philox_uniform(r.seed, r.offset, std::uint32_t(b), Stream::sample, 0);
}

SPECVERIFY_HD inline bool valid_probability_value(float v) {
  return v >= 0.0f && v <= 3.402823466e+38f;
}

namespace detail {

SPECVERIFY_HD inline ChainResult& fail(ChainResult& r, FaultKind kind, std::int32_t j,
                                       std::int64_t target, std::int64_t draft,
                                       std::int32_t column = -1, float value = 0) {
  r.fault = Fault{kind, j, target, draft, column, value};
  return r;
}

/// Draws the one extra token from row p (and q) as `how` says, or records why it cannot.
SPECVERIFY_HD_TEMPLATE
template <class Rows, class Prob>
SPECVERIFY_HD ChainResult& finish(ChainResult& r, Rows& rows, Draw how, const Prob* p,
                                  const Prob* q, std::int32_t x, float u, std::int32_t j,
                                  std::int64_t target, std::int64_t draft) {
  auto token = how == Draw::argmax   ? rows.argmax(p)
               : how == Draw::target ? rows.draw_target(p, u)
                                     : rows.draw_residual(p, q, x, u);
  if (token.ok && token.value < 0 && how == Draw::residual) token = rows.draw_target(p, u);
  if (!token.ok) return fail(r, FaultKind::bad_value, j, target, how == Draw::residual ? draft : -1);
  if (token.value < 0) return fail(r, FaultKind::target_no_mass, j, target, -1);
  r.extra = token.value;
  return r;
}

}  // namespace detail

/// Walks sequence b's chain: decides each draft in order, stops at the first rejection, and draws
/// the extra token (on rejection as the rule says, else the bonus token from the row after the
/// last kept draft). Row statistics are computed only for positions the walk reaches.
SPECVERIFY_HD_TEMPLATE
template <class Rule, class Rows, class Prob>
SPECVERIFY_HD ChainResult walk_chain(const Rule& rule, const ChainBatch<Prob>& batch,
                                     const Randomness& randomness, std::int32_t b, Rows& rows) {
  using traits = rule_traits<Rule>;
  ChainResult r;
  const std::int32_t first = batch.draft_offsets[b];
  r.drafted = batch.draft_offsets[b + 1] - first;
  const std::int32_t k = traits::cut(rule, first, r.drafted);
  const std::int64_t first_row = std::int64_t{first} + b;
  const RowStats need = traits::stats(rule);

  for (std::int32_t j = 0; j < k; ++j) {
    const std::int64_t row = first_row + j;
    Position at;
    at.sequence = b;
    at.index = j;
    at.draft = first + j;
    at.token = batch.draft_tokens[at.draft];
    const Prob* p = target_row(batch, row);
    const Prob* q = draft_row(batch, at.draft);
    const std::int64_t q_row = q ? at.draft : -1;
    at.p_x = rows.value(p, at.token);
    if (!valid_probability_value(at.p_x)) {
      return detail::fail(r, FaultKind::bad_value, j, row, -1, at.token, at.p_x);
    }
    at.q_x = q ? rows.value(q, at.token) : 1.0f;
    if (!valid_probability_value(at.q_x)) {
      return detail::fail(r, FaultKind::bad_value, j, -1, q_row, at.token, at.q_x);
    }
    at.u = accept_uniform(randomness, b, j, at.draft);

    if (need.max && batch.target_row_max) {
      at.p_max = batch.target_row_max[row];
      if (!valid_probability_value(at.p_max)) {
        return detail::fail(r, FaultKind::bad_row_max, j, row, -1, -1, at.p_max);
      }
    } else if (need.max) {
      const auto m = rows.max(p);
      if (!m.ok) return detail::fail(r, FaultKind::bad_value, j, row, -1);
      at.p_max = m.value;
    }
    if (need.argmax) {
      const auto a = rows.argmax(p);
      if (!a.ok) return detail::fail(r, FaultKind::bad_value, j, row, -1);
      if (a.value < 0) return detail::fail(r, FaultKind::target_no_mass, j, row, -1);
      at.p_argmax = a.value;
    }
    if (need.entropy) {
      const auto h = rows.entropy(p);
      if (!h.ok) return detail::fail(r, FaultKind::bad_value, j, row, -1);
      at.entropy = h.value;
    }
    if (need.divergence) {
      const auto d = rows.divergence(need.kind, p, q, at.token);
      if (!d.ok) return detail::fail(r, FaultKind::bad_value, j, row, q_row);
      at.divergence = d.value;
    }

    const Decision decision = rule.decide(at);
    r.target_checked += decision.target_checked;
    if (!decision.accepted && traits::on_reject == Draw::argmax && need.argmax) {
      r.extra = at.p_argmax;  // the statistic already read this row for it
      return r;
    }
    if (!decision.accepted) {
      return detail::finish(r, rows, traits::on_reject, p, q, at.token,
                            sample_uniform(randomness, b), j, row, q_row);
    }
    ++r.accepted;
    r.relaxed += decision.relaxed;
  }
  const Prob* bonus = target_row(batch, first_row + k);
  return detail::finish(r, rows, traits::on_bonus, bonus, static_cast<const Prob*>(nullptr),
                        kNoToken, sample_uniform(randomness, b), k, first_row + k, -1);
}

}  // namespace specverify::core
