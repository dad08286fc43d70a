// libFuzzer target: verify() over batches of logits (chains and trees) with every rule, on whatever
// bytes come in.
//
// The input decodes into a rule (Coupled and a user's rule included), a layout (ragged chains, or
// trees with any Drafted), sampling parameters per sequence (in and out of range, NaN), target and
// draft logits drawn from a palette (ordinary, -inf, NaN, +inf, huge), optional one-hot drafts,
// draft parameters, a reduced draft vocabulary (valid, out of range, not injective), guidance rows
// and scales, a grammar bitmask (rows with nothing allowed included), logprobs. Some chains are
// padded (core/padded_chain.hpp): each sequence walks its first count of slots (a count outside
// its slots now and then), and the drafts past it lie outside the vocabulary. Rows are long
// enough now and then (V up to ~4200) that the streaming pre-pass runs over several blocks. Buffers
// are sized exactly to what the batch describes, so ASan sees any read past them.
// Invariants (docs/api.md "Errors", "Logits and sampling parameters"): either invalid_input is thrown
// with every output untouched, or each sequence's row holds its n_b accepted drafts (the input's),
// one extra token, then kNoToken; every emitted token is in [0, V) and has processed p > 0 under
// the row it came from (core::probability, the scalar definition, over that row prepared again);
// every emitted token's logprob is finite and log p. Rows come as float, float16 or bfloat16: a
// 16-bit batch must give the float batch's outputs (or its message) bit for bit on the same values.
#include <fuzzer/FuzzedDataProvider.h>

#include <cfloat>
#include <cmath>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <limits>
#include <vector>

#include "fuzz_check.hpp"
#include "specverify/core/padded_chain.hpp"
#include "specverify/specverify.hpp"
#include "typical_acceptance.hpp"

namespace {

using namespace specverify;
using fuzz::kInf;
using fuzz::kNaN;

constexpr std::int32_t kSentinel = 0x5eed;
constexpr float kSentinelLogprob = 7.0f;

float logit(FuzzedDataProvider& in, bool allow_bad) {
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 200) return static_cast<float>(static_cast<std::int8_t>(pick * 37u)) / 8.0f;  // ordinary, with ties
  if (pick < 225) return -kInf;                                                              // masked
  if (pick < 240 || !allow_bad) return in.ConsumeFloatingPointInRange<float>(-1e30f, 1e30f);
  static const float bad[] = {kNaN, kInf, FLT_MAX, -FLT_MAX, 3e38f};
  return bad[pick % (sizeof bad / sizeof *bad)];
}

SamplingParams params(FuzzedDataProvider& in, std::int32_t V, bool allow_bad) {
  static const float temperatures[] = {0.0f, 0.5f, 1.0f, 2.0f, 1e-30f, 1e30f, 0x1p-149f, 0.8f};
  static const float top_ps[] = {1.0f, 0.5f, 0.9f, 1e-30f, 0x1p-149f, 0.999999f};
  static const float min_ps[] = {0.0f, 0.1f, 1.0f, 0.5f, 1e-30f};
  SamplingParams p;
  const std::uint8_t flags = in.ConsumeIntegral<std::uint8_t>();
  p.temperature = temperatures[in.ConsumeIntegral<std::uint8_t>() % 8];
  if (flags & 1) p.top_k = static_cast<std::int32_t>(in.ConsumeIntegralInRange<std::int64_t>(0, V + 3));
  if (flags & 2) p.top_p = top_ps[in.ConsumeIntegral<std::uint8_t>() % 6];
  if (flags & 4) p.min_p = min_ps[in.ConsumeIntegral<std::uint8_t>() % 5];
  if (flags & 8) {  // penalties, ordinary and extreme (overflow is refused, never ignored)
    static const float repetitions[] = {1.0f, 1.5f, 0.5f, 1e-30f, 1e30f};
    static const float additive[] = {0.0f, 0.5f, -1.0f, 3e38f, 2.0f};
    const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
    p.repetition_penalty = repetitions[pick % 5];
    p.presence_penalty = additive[(pick / 5) % 5];
    p.frequency_penalty = additive[(pick / 25) % 5];
  }
  if (allow_bad && (flags & 0xf8) == 0xe8) {  // penalties out of range
    p.repetition_penalty = (flags & 1) ? 0.0f : kNaN;
    if (flags & 2) p.presence_penalty = kInf;
  }
  if (allow_bad && (flags & 0xf0) == 0xf0) {  // out of range
    switch (flags & 7) {
      case 0: p.temperature = -1.0f; break;
      case 1: p.temperature = kNaN; break;
      case 2: p.top_k = -1; break;
      case 3: p.top_p = 0.0f; break;
      case 4: p.top_p = kNaN; break;
      case 5: p.min_p = 1.5f; break;
      case 6: p.min_p = kNaN; break;
      default: p.temperature = kInf; break;
    }
  }
  return p;
}

