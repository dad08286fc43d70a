// Penalties and logit bias per draft position (docs/api.md "Penalties and logit bias"): decode
// loops whose emitted sequences must follow the penalised target exactly, negative controls built
// from the mistakes engines made (counting committed tokens only, not the drafts before the row;
// the repetition penalty on output alone; prompt tokens counted as generated), the overlay against
// the same steps applied densely, neutral lists, and every bad input's message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "specverify/specverify.hpp"
#include "penalty_lists.hpp"
#include "support.hpp"

namespace specverify {
namespace {

/// Steps 2 and 3 for one token, written out plainly (the reference; the library's is in
/// core/penalties.hpp).
float reference_penalised(float l, float bias, bool in, std::int64_t count, const SamplingParams& p) {
  float x = l + bias;
  if (!in) return x;
  x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
  return x - std::fma(p.frequency_penalty, static_cast<float>(count), count > 0 ? p.presence_penalty : 0.0f);
}

/// What a row sees: the prompt, the tokens generated so far (committed), and the drafts on the
/// path before the row.
struct Context {
  std::set<std::int32_t> prompt;
  std::map<std::int32_t, std::int32_t> generated;
};

/// The mistakes engines made (see the head of this file), each a way to build the target rows wrongly.
enum class Mistake { none, committed_only, repetition_on_output_only, prompt_counted };

/// One row's logits after steps 2 and 3, computed densely (V tokens); `bias` maps token to value.
std::vector<float> penalised_row(const std::vector<float>& logits, const SamplingParams& params,
                                 const std::map<std::int32_t, float>& bias, const Context& ctx,
                                 const std::vector<std::int32_t>& path, Mistake mistake = Mistake::none) {
  std::vector<float> out(logits.size());
  for (std::int32_t v = 0; v < static_cast<std::int32_t>(logits.size()); ++v) {
    const auto g = ctx.generated.find(v);
    std::int64_t count = g == ctx.generated.end() ? 0 : g->second;
    std::int64_t on_path = mistake == Mistake::committed_only ? 0 : std::count(path.begin(), path.end(), v);
    count += on_path;
    const bool in_prompt = ctx.prompt.count(v) > 0;
    bool in = in_prompt || count > 0;
    if (mistake == Mistake::repetition_on_output_only) in = count > 0;
    if (mistake == Mistake::prompt_counted && in_prompt) ++count;
    const auto b = bias.find(v);
    out[std::size_t(v)] = reference_penalised(logits[std::size_t(v)], b == bias.end() ? 0.0f : b->second, in, count, params);
  }
  return out;
}

/// softmax(g / T) in double.
std::vector<float> distribution(const std::vector<float>& g, float temperature) {
  std::vector<double> l(g.begin(), g.end());
  return testing::softmax(l, temperature);
}

SamplingParams neutral(SamplingParams p) {
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.0f;
  return p;
}

/// Markov target and draft models given by logits (row prev + 1 after token prev), a history and
/// the sampling parameters of both sides.
struct Setup {
  std::int32_t V = 5;
  std::vector<std::vector<float>> target, draft;  // [V + 1][V]
  Context start;
  std::int32_t last = 4;
  SamplingParams target_params, draft_params;
  std::map<std::int32_t, float> bias;

  static Setup make(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    Setup s;
    for (std::int32_t i = 0; i <= s.V; ++i) {
      const auto t = testing::random_logits(s.V, rng, 1.0), d = testing::random_logits(s.V, rng, 1.0);
      s.target.emplace_back(t.begin(), t.end());
      s.draft.emplace_back(d.begin(), d.end());
    }
    s.start.prompt = {1, 3};
    s.start.generated = {{3, 1}, {4, 2}};
    s.target_params.temperature = 1.0f;
    s.target_params.repetition_penalty = 1.6f;
    s.target_params.presence_penalty = 0.5f;
    s.target_params.frequency_penalty = 0.6f;
    s.draft_params.temperature = 1.2f;
    s.draft_params.repetition_penalty = 2.5f;
    s.draft_params.presence_penalty = 0.2f;
    s.draft_params.frequency_penalty = 1.2f;
    s.bias = {{0, 0.8f}, {2, -0.5f}};
    return s;
  }

  /// p after `last` in context ctx with `path` drafted since (the correct target).
  std::vector<float> p(std::int32_t prev, const Context& ctx, const std::vector<std::int32_t>& path) const {
    return distribution(penalised_row(target[std::size_t(prev + 1)], target_params, bias, ctx, path),
                        target_params.temperature);
  }

