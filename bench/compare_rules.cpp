// The rule comparison: full speculative-decoding loops with every rule on a real-text n-gram pair
// (fortunes corpus: KN 4-gram target, KN bigram draft) and on synthetic LLM-like pairs; prints
// a table per setting and writes CSV, JSON and PNG plots. See README "The rule comparison".
//
//   build/release/bench/compare_rules [--seed N] [--full] [--out DIR] [--cost-ratio C]
//                                     [--corpus DIR] [--prompts N] [--tokens N] [--trials N]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "comparison/corpus.hpp"
#include "comparison/setup.hpp"

using namespace specverify::comparison;

namespace {

struct Progress {
  int done = 0, total = 0;
  bool tty = isatty(2);
  void step(const std::string& what) {
    ++done;
    if (!tty) return;  // no progress lines in CI logs
    const int width = 30, filled = width * done / total;
    std::fprintf(stderr, "\r[%.*s%*s] %3d/%d %-28s", filled, "##############################", width - filled, "",
                 done, total, what.c_str());
    if (done == total) std::fprintf(stderr, "\r%*s\r", 80, "");
  }
};

/// At temperature 0 the rows are one-hot and every rule is greedy matching: one FSD point per
/// divergence family shown is enough.
Sweep sweep_at(Sweep s, float temperature) {
  if (temperature == 0.0f) {
    s.divergences = {specverify::Divergence::tv, specverify::Divergence::js};
    s.fsd_scale = {0.3f};
  }
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool full = false;
  std::string out = "build/release/comparison", corpus_dir = "/usr/share/games/fortunes";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--full") { full = true; continue; }
    if (a == "--help" || i + 1 >= argc) {
      std::printf("usage: compare_rules [--seed N] [--full] [--out DIR] [--cost-ratio C] [--corpus DIR]\n"
                  "                     [--prompts N] [--tokens N] [--trials N]\n");
      return a == "--help" ? 0 : 2;
    }
    ++i;
    if (a == "--seed") o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--out") out = v;
    else if (a == "--cost-ratio") o.cost_ratio = std::atof(v);
    else if (a == "--corpus") corpus_dir = v;
    else if (a == "--prompts") o.prompts = std::max(1, std::atoi(v));
    else if (a == "--tokens") o.tokens = std::max(1, std::atoi(v));
    else if (a == "--trials") o.trials = std::max(1, std::atoi(v));
    else { std::fprintf(stderr, "unknown flag %s\n", a.c_str()); return 2; }
  }
  if (full) {
    o.prompts *= 4;
    o.tokens *= 2;
    o.trials *= 5;
    o.contexts *= 2;
    o.sweep.fsd_scale = {0.02f, 0.05f, 0.1f, 0.15f, 0.2f, 0.3f, 0.45f, 0.6f};
  }
  const auto start = std::chrono::steady_clock::now();
  Corpus corpus = build_corpus(read_fortune_dir(corpus_dir), 10);
  if (corpus.train.empty()) {
    std::fprintf(stderr, "no fortunes under %s (Debian: apt-get install fortunes)\n", corpus_dir.c_str());
    return 1;
  }
  auto target = std::make_shared<const KneserNey>(4, corpus.vocab(), corpus.train, corpus.bos, corpus.eos);
  auto draft = std::make_shared<const KneserNey>(2, corpus.vocab(), corpus.train, corpus.bos, corpus.eos);
  std::printf("specverify rule comparison, seed %llu, cost ratio c = %g%s\n", (unsigned long long)o.seed,
              o.cost_ratio, full ? ", full sweep" : "");
  std::printf("fortunes: V = %d words, %zu training / %zu held-out sentences; KN 4-gram target, KN bigram "
              "draft (built in %.1f s)\n", corpus.vocab(), corpus.train.size(), corpus.heldout.size(),
              seconds_since(start));