/// Everything verify reads, owned, sized exactly.
struct Case {
  bool tree = false;
  std::int32_t B = 0, V = 1, DV = 0;  // DV: draft row length
  std::vector<std::int32_t> offsets, parents, tokens;
  std::vector<float> target, draft, unconditional, scales;
  std::vector<std::int64_t> first_u, positions;
  std::vector<std::uint32_t> allowed;
  std::vector<std::int32_t> d2t;
  std::vector<SamplingParams> tp, dp;
  std::vector<std::int32_t> h_offsets, h_tokens, h_counts, b_offsets, b_tokens;
  std::vector<float> b_values;
  Drafted drafted = Drafted::sampled;
  bool one_hot = false;
  bool padded = false;               // chains verified as padded chains of `walked`
  std::vector<std::int32_t> walked;  // per sequence, with `padded`
  // Outputs.
  std::int32_t width = 1;
  std::vector<std::int32_t> out, accepted, nodes;
  std::vector<float> logprobs;
  Randomness randomness;

  std::int32_t count(std::int32_t b) const { return offsets[b + 1] - offsets[b]; }
  /// The drafts sequence b may accept.
  std::int32_t walks(std::int32_t b) const { return padded ? walked[b] : count(b); }
  std::int64_t rows() const { return std::int64_t{offsets[B]} + B; }

  template <class Batch, class Logit>
  void fill(Batch& batch, const Logit* t, const Logit* d, const Logit* u) const {
    batch.batch_size = B;
    batch.vocab_size = V;
    batch.draft_tokens = tokens.data();
    batch.target_logits = t;
    batch.draft_logits = one_hot ? nullptr : d;
    batch.target_params = tp.data();
    batch.draft_params = dp.empty() ? nullptr : dp.data();
    if (!d2t.empty()) {
      batch.draft_vocab_size = static_cast<std::int32_t>(d2t.size());
      batch.draft_to_target = d2t.data();
    }
    if (!unconditional.empty()) {
      batch.unconditional_logits = u;
      batch.unconditional_first_row = first_u.data();
      batch.guidance_scale = scales.data();
    }
    if (!allowed.empty()) batch.allowed_tokens = allowed.data();
    if (!h_offsets.empty()) {
      batch.history_offsets = h_offsets.data();
      batch.history_tokens = h_tokens.data();
      batch.history_counts = h_counts.data();
    }
    if (!b_offsets.empty()) {
      batch.bias_offsets = b_offsets.data();
      batch.bias_tokens = b_tokens.data();
      batch.bias_values = b_values.data();
    }
  }
  template <class Logit = float>
  LogitsChainBatch<Logit> chain(const Logit* t, const Logit* d, const Logit* u) const {
    LogitsChainBatch<Logit> batch;
    fill(batch, t, d, u);
    batch.draft_offsets = offsets.data();
    return batch;
  }
  template <class Logit = float>
  LogitsTreeBatch<Logit> trees(const Logit* t, const Logit* d, const Logit* u) const {
    LogitsTreeBatch<Logit> batch;
    fill(batch, t, d, u);
    batch.node_offsets = offsets.data();
    batch.parents = parents.data();
    batch.drafted = drafted;
    return batch;
  }
  LogitsChainBatch<float> chain() const { return chain(target.data(), draft.data(), unconditional.data()); }
  LogitsTreeBatch<float> trees() const { return trees(target.data(), draft.data(), unconditional.data()); }