  /// The exact probability of every 3-token continuation, indexed t0 V^2 + t1 V + t2.
  std::vector<float> joint() const {
    std::vector<float> j;
    const std::function<void(std::int32_t, Context, double, std::int32_t)> walk = [&](std::int32_t prev, Context ctx,
                                                                                        double mass, std::int32_t depth) {
      if (depth == 3) {
        j.push_back(static_cast<float>(mass));
        return;
      }
      const auto row = p(prev, ctx, {});
      for (std::int32_t t = 0; t < V; ++t) {
        Context next = ctx;
        ++next.generated[t];
        walk(t, next, mass * row[std::size_t(t)], depth + 1);
      }
    };
    walk(last, start, 1.0, 0);
    return j;
  }
};

/// The history lists of a context: ascending tokens, generated counts (0: prompt only).
void history_lists(const Context& ctx, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& counts) {
  std::set<std::int32_t> all = ctx.prompt;
  for (const auto& [t, c] : ctx.generated) all.insert(t);
  tokens.assign(all.begin(), all.end());
  counts.clear();
  for (const auto t : tokens) {
    const auto g = ctx.generated.find(t);
    counts.push_back(g == ctx.generated.end() ? 0 : g->second);
  }
}

struct Decode {
  Mistake mistake = Mistake::none;
  bool q_without_penalties = false;  // q handed to verify without the drafter's penalties
  std::int32_t trials = 20000;
};

/// A tree shape (parents; a chain of K is {-1, 0, .., K-2}) and how its children were drafted.
struct Shape {
  std::vector<std::int32_t> parents;
  Drafted drafted = Drafted::sampled;
  bool chain = true;
};

/// Runs `decode.trials` decodes of 3 tokens from the setup's history and returns the counts of
/// the first 3 emitted tokens.
template <class Rule>
std::vector<std::int64_t> decode_counts(const Setup& s, const Shape& shape, const Rule& rule, const Decode& decode,
                                        std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int32_t V = s.V, K = static_cast<std::int32_t>(shape.parents.size());
  std::vector<std::int64_t> counts(std::size_t(V * V * V));
  // The drafter's own q (with its penalties), or, for the rows a wrong engine makes, without.
  SamplingParams drafter = s.draft_params, verified_draft = s.draft_params;
  SamplingParams target_params = s.target_params;
  const bool engine_rows = decode.mistake != Mistake::none;
  if (engine_rows) {  // the target rows come penalised by the engine: the drafter runs plain
    drafter = verified_draft = neutral(s.draft_params);
    target_params = neutral(s.target_params);
  }
  if (decode.q_without_penalties) verified_draft = neutral(s.draft_params);
  std::uint64_t step = 0;
  for (std::int32_t trial = 0; trial < decode.trials; ++trial) {
    Context ctx = s.start;
    std::int32_t last = s.last;
    std::vector<std::int32_t> emitted;
    while (emitted.size() < 3) {
      // Draft: node i's token from q at its parent (after the path to the parent).
      std::vector<std::int32_t> tokens(static_cast<std::size_t>(K));
      std::vector<std::vector<std::int32_t>> paths(std::size_t(K) + 1);  // paths[1 + i]: root .. node i
      std::vector<std::int32_t> prev(std::size_t(K) + 1, last);         // the token before row r
      for (std::int32_t i = 0; i < K; ++i) {
        const std::int32_t parent = shape.parents[std::size_t(i)];
        const auto& path = paths[std::size_t(parent + 1)];
        auto q = distribution(penalised_row(s.draft[std::size_t(prev[std::size_t(parent + 1)] + 1)], drafter, {}, ctx, path),
                              drafter.temperature);
        if (shape.drafted != Drafted::sampled) {  // earlier siblings removed
          for (std::int32_t j = 0; j < i; ++j) {
            if (shape.parents[std::size_t(j)] == parent) q[std::size_t(tokens[std::size_t(j)])] = 0.0f;
          }
        }
        tokens[std::size_t(i)] = testing::sample(q, rng);
        paths[std::size_t(i + 1)] = path;
        paths[std::size_t(i + 1)].push_back(tokens[std::size_t(i)]);
        prev[std::size_t(i + 1)] = tokens[std::size_t(i)];
      }
      std::vector<float> p_rows, q_rows;
      for (std::int32_t r = 0; r <= K; ++r) {
        const auto& l = s.target[std::size_t(prev[std::size_t(r)] + 1)];
        if (engine_rows) {
          const auto row = penalised_row(l, s.target_params, s.bias, ctx, paths[std::size_t(r)], decode.mistake);
          p_rows.insert(p_rows.end(), row.begin(), row.end());
        } else {
          p_rows.insert(p_rows.end(), l.begin(), l.end());
        }
        // q rows: a chain's one per draft (rows 0 .. K-1), a tree's like its target rows.
        if (!shape.chain || r < K) {
          const auto& d = s.draft[std::size_t(prev[std::size_t(r)] + 1)];
          q_rows.insert(q_rows.end(), d.begin(), d.end());
        }
      }
      std::vector<std::int32_t> h_tokens, h_counts, b_tokens;
      std::vector<float> b_values;
      history_lists(ctx, h_tokens, h_counts);
      for (const auto& [t, v] : s.bias) {
        b_tokens.push_back(t);
        b_values.push_back(v);
      }
      std::reverse(b_tokens.begin(), b_tokens.end());  // any order
      std::reverse(b_values.begin(), b_values.end());
      const std::int32_t h_offsets[2] = {0, static_cast<std::int32_t>(h_tokens.size())};
      const std::int32_t b_offsets[2] = {0, static_cast<std::int32_t>(b_tokens.size())};
      const std::int32_t offsets[2] = {0, K};
      std::vector<std::int32_t> out(std::size_t(K) + 1), nodes(std::size_t(K) + 1);
      std::int32_t accepted = 0;
      const auto fill = [&](auto& batch) {
        batch.batch_size = 1;
        batch.vocab_size = V;
        batch.draft_tokens = tokens.data();
        batch.target_logits = p_rows.data();
        batch.draft_logits = q_rows.data();
        batch.target_params = &target_params;
        batch.draft_params = &verified_draft;
        if (!engine_rows) {
          batch.history_offsets = h_offsets;
          batch.history_tokens = h_tokens.data();
          batch.history_counts = h_counts.data();
          batch.bias_offsets = b_offsets;
          batch.bias_tokens = b_tokens.data();
          batch.bias_values = b_values.data();
        }
      };
      if (shape.chain) {
        LogitsChainBatch<float> batch;
        fill(batch);
        batch.draft_offsets = offsets;
        verify(rule, batch, Randomness{seed, step++}, ChainOutput{out.data(), K + 1, &accepted});
      } else {
        if constexpr (!std::is_same_v<Rule, Block>) {
          LogitsTreeBatch<float> batch;
          fill(batch);
          batch.node_offsets = offsets;
          batch.parents = shape.parents.data();
          batch.drafted = shape.drafted;
          if (shape.drafted == Drafted::deterministic) batch.draft_logits = nullptr;
          verify(rule, batch, Randomness{seed, step++}, TreeOutput{out.data(), K + 1, &accepted, nodes.data()});
        }
      }
      for (std::int32_t i = 0; i <= accepted; ++i) {
        emitted.push_back(out[std::size_t(i)]);
        ++ctx.generated[out[std::size_t(i)]];
      }
      last = emitted.back();
    }
    ++counts[std::size_t((emitted[0] * V + emitted[1]) * V + emitted[2])];
  }
  return counts;
}

std::vector<std::int32_t> chain_of(std::int32_t K) {
  std::vector<std::int32_t> parents;
  for (std::int32_t i = 0; i < K; ++i) parents.push_back(i - 1);
  return parents;
}

template <class Rule>
testing::ChiSquare decode_chi_square(const Shape& shape, const Rule& rule, const Decode& decode, std::uint64_t seed) {
  const Setup s = Setup::make(seed);
  return testing::chi_square(decode_counts(s, shape, rule, decode, seed * 31 + 7), s.joint());
}

TEST(Penalties, ChainsFollowThePenalisedTarget) {
  for (std::int32_t K = 1; K <= 3; ++K) {
    const auto chi = decode_chi_square(Shape{chain_of(K)}, Standard{}, Decode{}, 100 + K);
    EXPECT_TRUE(chi.fits()) << "Standard K = " << K << ": chi2 " << chi.statistic << " df " << chi.df;
  }
  for (std::int32_t K = 2; K <= 3; ++K) {
    const auto chi = decode_chi_square(Shape{chain_of(K)}, Block{}, Decode{}, 200 + K);
    EXPECT_TRUE(chi.fits()) << "Block K = " << K << ": chi2 " << chi.statistic << " df " << chi.df;
    const auto traversal = decode_chi_square(Shape{chain_of(K)}, Traversal{}, Decode{}, 250 + K);
    EXPECT_TRUE(traversal.fits()) << "Traversal K = " << K << ": chi2 " << traversal.statistic << " df " << traversal.df;
  }
}

TEST(Penalties, TreesFollowThePenalisedTarget) {
  const std::vector<std::int32_t> parents = {-1, -1, 0, 1, 0};  // two branches, one of depth 2 with two leaves
  for (const Drafted drafted : {Drafted::sampled, Drafted::sampled_without_replacement, Drafted::deterministic}) {
    const auto chi = decode_chi_square(Shape{parents, drafted, false}, Standard{}, Decode{}, 300 + int(drafted));
    EXPECT_TRUE(chi.fits()) << "Drafted " << int(drafted) << ": chi2 " << chi.statistic << " df " << chi.df;
  }
  // Traversal weighs whole paths, each row penalised with the drafts on its path.
  const auto chi = decode_chi_square(Shape{parents, Drafted::sampled, false}, Traversal{}, Decode{}, 310);
  EXPECT_TRUE(chi.fits()) << "Traversal: chi2 " << chi.statistic << " df " << chi.df;
}

// The negative controls: each mistake must fail the test the correct implementation passes.
TEST(Penalties, NegativeControlsFail) {
  const Shape chain{chain_of(3)};
  for (const Mistake m : {Mistake::committed_only, Mistake::repetition_on_output_only, Mistake::prompt_counted}) {
    Decode decode;
    decode.mistake = m;
    const auto chi = decode_chi_square(chain, Standard{}, decode, 400);
    EXPECT_FALSE(chi.fits()) << "mistake " << int(m) << " passed: chi2 " << chi.statistic << " df " << chi.df;
  }
  Decode decode;
  decode.q_without_penalties = true;
  const auto chi = decode_chi_square(chain, Standard{}, decode, 401);
  EXPECT_FALSE(chi.fits()) << "q without the drafter's penalties passed: chi2 " << chi.statistic << " df " << chi.df;
}

// ------------------------------------------------------------------ the overlay against dense rows

/// What a DenseCase adds to its rows beyond the lists.
struct Extras {
  std::int32_t V = 300;
  bool extremes = false;  // each row's max at a history token; a bias that makes a token the max,
                          // or an entry tied with a token outside the overlay for the max
  bool guided = false;    // guidance (step 1) on the target rows, and a bitmask (step 4)
  bool reduced = false;   // a reduced draft vocabulary: the even target ids
};

/// B sequences with random rows over V, histories, drafts and bias; verified once with the lists
/// and once with rows penalised densely beforehand (and neutral penalties): the same bits.
struct DenseCase : testing::PenaltyListArrays {
  std::int32_t B = 6, K = 4, V = 300;
  Extras extras;
  std::vector<std::int32_t> parents;  // trees: per sequence the same shape; empty: chains
  std::vector<float> target, draft, target_dense, draft_dense, unconditional, scales;
  std::vector<std::int32_t> offsets, tokens, draft_to_target;
  std::vector<std::int64_t> first_unconditional;
  std::vector<std::uint32_t> allowed;
  std::vector<SamplingParams> tp, dp, tp_neutral, dp_neutral;

