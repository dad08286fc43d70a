// compare_rules' command line (CLI11): every option with its range, so a bad value is an error
// naming the option (`--seed abc` is "Could not convert", not seed 0).
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "comparison/setup.hpp"

namespace specverify::comparison {

struct CommandLine {
  Options options;
  bool full = false;
  std::string out = "build/release/comparison";
  std::string corpus = "/usr/share/games/fortunes";
  std::string lm = "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin";
};

inline void add_options(CLI::App& app, CommandLine& c) {
  Options& o = c.options;
  // Digits only, within 64 bits: CLI11 would otherwise wrap "-1" and overflow silently.
  const CLI::Validator digits(
      [](std::string& v) {
        if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
          return "'" + v + "' is not a non-negative integer";
        errno = 0;
        std::strtoull(v.c_str(), nullptr, 10);
        return errno == ERANGE ? "'" + v + "' is larger than 2^64 - 1" : std::string();
      },
      "UINT64");
  app.add_option("--seed", o.seed, "seed of every random choice (prompts, drafts, verify, bootstrap)")
      ->check(digits)
      ->capture_default_str();
  app.add_flag("--full", c.full, "larger sweep: 4x prompts, 2x tokens, 5x trials, 2x contexts, more thresholds");
  app.add_option("--out", c.out, "output directory")->capture_default_str();
  app.add_option("--cost-ratio", o.cost_ratio, "draft/target cost ratio c of the speedup column")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--corpus", c.corpus, "directory of fortune files")->capture_default_str();
  app.add_option("--lm", c.lm, "CMU Sphinx trie language model (Debian pocketsphinx-en-us)")->capture_default_str();
  app.add_option("--prompts", o.prompts, "prompts per setting (the bootstrap's units)")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  app.add_option("--tokens", o.tokens, "tokens generated per prompt")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--trials", o.trials, "quality trials per context")->check(CLI::Range(1, 10000000))->capture_default_str();
  app.add_option("--contexts", o.contexts, "quality contexts per setting (the TV bootstrap's units)")
      ->check(CLI::Range(2, 100000))
      ->capture_default_str();
  app.add_option("--resamples", o.resamples, "bootstrap resamples per interval")
      ->check(CLI::Range(100, 1000000))
      ->capture_default_str();
}

}  // namespace specverify::comparison