  /// Target row `row` of sequence b (its local row index j) as the library builds it.
  core::LogitRow<float> target_row(std::int32_t b, std::int64_t row) const {
    core::LogitRow<float> r;
    r.logits = target.data() + row * V;
    r.n = V;
    r.params = tp[b];
    if (!unconditional.empty() && first_u[b] >= 0) {
      r.unconditional = unconditional.data() + (first_u[b] + (row - (offsets[b] + b))) * V;
      r.guidance_scale = scales[b];
    }
    if (!allowed.empty()) r.allowed = allowed.data() + row * ((V + 31) / 32);
    // Its penalty and bias lists as the library's source gives them (the bias in token order).
    std::vector<std::int32_t> order;
    if (tree) {
      const auto batch = trees();
      core::detail::check_penalty_lists(batch, order);
      r.lists = core::LogitSource<float>::of(batch, offsets.data(), nullptr, order.data()).lists(b, row, true);
    } else {
      const auto batch = chain();
      core::detail::check_penalty_lists(batch, order);
      r.lists = core::LogitSource<float>::of(batch, offsets.data(), nullptr, order.data()).lists(b, row, true);
    }
    bias_order = order;
    if (r.lists.bias_size > 0) r.lists.bias_order = bias_order.data() + b_offsets[b];
    return r;
  }
  mutable std::vector<std::int32_t> bias_order;
};

