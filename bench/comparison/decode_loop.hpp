// One speculative-decoding loop for every rule: draft a chain from q, compute p for every
// position, verify with specverify::verify, append the accepted drafts and the extra token.
// Draft length comes from a policy (fixed K, SPRINTER's gate, SpecDec++'s stop); the rule is
// built per step from the per-draft head outputs by a callable, so the loop is written once.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "specverify/heads/eigen.hpp"

#include "comparison/models.hpp"
#include "specverify/heads.hpp"
#include "specverify/specverify.hpp"

namespace specverify::comparison {

/// Draft-side features of a drafted token, standing in for the draft model's hidden state (an
/// n-gram has none): what the draft knows of its own confidence, without the target.
struct DraftFeatures {
  static constexpr std::int32_t kDim = 7;
  float max_q = 0, collision = 0;  // max_v q(v), sum_v q(v)^2 (Renyi-2 entropy = -log of it)

  DraftFeatures(const float* q, std::int32_t V) {
    double sq = 0;
    for (std::int32_t v = 0; v < V; ++v) {
      max_q = std::max(max_q, q[v]);
      sq += double(q[v]) * q[v];
    }
    collision = static_cast<float>(sq);
  }
  void write(const float* q, std::int32_t x, std::int32_t position, float* f) const {
    const float qx = q[x];
    f[0] = qx;
    f[1] = std::log(std::max(qx, 1e-30f)) / 10.0f;
    f[2] = max_q;
    f[3] = max_q > 0 ? qx / max_q : 0.0f;
    f[4] = -std::log(std::max(collision, 1e-30f)) / 10.0f;
    f[5] = static_cast<float>(position) / 8.0f;
    f[6] = qx == max_q ? 1.0f : 0.0f;
  }
};

/// Training data for the heads: features of each drafted token, label min(1, p(x)/q(x)).
struct TrainingData {
  std::vector<float> features;  // [n][kDim]
  std::vector<float> labels;
};

struct Heads {
  LinearVerifier verifier{DraftFeatures::kDim};
  AcceptanceHead head{DraftFeatures::kDim, 2, true};
};

enum class Drafting { fixed, sprinter, specdecpp };

struct DraftPolicy {
  Drafting kind = Drafting::fixed;
  std::int32_t k = 4;        // fixed: the chain length; otherwise the longest chain
  float parameter = 0.5f;    // SPRINTER's eta, SpecDec++'s threshold
};

/// The per-draft input a policy gives its rule: the verifier score (SPRINTER) or the head's
/// acceptance probability (SpecDec++); 1 for fixed chains, which read none.
inline float draft_score(const DraftPolicy& policy, Heads* heads, const float* f) {
  if (policy.kind == Drafting::fixed || !heads) return 1.0f;
  const Eigen::Map<const Eigen::Matrix<float, 1, DraftFeatures::kDim>> h(f);
  return policy.kind == Drafting::sprinter ? heads->verifier.scores(h)(0) : heads->head.accept_probs(h)(0);
}

struct DecodeSettings {
  std::int32_t tokens = 32;  // per prompt
  float temperature = 1.0f;
  std::uint64_t seed = 1;
};

/// One prompt's share of a run: the unit the confidence intervals resample.
struct PromptCounts {
  std::int64_t target_calls = 0, drafted = 0, accepted = 0, generated = 0;
};

struct RunStats {
  std::int64_t target_calls = 0, drafted = 0, accepted = 0, generated = 0, relaxed = 0, checked = 0;
  double verify_seconds = 0, logprob = 0;  // logprob: sum of untempered log p over generated tokens
  std::int64_t steps = 0;
  std::vector<PromptCounts> per_prompt;  // [prompts]
};

/// Index of the smallest i with q_0 + ... + q_i > u * sum(q). The sum runs in 16 float lanes
/// (vectorised), the scan stops at the token.
inline std::int32_t sample_row(const float* q, std::int32_t V, double u) {
  float lanes[16] = {};
  std::int32_t v = 0;
  for (; v + 16 <= V; v += 16)
    for (std::int32_t i = 0; i < 16; ++i) lanes[i] += q[v + i];
  double total = 0;
  for (; v < V; ++v) total += q[v];
  for (const float l : lanes) total += l;
  const double target = u * total;
  double run = 0;
  for (v = 0; v < V; ++v) {
    run += q[v];
    if (run > target) return v;
  }
  std::int32_t last = V - 1;
  while (last > 0 && q[last] == 0.0f) --last;
  return last;
}

/// Prompts decoded together: one verify call per step of a batch of up to 8 chains.
constexpr std::size_t kBatch = 8;

/// Decodes `settings.tokens` tokens after each prompt, a batch of prompts at a time (buffers are
/// reused from batch to batch).
template <class MakeRule>
RunStats decode(ModelPair& model, const std::vector<std::vector<std::int32_t>>& prompts,
                const DecodeSettings& settings, const DraftPolicy& policy, Heads* heads,
                MakeRule make_rule, TrainingData* collect = nullptr) {
  const std::int32_t V = model.vocab();
  std::vector<std::vector<std::int32_t>> text = prompts;
  std::vector<std::int32_t> produced(prompts.size(), 0), active, offsets, drafts, out_tokens, accepted;
  std::vector<float> p, q, scores, f(DraftFeatures::kDim);
  std::mt19937_64 rng(settings.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  RunStats stats;
  stats.per_prompt.resize(prompts.size());
  std::size_t group = 0;  // first prompt of the current batch
  for (std::uint64_t step = 0;; ++step) {
    active.clear();
    for (; group < text.size(); group += kBatch) {
      for (std::size_t b = group; b < std::min(text.size(), group + kBatch); ++b)
        if (produced[b] < settings.tokens) active.push_back(static_cast<std::int32_t>(b));
      if (!active.empty()) break;
    }
    if (active.empty()) break;
    offsets.assign(1, 0);
    drafts.clear();
    scores.clear();
    q.clear();
    for (const std::int32_t b : active) {
      std::vector<std::int32_t>& t = text[static_cast<std::size_t>(b)];
      const std::size_t base = t.size();
      SpecDecPPStop stop(policy.kind == Drafting::specdecpp ? policy.parameter : 1.0f, 1, policy.k);
      for (std::int32_t j = 0; j < policy.k; ++j) {
        q.resize(q.size() + std::size_t(V));
        float* row = q.data() + q.size() - std::size_t(V);
        model.draft_row(t.data(), static_cast<std::int32_t>(t.size()), settings.temperature, row);
        const std::int32_t x = sample_row(row, V, uniform(rng));
        const bool featured = collect || policy.kind != Drafting::fixed;  // a pass over q: only when read
        if (featured) DraftFeatures(row, V).write(row, x, j, f.data());
        const float score = featured ? draft_score(policy, heads, f.data()) : 1.0f;
        if (collect) collect->features.insert(collect->features.end(), f.begin(), f.end());
        drafts.push_back(x);
        scores.push_back(score);
        t.push_back(x);
        if (policy.kind == Drafting::sprinter && SprinterGate(policy.parameter).must_check(score)) break;
        if (policy.kind == Drafting::specdecpp && stop.feed(score)) break;
      }
      offsets.push_back(static_cast<std::int32_t>(drafts.size()));
      t.resize(base);
    }
    // p at every position of every chain, the bonus row last.
    p.resize((drafts.size() + active.size()) * std::size_t(V));
    for (std::size_t i = 0; i < active.size(); ++i) {
      std::vector<std::int32_t>& t = text[static_cast<std::size_t>(active[i])];
      const std::size_t base = t.size();
      for (std::int32_t j = offsets[i]; j <= offsets[i + 1]; ++j) {
        float* row = p.data() + (std::size_t(j) + i) * std::size_t(V);
        model.target_row(t.data(), static_cast<std::int32_t>(t.size()), settings.temperature, row);
        if (j == offsets[i + 1]) break;
        if (collect) {
          const float px = row[drafts[std::size_t(j)]], qx = q[std::size_t(j) * V + std::size_t(drafts[std::size_t(j)])];
          collect->labels.push_back(qx > 0 ? std::min(1.0f, px / qx) : 1.0f);
        }
        t.push_back(drafts[std::size_t(j)]);
      }
      t.resize(base);
    }
    const std::int32_t B = static_cast<std::int32_t>(active.size()), width = policy.k + 1;
    out_tokens.assign(std::size_t(B) * std::size_t(width), kNoToken);
    accepted.assign(std::size_t(B), 0);
    const ChainBatch<float> batch{B, V, offsets.data(), drafts.data(), p.data(), q.data()};
    const auto rule = make_rule(scores.data());
    const auto start = std::chrono::steady_clock::now();
    const VerifyStats v = verify(rule, batch, Randomness{settings.seed, step},
                                 ChainOutput{out_tokens.data(), width, accepted.data()}, CpuOptions{1});
    stats.verify_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++stats.steps;
    stats.target_calls += B;
    stats.drafted += v.drafted;
    stats.accepted += v.accepted;
    stats.relaxed += v.relaxed;
    stats.checked += v.target_checked;
    for (std::int32_t i = 0; i < B; ++i) {
      std::vector<std::int32_t>& t = text[static_cast<std::size_t>(active[std::size_t(i)])];
      for (std::int32_t j = 0; j <= accepted[std::size_t(i)]; ++j) {
        const std::int32_t w = out_tokens[std::size_t(i) * std::size_t(width) + std::size_t(j)];
        stats.logprob += model.target_logprob(t.data(), static_cast<std::int32_t>(t.size()), w);
        t.push_back(w);
      }
      produced[std::size_t(active[std::size_t(i)])] += accepted[std::size_t(i)] + 1;
      stats.generated += accepted[std::size_t(i)] + 1;
      PromptCounts& c = stats.per_prompt[std::size_t(active[std::size_t(i)])];
      ++c.target_calls;
      c.drafted += offsets[std::size_t(i) + 1] - offsets[std::size_t(i)];
      c.accepted += accepted[std::size_t(i)];
      c.generated += accepted[std::size_t(i)] + 1;
    }
  }
  return stats;
}

/// Plain target sampling (no drafts): the perplexity baseline. Returns the summed untempered log p.
inline RunStats sample_target(ModelPair& model, const std::vector<std::vector<std::int32_t>>& prompts,
                              const DecodeSettings& settings) {
  const std::int32_t V = model.vocab();
  std::vector<float> row(static_cast<std::size_t>(V));
  std::mt19937_64 rng(settings.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  RunStats stats;
  for (std::vector<std::int32_t> t : prompts) {
    for (std::int32_t i = 0; i < settings.tokens; ++i) {
      model.target_row(t.data(), static_cast<std::int32_t>(t.size()), settings.temperature, row.data());
      const std::int32_t w = sample_row(row.data(), V, uniform(rng));
      stats.logprob += model.target_logprob(t.data(), static_cast<std::int32_t>(t.size()), w);
      t.push_back(w);
      ++stats.generated;
      ++stats.target_calls;
    }
  }
  return stats;
}

}  // namespace specverify::comparison
