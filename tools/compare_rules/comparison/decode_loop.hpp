// One speculative-decoding loop for every rule: draft a chain (or a tree) from q, compute p for
// every position (node), verify with specverify::verify, append the accepted drafts and the extra
// token. What is drafted comes from a policy (fixed K, SPRINTER's gate, SpecDec++'s stop, a tree
// of a given shape); the rule is built per step from the per-draft head outputs by a callable, so
// the loop is written once.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "specverify/heads/eigen.hpp"

#include "comparison/models.hpp"
#include "comparison/tree_drafting.hpp"
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

enum class Drafting { fixed, sprinter, specdecpp, tree };

struct DraftPolicy {
  Drafting kind = Drafting::fixed;
  std::int32_t k = 4;        // fixed: the chain length; tree: its node count; otherwise the longest chain
  float parameter = 0.5f;    // SPRINTER's eta, SpecDec++'s threshold
  TreeShape tree{};          // tree: the shape
  Drafted drafted = Drafted::sampled;  // tree: how the children are drafted, and declared to verify
};

/// The rules the comparison verifies trees with (any tree rule would do; these are the ones drafted).
template <class Rule>
inline constexpr bool kTreeRule =
    std::is_same_v<Rule, Standard> || std::is_same_v<Rule, Greedy> || std::is_same_v<Rule, Traversal>;

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
  std::vector<std::vector<std::int32_t>> texts;  // [prompts]: the prompt and what was generated
};

/// Prompts decoded together: one verify call per step of a batch of up to 8 chains (trees).
constexpr std::size_t kBatch = 8;

/// One step's buffers, reused from step to step. Rows only grow (no zeroing per step); a tree's
/// leaves have q rows in the layout that are never read.
struct StepBuffers {
  std::vector<std::int32_t> offsets, parents, drafts, out_tokens, accepted, children, frontier, next, path;
  std::vector<float> p, q, scores, features = std::vector<float>(DraftFeatures::kDim);

  static float* row(std::vector<float>& rows, std::size_t i, std::int32_t V) {
    const std::size_t need = (i + 1) * std::size_t(V);
    if (rows.size() < need) rows.resize(need);
    return rows.data() + i * std::size_t(V);
  }
};

/// Drafts a chain per active sequence (its length by the policy), computes p at every position
/// and the bonus row, and verifies; fills b.offsets, b.drafts, b.out_tokens, b.accepted.
template <class MakeRule>
VerifyStats chain_step(ModelPair& model, std::vector<std::vector<std::int32_t>>& text,
                       const std::vector<std::int32_t>& active, const DecodeSettings& settings,
                       const DraftPolicy& policy, Heads* heads, MakeRule& make_rule, TrainingData* collect,
                       std::uint64_t step, std::mt19937_64& rng, StepBuffers& b, double& verify_seconds) {
  const std::int32_t V = model.vocab();
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  b.offsets.assign(1, 0);
  b.drafts.clear();
  b.scores.clear();
  for (const std::int32_t s : active) {
    std::vector<std::int32_t>& t = text[static_cast<std::size_t>(s)];
    const std::size_t base = t.size();
    SpecDecPPStop stop(policy.kind == Drafting::specdecpp ? policy.parameter : 1.0f, 1, policy.k);
    for (std::int32_t j = 0; j < policy.k; ++j) {
      float* row = StepBuffers::row(b.q, b.drafts.size(), V);
      model.draft_row(t.data(), static_cast<std::int32_t>(t.size()), settings.temperature, row);
      const std::int32_t x = sample_row(row, V, uniform(rng));
      const bool featured = collect || policy.kind != Drafting::fixed;  // a pass over q: only when read
      if (featured) DraftFeatures(row, V).write(row, x, j, b.features.data());
      const float score = featured ? draft_score(policy, heads, b.features.data()) : 1.0f;
      if (collect) collect->features.insert(collect->features.end(), b.features.begin(), b.features.end());
      b.drafts.push_back(x);
      b.scores.push_back(score);
      t.push_back(x);
      if (policy.kind == Drafting::sprinter && SprinterGate(policy.parameter).must_check(score)) break;
      if (policy.kind == Drafting::specdecpp && stop.feed(score)) break;
    }
    b.offsets.push_back(static_cast<std::int32_t>(b.drafts.size()));
    t.resize(base);
  }
  // p at every position of every chain, the bonus row last.
  for (std::size_t i = 0; i < active.size(); ++i) {
    std::vector<std::int32_t>& t = text[static_cast<std::size_t>(active[i])];
    const std::size_t base = t.size();
    for (std::int32_t j = b.offsets[i]; j <= b.offsets[i + 1]; ++j) {
      float* row = StepBuffers::row(b.p, std::size_t(j) + i, V);
      model.target_row(t.data(), static_cast<std::int32_t>(t.size()), settings.temperature, row);
      if (j == b.offsets[i + 1]) break;
      if (collect) {
        const std::int32_t x = b.drafts[std::size_t(j)];
        const float px = row[x], qx = b.q[std::size_t(j) * V + std::size_t(x)];
        collect->labels.push_back(qx > 0 ? std::min(1.0f, px / qx) : 1.0f);
      }
      t.push_back(b.drafts[std::size_t(j)]);
    }
    t.resize(base);
  }
  const std::int32_t B = static_cast<std::int32_t>(active.size()), width = policy.k + 1;
  b.out_tokens.assign(std::size_t(B) * std::size_t(width), kNoToken);
  b.accepted.assign(std::size_t(B), 0);
  const ChainBatch<float> batch{B, V, b.offsets.data(), b.drafts.data(), b.p.data(), b.q.data()};
  const auto rule = make_rule(b.scores.data());
  const auto start = std::chrono::steady_clock::now();
  const VerifyStats v = verify(rule, batch, Randomness{settings.seed, step},
                               ChainOutput{b.out_tokens.data(), width, b.accepted.data()}, CpuOptions{1});
  verify_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return v;
}