  DenseCase(std::uint64_t seed, bool tree, SamplingParams base, Extras extra = {}) : V(extra.V), extras(extra) {
    std::mt19937_64 rng(seed);
    if (tree) parents = {-1, -1, 0, 0};
    const std::int32_t words = (V + 31) / 32;
    if (extras.reduced) {
      for (std::int32_t i = 0; i < V / 2; ++i) draft_to_target.push_back(2 * i);
    }
    const std::int32_t rows_per = K + 1;
    std::uniform_int_distribution<std::int32_t> token(0, V - 1);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (std::int32_t b = 0; b < B; ++b) {
      offsets.push_back(b * K);
      SamplingParams t = base, d = base;
      t.repetition_penalty = 0.5f + 2.0f * unit(rng);
      t.presence_penalty = 2.0f * unit(rng) - 0.5f;
      t.frequency_penalty = unit(rng);
      d.repetition_penalty = 1.0f + unit(rng);
      d.frequency_penalty = 0.3f;
      d.temperature = base.temperature * 1.1f;
      tp.push_back(t);
      dp.push_back(d);
      tp_neutral.push_back(neutral(t));
      dp_neutral.push_back(neutral(d));
      Context ctx;
      for (std::int32_t i = 0; i < 40; ++i) ctx.prompt.insert(token(rng));
      for (std::int32_t i = 0; i < 30; ++i) ++ctx.generated[token(rng) % 50];  // some overlap with the drafts
      std::vector<std::int32_t> ht, hc;
      history_lists(ctx, ht, hc);
      h_tokens.insert(h_tokens.end(), ht.begin(), ht.end());
      h_counts.insert(h_counts.end(), hc.begin(), hc.end());
      std::map<std::int32_t, float> bias;
      for (std::int32_t i = 0; i < 12; ++i) bias[token(rng)] = 6.0f * unit(rng) - 3.0f;
      // Extremes: tokens outside every list (no history, path or bias), above the drafts' range.
      const auto outside = [&](std::int32_t from) {
        std::int32_t v = from;
        while (ctx.prompt.count(v) || ctx.generated.count(v) || bias.count(v)) ++v;
        return v;
      };
      const std::int32_t top = outside(60 + b), tied = outside(top + 1 + b);
      if (extras.extremes) bias[b % 2 == 0 ? top : tied] = b % 2 == 0 ? 30.0f : 0.0f;
      for (const auto& [v, x] : bias) {
        b_tokens.push_back(v);
        b_values.push_back(x);
      }
      std::shuffle(b_tokens.end() - std::int64_t(bias.size()), b_tokens.end(), rng);
      for (std::size_t i = b_tokens.size() - bias.size(); i < b_tokens.size(); ++i) b_values[i] = bias[b_tokens[i]];
      end_sequence();
      std::vector<std::int32_t> drafts;
      for (std::int32_t i = 0; i < K; ++i) drafts.push_back(extras.reduced ? 2 * (token(rng) % 25) : token(rng) % 50);
      tokens.insert(tokens.end(), drafts.begin(), drafts.end());
      const std::int32_t held = *ctx.prompt.begin();  // in the history
      first_unconditional.push_back(static_cast<std::int64_t>(target.size() / std::size_t(V)));
      scales.push_back(1.5f);
      for (std::int32_t r = 0; r < rows_per; ++r) {
        std::vector<std::int32_t> path;  // the drafts before row r
        if (tree) {
          for (std::int32_t n = r - 1; n >= 0; n = parents[std::size_t(n)]) path.push_back(drafts[std::size_t(n)]);
        } else {
          path.assign(drafts.begin(), drafts.begin() + r);
        }
        const auto l = testing::random_logits(V, rng, 3.0);
        std::vector<float> lf(l.begin(), l.end());
        if (extras.extremes) {
          const float max = *std::max_element(lf.begin(), lf.end());
          lf[std::size_t(held)] = max + 5.0f;
          if (b % 2 == 1) {  // the tied pair above it: the lower index is the argmax
            const std::int32_t other = r % 2 == 0 ? outside(tied + 1) : outside(50);
            lf[std::size_t(tied)] = lf[std::size_t(other)] = max + 8.0f;
          }
        }
        std::vector<float> g = lf;  // after step 1
        if (extras.guided) {
          const auto u = testing::random_logits(V, rng, 3.0);
          for (std::int32_t v = 0; v < V; ++v) {
            unconditional.push_back(static_cast<float>(u[std::size_t(v)]));
            g[std::size_t(v)] = core::fused(scales.back(), lf[std::size_t(v)] - unconditional.back(), unconditional.back());
          }
          for (std::int32_t w = 0; w < words; ++w) {
            allowed.push_back(static_cast<std::uint32_t>(rng() | rng()) | (w == held / 32 ? 1u << (held % 32) : 0u));
          }
        }
        const auto dense = penalised_row(g, t, bias, ctx, path);
        target.insert(target.end(), lf.begin(), lf.end());
        target_dense.insert(target_dense.end(), dense.begin(), dense.end());
        if (tree || r < K) {
          const auto ql = testing::random_logits(V, rng, 3.0);
          std::vector<float> qf(ql.begin(), ql.end());
          if (extras.extremes) qf[std::size_t(held)] = *std::max_element(qf.begin(), qf.end()) + 5.0f;
          auto qd = penalised_row(qf, d, {}, ctx, path);
          if (extras.reduced) {  // the draft row over the even target ids
            for (std::int32_t i = 0; i < V / 2; ++i) {
              qf[std::size_t(i)] = qf[std::size_t(2 * i)];
              qd[std::size_t(i)] = qd[std::size_t(2 * i)];
            }
            qf.resize(std::size_t(V / 2));
            qd.resize(std::size_t(V / 2));
          }
          draft.insert(draft.end(), qf.begin(), qf.end());
          draft_dense.insert(draft_dense.end(), qd.begin(), qd.end());
        }
      }
    }
    offsets.push_back(B * K);
  }

