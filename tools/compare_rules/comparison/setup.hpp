// Building a comparison setting: prompts, the heads trained on a collection run, the fixed
// quality contexts, and the loop over every rule.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "comparison/report.hpp"

namespace specverify::comparison {

struct Options {
  std::uint64_t seed = 1;
  std::int32_t prompts = 24, tokens = 20, contexts = 12, trials = 300, top_bins = 31;
  double cost_ratio = 0.05;
  std::int32_t resamples = 2000;  // bootstrap resamples per interval
  Sweep sweep;
};

/// Trains both heads on what a Standard run with the longest chains drafts in this setting.
inline Heads train_heads(ModelPair& m, const std::vector<std::vector<std::int32_t>>& prompts,
                         const DecodeSettings& s, std::int32_t k_max) {
  TrainingData data;
  decode(m, prompts, s, DraftPolicy{Drafting::fixed, k_max, 0, {}, Drafted::sampled}, nullptr,
         [](const float*) { return Standard{}; }, &data);
  const Eigen::Index n = Eigen::Index(data.labels.size());
  const Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> H(
      data.features.data(), n, DraftFeatures::kDim);
  const Eigen::Map<const Eigen::VectorXf> y(data.labels.data(), n);
  Heads heads;
  FitOptions o;
  o.epochs = 30;
  o.learning_rate = 1e-2f;
  o.seed = s.seed;
  heads.verifier.fit(H, y, o);
  heads.head.fit(H, y, o);
  return heads;
}

/// Runs every rule in one setting; `progress` is called after each rule.
inline std::vector<Row> run_setting(ModelPair& m, const std::vector<std::vector<std::int32_t>>& prompts,
                                    const std::vector<std::vector<std::int32_t>>& quality_prompts, float temperature,
                                    const Options& o, const std::function<void(const std::string&)>& progress) {
  const DecodeSettings s{o.tokens, temperature, o.seed};
  Heads heads = train_heads(m, prompts, DecodeSettings{o.tokens, temperature, o.seed + 7}, o.sweep.k_max);
  const RunStats target = sample_target(m, prompts, DecodeSettings{o.tokens, temperature, o.seed + 11});
  const std::int32_t V = m.vocab();
  std::vector<QualityContext> contexts;
  std::vector<float> p(static_cast<std::size_t>(V)), q(p.size());
  for (const auto& text : quality_prompts) {
    m.target_row(text.data(), std::int32_t(text.size()), temperature, p.data());
    m.draft_row(text.data(), std::int32_t(text.size()), temperature, q.data());
    contexts.emplace_back(p.data(), q.data(), V, o.top_bins);
  }
  // One set of resampling draws per setting: every rule's interval resamples the same prompts and
  // contexts, so intervals of differences between rules are paired.
  const Draws draws = make_draws(prompts.size(), contexts.size(), BootstrapOptions{o.resamples, 0.95, o.seed + 17});
  std::vector<Row> rows;
  std::map<std::string, Quality> measured;  // by RuleSpec::quality_key
  for_each_rule(o.sweep, [&](const RuleSpec& spec, const DraftPolicy& policy, auto make_rule) {
    const RunStats run = decode(m, prompts, s, policy, &heads, make_rule);
    const auto known = spec.quality_key.empty() ? measured.end() : measured.find(spec.quality_key);
    const Quality q = known != measured.end() ? known->second
                                              : measure_quality(contexts, o.trials, policy, &heads, make_rule, o.seed + 3);
    if (!spec.quality_key.empty()) measured.emplace(spec.quality_key, q);
    rows.push_back(make_row(m.name(), temperature, spec, run, q, target, o.cost_ratio, draws));
    progress(spec.name);
  });
  const auto base = std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.rule == "Standard K=4"; });
  if (base != rows.end()) {
    for (Row& r : rows) {
      r.gain = r.tokens_per_call / base->tokens_per_call;
      r.gain_ci = tokens_per_call_ratio(r, *base, draws, o.cost_ratio);
    }
  }
  return rows;
}

inline std::int32_t rules_per_setting(const Sweep& s) {
  std::int32_t n = 0;
  for_each_rule(s, [&](const RuleSpec&, const DraftPolicy&, auto) { ++n; });
  return n;
}

}  // namespace specverify::comparison
