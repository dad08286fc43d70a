// The comparison's output: one Row per (model pair, temperature, rule); a terminal table, CSV,
// JSON, and gnuplot scripts rendered to PNG.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "comparison/metrics.hpp"
#include "comparison/rules.hpp"

namespace specverify::comparison {

struct Row {
  std::string pair, rule, family;
  double temperature = 0, parameter = 0;
  double accept_rate = 0, accepted_per_call = 0, tokens_per_call = 0, calls_per_token = 0;
  double drafts_per_call = 0, discarded_per_token = 0, speedup = 0, leviathan = 0;
  double tv = 0, noise_floor = 0, ppl = 0, ppl_target = 0, verify_us = 0;
};

inline Row make_row(const std::string& pair, double temperature, const RuleSpec& spec, const RunStats& s,
                    const Quality& q, const RunStats& target, double cost_ratio) {
  Row r{pair, spec.name, spec.family, temperature, spec.parameter};
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
  return r;
}

inline void print_header(const std::string& title) {
  std::printf("\n== %s\n%-20s %7s %8s %7s %7s %8s %7s %7s %7s %7s %8s\n", title.c_str(), "rule", "accept",
              "tok/call", "calls/t", "disc/t", "speedup", "Lev.", "TV", "floor", "ppl", "verify");
}

inline void print_row(const Row& r) {
  std::printf("%-20s %7.3f %8.2f %7.3f %7.2f %8.2f %7.2f %7.3f %7.3f %7.1f %6.0fus\n", r.rule.c_str(),
              r.accept_rate, r.tokens_per_call, r.calls_per_token, r.discarded_per_token, r.speedup, r.leviathan,
              r.tv, r.noise_floor, r.ppl, r.verify_us);
}

inline const char* kColumns =
    "pair,temperature,rule,family,parameter,accept_rate,accepted_per_call,tokens_per_call,calls_per_token,"
    "drafts_per_call,discarded_per_token,speedup,leviathan_speedup,tv,tv_noise_floor,ppl,ppl_target,verify_us";

inline void write_csv(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream o(path);
  o << kColumns << '\n';
  for (const Row& r : rows) {
    o << '"' << r.pair << "\"," << r.temperature << ",\"" << r.rule << "\",\"" << r.family << "\"," << r.parameter
      << ',' << r.accept_rate << ',' << r.accepted_per_call << ',' << r.tokens_per_call << ',' << r.calls_per_token
      << ',' << r.drafts_per_call << ',' << r.discarded_per_token << ',' << r.speedup << ',' << r.leviathan << ','
      << r.tv << ',' << r.noise_floor << ',' << r.ppl << ',' << r.ppl_target << ',' << r.verify_us << '\n';
  }
}

inline void write_json(const std::string& path, const std::vector<Row>& rows, const std::string& settings) {
  std::ofstream o(path);
  o << "{\n  \"settings\": " << settings << ",\n  \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    o << "    {\"pair\": \"" << r.pair << "\", \"temperature\": " << r.temperature << ", \"rule\": \"" << r.rule
      << "\", \"family\": \"" << r.family << "\", \"parameter\": " << r.parameter
      << ", \"accept_rate\": " << r.accept_rate << ", \"accepted_per_call\": " << r.accepted_per_call
      << ", \"tokens_per_call\": " << r.tokens_per_call << ", \"calls_per_token\": " << r.calls_per_token
      << ", \"drafts_per_call\": " << r.drafts_per_call << ", \"discarded_per_token\": " << r.discarded_per_token
      << ", \"speedup\": " << r.speedup << ", \"leviathan_speedup\": " << r.leviathan << ", \"tv\": " << r.tv
      << ", \"tv_noise_floor\": " << r.noise_floor << ", \"ppl\": " << r.ppl << ", \"ppl_target\": " << r.ppl_target
      << ", \"verify_us\": " << r.verify_us << "}" << (i + 1 < rows.size() ? ",\n" : "\n");
  }
  o << "  ]\n}\n";
}

/// gnuplot data blocks: one file per (pair, temperature) with the rows of each family as a block.
inline void write_plots(const std::string& dir, const std::vector<Row>& rows,
                        const std::vector<std::pair<std::string, double>>& panels) {
  const char* families[] = {"Standard", "Greedy", "EARS", "FSD tv", "FSD js", "FSD js_fsd", "FSD kl_pq",
                            "FSD kl_qp", "rFSD", "SPRINTER", "SpecDec++", "Typical"};
  std::ofstream g(dir + "/tradeoff.gp");
  g << "set terminal pngcairo size 1400,1000 font ',11' noenhanced\nset output '" << dir << "/tradeoff.png'\n"
    << "set multiplot layout 2,2 title 'Tokens per target call vs quality cost (binned TV of the emitted token "
       "from p; dashed: noise floor)'\nset key bottom right font ',9'\nset grid\n"
    << "set xlabel 'quality cost: TV(emitted, p)'\nset ylabel 'tokens per target call'\n";
  for (std::size_t pi = 0; pi < panels.size() && pi < 4; ++pi) {
    const std::string data = dir + "/tradeoff_" + std::to_string(pi) + ".dat";
    std::ofstream d(data);
    double floor = 0;
    for (const char* fam : families) {
      d << "\"" << fam << "\"\n";
      for (const Row& r : rows)
        if (r.pair == panels[pi].first && std::abs(r.temperature - panels[pi].second) < 1e-4 && r.family == fam) {
          d << r.tv << ' ' << r.tokens_per_call << '\n';
          floor = r.noise_floor;
        }
      d << "\n\n";
    }
    g << "set title '" << panels[pi].first << ", T = " << panels[pi].second << "'\nset arrow 1 from " << floor
      << ", graph 0 to " << floor << ", graph 1 nohead dt 2 lc 'gray'\n"
      << "plot for [i=0:" << std::size(families) - 1 << "] '" << data
      << "' index i using 1:2 with linespoints pt (i%7+1) ps 1.3 title columnheader(1)\n";
  }
  g << "unset multiplot\n";

  // One block per beta (fortunes pair): temperature, gain over Standard K=4.
  std::ofstream e(dir + "/ears_gain.dat");
  std::vector<double> betas;
  for (const Row& r : rows)
    if (r.family == "EARS" && std::find(betas.begin(), betas.end(), r.parameter) == betas.end()) betas.push_back(r.parameter);
  for (const double beta : betas) {
    e << "\"beta = " << beta << "\"\n";
    for (const Row& r : rows)
      if (r.family == "EARS" && r.parameter == beta && r.pair == "fortunes")
        for (const Row& s : rows)
          if (s.pair == r.pair && s.temperature == r.temperature && s.rule == "Standard K=4")
            e << r.temperature << ' ' << r.tokens_per_call / s.tokens_per_call << '\n';
    e << "\n\n";
  }
  std::ofstream h(dir + "/ears_gain.gp");
  h << "set terminal pngcairo size 900,600 font ',11' noenhanced\nset output '" << dir << "/ears_gain.png'\n"
    << "set title 'EARS: tokens per target call relative to Standard (K = 4), fortunes n-gram pair'\n"
    << "set xlabel 'temperature'\nset ylabel 'gain (x Standard)'\nset grid\nset key top left\n"
    << "plot for [i=0:" << (betas.empty() ? 0 : betas.size() - 1) << "] '" << dir
    << "/ears_gain.dat' index i using 1:2 with linespoints lw 2 ps 1.5 title columnheader(1)\n";
}

inline bool run_gnuplot(const std::string& script) {
  const std::string cmd = "gnuplot '" + script + "' 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace specverify::comparison