  template <class Batch>
  void fill(Batch& batch, bool lists) const {
    batch.batch_size = B;
    batch.vocab_size = V;
    batch.draft_tokens = tokens.data();
    batch.target_logits = lists ? target.data() : target_dense.data();
    batch.draft_logits = lists ? draft.data() : draft_dense.data();
    batch.target_params = lists ? tp.data() : tp_neutral.data();
    batch.draft_params = lists ? dp.data() : dp_neutral.data();
    if (extras.guided) {
      batch.allowed_tokens = allowed.data();
      if (lists) {  // the dense rows hold the guided values already
        batch.unconditional_logits = unconditional.data();
        batch.unconditional_first_row = first_unconditional.data();
        batch.guidance_scale = scales.data();
      }
    }
    if (extras.reduced) {
      batch.draft_vocab_size = V / 2;
      batch.draft_to_target = draft_to_target.data();
    }
    if (lists) attach(batch);
  }
};

struct Emitted {
  std::vector<std::int32_t> tokens, accepted;
  std::vector<float> logprobs;
  bool operator==(const Emitted& o) const {
    return tokens == o.tokens && accepted == o.accepted &&
           std::memcmp(logprobs.data(), o.logprobs.data(), logprobs.size() * sizeof(float)) == 0;
  }
};

template <class Rule>
Emitted run_dense_case(const DenseCase& c, const Rule& rule, bool lists, std::uint64_t seed) {
  Emitted e;
  const std::int32_t width = c.K + 1;
  e.tokens.assign(std::size_t(c.B * width), -7);
  e.accepted.assign(std::size_t(c.B), -7);
  e.logprobs.assign(std::size_t(c.B * width), 7.0f);
  const std::vector<std::int64_t> positions(std::size_t(c.B), 40);
  Randomness randomness{seed, 5};
  randomness.positions = positions.data();  // Coupled keys its samples by position
  if (c.parents.empty()) {
    LogitsChainBatch<float> batch;
    c.fill(batch, lists);
    batch.draft_offsets = c.offsets.data();
    verify(rule, batch, randomness, ChainOutput{e.tokens.data(), width, e.accepted.data(), e.logprobs.data()});
  } else if constexpr (!std::is_same_v<Rule, Block>) {
    std::vector<std::int32_t> parents;
    for (std::int32_t b = 0; b < c.B; ++b) parents.insert(parents.end(), c.parents.begin(), c.parents.end());
    LogitsTreeBatch<float> batch;
    c.fill(batch, lists);
    batch.node_offsets = c.offsets.data();
    batch.parents = parents.data();
    verify(rule, batch, randomness, TreeOutput{e.tokens.data(), width, e.accepted.data(), nullptr, e.logprobs.data()});
  }
  return e;
}

/// The sampling parameters the dense comparisons run: T alone, top_k, top_p with min_p, greedy.
std::vector<SamplingParams> dense_params() {
  std::vector<SamplingParams> params(4);
  params[0].temperature = 0.8f;
  params[1].temperature = 1.0f;
  params[1].top_k = 20;
  params[2].temperature = 0.7f;
  params[2].top_p = 0.8f;
  params[2].min_p = 0.01f;
  params[3].temperature = 0.0f;
  return params;
}

TEST(Penalties, OverlayGivesTheBitsOfDenselyPenalisedRows) {
  const std::vector<SamplingParams> params = dense_params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    for (const bool tree : {false, true}) {
      for (std::uint64_t seed = 1; seed <= 4; ++seed) {
        const DenseCase c(seed * 10 + i, tree, params[i]);
        EXPECT_TRUE(run_dense_case(c, Standard{}, true, seed) == run_dense_case(c, Standard{}, false, seed))
            << "params " << i << " tree " << tree << " seed " << seed;
        if (!tree) {
          EXPECT_TRUE(run_dense_case(c, Block{}, true, seed) == run_dense_case(c, Block{}, false, seed))
              << "Block params " << i << " seed " << seed;
        }
      }
    }
  }
}

TEST(Penalties, OverlayAtTheRowsExtremesGivesTheBitsOfDenseRows) {
  // The pre-pass reads the overlay's tokens apart from the rest of the row (cpu/logit_kernels.hpp):
  // the row's max at a penalised token, a biased token made the max, an entry tied with another
  // token for it (either first), entries in the vector body and in the tail (V = 1007), with
  // guidance and a bitmask or a reduced draft vocabulary, for every pass a rule may run.
  const std::vector<SamplingParams> params = dense_params();
  std::vector<Extras> extras(3);
  for (Extras& e : extras) {
    e.V = 1007;
    e.extremes = true;
  }
  extras[1].guided = true;
  extras[2].reduced = true;
  for (std::size_t x = 0; x < extras.size(); ++x) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      for (const bool tree : {false, true}) {
        const std::uint64_t seed = 100 + 10 * x + i;
        const DenseCase c(seed, tree, params[i], extras[x]);
        const auto same = [&](const auto& rule, const char* name) {
          EXPECT_TRUE(run_dense_case(c, rule, true, seed) == run_dense_case(c, rule, false, seed))
              << name << " extras " << x << " params " << i << " tree " << tree;
        };
        same(Standard{}, "Standard");
        same(Traversal{}, "Traversal");
        if (!extras[x].reduced) same(Coupled{}, "Coupled");
        if (!tree) same(Block{}, "Block");
      }
    }
  }
}

