// Test support for the sharded verify: chain batches owned by the test (rows whole), their
// outcome under the unsharded verify, uneven splits of the vocabulary, and every rule. Shared by
// the in-process test and the MPI test.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "specverify/specverify.hpp"
#include "support.hpp"

namespace specverify::testing::sharded {

namespace sv = specverify;

/// A chain batch owned by the test, rows whole.
struct Chains {
  std::int32_t B = 0, V = 0, K = 0;
  std::vector<std::int32_t> offsets, tokens;
  std::vector<float> p, q, scores, accept_probs;
  std::vector<std::int64_t> positions;
  std::vector<std::uint64_t> seeds;

  std::int32_t width() const { return K + 1; }
  std::int64_t target_rows() const { return offsets.back() + B; }
};

enum class Rows { normalised, unnormalised_large, tiny, peaked, close };

/// Rows that exercise every path: LLM-like, far from normalised (FixedSum's rescaling), tiny
/// masses (scaled up), one token holding nearly all (residuals of p close to q), each q within
/// 50% of the p it drafts for (Block's p_i near 1, so its tests read the masses Z_i).
inline Chains make_chains(std::int32_t B, std::int32_t V, std::int32_t K, Rows kind, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Chains c;
  c.B = B;
  c.V = V;
  c.K = K;
  c.offsets.push_back(0);
  for (std::int32_t b = 0; b < B; ++b) c.offsets.push_back(c.offsets.back() + static_cast<std::int32_t>(rng() % (K + 1)));
  const auto row = [&](float* out) {
    std::vector<float> d = sv::testing::random_distribution(V, rng, kind == Rows::peaked ? 6.0 : 2.0);
    for (std::int32_t v = 0; v < V; ++v) {
      float x = d[static_cast<std::size_t>(v)];
      if (kind == Rows::unnormalised_large) x *= 3000.0f;
      if (kind == Rows::tiny) x *= 1e-12f;
      if (rng() % 11 == 0) x = 0.0f;
      out[v] = x;
    }
  };
  c.p.resize(static_cast<std::size_t>(c.target_rows()) * V);
  c.q.resize(static_cast<std::size_t>(c.offsets.back()) * V);
  for (std::int64_t r = 0; r < c.target_rows(); ++r) row(&c.p[static_cast<std::size_t>(r) * V]);
  for (std::int64_t r = 0; r < c.offsets.back(); ++r) row(&c.q[static_cast<std::size_t>(r) * V]);
  if (kind == Rows::close) {
    std::uniform_real_distribution<float> factor(0.5f, 1.5f);
    for (std::int32_t b = 0; b < B; ++b) {
      for (std::int32_t j = c.offsets[b]; j < c.offsets[b + 1]; ++j) {
        const float* p = &c.p[static_cast<std::size_t>(j + b) * V];  // the target row draft j is tested on
        float* q = &c.q[static_cast<std::size_t>(j) * V];
        for (std::int32_t v = 0; v < V; ++v) q[v] = p[v] * factor(rng);
      }
    }
  }
  for (std::int32_t j = 0; j < c.offsets.back(); ++j) {
    // Mostly where q is large (accepted often), some anywhere.
    const float* qr = &c.q[static_cast<std::size_t>(j) * V];
    std::int32_t t = static_cast<std::int32_t>(rng() % V);
    if (rng() % 3 != 0) t = static_cast<std::int32_t>(std::max_element(qr, qr + V) - qr);
    c.tokens.push_back(t);
    c.scores.push_back(static_cast<float>(rng() % 101) / 100.0f);
    c.accept_probs.push_back(0.5f + static_cast<float>(rng() % 50) / 100.0f);
  }
  for (std::int32_t b = 0; b < B; ++b) {
    c.positions.push_back(100 + 13 * b);
    c.seeds.push_back(rng());
  }
  return c;
}

/// Everything verify() returns or writes.
struct Outcome {
  std::vector<std::int32_t> tokens, accepted;
  std::vector<float> logprobs;
  sv::VerifyStats stats{};
  std::string error;