  // Held-out prompts: the first three words of sentences with at least six, drawn by the seed.
  std::vector<std::vector<std::int32_t>> pool;
  for (const auto& s : corpus.heldout)
    if (s.size() >= 6) pool.emplace_back(s.begin(), s.begin() + 3);
  std::mt19937_64 rng(o.seed);
  for (std::size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[rng() % i]);
  const std::vector<std::vector<std::int32_t>> prompts(pool.begin(), pool.begin() + o.prompts),
      quality(pool.begin() + o.prompts, pool.begin() + o.prompts + o.contexts);
  std::vector<std::vector<std::int32_t>> random_prompts(std::size_t(o.prompts), std::vector<std::int32_t>(3));
  for (auto& p : random_prompts)
    for (auto& t : p) t = std::int32_t(rng() % 32000);

  struct Setting {
    std::shared_ptr<ModelPair> pair;
    float temperature;
    bool text;
  };
  std::vector<Setting> settings;
  auto ngram = std::make_shared<NgramPair>(target, draft);
  for (const float t : {0.0f, 0.6f, 1.0f}) settings.push_back({ngram, t, true});
  for (const std::int32_t V : {32000, 128256}) {
    for (const double mis : full ? std::vector<double>{0.5, 1.0, 2.0} : std::vector<double>{1.0}) {
      auto pair = std::make_shared<SyntheticPair>(V, mis, o.seed + std::uint64_t(V));
      for (const float t : full ? std::vector<float>{0.0f, 0.6f, 1.0f} : std::vector<float>{1.0f})
        settings.push_back({pair, t, false});
    }
  }
  Progress progress;
  for (const Setting& s : settings) progress.total += rules_per_setting(sweep_at(o.sweep, s.temperature));
  std::vector<Row> rows;
  for (const Setting& s : settings) {
    Options so = o;
    so.sweep = sweep_at(o.sweep, s.temperature);
    if (!s.text) so.trials = std::max(1, o.trials / 3);  // rows of 128k: fewer trials, same contexts count
    const auto& qp = s.text ? quality : std::vector<std::vector<std::int32_t>>(random_prompts.begin(), random_prompts.begin() + std::min<std::size_t>(random_prompts.size(), std::size_t(o.contexts)));
    const auto r = run_setting(*s.pair, s.text ? prompts : random_prompts, qp, s.temperature, so,
                               [&](const std::string& what) { progress.step(what); });
    rows.insert(rows.end(), r.begin(), r.end());
  }

  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i == 0 || rows[i].pair != rows[i - 1].pair || rows[i].temperature != rows[i - 1].temperature) {
      char title[160];
      std::snprintf(title, sizeof title, "%s, T = %g: %d prompts x %d tokens; TV from %d trials x %d contexts; "
                    "target-sampling ppl %.1f", rows[i].pair.c_str(), rows[i].temperature, o.prompts, o.tokens,
                    o.trials, o.contexts, rows[i].ppl_target);
      print_header(title);
    }
    print_row(rows[i]);
  }
  std::filesystem::create_directories(out);
  write_csv(out + "/comparison.csv", rows);
  char settings_json[256];
  std::snprintf(settings_json, sizeof settings_json,
                "{\"seed\": %llu, \"cost_ratio\": %g, \"prompts\": %d, \"tokens\": %d, \"trials\": %d, "
                "\"contexts\": %d, \"full\": %s}", (unsigned long long)o.seed, o.cost_ratio, o.prompts, o.tokens,
                o.trials, o.contexts, full ? "true" : "false");
  write_json(out + "/comparison.json", rows, settings_json);
  write_plots(out, rows, {{"fortunes", 0.6}, {"fortunes", 1.0}, {settings[3].pair->name(), 1.0},
                          {settings.back().pair->name(), 1.0}});
  const bool plotted = run_gnuplot(out + "/tradeoff.gp") && run_gnuplot(out + "/ears_gain.gp");
  std::printf("\nwrote %s/comparison.{csv,json}%s; %.1f s\n", out.c_str(),
              plotted ? ", tradeoff.png, ears_gain.png" : " (gnuplot failed: no PNGs)", seconds_since(start));
  return 0;
}