TEST(Penalties, NeutralPenaltiesAreBitIdenticalToNoLists) {
  SamplingParams base;
  base.temperature = 0.9f;
  for (const bool tree : {false, true}) {
    DenseCase c(77, tree, base);
    for (auto& p : c.tp) p = neutral(p);
    for (auto& p : c.dp) p = neutral(p);
    const std::vector<float> bias = c.b_values;
    // No bias list; then a bias list of zeros (which goes through the overlay): the same bits.
    const auto without = [&](bool zero_bias) {
      Emitted e;
      const std::int32_t width = c.K + 1;
      e.tokens.assign(std::size_t(c.B * width), -7);
      e.accepted.assign(std::size_t(c.B), -7);
      e.logprobs.assign(std::size_t(c.B * width), 7.0f);
      DenseCase d = c;
      std::fill(d.b_values.begin(), d.b_values.end(), 0.0f);
      std::vector<std::int32_t> parents;
      for (std::int32_t b = 0; b < c.B; ++b) parents.insert(parents.end(), c.parents.begin(), c.parents.end());
      const auto lists = [&](auto& batch) {
        d.fill(batch, true);
        batch.target_logits = c.target.data();
        batch.draft_logits = c.draft.data();
        if (!zero_bias) batch.bias_offsets = nullptr;
      };
      if (!tree) {
        LogitsChainBatch<float> batch;
        lists(batch);
        batch.draft_offsets = c.offsets.data();
        verify(Standard{}, batch, Randomness{3, 1}, ChainOutput{e.tokens.data(), width, e.accepted.data(), e.logprobs.data()});
      } else {
        LogitsTreeBatch<float> batch;
        lists(batch);
        batch.node_offsets = c.offsets.data();
        batch.parents = parents.data();
        verify(Standard{}, batch, Randomness{3, 1}, TreeOutput{e.tokens.data(), width, e.accepted.data(), nullptr, e.logprobs.data()});
      }
      return e;
    };
    // Plain: the same rows, no lists at all.
    Emitted plain;
    {
      const std::int32_t width = c.K + 1;
      plain.tokens.assign(std::size_t(c.B * width), -7);
      plain.accepted.assign(std::size_t(c.B), -7);
      plain.logprobs.assign(std::size_t(c.B * width), 7.0f);
      std::vector<std::int32_t> parents;
      for (std::int32_t b = 0; b < c.B; ++b) parents.insert(parents.end(), c.parents.begin(), c.parents.end());
      const auto none = [&](auto& batch) {
        batch.batch_size = c.B;
        batch.vocab_size = c.V;
        batch.draft_tokens = c.tokens.data();
        batch.target_logits = c.target.data();
        batch.draft_logits = c.draft.data();
        batch.target_params = c.tp.data();
        batch.draft_params = c.dp.data();
      };
      if (!tree) {
        LogitsChainBatch<float> batch;
        none(batch);
        batch.draft_offsets = c.offsets.data();
        verify(Standard{}, batch, Randomness{3, 1}, ChainOutput{plain.tokens.data(), width, plain.accepted.data(), plain.logprobs.data()});
      } else {
        LogitsTreeBatch<float> batch;
        none(batch);
        batch.node_offsets = c.offsets.data();
        batch.parents = parents.data();
        verify(Standard{}, batch, Randomness{3, 1},
               TreeOutput{plain.tokens.data(), width, plain.accepted.data(), nullptr, plain.logprobs.data()});
      }
    }
    EXPECT_TRUE(without(false) == plain) << "tree " << tree;
    EXPECT_TRUE(without(true) == plain) << "tree " << tree << " (zero bias)";
  }
}

