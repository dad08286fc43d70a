// The rule comparison: full speculative-decoding loops with every rule on real-text n-gram pairs
// (fortunes corpus: KN 4-gram target, KN bigram draft; CMU's published US English trigram model:
// trigram target, its bigram rows as draft) and on synthetic LLM-like pairs; prints a table per
// setting with 95% bootstrap intervals and the README's claims, and writes CSV, JSON and PNG
// plots. See README "The rule comparison"; `compare_rules --help` lists the options.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "comparison/claims.hpp"
#include "comparison/cli.hpp"
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
/// divergence family shown is enough. Sampled trees are pointless there (a one-hot q drafts the
/// same child again); top-k trees are verified by Standard and by Greedy (the same decisions).
Sweep sweep_at(Sweep s, float temperature) {
  if (temperature == 0.0f) {
    s.divergences = {specverify::Divergence::tv, specverify::Divergence::js};
    s.fsd_scale = {0.3f};
    std::vector<TreeSetting> trees;
    for (const TreeSetting& t : s.trees) {
      if (t.drafted != specverify::Drafted::deterministic) continue;
      trees.push_back(t);
      trees.push_back({t.shape, t.drafted, true});
    }
    s.trees = trees;
  }
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

using Prompts = std::vector<std::vector<std::int32_t>>;

/// Shuffles `pool` by the seed and splits it into the decoding prompts and the quality contexts.
std::pair<Prompts, Prompts> split_prompts(Prompts pool, const Options& o, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[rng() % i]);
  const std::size_t n = std::min(pool.size(), std::size_t(o.prompts));
  const std::size_t m = std::min(pool.size() - n, std::size_t(o.contexts));
  return {Prompts(pool.begin(), pool.begin() + std::ptrdiff_t(n)),
          Prompts(pool.begin() + std::ptrdiff_t(n), pool.begin() + std::ptrdiff_t(n + m))};
}

}  // namespace