/// Replaces what follows `base` in t by the path from the root to `node` (sequence-local; -1 is
/// the root) of the tree whose node 0 is b.drafts[first].
inline void extend_to(std::vector<std::int32_t>& t, std::size_t base, std::int32_t node, std::size_t first,
                      StepBuffers& b) {
  t.resize(base);
  b.path.clear();
  for (std::int32_t i = node; i >= 0; i = b.parents[first + std::size_t(i)]) b.path.push_back(b.drafts[first + std::size_t(i)]);
  t.insert(t.end(), b.path.rbegin(), b.path.rend());
}

/// Drafts a tree per active sequence, level by level (each node's children from q after the
/// node's path, as policy.drafted declares), computes p at the root and after every node, and
/// verifies; fills b.offsets (node offsets), b.drafts, b.out_tokens, b.accepted.
template <class Rule>
VerifyStats tree_step(ModelPair& model, std::vector<std::vector<std::int32_t>>& text,
                      const std::vector<std::int32_t>& active, const DecodeSettings& settings,
                      const DraftPolicy& policy, const Rule& rule, std::uint64_t step, std::mt19937_64& rng,
                      StepBuffers& b, double& verify_seconds) {
  const std::int32_t V = model.vocab();
  const bool ranked = policy.drafted == Drafted::deterministic;
  // Top-k children rank q. At T = 0 the tempered draft row is one-hot and ranks nothing past its
  // argmax, so the untempered row is ranked (as engines rank the draft's logits); verify reads no q.
  const float draft_t = ranked && settings.temperature == 0.0f ? 1.0f : settings.temperature;
  b.offsets.assign(1, 0);
  b.parents.clear();
  b.drafts.clear();
  std::size_t row_base = 0;  // the current sequence's row 0 (its root) in p and q
  for (const std::int32_t s : active) {
    std::vector<std::int32_t>& t = text[static_cast<std::size_t>(s)];
    const std::size_t base = t.size(), first = b.drafts.size();
    b.frontier.assign(1, -1);
    for (const std::int32_t width : policy.tree.branching) {
      b.next.clear();
      for (const std::int32_t node : b.frontier) {
        extend_to(t, base, node, first, b);
        float* row = StepBuffers::row(b.q, row_base + std::size_t(node + 1), V);
        model.draft_row(t.data(), static_cast<std::int32_t>(t.size()), draft_t, row);
        draft_children(row, V, width, policy.drafted, rng, b.children);
        for (const std::int32_t x : b.children) {
          b.next.push_back(std::int32_t(b.drafts.size() - first));
          b.parents.push_back(node);
          b.drafts.push_back(x);
        }
      }
      b.frontier.swap(b.next);
    }
    const std::int32_t n = std::int32_t(b.drafts.size() - first);
    for (std::int32_t node = -1; node < n; ++node) {
      extend_to(t, base, node, first, b);
      model.target_row(t.data(), static_cast<std::int32_t>(t.size()), settings.temperature,
                       StepBuffers::row(b.p, row_base + std::size_t(node + 1), V));
    }
    t.resize(base);
    StepBuffers::row(b.q, row_base + std::size_t(n), V);  // q laid out like p (leaf rows unread)
    row_base += std::size_t(n) + 1;
    b.offsets.push_back(std::int32_t(b.drafts.size()));
  }
  const std::int32_t B = static_cast<std::int32_t>(active.size()), width = policy.tree.depth() + 1;
  b.out_tokens.assign(std::size_t(B) * std::size_t(width), kNoToken);
  b.accepted.assign(std::size_t(B), 0);
  TreeBatch<float> batch;
  batch.batch_size = B;
  batch.vocab_size = V;
  batch.node_offsets = b.offsets.data();
  batch.parents = b.parents.data();
  batch.draft_tokens = b.drafts.data();
  batch.target_probs = b.p.data();
  batch.draft_probs = ranked ? nullptr : b.q.data();  // top-k children: verify must not need q
  batch.drafted = policy.drafted;
  const auto start = std::chrono::steady_clock::now();
  const VerifyStats v = verify(rule, batch, Randomness{settings.seed, step},
                               TreeOutput{b.out_tokens.data(), width, b.accepted.data()}, CpuOptions{1});
  verify_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return v;
}