Case decode(FuzzedDataProvider& in) {
  Case c;
  const std::uint8_t shape = in.ConsumeIntegral<std::uint8_t>();
  c.tree = shape & 1;
  const bool wide = (shape & 0x0e) == 0x0e;  // now and then rows of several streaming blocks
  c.B = in.ConsumeIntegralInRange<std::int32_t>(0, wide ? 2 : 4);
  c.V = wide ? in.ConsumeIntegralInRange<std::int32_t>(2040, 4200) : in.ConsumeIntegralInRange<std::int32_t>(1, 80);
  const bool allow_bad = shape & 0x10;
  c.one_hot = shape & 0x20;
  c.padded = !c.tree && (shape & 0x40);
  const std::int32_t max_k = wide ? 2 : 4;
  c.offsets.push_back(0);
  for (std::int32_t b = 0; b < c.B; ++b) {
    const std::int32_t k = in.ConsumeIntegralInRange<std::int32_t>(0, max_k);
    for (std::int32_t i = 0; i < k; ++i) {
      // Trees: a parent among the earlier nodes of the sequence (or the root); chains: the previous.
      c.parents.push_back(c.tree ? in.ConsumeIntegralInRange<std::int32_t>(-1, i - 1) : i - 1);
    }
    c.offsets.push_back(c.offsets.back() + k);
  }
  if (c.tree) c.drafted = static_cast<Drafted>(in.ConsumeIntegralInRange<int>(0, 2));
  const std::uint8_t extras = in.ConsumeIntegral<std::uint8_t>();
  if (extras & 1) {  // a reduced draft vocabulary: an injective map, or one that is not
    const std::int32_t dv = in.ConsumeIntegralInRange<std::int32_t>(1, c.V);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(c.V));
    for (std::int32_t v = 0; v < c.V; ++v) ids[v] = v;
    for (std::int32_t d = 0; d < dv; ++d) {  // a partial shuffle: the first dv ids
      std::swap(ids[d], ids[in.ConsumeIntegralInRange<std::int32_t>(d, c.V - 1)]);
      c.d2t.push_back(ids[d]);
    }
    if (allow_bad && (extras & 0x80)) c.d2t[in.ConsumeIntegralInRange<std::size_t>(0, c.d2t.size() - 1)] = (extras & 0x40) ? c.V : -1;
    if (allow_bad && (extras & 0x20) && dv > 1) c.d2t[1] = c.d2t[0];
  }
  c.DV = c.d2t.empty() ? c.V : static_cast<std::int32_t>(c.d2t.size());
  const std::int32_t N = c.offsets.back();
  for (std::int32_t i = 0; i < N; ++i) {
    // Drafts mostly inside the vocabulary of the draft rows they could come from.
    const std::int32_t x = in.ConsumeIntegralInRange<std::int32_t>(0, c.V - 1);
    c.tokens.push_back(c.d2t.empty() || (extras & 2) ? x : c.d2t[static_cast<std::size_t>(x) % c.d2t.size()]);
  }
  const std::int64_t rows = c.rows();
  // A pattern of logits repeated over the rows (cheap for wide rows), with edits per row.
  std::vector<float> pattern(static_cast<std::size_t>(std::min<std::int32_t>(c.V, 97)));
  for (float& l : pattern) l = logit(in, allow_bad);
  c.target.resize(static_cast<std::size_t>(rows * c.V));
  for (std::size_t i = 0; i < c.target.size(); ++i) c.target[i] = pattern[(i * 31 + i / 97) % pattern.size()];
  for (int e = in.ConsumeIntegralInRange<int>(0, 8); e > 0 && !c.target.empty(); --e) {
    c.target[in.ConsumeIntegralInRange<std::size_t>(0, c.target.size() - 1)] = logit(in, allow_bad);
  }
  c.draft.resize(static_cast<std::size_t>(rows * c.DV));  // as many rows as the target (trees), >= N
  for (std::size_t i = 0; i < c.draft.size(); ++i) c.draft[i] = pattern[(i * 17 + 5) % pattern.size()];
  for (int e = in.ConsumeIntegralInRange<int>(0, 4); e > 0 && !c.draft.empty(); --e) {
    c.draft[in.ConsumeIntegralInRange<std::size_t>(0, c.draft.size() - 1)] = logit(in, allow_bad);
  }
  if (!c.tree) c.draft.resize(static_cast<std::size_t>(std::int64_t{N} * c.DV));  // chains: N rows
  for (std::int32_t b = 0; b < c.B; ++b) c.tp.push_back(params(in, c.V, allow_bad));
  if (extras & 4) {
    for (std::int32_t b = 0; b < c.B; ++b) c.dp.push_back(params(in, c.DV, allow_bad));
  }
  if (extras & 8) {  // guidance: each sequence with its own rows somewhere in the buffer, or none
    c.unconditional.resize(c.target.size());
    for (std::size_t i = 0; i < c.unconditional.size(); ++i) c.unconditional[i] = pattern[(i * 7 + 3) % pattern.size()];
    if (!c.unconditional.empty()) c.unconditional[in.ConsumeIntegralInRange<std::size_t>(0, c.unconditional.size() - 1)] = logit(in, allow_bad);
    static const float scale_palette[] = {1.0f, 1.5f, 0.0f, -2.0f, 1e20f, 3.0f, kNaN, kInf};
    for (std::int32_t b = 0; b < c.B; ++b) {
      const std::int64_t span = rows - (c.count(b) + 1);
      const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
      c.first_u.push_back(pick < 64 ? -1 : in.ConsumeIntegralInRange<std::int64_t>(0, span));
      if (allow_bad && pick == 255) c.first_u.back() = -2;
      c.scales.push_back(scale_palette[pick % (allow_bad ? 8 : 6)]);
    }
  }
  if (extras & 16) {  // a grammar bitmask; some rows allow nothing
    const std::int64_t words = (c.V + 31) / 32;
    c.allowed.resize(static_cast<std::size_t>(rows * words));
    for (auto& w : c.allowed) {
      const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
      w = pick < 16 ? 0u : pick < 200 ? 0xffffffffu : in.ConsumeIntegral<std::uint32_t>();
    }
  }
  c.randomness.seed = in.ConsumeIntegral<std::uint64_t>();
  c.randomness.offset = in.ConsumeIntegral<std::uint8_t>();
  if (!(extras & 32) || !allow_bad) {
    for (std::int32_t b = 0; b < c.B; ++b) c.positions.push_back(in.ConsumeIntegral<std::int32_t>());
    c.randomness.positions = c.positions.data();
  }
  // Penalty and bias lists: short, in range, ascending and unique, or (allow_bad) not.
  const std::uint8_t lists = in.remaining_bytes() > 0 ? in.ConsumeIntegral<std::uint8_t>() : 0;
  if (lists & 1) {
    c.h_offsets.push_back(0);
    for (std::int32_t b = 0; b < c.B; ++b) {
      std::int32_t t = -1;
      for (std::int32_t e = in.ConsumeIntegralInRange<std::int32_t>(0, 6); e > 0; --e) {
        t += 1 + in.ConsumeIntegralInRange<std::int32_t>(0, 3);
        if (t >= c.V) break;
        c.h_tokens.push_back(t);
        c.h_counts.push_back(in.ConsumeIntegralInRange<std::int32_t>(0, 3));
      }
      c.h_offsets.push_back(static_cast<std::int32_t>(c.h_tokens.size()));
    }
    if (allow_bad && (lists & 4) && !c.h_tokens.empty()) {
      const std::size_t e = in.ConsumeIntegralInRange<std::size_t>(0, c.h_tokens.size() - 1);
      switch ((lists >> 3) & 3) {
        case 0: c.h_counts[e] = -1; break;
        case 1: c.h_tokens[e] = c.V; break;
        case 2: c.h_tokens[e] = e > 0 ? c.h_tokens[e - 1] : -1; break;
        default: c.h_tokens[e] = 0; break;
      }
    }
  }
  if (lists & 2) {
    static const float biases[] = {0.0f, 1.5f, -2.0f, 3e38f, -3e38f, 100.0f};
    c.b_offsets.push_back(0);
    for (std::int32_t b = 0; b < c.B; ++b) {
      for (std::int32_t e = in.ConsumeIntegralInRange<std::int32_t>(0, 4); e > 0; --e) {
        const std::int32_t t = in.ConsumeIntegralInRange<std::int32_t>(0, c.V - 1);
        if (std::find(c.b_tokens.begin() + c.b_offsets.back(), c.b_tokens.end(), t) != c.b_tokens.end()) continue;
        c.b_tokens.push_back(t);
        c.b_values.push_back(biases[in.ConsumeIntegral<std::uint8_t>() % 6]);
      }
      c.b_offsets.push_back(static_cast<std::int32_t>(c.b_tokens.size()));
    }
    if (allow_bad && (lists & 0x20) && !c.b_tokens.empty()) {
      const std::size_t e = in.ConsumeIntegralInRange<std::size_t>(0, c.b_tokens.size() - 1);
      if (lists & 0x40) {
        c.b_values[e] = (lists & 0x80) ? kNaN : kInf;
      } else {
        c.b_tokens[e] = (lists & 0x80) ? -1 : c.b_tokens[e > 0 ? e - 1 : e];
      }
    }
  }
  if (c.padded) {  // a count per sequence, mostly within its slots; the drafts past it not read
    for (std::int32_t b = 0; b < c.B; ++b) {
      const std::uint8_t pick = in.remaining_bytes() > 0 ? in.ConsumeIntegral<std::uint8_t>() : 0;
      std::int32_t n = pick % (c.count(b) + 1);
      if (allow_bad && pick >= 250) n = pick % 2 ? c.count(b) + 1 : -1;
      c.walked.push_back(n);
      for (std::int32_t i = std::max(n, 0); i < c.count(b); ++i) c.tokens[std::size_t(c.offsets[b] + i)] = c.V + 3;
    }
  }
  // Outputs: wide enough for the deepest path.
  for (std::int32_t b = 0; b < c.B; ++b) {
    std::vector<std::int32_t> depth(static_cast<std::size_t>(c.count(b)));
    for (std::int32_t i = 0; i < c.count(b); ++i) {
      const std::int32_t parent = c.parents[static_cast<std::size_t>(c.offsets[b] + i)];
      depth[i] = parent < 0 ? 1 : depth[parent] + 1;
      c.width = std::max(c.width, depth[i] + 1);
    }
  }
  c.out.assign(static_cast<std::size_t>(c.B) * c.width, kSentinel);
  c.accepted.assign(static_cast<std::size_t>(c.B), kSentinel);
  c.nodes.assign(c.out.size(), kSentinel);
  c.logprobs.assign(c.out.size(), kSentinelLogprob);
  return c;
}