int main(int argc, char** argv) {
  CommandLine cl;
  CLI::App app{"specverify rule comparison: every rule in full speculative-decoding loops, with 95% bootstrap "
               "intervals (README \"The rule comparison\")"};
  add_options(app, cl);
  CLI11_PARSE(app, argc, argv);
  Options& o = cl.options;
  const bool full = cl.full;
  const std::string &out = cl.out, &corpus_dir = cl.corpus, &lm_path = cl.lm;

  if (full) {
    o.prompts *= 4;
    o.tokens *= 2;
    o.trials *= 5;
    o.contexts *= 2;
    o.sweep.fsd_scale = {0.02f, 0.05f, 0.1f, 0.15f, 0.2f, 0.3f, 0.45f, 0.6f};
    o.sweep.block_k = {2, 3, 4, 6, 8};
    // Deeper trees at the same budgets: two chains of 3 (6 nodes) and of 4 (8 nodes).
    for (const auto how : {specverify::Drafted::deterministic, specverify::Drafted::sampled_without_replacement,
                           specverify::Drafted::sampled})
      for (const TreeShape& shape : {TreeShape{{2, 1, 1}}, TreeShape{{2, 1, 1, 1}}})
        o.sweep.trees.push_back({shape, how, false});
  }
  const auto start = std::chrono::steady_clock::now();
  Corpus corpus = build_corpus(read_fortune_dir(corpus_dir), 10);
  if (corpus.train.empty()) {
    std::fprintf(stderr, "no fortunes under %s (Debian: apt-get install fortunes)\n", corpus_dir.c_str());
    return 1;
  }
  auto target = std::make_shared<const KneserNey>(4, corpus.vocab(), corpus.train, corpus.bos, corpus.eos);
  auto draft = std::make_shared<const KneserNey>(2, corpus.vocab(), corpus.train, corpus.bos, corpus.eos);
  std::printf("specverify rule comparison, seed %llu, cost ratio c = %g%s; intervals: 95%% percentile bootstrap, "
              "%d resamples of the prompts (tokens per call, speedup) and of the quality contexts (TV)\n",
              (unsigned long long)o.seed, o.cost_ratio, full ? ", full sweep" : "", o.resamples);
  std::printf("fortunes: V = %d words, %zu training / %zu held-out sentences; KN 4-gram target, KN bigram "
              "draft (built in %.1f s)\n", corpus.vocab(), corpus.train.size(), corpus.heldout.size(),
              seconds_since(start));

  // Held-out prompts: the first three words of sentences with at least six, drawn by the seed.
  Prompts pool;
  for (const auto& s : corpus.heldout)
    if (s.size() >= 6) pool.emplace_back(s.begin(), s.begin() + 3);
  const auto [prompts, quality] = split_prompts(pool, o, o.seed);
  std::mt19937_64 rng(o.seed + 1);
  Prompts random_prompts(std::size_t(o.prompts), std::vector<std::int32_t>(3));
  for (auto& p : random_prompts)
    for (auto& t : p) t = std::int32_t(rng() % 32000);
  const Prompts random_quality(random_prompts.begin(),
                               random_prompts.begin() + std::min<std::ptrdiff_t>(o.prompts, o.contexts));

  struct Setting {
    std::shared_ptr<ModelPair> pair;
    float temperature;
    const Prompts* prompts;
    const Prompts* quality;
    bool text;
  };
  std::vector<Setting> settings;
  auto ngram = std::make_shared<NgramPair>(target, draft);
  for (const float t : {0.0f, 0.6f, 1.0f}) settings.push_back({ngram, t, &prompts, &quality, true});

  // CMU's published model, prompted with the same held-out fortunes mapped into its vocabulary.
  Prompts cmu_prompts, cmu_quality;
  if (std::filesystem::exists(lm_path)) {
    const auto t0 = std::chrono::steady_clock::now();
    auto lm = std::make_shared<const SphinxTrigram>(lm_path);
    // The model has no <unk>: a sentence is a prompt only if its first three words are all in the
    // vocabulary (lowercase, as the corpus is); later words are never read.
    Prompts cmu_pool;
    std::size_t candidates = 0;
    for (const auto& s : corpus.heldout) {
      if (s.size() < 6) continue;
      ++candidates;
      std::vector<std::int32_t> p;
      for (std::size_t i = 0; i < 3; ++i) {
        const std::int32_t id = lm->id(corpus.words[std::size_t(s[i])]);
        if (id >= 0) p.push_back(id);
      }
      if (p.size() == 3) cmu_pool.push_back(p);
    }
    std::tie(cmu_prompts, cmu_quality) = split_prompts(cmu_pool, o, o.seed);
    std::printf("cmu-en-us: CMU Sphinx US English trigram model (%s): V = %d words, %zu bigrams, %zu trigrams "
                "(read in %.1f s); trigram target, bigram draft; prompts: %zu of %zu held-out fortune sentences "
                "have their first three words in its vocabulary\n", lm_path.c_str(), lm->vocab(), lm->bigram_count(),
                lm->trigram_count(), seconds_since(t0), cmu_pool.size(), candidates);
    auto cmu = std::make_shared<SphinxPair>(lm);
    for (const float t : full ? std::vector<float>{0.0f, 0.6f, 1.0f} : std::vector<float>{0.6f, 1.0f})
      settings.push_back({cmu, t, &cmu_prompts, &cmu_quality, true});
  } else {
    std::printf("cmu-en-us: skipped, no %s (Debian: apt-get install pocketsphinx-en-us)\n", lm_path.c_str());
  }
  for (const std::int32_t V : {32000, 128256}) {
    for (const double mis : full ? std::vector<double>{0.5, 1.0, 2.0} : std::vector<double>{1.0}) {
      auto pair = std::make_shared<SyntheticPair>(V, mis, o.seed + std::uint64_t(V));
      for (const float t : full ? std::vector<float>{0.0f, 0.6f, 1.0f} : std::vector<float>{1.0f})
        settings.push_back({pair, t, &random_prompts, &random_quality, false});
    }
  }
  const auto sweep_of = [&](const Setting& s) {
    Sweep sweep = sweep_at(o.sweep, s.temperature);
    // The tree walk's residual passes make trees the slowest rows at V = 128256: --full only.
    if (!full && s.pair->vocab() > 100000) sweep.trees.clear();
    return sweep;
  };
  Progress progress;
  for (const Setting& s : settings) progress.total += rules_per_setting(sweep_of(s));
  std::vector<Row> rows;
  std::vector<double> setting_seconds;
  for (const Setting& s : settings) {
    const auto t0 = std::chrono::steady_clock::now();
    Options so = o;
    so.sweep = sweep_of(s);
    if (!s.text) so.trials = std::max(1, o.trials / 3);  // rows of 128k: fewer trials, same contexts count
    const auto r = run_setting(*s.pair, *s.prompts, *s.quality, s.temperature, so,
                               [&](const std::string& what) { progress.step(what); });
    rows.insert(rows.end(), r.begin(), r.end());
    setting_seconds.push_back(seconds_since(t0));
  }

  for (std::size_t i = 0, setting = 0; i < rows.size(); ++i) {
    if (i == 0 || rows[i].pair != rows[i - 1].pair || rows[i].temperature != rows[i - 1].temperature) {
      char title[240];
      std::snprintf(title, sizeof title, "%s, T = %g: %zu prompts x %d tokens; TV from %d trials x %zu contexts; "
                    "target-sampling ppl %.1f (%.1f s)", rows[i].pair.c_str(), rows[i].temperature,
                    rows[i].per_prompt.size(), o.tokens,
                    rows[i].pair.rfind("synthetic", 0) == 0 ? std::max(1, o.trials / 3) : o.trials,
                    rows[i].tv_each.size(), rows[i].ppl_target, setting_seconds[setting++]);
      print_header(title);
    }
    print_row(rows[i]);
  }
  print_claims(rows, o);

  std::filesystem::create_directories(out);
  write_csv(out + "/comparison.csv", rows);
  const nlohmann::json settings_json{{"seed", o.seed},         {"cost_ratio", o.cost_ratio}, {"prompts", o.prompts},
                                     {"tokens", o.tokens},     {"trials", o.trials},         {"contexts", o.contexts},
                                     {"resamples", o.resamples}, {"interval", "95% percentile bootstrap"},
                                     {"full", full},           {"lm", lm_path}};
  write_json(out + "/comparison.json", rows, settings_json);
  std::vector<Panel> panels{{"fortunes", 0.6}, {"fortunes", 1.0}};
  if (!cmu_prompts.empty()) panels.insert(panels.end(), {{"cmu-en-us", 0.6}, {"cmu-en-us", 1.0}});
  for (const Setting& s : settings)
    if (!s.text && s.temperature == 1.0f && panels.size() < 6 &&
        std::none_of(panels.begin(), panels.end(), [&](const Panel& p) { return p.pair == s.pair->name(); }))
      panels.push_back({s.pair->name(), 1.0});
  write_plots(out, rows, panels);
  const bool plotted = run_gnuplot(out + "/tradeoff.gp") && run_gnuplot(out + "/ears_gain.gp");
  std::printf("\nwrote %s/comparison.{csv,json}%s; %.1f s\n", out.c_str(),
              plotted ? ", tradeoff.png, ears_gain.png" : " (gnuplot failed: no PNGs)", seconds_since(start));
  return 0;
}
