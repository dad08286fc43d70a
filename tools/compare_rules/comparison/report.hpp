// The comparison's output: one Row per (model pair, temperature, rule) with 95% bootstrap
// intervals; a terminal table, CSV, JSON (nlohmann-json), and gnuplot scripts with error bars
// rendered to PNG.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comparison/bootstrap.hpp"
#include "comparison/metrics.hpp"
#include "comparison/rules.hpp"

namespace specverify::comparison {

struct Row {
  std::string pair, rule, family;
  double temperature = 0, parameter = 0;
  double accept_rate = 0, accepted_per_call = 0, tokens_per_call = 0, calls_per_token = 0;
  double drafts_per_call = 0, discarded_per_token = 0, speedup = 0, leviathan = 0;
  double tv = 0, noise_floor = 0, ppl = 0, ppl_target = 0, verify_us = 0;
  Interval tokens_per_call_ci, speedup_ci, tv_ci, floor_ci, excess_tv_ci;  // excess: TV - floor
  double gain = 0;   // tokens per call over Standard K=4's in the same setting
  Interval gain_ci;  // paired: both rules' prompts resampled together
  // The resampled units, kept for paired intervals between rows of one setting (same prompts,
  // same contexts, same draws).
  std::vector<PromptCounts> per_prompt;
  std::vector<double> tv_each, floor_each;
};

/// The units' columns the interval statistics read.
struct PromptColumns {
  std::vector<double> generated, calls, cost;
  PromptColumns(const std::vector<PromptCounts>& c, double cost_ratio) {
    for (const PromptCounts& p : c) {
      generated.push_back(double(p.generated));
      calls.push_back(double(p.target_calls));
      cost.push_back(double(p.target_calls) + cost_ratio * double(p.drafted));
    }
  }
};

/// Resampling draws of one setting: over its prompts and over its quality contexts.
struct Draws {
  std::vector<std::vector<std::int32_t>> prompts, contexts;
  double level = 0.95;
};

inline Draws make_draws(std::size_t prompts, std::size_t contexts, const BootstrapOptions& o) {
  BootstrapOptions c = o;
  c.seed = o.seed ^ 0x5DEECE66Dull;  // an independent stream for the contexts
  return {bootstrap_draws(std::int32_t(prompts), o), bootstrap_draws(std::int32_t(contexts), c), o.level};
}

inline Row make_row(const std::string& pair, double temperature, const RuleSpec& spec, const RunStats& s,
                    const Quality& q, const RunStats& target, double cost_ratio, const Draws& draws) {
  Row r;
  r.pair = pair;
  r.rule = spec.name;
  r.family = spec.family;
  r.temperature = temperature;
  r.parameter = spec.parameter;
  const double calls = double(s.target_calls), gen = double(s.generated);
  r.accept_rate = s.drafted ? double(s.accepted) / double(s.drafted) : 0;
  r.accepted_per_call = double(s.accepted) / calls;
  r.tokens_per_call = gen / calls;
  r.calls_per_token = calls / gen;
  r.drafts_per_call = double(s.drafted) / calls;
  r.discarded_per_token = double(s.drafted - s.accepted) / gen;
  r.speedup = measured_speedup(s.generated, s.target_calls, s.drafted, cost_ratio);
  r.leviathan = leviathan_speedup(r.accept_rate, r.drafts_per_call, cost_ratio);
  r.tv = q.tv;
  r.noise_floor = q.noise_floor;
  r.ppl = std::exp(-s.logprob / gen);
  r.ppl_target = std::exp(-target.logprob / double(target.generated));
  r.verify_us = s.steps ? 1e6 * s.verify_seconds / double(s.steps) : 0;
  r.per_prompt = s.per_prompt;
  r.tv_each = q.tv_each;
  r.floor_each = q.floor_each;
  const PromptColumns c(s.per_prompt, cost_ratio);
  r.tokens_per_call_ci = percentile_interval(
      draws.prompts, [&](const auto& m) { return weighted_ratio(m, c.generated, c.calls); }, draws.level);
  r.speedup_ci = percentile_interval(
      draws.prompts, [&](const auto& m) { return weighted_ratio(m, c.generated, c.cost); }, draws.level);
  std::vector<double> excess(q.tv_each.size());
  for (std::size_t i = 0; i < excess.size(); ++i) excess[i] = q.tv_each[i] - q.floor_each[i];
  r.tv_ci = percentile_interval(draws.contexts, [&](const auto& m) { return weighted_mean(m, q.tv_each); }, draws.level);
  r.floor_ci = percentile_interval(draws.contexts, [&](const auto& m) { return weighted_mean(m, q.floor_each); },
                                   draws.level);
  r.excess_tv_ci = percentile_interval(draws.contexts, [&](const auto& m) { return weighted_mean(m, excess); },
                                       draws.level);
  return r;
}

/// Paired interval of a / b for tokens per call of two rows of one setting (same prompts).
inline Interval tokens_per_call_ratio(const Row& a, const Row& b, const Draws& draws, double cost_ratio) {
  const PromptColumns ca(a.per_prompt, cost_ratio), cb(b.per_prompt, cost_ratio);
  return percentile_interval(draws.prompts, [&](const auto& m) {
    return weighted_ratio(m, ca.generated, ca.calls) / weighted_ratio(m, cb.generated, cb.calls);
  }, draws.level);
}

inline std::string interval_text(double value, const Interval& i, const char* format) {
  char v[32], lo[32], hi[32], out[112];
  std::snprintf(v, sizeof v, format, value);
  std::snprintf(lo, sizeof lo, format, i.lo);
  std::snprintf(hi, sizeof hi, format, i.hi);
  std::snprintf(out, sizeof out, "%s [%s,%s]", v, lo, hi);
  return out;
}

inline void print_header(const std::string& title) {
  std::printf("\n== %s\n%-25s %6s %18s %7s %6s %18s %6s %21s %6s %7s %7s\n", title.c_str(), "rule", "accept",
              "tok/call [95% CI]", "calls/t", "disc/t", "speedup [95% CI]", "Lev.", "TV [95% CI]", "floor", "ppl",
              "verify");
}

inline void print_row(const Row& r) {
  std::printf("%-25s %6.3f %18s %7.3f %6.2f %18s %6.2f %21s %6.3f %7.1f %5.0fus\n", r.rule.c_str(), r.accept_rate,
              interval_text(r.tokens_per_call, r.tokens_per_call_ci, "%.2f").c_str(), r.calls_per_token,
              r.discarded_per_token, interval_text(r.speedup, r.speedup_ci, "%.2f").c_str(), r.leviathan,
              interval_text(r.tv, r.tv_ci, "%.3f").c_str(), r.noise_floor, r.ppl, r.verify_us);
}

inline const char* kColumns =
    "pair,temperature,rule,family,parameter,accept_rate,accepted_per_call,tokens_per_call,tokens_per_call_lo,"
    "tokens_per_call_hi,calls_per_token,drafts_per_call,discarded_per_token,speedup,speedup_lo,speedup_hi,"
    "leviathan_speedup,tv,tv_lo,tv_hi,tv_noise_floor,tv_noise_floor_lo,tv_noise_floor_hi,excess_tv_lo,"
    "excess_tv_hi,ppl,ppl_target,verify_us";

inline void write_csv(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream o(path);
  o << kColumns << '\n';
  for (const Row& r : rows) {
    o << '"' << r.pair << "\"," << r.temperature << ",\"" << r.rule << "\",\"" << r.family << "\"," << r.parameter
      << ',' << r.accept_rate << ',' << r.accepted_per_call << ',' << r.tokens_per_call << ','
      << r.tokens_per_call_ci.lo << ',' << r.tokens_per_call_ci.hi << ',' << r.calls_per_token << ','
      << r.drafts_per_call << ',' << r.discarded_per_token << ',' << r.speedup << ',' << r.speedup_ci.lo << ','
      << r.speedup_ci.hi << ',' << r.leviathan << ',' << r.tv << ',' << r.tv_ci.lo << ',' << r.tv_ci.hi << ','
      << r.noise_floor << ',' << r.floor_ci.lo << ',' << r.floor_ci.hi << ',' << r.excess_tv_ci.lo << ','
      << r.excess_tv_ci.hi << ',' << r.ppl << ',' << r.ppl_target << ',' << r.verify_us << '\n';
  }
}

inline nlohmann::json interval_json(double value, const Interval& i) {
  return {{"value", value}, {"lo", i.lo}, {"hi", i.hi}};
}

inline void write_json(const std::string& path, const std::vector<Row>& rows, const nlohmann::json& settings) {
  nlohmann::json out{{"settings", settings}, {"rows", nlohmann::json::array()}};
  for (const Row& r : rows) {
    out["rows"].push_back({{"pair", r.pair},
                           {"temperature", r.temperature},
                           {"rule", r.rule},
                           {"family", r.family},
                           {"parameter", r.parameter},
                           {"accept_rate", r.accept_rate},
                           {"accepted_per_call", r.accepted_per_call},
                           {"tokens_per_call", interval_json(r.tokens_per_call, r.tokens_per_call_ci)},
                           {"calls_per_token", r.calls_per_token},
                           {"drafts_per_call", r.drafts_per_call},
                           {"discarded_per_token", r.discarded_per_token},
                           {"speedup", interval_json(r.speedup, r.speedup_ci)},
                           {"leviathan_speedup", r.leviathan},
                           {"tv", interval_json(r.tv, r.tv_ci)},
                           {"tv_noise_floor", interval_json(r.noise_floor, r.floor_ci)},
                           {"excess_tv", interval_json(r.tv - r.noise_floor, r.excess_tv_ci)},
                           {"ppl", r.ppl},
                           {"ppl_target", r.ppl_target},
                           {"verify_us", r.verify_us}});
  }
  std::ofstream(path) << out.dump(2) << '\n';
}

/// A plot panel: one (pair, temperature).
struct Panel {
  std::string pair;
  double temperature;
};

/// gnuplot data blocks: one file per panel with the rows of each family as a block, each point
/// with its 95% intervals (TV across, tokens per call up).
inline void write_plots(const std::string& dir, const std::vector<Row>& rows, const std::vector<Panel>& panels) {
  const char* families[] = {"Standard", "Block", "Tree top-k", "Tree w/o-repl", "Tree iid", "Greedy", "EARS", "FSD tv", "FSD js", "FSD js_fsd", "FSD kl_pq",
                            "FSD kl_qp", "rFSD", "SPRINTER", "SpecDec++", "Typical", "Synthetic"};
  const std::size_t columns = panels.size() > 4 ? 3 : 2, lines = (panels.size() + columns - 1) / columns;
  std::ofstream g(dir + "/tradeoff.gp");
  g << "set terminal pngcairo size " << 700 * columns << "," << 500 * lines << " font ',11' noenhanced\nset output '"
    << dir << "/tradeoff.png'\n"
    << "set multiplot layout " << lines << "," << columns
    << " title 'Tokens per target call vs quality cost (binned TV of the emitted token from p), 95% bootstrap "
       "intervals; dashed: noise floor'\nset key bottom right font ',8'\nset grid\n"
    << "set xlabel 'quality cost: TV(emitted, p)'\nset ylabel 'tokens per target call'\nset bars small\n";
  for (std::size_t pi = 0; pi < panels.size(); ++pi) {
    const std::string data = dir + "/tradeoff_" + std::to_string(pi) + ".dat";
    std::ofstream d(data);
    double floor = 0;
    std::size_t blocks = 0;  // families with rows in this panel (an empty block makes gnuplot warn)
    for (const char* fam : families) {
      const auto in_panel = [&](const Row& r) {
        return r.pair == panels[pi].pair && std::abs(r.temperature - panels[pi].temperature) < 1e-4 && r.family == fam;
      };
      if (std::none_of(rows.begin(), rows.end(), in_panel)) continue;
      ++blocks;
      d << "\"" << fam << "\"\n";
      for (const Row& r : rows)
        if (in_panel(r)) {
          d << r.tv << ' ' << r.tokens_per_call << ' ' << r.tv_ci.lo << ' ' << r.tv_ci.hi << ' '
            << r.tokens_per_call_ci.lo << ' ' << r.tokens_per_call_ci.hi << '\n';
          floor = r.noise_floor;
        }
      d << "\n\n";
    }
    g << "set title '" << panels[pi].pair << ", T = " << panels[pi].temperature << "'\nset arrow 1 from " << floor
      << ", graph 0 to " << floor << ", graph 1 nohead dt 2 lc 'gray'\n"
      << "plot for [i=0:" << blocks - 1 << "] '" << data
      << "' index i using 1:2:3:4:5:6 with xyerrorlines pt (i%7+1) ps 1.1 title columnheader(1)\n";
  }
  g << "unset multiplot\n";

  // One block per beta (fortunes pair): temperature, gain over Standard K=4, its paired interval.
  std::ofstream e(dir + "/ears_gain.dat");
  std::vector<double> betas;
  for (const Row& r : rows)
    if (r.family == "EARS" && std::find(betas.begin(), betas.end(), r.parameter) == betas.end()) betas.push_back(r.parameter);
  for (const double beta : betas) {
    e << "\"beta = " << beta << "\"\n";
    for (const Row& r : rows)
      if (r.family == "EARS" && r.parameter == beta && r.pair == "fortunes")
        e << r.temperature << ' ' << r.gain << ' ' << r.gain_ci.lo << ' ' << r.gain_ci.hi << '\n';
    e << "\n\n";
  }
  std::ofstream h(dir + "/ears_gain.gp");
  h << "set terminal pngcairo size 900,600 font ',11' noenhanced\nset output '" << dir << "/ears_gain.png'\n"
    << "set title 'EARS: tokens per target call relative to Standard (K = 4), fortunes pair, paired 95% intervals'\n"
    << "set xlabel 'temperature'\nset ylabel 'gain (x Standard)'\nset grid\nset key top left\nset offsets 0.05, 0.05, 0, 0\n"
    << "plot for [i=0:" << (betas.empty() ? 0 : betas.size() - 1) << "] '" << dir
    << "/ears_gain.dat' index i using ($1+0.01*i):2:3:4 with yerrorlines lw 2 ps 1.5 title columnheader(1)\n";
}

inline bool run_gnuplot(const std::string& script) {
  const std::string cmd = "gnuplot '" + script + "' 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace specverify::comparison