/// The emitted token `token` at depth d of sequence b, from target row `row`: p > 0 there, and its
/// logprob is log p.
void check_token(const Case& c, std::int32_t b, std::int64_t row, std::int32_t token, float logprob) {
  CHECK(token >= 0 && token < c.V, token, c.V);
  std::vector<float> scratch(static_cast<std::size_t>(c.V));
  core::LogitRow<float> r = c.target_row(b, row);
  core::OverlayRoom overlay;
  overlay.build(r);
  const core::LogitView<float> view = cpu::prepare(r, scratch.data());
  CHECK(view.ok && view.has_mass(), b, row);
  const float p = core::probability(view, token);
  CHECK(p > 0.0f, token, row);
  CHECK(std::isfinite(logprob), token, row);
  CHECK(std::fabs(double(logprob) - std::log(double(p))) <= 1e-4 * (1.0 + std::fabs(std::log(double(p)))), token, row);
}

/// x as float16, truncated (any rounding will do: both runs read the values it gives).
float16 to_float16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(x);
  if (std::isnan(x)) return float16{static_cast<std::uint16_t>(sign | 0x7e00u)};
  if (!(a < 65520.0f)) return float16{static_cast<std::uint16_t>(sign | 0x7c00u)};
  if (a < 0x1p-14f) return float16{static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(a * 0x1p24f))};
  return float16{static_cast<std::uint16_t>(sign | ((((u >> 23) & 0xffu) - 112u) << 10) | ((u >> 13) & 0x3ffu))};
}
bfloat16 to_bfloat16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return bfloat16{static_cast<std::uint16_t>(u >> 16)};
}

