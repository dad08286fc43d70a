// The papers' claims the README states, each printed with its 95% interval: a difference between
// two rules of one setting is judged by a paired interval (both rules' prompts, or contexts,
// resampled together) and called significant only when that interval excludes no-difference.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "comparison/report.hpp"
#include "comparison/setup.hpp"

namespace specverify::comparison {

namespace claims_detail {

inline const Row* find(const std::vector<Row>& rows, const std::string& pair, double t, const std::string& rule) {
  for (const Row& r : rows)
    if (r.pair == pair && std::abs(r.temperature - t) < 1e-4 && r.rule == rule) return &r;
  return nullptr;
}

inline Draws draws_of(const Row& r, const Options& o) {
  return make_draws(r.per_prompt.size(), r.tv_each.size(), BootstrapOptions{o.resamples, 0.95, o.seed + 17});
}

/// Paired interval of f(a) / f(b) for a per-prompt ratio statistic num/den.
template <class Num, class Den>
Interval paired_prompt_ratio(const Row& a, const Row& b, const Draws& d, Num num, Den den) {
  std::vector<double> an, ad, bn, bd;
  for (const auto& p : a.per_prompt) an.push_back(num(p)), ad.push_back(den(p));
  for (const auto& p : b.per_prompt) bn.push_back(num(p)), bd.push_back(den(p));
  return percentile_interval(d.prompts, [&](const auto& m) { return weighted_ratio(m, an, ad) / weighted_ratio(m, bn, bd); },
                             d.level);
}

/// Paired interval of TV(a) - TV(b) over the shared quality contexts.
inline Interval paired_tv_difference(const Row& a, const Row& b, const Draws& d) {
  std::vector<double> diff(a.tv_each.size());
  for (std::size_t i = 0; i < diff.size(); ++i) diff[i] = a.tv_each[i] - b.tv_each[i];
  return percentile_interval(d.contexts, [&](const auto& m) { return weighted_mean(m, diff); }, d.level);
}

inline const char* verdict(const Interval& i, double null_value) {
  return i.contains(null_value) ? "not significant" : "significant";
}

}  // namespace claims_detail

inline void print_claims(const std::vector<Row>& rows, const Options& o) {
  using namespace claims_detail;
  const auto gen = [](const PromptCounts& p) { return double(p.generated); };
  const auto calls = [](const PromptCounts& p) { return double(p.target_calls); };
  const auto discarded = [](const PromptCounts& p) { return double(p.drafted - p.accepted); };
  const auto cost = [&](const PromptCounts& p) { return double(p.target_calls) + o.cost_ratio * double(p.drafted); };
  std::vector<std::pair<std::string, double>> settings;
  for (const Row& r : rows)
    if (settings.empty() || settings.back().first != r.pair || settings.back().second != r.temperature)
      settings.emplace_back(r.pair, r.temperature);
  std::printf("\n== Claims (95%% intervals; paired between rules of one setting; 'significant': the interval "
              "excludes no difference)\n");

  std::printf("EARS: tokens per call over Standard K=4\n");
  for (const auto& [pair, t] : settings) {
    if (pair.rfind("synthetic", 0) == 0) continue;
    std::printf("  %-10s T=%-3g", pair.c_str(), t);
    for (const Row& r : rows)
      if (r.pair == pair && r.temperature == t && r.family == "EARS")
        std::printf("  b=%g %s (%s)", r.parameter, interval_text(r.gain, r.gain_ci, "%.2f").c_str(), verdict(r.gain_ci, 1.0));
    std::printf("\n");
  }

  std::printf("FSD tv: each threshold against the previous (tokens per call ratio; TV difference)\n");
  for (const auto& [pair, t] : settings) {
    if (t == 0.0) continue;
    const Row* prev = nullptr;
    std::printf("  %-10s T=%-3g", pair.c_str(), t);
    for (const Row& r : rows) {
      if (r.pair != pair || r.temperature != t || r.family != "FSD tv") continue;
      std::printf("\n      %-12s tok/call %s TV %s", r.rule.c_str(),
                  interval_text(r.tokens_per_call, r.tokens_per_call_ci, "%.2f").c_str(),
                  interval_text(r.tv, r.tv_ci, "%.3f").c_str());
      if (prev) {
        const Draws d = draws_of(r, o);
        const Interval up = paired_prompt_ratio(r, *prev, d, gen, calls), dtv = paired_tv_difference(r, *prev, d);
        std::printf("  vs previous: x%s (%s), TV %+.3f [%+.3f,%+.3f] (%s)",
                    interval_text(r.tokens_per_call / prev->tokens_per_call, up, "%.2f").c_str(), verdict(up, 1.0),
                    r.tv - prev->tv, dtv.lo, dtv.hi, verdict(dtv, 0.0));
      }
      prev = &r;
    }
    std::printf("\n");
  }

  std::printf("SPRINTER: tokens per call over Standard K=4 (above 1: fewer target calls); excess TV over the floor\n");
  for (const auto& [pair, t] : settings) {
    if (t == 0.0) continue;
    std::printf("  %-22s T=%-3g", pair.c_str(), t);
    for (const Row& r : rows)
      if (r.pair == pair && r.temperature == t && r.family == "SPRINTER")
        std::printf("\n      eta=%g x%s (%s), excess TV %+.3f [%+.3f,%+.3f] (%s), ppl %.0f vs Standard K=4 %.0f",
                    r.parameter, interval_text(r.gain, r.gain_ci, "%.2f").c_str(), verdict(r.gain_ci, 1.0),
                    r.tv - r.noise_floor, r.excess_tv_ci.lo, r.excess_tv_ci.hi, verdict(r.excess_tv_ci, 0.0), r.ppl,
                    find(rows, pair, t, "Standard K=4") ? find(rows, pair, t, "Standard K=4")->ppl : 0.0);
    std::printf("\n");
  }

  std::printf("SpecDec++ against the best fixed K (by speedup): discarded per token ratio, speedup ratio\n");
  for (const auto& [pair, t] : settings) {
    if (t == 0.0) continue;
    const Row* best = nullptr;
    for (const Row& r : rows)
      if (r.pair == pair && r.temperature == t && r.family == "Standard" && (!best || r.speedup > best->speedup)) best = &r;
    if (!best) continue;
    std::printf("  %-22s T=%-3g best %s (speedup %s)", pair.c_str(), t, best->rule.c_str(),
                interval_text(best->speedup, best->speedup_ci, "%.2f").c_str());
    for (const Row& r : rows) {
      if (r.pair != pair || r.temperature != t || r.family != "SpecDec++") continue;
      const Draws d = draws_of(r, o);
      const Interval disc = paired_prompt_ratio(r, *best, d, discarded, gen), sp = paired_prompt_ratio(r, *best, d, gen, cost);
      std::printf("\n      h=%g discards x%s (%s), speedup x%s (%s)", r.parameter,
                  interval_text(r.discarded_per_token / best->discarded_per_token, disc, "%.2f").c_str(),
                  verdict(disc, 1.0), interval_text(r.speedup / best->speedup, sp, "%.2f").c_str(), verdict(sp, 1.0));
    }
    std::printf("\n");
  }

  std::printf("Block over Standard at the same K (Sun et al.: +5-8%%): tokens per call ratio\n");
  for (const auto& [pair, t] : settings) {
    std::printf("  %-22s T=%-3g", pair.c_str(), t);
    for (const Row& r : rows) {
      if (r.pair != pair || r.temperature != t || r.family != "Block") continue;
      char chain[32];
      std::snprintf(chain, sizeof chain, "Standard K=%g", r.parameter);
      const Row* base = find(rows, pair, t, chain);
      if (!base) continue;
      const Interval i = paired_prompt_ratio(r, *base, draws_of(r, o), gen, calls);
      std::printf("  K=%g x%s (%s)", r.parameter, interval_text(r.tokens_per_call / base->tokens_per_call, i, "%.3f").c_str(),
                  verdict(i, 1.0));
    }
    std::printf("\n");
  }
  // Traversal's rows are named like their baselines': "Traversal K=4" and "Block K=4", "Traversal
  // iid 2-2 (6)" and "Tree iid 2-2 (6)" (the same drafting, so the same trees in expectation).
  std::printf("Traversal over Standard on the same trees (Weng et al.: +2.2-5.7%% acceptance length) and over\n"
              "Block on chains (the same law): tokens per call ratio; excess TV over the noise floor\n");
  for (const auto& [pair, t] : settings) {
    bool any = false;
    for (const Row& r : rows) {
      if (r.pair != pair || r.temperature != t || r.family.rfind("Traversal", 0) != 0) continue;
      const std::string base_name = r.family == "Traversal" ? "Block" + r.rule.substr(9) : "Tree" + r.rule.substr(9);
      const Row* base = find(rows, pair, t, base_name);
      if (!base) continue;
      if (!any) std::printf("  %-22s T=%-3g", pair.c_str(), t);
      any = true;
      const Interval i = paired_prompt_ratio(r, *base, draws_of(r, o), gen, calls);
      std::printf("\n      %-22s vs %-18s x%s (%s)", r.rule.c_str(), base_name.c_str(),
                  interval_text(r.tokens_per_call / base->tokens_per_call, i, "%.3f").c_str(), verdict(i, 1.0));
      if (t != 0.0) {
        std::printf(", excess TV %+.3f [%+.3f,%+.3f] (%s)", r.tv - r.noise_floor, r.excess_tv_ci.lo, r.excess_tv_ci.hi,
                    verdict(r.excess_tv_ci, 0.0));
      }
    }
    if (any) std::printf("\n");
  }

  std::printf("Trees against Standard chains of the same node budget: tokens per call ratio\n");
  for (const auto& [pair, t] : settings) {
    bool any = false;
    for (const Row& r : rows) {
      if (r.pair != pair || r.temperature != t || r.family.find("ree") == std::string::npos) continue;
      char chain[32];
      std::snprintf(chain, sizeof chain, "Standard K=%g", r.parameter);
      const Row* base = find(rows, pair, t, chain);
      if (!base) continue;
      if (!any) std::printf("  %-22s T=%-3g", pair.c_str(), t);
      any = true;
      const Interval i = paired_prompt_ratio(r, *base, draws_of(r, o), gen, calls);
      std::printf("\n      %-22s vs %-12s x%s (%s)", r.rule.c_str(), chain,
                  interval_text(r.tokens_per_call / base->tokens_per_call, i, "%.3f").c_str(), verdict(i, 1.0));
    }
    if (any) std::printf("\n");
  }

  std::printf("Standard: excess TV over the noise floor (0: lossless within noise)\n");
  for (const auto& [pair, t] : settings) {
    if (t == 0.0) continue;
    std::printf("  %-22s T=%-3g", pair.c_str(), t);
    for (const Row& r : rows)
      if (r.pair == pair && r.temperature == t && (r.rule == "Standard K=1" || r.rule == "Standard K=4"))
        std::printf("  %s %+.3f [%+.3f,%+.3f] (%s)", r.rule.c_str(), r.tv - r.noise_floor, r.excess_tv_ci.lo,
                    r.excess_tv_ci.hi, verdict(r.excess_tv_ci, 0.0));
    std::printf("\n");
  }

  std::printf("Standard on trees: excess TV over the noise floor of the first token of a one-level tree (one per drafting)\n");
  for (const auto& [pair, t] : settings) {
    if (t == 0.0) continue;
    std::vector<std::string> seen;
    for (const Row& r : rows) {
      if (r.pair != pair || r.temperature != t || r.family.rfind("Tree", 0) != 0) continue;
      if (std::find(seen.begin(), seen.end(), r.family) != seen.end()) continue;  // same trials per drafting
      if (seen.empty()) std::printf("  %-22s T=%-3g", pair.c_str(), t);
      seen.push_back(r.family);
      std::printf("  %s %+.3f [%+.3f,%+.3f] (%s)", r.family.c_str(), r.tv - r.noise_floor, r.excess_tv_ci.lo,
                  r.excess_tv_ci.hi, verdict(r.excess_tv_ci, 0.0));
    }
    if (!seen.empty()) std::printf("\n");
  }

  std::printf("Synthetic acceptance: tokens per call against the closed form 1 + sum_j prod_{i<=j} rate(i)\n");
  for (const auto& [pair, t] : settings) {
    std::printf("  %-22s T=%-3g", pair.c_str(), t);
    for (const Row& r : rows)
      if (r.pair == pair && r.temperature == t && r.family == "Synthetic")
        std::printf("  %s %s vs %.3f (%s)", r.rule.c_str(), interval_text(r.tokens_per_call, r.tokens_per_call_ci, "%.2f").c_str(),
                    r.parameter, r.tokens_per_call_ci.contains(r.parameter) ? "inside" : "OUTSIDE");
    std::printf("\n");
  }
}

}  // namespace specverify::comparison
