// Target/draft model pairs producing full next-token rows over V at a temperature: p target,
// q draft. Temperature 0 gives one-hot rows on the argmax (greedy decoding).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "comparison/ngram.hpp"
#include "comparison/sphinx_trigram.hpp"
#include "synthetic.hpp"

namespace specverify::comparison {

class ModelPair {
 public:
  virtual ~ModelPair() = default;
  virtual std::string name() const = 0;
  virtual std::int32_t vocab() const = 0;
  /// p (target) or q (draft) after text[0, n), at `temperature`, into out[V].
  virtual void target_row(const std::int32_t* text, std::int32_t n, float temperature, float* out) = 0;
  virtual void draft_row(const std::int32_t* text, std::int32_t n, float temperature, float* out) = 0;
  /// log p(w | text) at temperature 1: perplexity is always measured against the untempered target.
  virtual double target_logprob(const std::int32_t* text, std::int32_t n, std::int32_t w) = 0;
};

inline void one_hot_argmax(float* row, std::int32_t V) {
  const std::int32_t best = static_cast<std::int32_t>(std::max_element(row, row + V) - row);
  std::fill(row, row + V, 0.0f);
  row[best] = 1.0f;
}

/// Interpolated KN 4-gram target, KN bigram draft.
class NgramPair final : public ModelPair {
 public:
  NgramPair(std::shared_ptr<const KneserNey> target, std::shared_ptr<const KneserNey> draft)
      : target_(std::move(target)), draft_(std::move(draft)) {}
  std::string name() const override { return "fortunes"; }
  std::int32_t vocab() const override { return target_->vocab(); }
  void target_row(const std::int32_t* text, std::int32_t n, float t, float* out) override { row(*target_, text, n, t, out); }
  void draft_row(const std::int32_t* text, std::int32_t n, float t, float* out) override { row(*draft_, text, n, t, out); }
  double target_logprob(const std::int32_t* text, std::int32_t n, std::int32_t w) override {
    return std::log(target_->prob(text, n, w));
  }

 private:
  struct Tempered {
    std::vector<float> unigram;  // u^(1/T)
    double total = 0;
  };

  // A KN row is s * unigram except at the few words the context has seen, so the tempered row
  // (p^(1/T), normalised) is s^(1/T) u^(1/T) with u^(1/T) precomputed: one pass, no pow per word.
  void row(const KneserNey& m, const std::int32_t* text, std::int32_t n, float t, float* out) {
    const std::int32_t V = m.vocab();
    if (t == 1.0f || t == 0.0f) {
      m.distribution(text, n, out);
      if (t == 0.0f) one_hot_argmax(out, V);
      return;
    }
    double s = 0;
    const auto& sparse = m.sparse(text, n, s);
    const double a = 1.0 / t;
    Tempered& tu = tempered_[{&m, t}];
    if (tu.unigram.empty()) {
      for (const float u : m.unigram()) {
        tu.unigram.push_back(static_cast<float>(std::pow(static_cast<double>(u), a)));
        tu.total += tu.unigram.back();
      }
    }
    values_.clear();
    const double sa = std::pow(s, a);
    double z = sa * tu.total;
    for (const auto& [w, add] : sparse) {
      values_.push_back(std::pow(s * m.unigram()[std::size_t(w)] + add, a));
      z += values_.back() - sa * tu.unigram[static_cast<std::size_t>(w)];
    }
    const float scale = static_cast<float>(sa / z);
    for (std::int32_t v = 0; v < V; ++v) out[v] = scale * tu.unigram[static_cast<std::size_t>(v)];
    for (std::size_t i = 0; i < sparse.size(); ++i) out[sparse[i].first] = static_cast<float>(values_[i] / z);
  }

