// Test support for the sharded verify over logits (docs/api.md "Sharded vocabulary" with "Logits
// and sampling parameters" and "Penalties and logit bias"): logits chain batches
// owned by the test (rows whole) with every optional input the logits batch takes, and each
// rank's batch over its slice of them, as views into the whole rows or as copies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "penalty_lists.hpp"
#include "sharded_chains.hpp"
#include "specverify/specverify.hpp"
#include "support.hpp"

namespace specverify::testing::sharded {

/// Which optional inputs a batch has, and how its logits look.
struct LogitFeatures {
  bool quantised = false;      // logits rounded to multiples of 0.5: many ties at the k-th largest
  bool sparse = false;         // most logits -inf: top_k above the number of finite logits
  bool guidance = false;       // unconditional rows on most sequences
  bool mask = false;           // a random grammar bitmask (each target row keeps a finite token)
  bool penalties = false;      // history and bias lists, penalties on some sequences
  bool reduced_draft = false;  // draft rows over a reduced draft vocabulary (draft_to_target)
  bool draft_params = false;   // draft_params given, unlike the target's
  bool top_p_alone = false;    // the parameters include top_p without top_k (or with top_k >= V);
                               // otherwise top_p is set to 1 where top_k >= V
};

/// The target parameters a batch's sequences take in turn.
inline std::vector<SamplingParams> params_pool(const LogitFeatures& f) {
  const auto make = [](float t, std::int32_t k, float top_p, float min_p) {
    SamplingParams p;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
  };
  std::vector<SamplingParams> pool;
  if (f.top_p_alone) {
    // With top_k = 7 or 50 too: at V = 1 or 7 it keeps every token, so top_p acts alone there.
    pool = {make(1.0f, 0, 0.9f, 0.0f),  make(0.8f, 0, 0.5f, 0.0f), make(1.0f, 0, 0.9f, 0.1f),
            make(1e-3f, 0, 0.9f, 0.0f), make(0.0f, 0, 0.7f, 0.0f), make(1.0f, 0, 0.99f, 0.0f),
            make(1.0f, 50, 0.9f, 0.0f), make(0.8f, 7, 0.5f, 0.1f)};
    return pool;
  }
  pool = {make(1.0f, 0, 1.0f, 0.0f),   make(0.8f, 0, 1.0f, 0.0f),  make(0.0f, 0, 1.0f, 0.0f),
          make(1e-3f, 0, 1.0f, 0.0f),  make(1.0f, 0, 1.0f, 0.1f),  make(1.0f, 1, 1.0f, 0.0f),
          make(1.0f, 5, 1.0f, 0.0f),   make(0.8f, 50, 1.0f, 0.0f), make(1.0f, 5, 0.9f, 0.0f),
          make(1.0f, 50, 0.9f, 0.1f),  make(0.8f, 50, 1.0f, 0.1f), make(0.0f, 5, 1.0f, 0.0f),
          make(1e-3f, 50, 0.9f, 0.0f), make(1.0f, 5, 0.9f, 0.1f)};
  return pool;
}

/// A logits chain batch owned by the test, rows whole. `shape` holds B, V, K, the drafts, the
/// rules' per-draft inputs, positions and per-sequence seeds (its p and q stay empty), so the
/// sharded_chains.hpp helpers (capture, randomness, every_rule) take it.
struct LogitChains {
  Chains shape;
  LogitFeatures features;
  std::int32_t Vd = 0;  // the draft rows' length: V, or draft_vocab_size
  std::vector<float> target, draft,
      uncond;  // [target rows][V], [draft rows][Vd], [target rows + 1][V]
  std::vector<std::int64_t> first_u;
  std::vector<float> scales;
  std::vector<std::uint32_t> mask;  // [target rows][words()]
  std::vector<SamplingParams> tp, dp;
  PenaltyListArrays lists;
  std::vector<std::int32_t> d2t;

  std::int32_t V() const { return shape.V; }
  std::int32_t words() const { return (shape.V + 31) / 32; }
  bool reduced() const { return !d2t.empty(); }

  /// The unsharded batch over the whole rows.
  LogitsChainBatch<float> whole(bool one_hot) const {
    LogitsChainBatch<float> b;
    b.batch_size = shape.B;
    b.vocab_size = shape.V;
    b.draft_offsets = shape.offsets.data();
    b.draft_tokens = shape.tokens.data();
    b.target_logits = target.data();
    // Without any draft rows a batch that has them says so with a pointer all the same.
    b.draft_logits = one_hot ? nullptr : draft.empty() ? target.data() : draft.data();
    b.target_params = tp.data();
    b.draft_params = features.draft_params ? dp.data() : nullptr;
    if (reduced()) {
      b.draft_vocab_size = Vd;
      b.draft_to_target = d2t.data();
    }
    if (features.guidance) {
      b.unconditional_logits = uncond.data();
      b.unconditional_first_row = first_u.data();
      b.guidance_scale = scales.data();
    }
    if (features.mask) b.allowed_tokens = mask.data();
    if (features.penalties) lists.attach(b);
    return b;
  }