/// Decodes `settings.tokens` tokens after each prompt, a batch of prompts at a time (buffers are
/// reused from batch to batch).
template <class MakeRule>
RunStats decode(ModelPair& model, const std::vector<std::vector<std::int32_t>>& prompts,
                const DecodeSettings& settings, const DraftPolicy& policy, Heads* heads,
                MakeRule make_rule, TrainingData* collect = nullptr) {
  using Rule = decltype(make_rule(static_cast<const float*>(nullptr)));
  std::vector<std::vector<std::int32_t>> text = prompts;
  std::vector<std::int32_t> produced(prompts.size(), 0), active;
  // Reused from run to run: rows of a 128k vocabulary take tens of MB, which malloc maps afresh
  // for every run and the kernel then faults in page by page.
  thread_local StepBuffers b;
  std::mt19937_64 rng(settings.seed);
  RunStats stats;
  stats.per_prompt.resize(prompts.size());
  std::size_t group = 0;  // first prompt of the current batch
  for (std::uint64_t step = 0;; ++step) {
    active.clear();
    for (; group < text.size(); group += kBatch) {
      for (std::size_t s = group; s < std::min(text.size(), group + kBatch); ++s)
        if (produced[s] < settings.tokens) active.push_back(static_cast<std::int32_t>(s));
      if (!active.empty()) break;
    }
    if (active.empty()) break;
    VerifyStats v;
    if (policy.kind == Drafting::tree) {
      if constexpr (kTreeRule<Rule>) {
        v = tree_step(model, text, active, settings, policy, make_rule(nullptr), step, rng, b, stats.verify_seconds);
      } else {
        throw std::logic_error("the comparison drafts trees only for Standard, Greedy and Traversal");
      }
    } else {
      v = chain_step(model, text, active, settings, policy, heads, make_rule, collect, step, rng, b,
                     stats.verify_seconds);
    }
    const std::int32_t B = static_cast<std::int32_t>(active.size());
    const std::size_t width = b.out_tokens.size() / std::size_t(B);
    ++stats.steps;
    stats.target_calls += B;
    stats.drafted += v.drafted;
    stats.accepted += v.accepted;
    stats.relaxed += v.relaxed;
    stats.checked += v.target_checked;
    for (std::int32_t i = 0; i < B; ++i) {
      std::vector<std::int32_t>& t = text[static_cast<std::size_t>(active[std::size_t(i)])];
      const std::int32_t n = b.accepted[std::size_t(i)];
      for (std::int32_t j = 0; j <= n; ++j) {
        const std::int32_t w = b.out_tokens[std::size_t(i) * width + std::size_t(j)];
        stats.logprob += model.target_logprob(t.data(), static_cast<std::int32_t>(t.size()), w);
        t.push_back(w);
      }
      produced[std::size_t(active[std::size_t(i)])] += n + 1;
      stats.generated += n + 1;
      PromptCounts& c = stats.per_prompt[std::size_t(active[std::size_t(i)])];
      ++c.target_calls;
      c.drafted += b.offsets[std::size_t(i) + 1] - b.offsets[std::size_t(i)];
      c.accepted += n;
      c.generated += n + 1;
    }
  }
  stats.texts = std::move(text);
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