TEST(Penalties, SampleTakesTheListsOfItsRow) {
  std::mt19937_64 rng(5);
  const std::int32_t V = 1000;
  const auto l = testing::random_logits(V, rng, 3.0);
  const std::vector<float> logits(l.begin(), l.end());
  SamplingParams params;
  params.temperature = 0.7f;
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 0.4f;
  params.frequency_penalty = 0.2f;
  Context ctx;
  ctx.prompt = {3, 10, 500};
  ctx.generated = {{10, 2}, {999, 1}, {7, 4}};
  std::vector<std::int32_t> tokens, counts;
  history_lists(ctx, tokens, counts);
  const std::vector<std::int32_t> bias_tokens = {900, 4};
  const std::vector<float> bias_values = {2.5f, -1.0f};
  const auto dense = penalised_row(logits, params, {{900, 2.5f}, {4, -1.0f}}, ctx, {});
  for (std::int64_t position = 0; position < 200; ++position) {
    ASSERT_EQ(sample(logits.data(), V, params, 9, position, tokens.data(), counts.data(),
                     static_cast<std::int32_t>(tokens.size()), bias_tokens.data(), bias_values.data(), 2),
              sample(dense.data(), V, neutral(params), 9, position))
        << "position " << position;
  }
  EXPECT_EQ(sample(logits.data(), V, neutral(params), 9, 3, tokens.data(), counts.data(), static_cast<std::int32_t>(tokens.size())),
            sample(logits.data(), V, neutral(params), 9, 3));
}