  bool allowed(std::int64_t row, std::int32_t v) const {
    return !features.mask ||
           (mask[std::size_t(row) * words() + std::size_t(v / 32)] >> (v % 32) & 1u) != 0;
  }
};

/// A batch of B sequences of up to K drafts over V tokens. `shape_seed` fixes the drafts' shape
/// (offsets, which sequences have guidance, the list lengths, the parameters); `data_seed` the
/// values and tokens.
inline LogitChains make_logit_chains(std::int32_t B, std::int32_t V, std::int32_t K,
                                     const LogitFeatures& f, std::uint64_t shape_seed,
                                     std::uint64_t data_seed) {
  std::mt19937_64 shape_rng(shape_seed), rng(data_seed);
  LogitChains c;
  c.features = f;
  Chains& s = c.shape;
  s.B = B;
  s.V = V;
  s.K = K;
  s.offsets.push_back(0);
  for (std::int32_t b = 0; b < B; ++b) {
    s.offsets.push_back(s.offsets.back() + static_cast<std::int32_t>(shape_rng() % (K + 1)));
  }
  const std::int64_t rows = s.target_rows(), drafts = s.offsets.back();

  // Parameters: the pool in turn from a random start; penalties on every other sequence.
  const auto pool = params_pool(f);
  const std::size_t first = shape_rng() % pool.size();
  for (std::int32_t b = 0; b < B; ++b) {
    SamplingParams t = pool[(first + std::size_t(b)) % pool.size()];
    SamplingParams d = f.draft_params ? pool[(first + 3 * std::size_t(b) + 1) % pool.size()] : t;
    if (f.draft_params) d.temperature = d.temperature == 0.0f ? 0.0f : d.temperature * 1.3f;
    if (f.penalties && b % 2 == 0) {
      t.repetition_penalty = 1.3f;
      t.presence_penalty = 0.5f;
      t.frequency_penalty = 0.2f;
      if (f.draft_params && b % 4 == 0) {
        d.repetition_penalty = 1.1f;
        d.presence_penalty = 0.3f;
        d.frequency_penalty = 0.1f;
      } else if (f.draft_params) {
        d.repetition_penalty = 1.0f;
        d.presence_penalty = 0.0f;
        d.frequency_penalty = 0.0f;
      } else {
        d = t;
      }
    }
    if (!f.top_p_alone) {
      // top_k >= V keeps every token: with top_p that is top_p alone, which top_p_alone tests.
      for (SamplingParams* p : {&t, &d}) {
        if (p->top_k >= V) p->top_p = 1.0f;
      }
    }
    c.tp.push_back(t);
    c.dp.push_back(d);
  }

  const float ninf = -std::numeric_limits<float>::infinity();
  const auto row = [&](float* out, std::int32_t n, bool may_mask) {
    const auto l = testing::random_logits(n, rng, 2.0);
    for (std::int32_t v = 0; v < n; ++v) {
      float x = static_cast<float>(std::clamp(l[std::size_t(v)], -80.0, 80.0));
      if (f.quantised) x = std::round(x * 2.0f) / 2.0f;
      if (may_mask && rng() % 13 == 0) x = ninf;
      out[v] = x;
    }
    if (f.sparse && n > 1) {
      // A handful of finite logits (1 to 4), the rest -inf.
      std::vector<char> keep(std::size_t(n), 0);
      const std::int32_t finite = 1 + static_cast<std::int32_t>(rng() % 4);
      for (std::int32_t i = 0; i < finite; ++i) keep[rng() % std::uint64_t(n)] = 1;
      for (std::int32_t v = 0; v < n; ++v) {
        if (!keep[std::size_t(v)]) out[v] = ninf;
      }
    }
    // At least one finite logit.
    if (std::none_of(out, out + n, [](float x) { return std::isfinite(x); })) {
      out[rng() % std::uint64_t(n)] = static_cast<float>(rng() % 7) - 3.0f;
    }
  };

  // The draft vocabulary.
  c.Vd = V;
  if (f.reduced_draft) {
    c.Vd = std::max<std::int32_t>(
        1, V / 2 + static_cast<std::int32_t>(shape_rng() % std::uint64_t(V / 4 + 1)));
    c.Vd = std::min(c.Vd, V);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(V));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    c.d2t.assign(ids.begin(), ids.begin() + c.Vd);
  }