  std::shared_ptr<const KneserNey> target_, draft_;
  std::map<std::pair<const KneserNey*, float>, Tempered> tempered_;
  std::vector<double> values_;
};

/// CMU's published US English trigram model: target = its trigram rows, draft = the same model's
/// bigram rows (the history cut to one word). Rows are normalised explicitly (as shipped they
/// sum to 0.995-1.0001). Only the text after the last </s> is context; a sentence's first word
/// is predicted from <s> alone (the bigram row of <s>, as pocketsphinx scores it).
///
/// A row is s * u(w) except at the few words the context has stored n-grams for, with u = b^p1
/// (b = 1.0001) precomputed per temperature and s = b^(backoffs): one pass over V per row. The
/// stored n-grams' values b^(score / T) are precomputed too, once per temperature (3.7M exps), so
/// a row costs two exps, not one per stored successor (thousands after a common word). No row
/// cache is needed: a cached row would cost the same pass to copy.
class SphinxPair final : public ModelPair {
 public:
  explicit SphinxPair(std::shared_ptr<const SphinxTrigram> lm) : lm_(std::move(lm)) {}
  std::string name() const override { return "cmu-en-us"; }
  std::int32_t vocab() const override { return lm_->vocab(); }
  void target_row(const std::int32_t* text, std::int32_t n, float t, float* out) override { row(text, n, 2, t, out); }
  void draft_row(const std::int32_t* text, std::int32_t n, float t, float* out) override { row(text, n, 1, t, out); }
  double target_logprob(const std::int32_t* text, std::int32_t n, std::int32_t w) override {
    const std::int32_t c = context(text, n, 2);
    lm_->sparse_row(context_, c, sparse_);
    const Tempered& tu = tempered(1.0f);
    const double s = scale(1.0), z = normaliser(tu, s, 1.0, [](std::size_t, double) {});
    return double(lm_->score(context_, c, w)) * kLnB - std::log(z);
  }
  const SphinxTrigram& model() const { return *lm_; }

 private:
  static constexpr double kLnB = SphinxTrigram::kLnBase;
  struct Tempered {
    std::vector<float> unigram;  // b^(p1(w) / T)
    std::vector<float> stored;   // b^(score / T) of each stored n-gram, indexed as SparseRow::source
    double total = 0;
  };

  /// The last `order` words of the current sentence; fewer words than that are preceded by <s>
  /// (so a sentence start is the context <s> alone). Returns how many context_ holds.
  std::int32_t context(const std::int32_t* text, std::int32_t n, std::int32_t order) {
    std::int32_t start = n;
    while (start > 0 && text[start - 1] != lm_->eos()) --start;
    const std::int32_t have = std::min(order, n - start);
    std::int32_t c = 0;
    if (have < order) context_[c++] = lm_->bos();
    for (std::int32_t i = n - have; i < n; ++i) context_[c++] = text[i];
    return c;
  }
  double scale(double a) const { return std::exp((double(sparse_.first_add) + sparse_.second_add) * kLnB * a); }
  const Tempered& tempered(float t) {
    Tempered& tu = tempered_[t];
    if (tu.unigram.empty()) {
      const double a = 1.0 / double(t);
      for (const float p1 : lm_->unigram_scores()) {
        tu.unigram.push_back(static_cast<float>(std::exp(double(p1) * kLnB * a)));
        tu.total += tu.unigram.back();
      }
      tu.stored.resize(lm_->stored_count());
      for (std::size_t i = 0; i < tu.stored.size(); ++i)
        tu.stored[i] = static_cast<float>(std::exp(double(lm_->stored_score(i)) * kLnB * a));
    }
    return tu;
  }
  /// The row's normaliser s * total + sum over the exact words of (value - s * u(w)); `each` sees
  /// every exact word's value. A two-word context's bigram entries carry the history's back-off
  /// weight b^(second_add / T) as a factor (second_add is 0 otherwise).
  template <class Each>
  double normaliser(const Tempered& tu, double s, double a, Each each) const {
    const double backoff = std::exp(double(sparse_.second_add) * kLnB * a);
    double z = s * tu.total;
    for (std::size_t i = 0; i < sparse_.exact.size(); ++i) {
      const std::uint32_t from = sparse_.source[i];
      const double value = double(tu.stored[from]) * (lm_->stored_is_bigram(from) ? backoff : 1.0);
      each(i, value);
      z += value - s * tu.unigram[std::size_t(sparse_.exact[i].first)];
    }
    return z;
  }

  void row(const std::int32_t* text, std::int32_t n, std::int32_t order, float t, float* out) {
    const std::int32_t V = lm_->vocab();
    const std::int32_t c = context(text, n, order);
    lm_->sparse_row(context_, c, sparse_);
    const double a = t == 0.0f ? 1.0 : 1.0 / double(t);
    const Tempered& tu = tempered(t == 0.0f ? 1.0f : t);
    const double s = scale(a);
    values_.resize(sparse_.exact.size());
    const double z = normaliser(tu, s, a, [&](std::size_t i, double value) { values_[i] = value; });
    const float f = static_cast<float>(s / z);
    for (std::int32_t v = 0; v < V; ++v) out[v] = f * tu.unigram[std::size_t(v)];
    for (std::size_t i = 0; i < sparse_.exact.size(); ++i) out[sparse_.exact[i].first] = static_cast<float>(values_[i] / z);
    if (t == 0.0f) one_hot_argmax(out, V);
  }