  bool operator==(const Outcome& o) const {
    return tokens == o.tokens && accepted == o.accepted &&
           std::memcmp(logprobs.data(), o.logprobs.data(), logprobs.size() * sizeof(float)) == 0 &&
           std::memcmp(&stats, &o.stats, sizeof stats) == 0 && error == o.error;
  }
};

inline sv::Randomness randomness(const Chains& c, bool per_sequence) {
  sv::Randomness r{12345u, 6u};
  r.positions = c.positions.data();
  if (per_sequence) r.sequence_seeds = c.seeds.data();
  return r;
}

template <class Run>
Outcome capture(const Chains& c, Run run) {
  Outcome o;
  o.tokens.assign(static_cast<std::size_t>(c.B * c.width()), -7);
  o.accepted.assign(static_cast<std::size_t>(c.B), -7);
  o.logprobs.assign(o.tokens.size(), 0.5f);
  sv::ChainOutput out{o.tokens.data(), c.width(), o.accepted.data(), o.logprobs.data()};
  try {
    o.stats = run(out);
  } catch (const sv::invalid_input& e) {
    o.error = e.what();
  }
  return o;
}

template <class Rule>
Outcome unsharded(const Rule& rule, const Chains& c, const sv::Randomness& r, bool one_hot) {
  sv::ChainBatch<float> batch{c.B, c.V, c.offsets.data(), c.tokens.data(), c.p.data(), one_hot ? nullptr : c.q.data()};
  return capture(c, [&](const sv::ChainOutput& out) { return sv::verify(rule, batch, r, out); });
}

/// Uneven slices of [0, V) for `ranks` ranks, some empty.
inline std::vector<std::int32_t> random_bounds(std::int32_t V, std::int32_t ranks, std::mt19937_64& rng) {
  std::vector<std::int32_t> cuts{0, V};
  for (std::int32_t k = 1; k < ranks; ++k) cuts.push_back(static_cast<std::int32_t>(rng() % (V + 1)));
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

/// Whether `rule` takes one-hot drafts: Traversal needs draft rows (without them, invalid_input).
template <class Rule>
constexpr bool takes_one_hot(const Rule&) {
  return sv::rule_traits<Rule>::joint != sv::Joint::traversal;
}

/// Every rule that decides draft by draft and has a tree form (all but SpecDecPP, which cuts
/// chains, and the joint Block and Traversal); `scores`: SPRINTER's, per draft.
template <class Fn>
void every_tree_rule(const float* scores, Fn check) {
  check("standard", sv::Standard{});
  check("greedy", sv::Greedy{});
  check("ears", sv::Ears{0.3f});
  const char* names[] = {"kl_pq", "kl_qp", "js", "js_fsd", "tv"};
  int i = 0;
  for (const sv::Divergence d : {sv::Divergence::kl_target_draft, sv::Divergence::kl_draft_target,
                                 sv::Divergence::js, sv::Divergence::js_fsd, sv::Divergence::tv}) {
    check(std::string("fsd ") + names[i], sv::Fsd{d, 0.4f});
    check(std::string("rfsd ") + names[i++], sv::ReducibleFsd{d, 0.4f});
  }
  check("sprinter", sv::Sprinter{0.5f, scores});
  check("coupled", sv::Coupled{});
}

template <class Fn>
void every_rule(const Chains& c, Fn check) {
  every_tree_rule(c.scores.data(), check);
  check("specdecpp", sv::SpecDecPP<sv::Standard>{0.7f, c.accept_probs.data(), {}});
  check("block", sv::Block{});
  check("traversal", sv::Traversal{});  // draft rows: one-hot drafts are invalid_input for it
}

/// Columns [start, start + size) of every row of V, copied (stride 0); empty for an empty slice.
inline std::vector<float> slice_rows(const std::vector<float>& rows, std::int32_t V, std::int32_t start, std::int32_t size) {
  std::vector<float> out;
  for (std::size_t row = 0; size > 0 && row * V < rows.size(); ++row) {
    out.insert(out.end(), rows.begin() + std::int64_t(row) * V + start, rows.begin() + std::int64_t(row) * V + start + size);
  }
  return out;
}

}  // namespace specverify::testing::sharded