  c.target.resize(std::size_t(rows) * V);
  c.draft.resize(std::size_t(drafts) * c.Vd);
  for (std::int64_t r = 0; r < rows; ++r) row(&c.target[std::size_t(r) * V], V, true);
  // Draft rows: mostly the target row at the draft's position (over the draft vocabulary) plus
  // noise, so that drafts are often accepted and the walk reaches the later rows; some
  // independent of it.
  std::normal_distribution<float> noise(0.0f, 0.7f);
  for (std::int32_t b = 0; b < B; ++b) {
    for (std::int32_t j = s.offsets[b]; j < s.offsets[b + 1]; ++j) {
      float* d = &c.draft[std::size_t(j) * c.Vd];
      row(d, c.Vd, true);
      if (rng() % 4 == 0) continue;
      const float* t = &c.target[std::size_t(j + b) * V];
      for (std::int32_t i = 0; i < c.Vd; ++i) {
        const float x = t[c.reduced() ? c.d2t[std::size_t(i)] : i];
        if (std::isfinite(x) && std::isfinite(d[i])) d[i] = f.quantised ? std::round(2.0f * (x + noise(rng))) / 2.0f : x + noise(rng);
      }
    }
  }

  if (f.guidance) {
    // Finite unconditional rows (u = -inf under a finite l would make guidance NaN), one spare row
    // first so that sequence b's rows start at offsets[b] + b + 1.
    c.uncond.resize(std::size_t(rows + 1) * V);
    for (std::int64_t r = 0; r <= rows; ++r) {
      const auto l = testing::random_logits(V, rng, 2.0);
      for (std::int32_t v = 0; v < V; ++v) {
        float x = static_cast<float>(std::clamp(l[std::size_t(v)], -20.0, 20.0));
        if (f.quantised) x = std::round(x * 2.0f) / 2.0f;
        c.uncond[std::size_t(r) * V + std::size_t(v)] = x;
      }
    }
    const float scale_pool[] = {1.5f, 0.5f, 3.0f, 1.0f};
    for (std::int32_t b = 0; b < B; ++b) {
      const bool guided = shape_rng() % 3 != 0;
      c.first_u.push_back(guided ? std::int64_t(s.offsets[b]) + b + 1 : -1);
      c.scales.push_back(scale_pool[shape_rng() % 4]);
    }
  }

  if (f.mask) {
    c.mask.resize(std::size_t(rows) * c.words());
    for (auto& w : c.mask)
      w = static_cast<std::uint32_t>(rng()) | static_cast<std::uint32_t>(rng());  // ~3/4 allowed
    for (std::int64_t r = 0; r < rows; ++r) {
      // Keep one finite token of the row allowed.
      const float* l = &c.target[std::size_t(r) * V];
      std::int32_t t = static_cast<std::int32_t>(rng() % std::uint64_t(V));
      while (!std::isfinite(l[t])) t = (t + 1) % V;
      c.mask[std::size_t(r) * c.words() + std::size_t(t / 32)] |= 1u << (t % 32);
    }
  }

  if (f.penalties) {
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int32_t h = std::min<std::int32_t>(V, static_cast<std::int32_t>(shape_rng() % 7));
      const std::int32_t n_bias =
          std::min<std::int32_t>(V, static_cast<std::int32_t>(shape_rng() % 5));
      std::vector<std::int32_t> ids(static_cast<std::size_t>(V));
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      std::vector<std::int32_t> history(ids.begin(), ids.begin() + h);
      std::sort(history.begin(), history.end());
      for (const std::int32_t t : history) {
        c.lists.h_tokens.push_back(t);
        c.lists.h_counts.push_back(static_cast<std::int32_t>(rng() % 4));
      }
      std::shuffle(ids.begin(), ids.end(), rng);
      for (std::int32_t i = 0; i < n_bias; ++i) {
        c.lists.b_tokens.push_back(ids[std::size_t(i)]);
        c.lists.b_values.push_back(static_cast<float>(static_cast<std::int32_t>(rng() % 41) - 20) /
                                   10.0f);
      }
      c.lists.end_sequence();
    }
  }

  // Drafts: mostly the target row's argmax (among the tokens the bitmask allows), else the draft
  // row's or any token (for a reduced draft vocabulary mostly one of the map's).
  for (std::int32_t b = 0; b < B; ++b) {
    for (std::int32_t j = s.offsets[b]; j < s.offsets[b + 1]; ++j) {
      const float* d = &c.draft[std::size_t(j) * c.Vd];
      const std::int64_t target_row = j + b;
      const float* t = &c.target[std::size_t(target_row) * V];
      std::int32_t token = static_cast<std::int32_t>(rng() % std::uint64_t(V));
      const std::uint64_t pick = rng() % 10;
      if (pick < 6) {
        token = -1;
        for (std::int32_t v = 0; v < V; ++v) {
          if (c.allowed(target_row, v) && (token < 0 || t[v] > t[token])) token = v;
        }
      } else if (pick < 8) {
        const std::int32_t a = static_cast<std::int32_t>(std::max_element(d, d + c.Vd) - d);
        token = c.reduced() ? c.d2t[std::size_t(a)] : a;
      } else if (c.reduced() && rng() % 5 != 0) {
        token = c.d2t[rng() % c.d2t.size()];
      }
      s.tokens.push_back(token);
      s.scores.push_back(static_cast<float>(rng() % 101) / 100.0f);
      s.accept_probs.push_back(0.5f + static_cast<float>(rng() % 50) / 100.0f);
    }
  }
  for (std::int32_t b = 0; b < B; ++b) {
    s.positions.push_back(100 + 13 * b);
    s.seeds.push_back(rng());
  }
  return c;
}