  std::shared_ptr<const SphinxTrigram> lm_;
  std::map<float, Tempered> tempered_;
  std::int32_t context_[2] = {0, 0};
  SphinxTrigram::SparseRow sparse_;
  std::vector<double> values_;
};

/// LLM-like synthetic pair: a bank of heavy-tailed target logit rows and draft rows = target
/// logits + N(0, misalignment^2) noise, picked by a hash of the last two tokens, so the same
/// context always gives the same (p, q).
class SyntheticPair final : public ModelPair {
 public:
  static constexpr std::int32_t kTargets = 16, kNoises = 4;

  SyntheticPair(std::int32_t vocab, double misalignment, std::uint64_t seed)
      : V_(vocab), misalignment_(misalignment) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> noise(0.0f, static_cast<float>(misalignment));
    logits_.assign(kTargets, std::vector<float>(static_cast<std::size_t>(vocab)));
    noise_.assign(kNoises, std::vector<float>(static_cast<std::size_t>(vocab)));
    for (auto& l : logits_) bench::heavy_tailed_logits(l, rng);
    for (auto& l : noise_)
      for (auto& x : l) x = noise(rng);
  }
  std::string name() const override {
    char buf[64];
    std::snprintf(buf, sizeof buf, "synthetic V=%d mis=%.2g", V_, misalignment_);
    return buf;
  }
  std::int32_t vocab() const override { return V_; }
  void target_row(const std::int32_t* text, std::int32_t n, float t, float* out) override {
    const Bank& b = bank(t);
    std::copy_n(b.p.data() + std::size_t(pick(text, n).first) * V_, V_, out);
  }
  void draft_row(const std::int32_t* text, std::int32_t n, float t, float* out) override {
    const Bank& b = bank(t);
    const auto [i, j] = pick(text, n);
    std::copy_n(b.q.data() + (std::size_t(i) * kNoises + j) * V_, V_, out);
  }
  double target_logprob(const std::int32_t* text, std::int32_t n, std::int32_t w) override {
    return std::log(bank(1.0f).p[std::size_t(pick(text, n).first) * V_ + w]);
  }

 private:
  struct Bank {
    std::vector<float> p, q;  // [kTargets][V], [kTargets][kNoises][V]
  };
  std::pair<std::int32_t, std::int32_t> pick(const std::int32_t* text, std::int32_t n) const {
    std::uint64_t h = 0x9E3779B97F4A7C15ull;
    for (std::int32_t i = std::max(0, n - 2); i < n; ++i) h = (h ^ static_cast<std::uint64_t>(text[i])) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
    return {static_cast<std::int32_t>(h % kTargets), static_cast<std::int32_t>((h / kTargets) % kNoises)};
  }
  const Bank& bank(float t) {
    Bank& b = banks_[t];
    if (!b.p.empty()) return b;
    std::vector<float> scaled(static_cast<std::size_t>(V_));
    const float inv = t > 0 ? 1.0f / t : 1.0f;
    const auto emit = [&](std::vector<float>& dest) {
      dest.resize(dest.size() + static_cast<std::size_t>(V_));
      float* row = dest.data() + dest.size() - static_cast<std::size_t>(V_);
      bench::softmax_into(scaled, row);
      if (t == 0.0f) one_hot_argmax(row, V_);
    };
    for (std::int32_t i = 0; i < kTargets; ++i) {
      const auto& l = logits_[static_cast<std::size_t>(i)];
      for (std::int32_t v = 0; v < V_; ++v) scaled[v] = l[v] * inv;
      emit(b.p);
      for (std::int32_t j = 0; j < kNoises; ++j) {
        const auto& e = noise_[static_cast<std::size_t>(j)];
        for (std::int32_t v = 0; v < V_; ++v) scaled[v] = (l[v] + e[v]) * inv;
        emit(b.q);
      }
    }
    return b;
  }

  std::int32_t V_;
  double misalignment_;
  std::vector<std::vector<float>> logits_, noise_;
  std::map<float, Bank> banks_;
};

}  // namespace specverify::comparison
