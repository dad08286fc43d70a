// Interpolated Kneser-Ney n-gram language model producing full next-word distributions over V.
//
// P(w | h) = max(c(h w) - D, 0) / c(h) + gamma(h) P(w | h'),  gamma(h) = D N1+(h .) / c(h),
// h' = h without its oldest word; raw counts at the highest order, continuation counts
// N1+(. h w) below it, and the unigram interpolated with the uniform 1/V. An unseen context
// passes its whole mass to h'. Sentences are padded with order-1 <s>, so every prediction has a
// full-length context. One discount per order, D = n1 / (n1 + 2 n2).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace specverify::comparison {

class KneserNey {
 public:
  /// Word ids must be < 65536: an n-gram of up to 4 words packs into one 64-bit key.
  KneserNey(std::int32_t order, std::int32_t vocab, const std::vector<std::vector<std::int32_t>>& sentences,
            std::int32_t bos, std::int32_t eos)
      : order_(order), vocab_(vocab), bos_(bos), eos_(eos), levels_(static_cast<std::size_t>(order)) {
    if (order < 1 || order > 4) throw std::invalid_argument("KneserNey: order must be 1..4");
    if (vocab < 1 || vocab > 65536) throw std::invalid_argument("KneserNey: vocab must be 1..65536");
    std::vector<std::uint64_t> grams;  // highest-order n-grams, oldest word in the high bits
    std::vector<std::int32_t> padded;
    for (const auto& s : sentences) {
      padded.assign(static_cast<std::size_t>(order - 1), bos);
      padded.insert(padded.end(), s.begin(), s.end());
      padded.push_back(eos);
      for (std::size_t i = static_cast<std::size_t>(order - 1); i < padded.size(); ++i) {
        std::uint64_t key = 0;
        for (std::size_t j = i + 1 - static_cast<std::size_t>(order); j <= i; ++j) key = key << 16 | static_cast<std::uint64_t>(padded[j]);
        grams.push_back(key);
      }
    }
    std::sort(grams.begin(), grams.end());
    // Counts per order, highest first: raw counts, then continuation counts of the suffixes.
    std::vector<std::pair<std::uint64_t, float>> counted;
    for (std::size_t i = 0; i < grams.size();) {
      std::size_t j = i;
      while (j < grams.size() && grams[j] == grams[i]) ++j;
      counted.emplace_back(grams[i], static_cast<float>(j - i));
      i = j;
    }
    for (std::int32_t n = order; n >= 1; --n) {
      build_level(n, counted);
      if (n == 1) break;
      std::vector<std::uint64_t> suffixes;
      const std::uint64_t mask = (std::uint64_t{1} << (16 * (n - 1))) - 1;
      for (const auto& [key, c] : counted) suffixes.push_back(key & mask);
      std::sort(suffixes.begin(), suffixes.end());
      counted.clear();
      for (std::size_t i = 0; i < suffixes.size();) {
        std::size_t j = i;
        while (j < suffixes.size() && suffixes[j] == suffixes[i]) ++j;
        counted.emplace_back(suffixes[i], static_cast<float>(j - i));
        i = j;
      }
    }
    // Unigram: continuation counts interpolated with the uniform distribution.
    const Level& l1 = levels_[0];
    const Context& all = l1.contexts.at(0);
    unigram_.assign(static_cast<std::size_t>(vocab), 0.0f);
    const double floor = l1.discount * all.distinct / all.total / vocab;
    for (auto& u : unigram_) u = static_cast<float>(floor);
    for (std::uint32_t i = all.begin; i < all.end; ++i)
      unigram_[l1.words[i]] += static_cast<float>((l1.counts[i] - l1.discount) / all.total);
  }

  std::int32_t order() const { return order_; }
  std::int32_t vocab() const { return vocab_; }