/// How a rank holds its slices.
enum class Layout {
  views,   // pointers into the whole rows, stride V
  copies,  // a compact copy of the slice, stride 0
  padded,  // a copy of the slice with NaN padding after each row, stride = slice + 3
};

inline const char* name(Layout l) {
  switch (l) {
    case Layout::views:
      return "views";
    case Layout::copies:
      return "copies";
    default:
      return "padded copies";
  }
}

/// Columns [start, start + size) of every row of V, each followed by `pad` NaNs.
inline std::vector<float> slice_padded(const std::vector<float>& rows, std::int32_t V,
                                       std::int32_t start, std::int32_t size, std::int32_t pad) {
  std::vector<float> out;
  for (std::size_t row = 0; size > 0 && row * std::size_t(V) < rows.size(); ++row) {
    out.insert(out.end(), rows.begin() + std::int64_t(row) * V + start,
               rows.begin() + std::int64_t(row) * V + start + size);
    out.insert(out.end(), std::size_t(pad), std::numeric_limits<float>::quiet_NaN());
  }
  return out;
}

/// The rows one rank holds (copies own them) and its batch.
struct RankRows {
  std::vector<float> target, draft, uncond;
  LogitsChainBatch<float> batch;
};

/// Rank k's batch of `bounds` (k's slice [bounds[k], bounds[k + 1])), every other field as the
/// whole batch's.
inline void rank_batch(const LogitChains& c, bool one_hot, const std::vector<std::int32_t>& bounds,
                       std::int32_t k, Layout layout, RankRows& rows) {
  const std::int32_t ranks = static_cast<std::int32_t>(bounds.size()) - 1;
  const std::int32_t start = bounds[std::size_t(k)], size = bounds[std::size_t(k) + 1] - start,
                     V = c.V();
  LogitsChainBatch<float> b = c.whole(one_hot);
  b.shard = {k, ranks, start, size};
  const bool sliced_draft = !one_hot && !c.reduced();  // whole draft rows over a reduced vocabulary
  if (layout == Layout::views) {
    b.target_logits = c.target.data() + start;
    b.target_stride = V;
    if (sliced_draft) {
      b.draft_logits = c.draft.empty() ? b.target_logits : c.draft.data() + start;
      b.draft_stride = V;
    }
    if (c.features.guidance) {
      b.unconditional_logits = c.uncond.data() + start;
      b.unconditional_stride = V;
    }
  } else if (size == 0) {  // an empty slice passes null rows (whole draft rows too: it reads none)
    b.target_logits = nullptr;
    if (!one_hot) b.draft_logits = nullptr;
    b.unconditional_logits = nullptr;
  } else {
    const std::int32_t pad = layout == Layout::padded ? 3 : 0;
    const std::int64_t stride = layout == Layout::padded ? size + pad : 0;
    rows.target = slice_padded(c.target, V, start, size, pad);
    b.target_logits = rows.target.data();
    b.target_stride = stride;
    if (sliced_draft) {
      rows.draft = slice_padded(c.draft, V, start, size, pad);
      b.draft_logits = rows.draft.empty() ? rows.target.data() : rows.draft.data();
      b.draft_stride = stride;
    }
    if (c.features.guidance) {
      rows.uncond = slice_padded(c.uncond, V, start, size, pad);
      b.unconditional_logits = rows.uncond.data();
      b.unconditional_stride = stride;
    }
  }
  rows.batch = b;
}

/// What an outcome says, for failure messages.
inline std::string describe(const Outcome& o) {
  std::string s;
  if (!o.error.empty()) return "error \"" + o.error + "\"";
  s += "accepted [";
  for (const auto a : o.accepted) s += std::to_string(a) + " ";
  s += "] tokens [";
  for (const auto t : o.tokens) s += std::to_string(t) + " ";
  s += "] logprobs [";
  for (const auto l : o.logprobs) s += std::to_string(l) + " ";
  s += "] stats {" + std::to_string(o.stats.drafted) + ", " + std::to_string(o.stats.accepted) +
       ", " + std::to_string(o.stats.relaxed) + ", " + std::to_string(o.stats.target_checked) + "}";
  return s;
}

}  // namespace specverify::testing::sharded