/// Rows as Logit, exactly sized; `rows` is set to the values they hold (so the float run and the
/// reference read the same values).
template <class Logit, class Encode>
std::vector<Logit> narrowed(std::vector<float>& rows, Encode encode) {
  std::vector<Logit> out;
  out.reserve(rows.size());
  for (float& x : rows) {
    out.push_back(encode(x));
    x = static_cast<float>(out.back());
  }
  return out;
}

/// verify over c's rows as Logit into c's outputs; whether it threw, and its message.
template <class Rule, class Logit>
bool call(const Rule& rule, Case& c, const Logit* t, const Logit* d, const Logit* u, std::string& message) {
  constexpr bool kChainsOnly = specverify::detail::has_cut<Rule>::value;  // SpecDecPP: no tree form
  try {
    if constexpr (!kChainsOnly) {
      if (c.tree) {
        verify(rule, c.trees(t, d, u), c.randomness,
               TreeOutput{c.out.data(), c.width, c.accepted.data(), c.nodes.data(), c.logprobs.data()});
      }
    }
    const ChainOutput out{c.out.data(), c.width, c.accepted.data(), c.logprobs.data()};
    if (!c.tree && !c.padded) verify(rule, c.chain(t, d, u), c.randomness, out);
    if (c.padded) verify(rule, core::padded(c.chain(t, d, u), c.walked.data()), c.randomness, out);
  } catch (const invalid_input& e) {
    message = e.what();
    return true;
  }
  return false;
}

/// Rows as Logit: the float run on their values first, then the 16-bit run must match it bit for bit.
template <class Rule, class Logit, class Encode>
bool call_narrowed(const Rule& rule, Case& c, Encode encode) {
  const std::vector<Logit> t = narrowed<Logit>(c.target, encode), d = narrowed<Logit>(c.draft, encode),
                           u = narrowed<Logit>(c.unconditional, encode);
  const Case before = c;
  std::string float_message, message;
  const bool float_threw = call(rule, c, c.target.data(), c.draft.data(), c.unconditional.data(), float_message);
  const Case by_float = c;
  c.out = before.out;
  c.accepted = before.accepted;
  c.nodes = before.nodes;
  c.logprobs = before.logprobs;
  const bool threw = call(rule, c, t.data(), d.data(), u.data(), message);
  CHECK(threw == float_threw && message == float_message, threw, float_threw);
  CHECK(c.out == by_float.out && c.accepted == by_float.accepted && c.nodes == by_float.nodes);
  CHECK(c.logprobs.empty() || std::memcmp(c.logprobs.data(), by_float.logprobs.data(), c.logprobs.size() * sizeof(float)) == 0);
  return threw;
}