  /// The distribution after `history` (token ids, oldest first; only the text after its last
  /// </s> counts, so a finished sentence starts a new one) is s * unigram() plus, at the words the
  /// context has seen, the additions this returns (sorted by word, one entry each); s is returned
  /// through `scale`. Lets a caller write (or temper) the row in one pass.
  const std::vector<std::pair<std::int32_t, float>>& sparse(const std::int32_t* history, std::int32_t n,
                                                            double& scale) const {
    std::int32_t ctx[3];
    context(history, n, ctx);
    sparse_.clear();
    scale = 1.0;
    for (std::int32_t level = order_; level >= 2; --level) {
      const Level& l = levels_[static_cast<std::size_t>(level - 1)];
      const auto it = l.contexts.find(pack(ctx + (4 - level), level - 1));
      if (it == l.contexts.end()) continue;
      const Context& c = it->second;
      const std::size_t mid = sparse_.size();
      const double per_count = scale / c.total;
      for (std::uint32_t i = c.begin; i < c.end; ++i)
        sparse_.emplace_back(l.words[i], static_cast<float>(per_count * (l.counts[i] - l.discount)));
      // Each level's followers are sorted by word: a linear merge keeps the list sorted.
      std::inplace_merge(sparse_.begin(), sparse_.begin() + std::ptrdiff_t(mid), sparse_.end());
      scale *= l.discount * c.distinct / c.total;
    }
    std::size_t kept = 0;
    for (std::size_t i = 0; i < sparse_.size(); ++i) {
      if (kept > 0 && sparse_[kept - 1].first == sparse_[i].first) {
        sparse_[kept - 1].second += sparse_[i].second;
      } else {
        sparse_[kept++] = sparse_[i];
      }
    }
    sparse_.resize(kept);
    return sparse_;
  }

  /// The full distribution after `history` into out[V].
  void distribution(const std::int32_t* history, std::int32_t n, float* out) const {
    double scale = 0;
    sparse(history, n, scale);
    const float s = static_cast<float>(scale);
    for (std::int32_t v = 0; v < vocab_; ++v) out[v] = s * unigram_[static_cast<std::size_t>(v)];
    for (const auto& [w, add] : sparse_) out[w] += add;
  }

  /// P(w | history), the same recursion for one word.
  double prob(const std::int32_t* history, std::int32_t n, std::int32_t w) const {
    std::int32_t ctx[3];
    context(history, n, ctx);
    double p = 0, scale = 1.0;
    for (std::int32_t level = order_; level >= 2; --level) {
      const Level& l = levels_[static_cast<std::size_t>(level - 1)];
      const auto it = l.contexts.find(pack(ctx + (4 - level), level - 1));
      if (it == l.contexts.end()) continue;
      const Context& c = it->second;
      const auto first = l.words.begin() + c.begin, last = l.words.begin() + c.end;
      const auto hit = std::lower_bound(first, last, w);
      if (hit != last && *hit == w) p += scale * (l.counts[static_cast<std::size_t>(hit - l.words.begin())] - l.discount) / c.total;
      scale *= l.discount * c.distinct / c.total;
    }
    return p + scale * unigram_[static_cast<std::size_t>(w)];
  }

  const std::vector<float>& unigram() const { return unigram_; }

 private:
  struct Context {
    std::uint32_t begin = 0, end = 0;  // followers [begin, end) in the level's arrays, sorted by word
    double total = 0, distinct = 0;     // sum of counts, number of followers
  };
  struct Level {
    std::unordered_map<std::uint64_t, Context> contexts;
    std::vector<std::int32_t> words;
    std::vector<float> counts;
    double discount = 0.5;
  };

  static std::uint64_t pack(const std::int32_t* w, std::int32_t n) {
    std::uint64_t key = 0;
    for (std::int32_t i = 0; i < n; ++i) key = key << 16 | static_cast<std::uint64_t>(w[i]);
    return key;
  }

  /// The last three words of the current sentence, <s>-padded on the left.
  void context(const std::int32_t* history, std::int32_t n, std::int32_t ctx[3]) const {
    std::int32_t start = n;
    while (start > 0 && history[start - 1] != eos_) --start;
    for (std::int32_t i = 0; i < 3; ++i) {
      const std::int32_t at = n - 3 + i;
      ctx[i] = at >= start ? history[at] : bos_;
    }
  }

  void build_level(std::int32_t n, const std::vector<std::pair<std::uint64_t, float>>& counted) {
    Level& l = levels_[static_cast<std::size_t>(n - 1)];
    double n1 = 0, n2 = 0;
    for (const auto& [key, c] : counted) {
      n1 += c == 1.0f;
      n2 += c == 2.0f;
      const std::uint64_t ctx = n == 1 ? 0 : key >> 16;
      Context& e = l.contexts[ctx];
      if (e.end == e.begin) e.begin = e.end = static_cast<std::uint32_t>(l.words.size());
      l.words.push_back(static_cast<std::int32_t>(key & 0xFFFF));
      l.counts.push_back(c);
      e.end = static_cast<std::uint32_t>(l.words.size());
      e.total += c;
      e.distinct += 1;
    }
    if (n1 > 0 && n2 > 0) l.discount = std::clamp(n1 / (n1 + 2 * n2), 0.05, 0.95);
  }

  std::int32_t order_, vocab_, bos_, eos_;
  std::vector<Level> levels_;
  std::vector<float> unigram_;
  mutable std::vector<std::pair<std::int32_t, float>> sparse_;
};

}  // namespace specverify::comparison