// ------------------------------------------------------------------ bad input

struct BadCase {
  std::int32_t V = 8;
  std::vector<float> target = std::vector<float>(3 * 8, 0.5f), draft = std::vector<float>(2 * 8, 0.25f);
  std::vector<std::int32_t> offsets{0, 2}, tokens{1, 2};
  std::vector<std::int32_t> h_offsets{0, 3}, h_tokens{1, 4, 6}, h_counts{0, 2, 1}, b_offsets{0, 2}, b_tokens{5, 0};
  std::vector<float> b_values{1.0f, -2.0f};
  SamplingParams tp, dp;
  std::vector<std::int32_t> out = std::vector<std::int32_t>(3, -7);
  std::int32_t accepted = -7;

  BadCase() {
    tp.repetition_penalty = 1.2f;
    dp.frequency_penalty = 0.5f;
  }
  LogitsChainBatch<float> batch() {
    LogitsChainBatch<float> b;
    b.batch_size = 1;
    b.vocab_size = V;
    b.draft_offsets = offsets.data();
    b.draft_tokens = tokens.data();
    b.target_logits = target.data();
    b.draft_logits = draft.data();
    b.target_params = &tp;
    b.draft_params = &dp;
    b.history_offsets = h_offsets.data();
    b.history_tokens = h_tokens.data();
    b.history_counts = h_counts.data();
    b.bias_offsets = b_offsets.data();
    b.bias_tokens = b_tokens.data();
    b.bias_values = b_values.data();
    return b;
  }
  /// verify throws exactly `message` and writes nothing.
  void expect(const std::string& message) {
    try {
      verify(Standard{}, batch(), Randomness{1, 0}, ChainOutput{out.data(), 3, &accepted});
      ADD_FAILURE() << "accepted; expected: " << message;
    } catch (const invalid_input& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
    EXPECT_EQ(out, std::vector<std::int32_t>(3, -7));
    EXPECT_EQ(accepted, -7);
  }
};

TEST(PenaltiesBadInput, TheGoodCaseIsAccepted) {
  BadCase c;
  verify(Standard{}, c.batch(), Randomness{1, 0}, ChainOutput{c.out.data(), 3, &c.accepted});
  EXPECT_GE(c.accepted, 0);
}

TEST(PenaltiesBadInput, PenaltyValuesOutOfRange) {
  const float nan = std::nanf(""), inf = HUGE_VALF;
  {
    BadCase c;
    c.tp.repetition_penalty = 0.0f;
    c.expect("specverify::verify: sequence 0: target_params.repetition_penalty = 0 is out of range");
  }
  {
    BadCase c;
    c.dp.repetition_penalty = -1.0f;
    c.expect("specverify::verify: sequence 0: draft_params.repetition_penalty = -1 is out of range");
  }
  {
    BadCase c;
    c.tp.repetition_penalty = inf;
    c.expect("specverify::verify: sequence 0: target_params.repetition_penalty = inf is out of range");
  }
  {
    BadCase c;
    c.tp.presence_penalty = nan;
    c.expect("specverify::verify: sequence 0: target_params.presence_penalty = nan is out of range");
  }
  {
    BadCase c;
    c.dp.frequency_penalty = -inf;
    c.expect("specverify::verify: sequence 0: draft_params.frequency_penalty = -inf is out of range");
  }
}

TEST(PenaltiesBadInput, HistoryLists) {
  {
    BadCase c;
    c.h_tokens = {1, 6, 4};
    c.expect("specverify::verify: sequence 0: history_tokens[2] = 4 follows 6 (a sequence's history must be ascending and unique)");
  }
  {
    BadCase c;
    c.h_tokens = {1, 4, 4};
    c.expect("specverify::verify: sequence 0: history_tokens[2] = 4 follows 4 (a sequence's history must be ascending and unique)");
  }
  {
    BadCase c;
    c.h_counts = {0, -1, 1};
    c.expect("specverify::verify: sequence 0: history_counts[1] = -1 must be >= 0");
  }
  {
    BadCase c;
    c.h_tokens = {1, 4, 8};
    c.expect("specverify::verify: sequence 0: history_tokens[2] = 8 is outside [0, 8)");
  }
  {
    BadCase c;
    c.h_tokens = {-1, 4, 6};
    c.expect("specverify::verify: sequence 0: history_tokens[0] = -1 is outside [0, 8)");
  }
  {
    BadCase c;
    c.h_offsets = {1, 3};
    c.expect("specverify::verify: history_offsets[0] = 1 must be 0");
  }
  {
    BadCase c;
    c.h_offsets = {0, -1};
    c.expect("specverify::verify: sequence 0: history_offsets decrease (0 then -1)");
  }
  {
    BadCase c;
    c.h_counts.clear();
    auto b = c.batch();
    b.history_counts = nullptr;
    try {
      verify(Standard{}, b, Randomness{1, 0}, ChainOutput{c.out.data(), 3, &c.accepted});
      ADD_FAILURE() << "null history_counts accepted";
    } catch (const invalid_input& e) {
      EXPECT_EQ(std::string(e.what()), "specverify::verify: history_counts is null");
    }
  }
}

TEST(PenaltiesBadInput, BiasLists) {
  {
    BadCase c;
    c.b_tokens = {5, 5};
    c.expect("specverify::verify: sequence 0: bias_tokens[1] = 5 is biased twice (also bias_tokens[0])");
  }
  {
    BadCase c;
    c.b_tokens = {5, 9};
    c.expect("specverify::verify: sequence 0: bias_tokens[1] = 9 is outside [0, 8)");
  }
  {
    BadCase c;
    c.b_values = {1.0f, std::nanf("")};
    c.expect("specverify::verify: sequence 0: bias_values[1] = nan must be finite");
  }
  {
    BadCase c;
    c.b_values = {HUGE_VALF, 1.0f};
    c.expect("specverify::verify: sequence 0: bias_values[0] = inf must be finite");
  }
}

TEST(PenaltiesBadInput, OverflowOfAFiniteLogit) {
  {
    BadCase c;  // bias pushes logit 3e38 of token 5 past FLT_MAX
    c.target[5] = 3e38f;
    c.b_values = {1e38f, 0.0f};
    c.expect("specverify::verify: sequence 0, position 0: bias and penalties give inf at index 5 of target logits row 0 "
             "(logit 3e+38: a finite logit must stay finite)");
  }
  {
    BadCase c;  // a tiny repetition penalty divides the history token 4's logit past FLT_MAX
    c.tp.repetition_penalty = 1e-30f;
    c.target[8 + 4] = 1e10f;  // row 1 (after draft 0)
    c.out.assign(3, -7);
    c.expect("specverify::verify: sequence 0, position 1: bias and penalties give inf at index 4 of target logits row 1 "
             "(logit 1e+10: a finite logit must stay finite)");
  }
  {
    BadCase c;  // frequency penalty times the draft's count in the draft row
    c.h_counts = {0, 0, 0};  // the prompt only: no count before the drafts
    c.dp.frequency_penalty = 3e38f;
    c.dp.presence_penalty = 3e38f;
    c.draft[8 + 1] = -3e38f;  // draft row 1 sees draft 0 = token 1
    c.target[1] = 60.0f;      // which p accepts for sure, so row 1 is read
    c.tokens = {1, 1};
    c.expect("specverify::verify: sequence 0, position 1: bias and penalties give -inf at index 1 of draft logits row 1 "
             "(logit -3e+38: a finite logit must stay finite)");
  }
}

TEST(PenaltiesBadInput, SampleNamesTheEntry) {
  const std::vector<float> logits(8, 0.0f);
  SamplingParams params;
  const std::int32_t tokens[] = {2, 1}, counts[] = {0, 0};
  try {
    sample(logits.data(), 8, params, 1, 0, tokens, counts, 2);
    ADD_FAILURE() << "accepted";
  } catch (const invalid_input& e) {
    EXPECT_EQ(std::string(e.what()), "sample: history_tokens[1] = 1 follows 2 (a sequence's history must be ascending and unique)");
  }
  params.repetition_penalty = 0.0f;
  try {
    sample(logits.data(), 8, params, 1, 0, nullptr, nullptr, 0);
    ADD_FAILURE() << "accepted";
  } catch (const invalid_input& e) {
    EXPECT_EQ(std::string(e.what()), "sample: repetition_penalty is 0.000000");
  }
  params.repetition_penalty = 1.0f;
  // The list sizes by their own names: sample takes no offsets.
  try {
    sample(logits.data(), 8, params, 1, 0, tokens, counts, -1);
    ADD_FAILURE() << "accepted";
  } catch (const invalid_input& e) {
    EXPECT_EQ(std::string(e.what()), "sample: history_size is -1 (must be >= 0)");
  }
  const std::int32_t bias_tokens[] = {3};
  const float bias_values[] = {1.0f};
  try {
    sample(logits.data(), 8, params, 1, 0, nullptr, nullptr, 0, bias_tokens, bias_values, -2);
    ADD_FAILURE() << "accepted";
  } catch (const invalid_input& e) {
    EXPECT_EQ(std::string(e.what()), "sample: bias_size is -2 (must be >= 0)");
  }
}

}  // namespace
}  // namespace specverify