enum class RowType { float32, float16, bfloat16 };

template <class Rule>
void run(const Rule& rule, Case& c, RowType rows) {
  if (specverify::detail::has_cut<Rule>::value && c.tree) return;  // SpecDecPP: no tree form
  std::string message;
  bool threw = false;
  switch (rows) {
    case RowType::float32: threw = call(rule, c, c.target.data(), c.draft.data(), c.unconditional.data(), message); break;
    case RowType::float16: threw = call_narrowed<Rule, float16>(rule, c, to_float16); break;
    case RowType::bfloat16: threw = call_narrowed<Rule, bfloat16>(rule, c, to_bfloat16); break;
  }
  if (threw) {
    for (auto t : c.out) CHECK(t == kSentinel, t);
    for (auto n : c.accepted) CHECK(n == kSentinel, n);
    for (auto n : c.nodes) CHECK(n == kSentinel, n);
    for (auto l : c.logprobs) CHECK(l == kSentinelLogprob);
    return;
  }
  for (std::int32_t b = 0; b < c.B; ++b) {
    const std::int32_t n = c.accepted[b];
    CHECK(n >= 0 && n <= c.walks(b), n, c.walks(b));
    const std::int32_t* tokens = c.out.data() + std::size_t(b) * c.width;
    const float* logprobs = c.logprobs.data() + std::size_t(b) * c.width;
    const std::int64_t base = std::int64_t{c.offsets[b]} + b;  // row 0 of the sequence
    std::int32_t node = -1;  // the last accepted node, sequence-local
    for (std::int32_t d = 0; d < n; ++d) {
      const std::int32_t next = c.tree ? c.nodes[std::size_t(b) * c.width + d] : d;
      CHECK(next >= 0 && next < c.count(b), next, d);
      CHECK(c.parents[std::size_t(c.offsets[b] + next)] == node, next, node);
      CHECK(tokens[d] == c.tokens[std::size_t(c.offsets[b] + next)], tokens[d], d);
      check_token(c, b, base + 1 + node, tokens[d], logprobs[d]);
      node = next;
    }
    check_token(c, b, base + 1 + node, tokens[n], logprobs[n]);
    for (std::int32_t d = n + 1; d < c.width; ++d) {
      CHECK(tokens[d] == kNoToken, tokens[d], d);
      CHECK(logprobs[d] == kSentinelLogprob, d);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::uint8_t which = in.ConsumeIntegral<std::uint8_t>();
  const float a = static_cast<float>(in.ConsumeIntegral<std::uint8_t>()) / 64.0f;
  Case c = decode(in);
  std::vector<float> scores(static_cast<std::size_t>(c.offsets.back()), 0.7f);
  static const Divergence divergences[] = {Divergence::kl_target_draft, Divergence::kl_draft_target,
                                           Divergence::js, Divergence::js_fsd, Divergence::tv};
  const RowType rows = static_cast<RowType>(which / 50 % 3);  // the rule from which % 10, the rows from which / 50
  switch (which % 10) {
    case 0: run(Standard{}, c, rows); break;
    case 1: run(Greedy{}, c, rows); break;
    case 2: run(Ears{a}, c, rows); break;
    case 3: run(Fsd{divergences[which / 10 % 5], a}, c, rows); break;
    case 4: run(ReducibleFsd{divergences[which / 10 % 5], a}, c, rows); break;
    case 5: run(Sprinter{std::min(a, 1.0f), scores.data()}, c, rows); break;
    case 6: run(Coupled{}, c, rows); break;
    case 7: run(SpecDecPP<Standard>{a, scores.data(), {}}, c, rows); break;
    case 8: run(TypicalAcceptance{std::min(a, 1.0f), 0.3f}, c, rows); break;
    default: run(Standard{}, c, rows); break;
  }
  return 0;
}
