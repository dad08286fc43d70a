// CMU Sphinx's US English trigram language model (Debian pocketsphinx-en-us, en-us.lm.bin) read
// from its binary trie file, giving full next-word rows over its 72,547 words.
//
// Why not through libsphinxbase's API: Debian's libsphinxbase (5prealpha) exports no n-gram
// iterator, its ARPA writer aborts on this model (ngram_model_trie.c:279 assertion), and scoring
// every word through ngram_ng_prob costs 30 ms per trigram row (measured). The file layout is
// sphinxbase's lm_trie (a KenLM-style reversed trie: unigram w -> bigram entries keyed by the
// previous word -> trigram entries keyed by the word before that), 16-bit quantised bigram and
// trigram values, float unigrams, all in log base 1.0001 units. This reader keeps the stored
// floats and adds them in the library's order, so every score equals libsphinxbase's
// ngram_ng_prob (which truncates the same float sum to an integer): tools/compare_rules/test_comparison.cpp
// checks that word by word against the library.
//
// Scores (Katz back-off, as lm_trie_score computes them), context (w1, w2), w2 the latest word:
//   trigram w1 w2 w stored:   p3
//   else bigram w2 w stored:  p2(w2 w) + bo(w1 w2)
//   else:                     (p1(w) + bo(w2)) + bo(w1 w2)
// bo(w1 w2) is 0 where the bigram w1 w2 is not stored. A one-word context (sentence start,
// history <s>) gives the bigram row, p2 or p1 + bo(w2).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace specverify::comparison {

class SphinxTrigram {
 public:
  /// log_b of a probability, b = 1.0001 (sphinxbase's default logmath base, which the file uses).
  static constexpr double kLnBase = 9.9995000333308e-05;  // ln(1.0001)

  explicit SphinxTrigram(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    Reader r{file, 0};
    static const char kHeader[] = "Trie Language Model";
    if (file.size() < sizeof kHeader || std::memcmp(file.data(), kHeader, sizeof kHeader - 1) != 0)
      throw std::runtime_error(path + ": not a sphinxbase trie language model");
    r.at = sizeof kHeader - 1;
    if (r.get<std::uint8_t>() != 3) throw std::runtime_error(path + ": not a trigram model");
    std::uint32_t counts[3];
    for (auto& c : counts) c = r.get<std::uint32_t>();
    const std::uint32_t V = counts[0];

    // Quantiser: an int32, then bigram probs[65536], bigram backoffs[65536], trigram probs[65536].
    r.get<std::int32_t>();
    std::vector<float> bigram_prob_bins(65536), bigram_bo_bins(65536), trigram_prob_bins(65536);
    r.floats(bigram_prob_bins);
    r.floats(bigram_bo_bins);
    r.floats(trigram_prob_bins);
    // Unigrams: V + 1 records {prob, bo, next}; next..next of the following one is the range of
    // bigram entries predicting this word.
    std::vector<std::uint32_t> next(V + 1);
    unigram_.resize(V);
    unigram_bo_.resize(V);
    for (std::uint32_t w = 0; w <= V; ++w) {
      const float p = r.get<float>(), bo = r.get<float>();
      next[w] = r.get<std::uint32_t>();
      if (w < V) {
        unigram_[w] = p;
        unigram_bo_[w] = bo;
      }
    }
    // Bit-packed arrays: bigram entries [word | bo 16 | prob 16 | next], then trigram entries
    // [word | prob 16]; each array has one extra entry and 8 bytes of padding.
    const std::uint8_t word_bits = required_bits(V), next_bits = required_bits(counts[2]);
    const std::uint32_t middle_total = word_bits + 32u + next_bits, longest_total = word_bits + 16u;
    const std::size_t middle_bytes = (std::size_t(1 + counts[1]) * middle_total + 7) / 8 + 8;
    const std::size_t longest_bytes = (std::size_t(1 + counts[2]) * longest_total + 7) / 8 + 8;
    if (r.at + middle_bytes + longest_bytes > file.size()) throw std::runtime_error(path + ": truncated");
    const char* middle = file.data() + r.at;
    const char* longest = middle + middle_bytes;
    r.at += middle_bytes + longest_bytes;

    // Forward index: bigrams grouped by history word, trigrams by (w1, w2).
    std::vector<Bigram> bigrams;
    std::vector<Trigram> trigrams;
    bigrams.reserve(counts[1]);
    trigrams.reserve(counts[2]);
    for (std::uint32_t w = 0; w < V; ++w) {
      for (std::uint32_t i = next[w]; i < next[w + 1]; ++i) {
        const std::uint64_t bit = std::uint64_t(i) * middle_total;
        const std::uint32_t w2 = read_bits(middle, bit, word_bits);
        const float bo = bigram_bo_bins[read_bits(middle, bit + word_bits, 16)];
        const float p2 = bigram_prob_bins[read_bits(middle, bit + word_bits + 16, 16)];
        const std::uint32_t first = read_bits(middle, bit + word_bits + 32, next_bits);
        const std::uint32_t last = read_bits(middle, bit + middle_total + word_bits + 32, next_bits);
        bigrams.push_back({w2, w, p2, bo, 0, 0});
        for (std::uint32_t j = first; j < last; ++j) {
          const std::uint64_t tbit = std::uint64_t(j) * longest_total;
          trigrams.push_back({read_bits(longest, tbit, word_bits), w2, w,
                              trigram_prob_bins[read_bits(longest, tbit + word_bits, 16)]});
        }
      }
    }
    // The header may count a few more bigrams than the unigrams reach (the arrays are sized by it).
    if (bigrams.size() > counts[1] || trigrams.size() != counts[2])
      throw std::runtime_error(path + ": n-gram counts do not match the header");
    std::sort(bigrams.begin(), bigrams.end(),
              [](const Bigram& a, const Bigram& b) { return a.h != b.h ? a.h < b.h : a.w < b.w; });
    std::sort(trigrams.begin(), trigrams.end(), [](const Trigram& a, const Trigram& b) {
      return a.w1 != b.w1 ? a.w1 < b.w1 : a.w2 != b.w2 ? a.w2 < b.w2 : a.w < b.w;
    });
    // Trigram ranges per bigram "w1 w2": both lists are sorted by (w1, w2), a linear merge.
    std::size_t t = 0;
    for (Bigram& b : bigrams) {
      while (t < trigrams.size() && (trigrams[t].w1 < b.h || (trigrams[t].w1 == b.h && trigrams[t].w2 < b.w))) ++t;
      b.tri_begin = std::uint32_t(t);
      while (t < trigrams.size() && trigrams[t].w1 == b.h && trigrams[t].w2 == b.w) ++t;
      b.tri_end = std::uint32_t(t);
    }
    bigram_begin_.assign(V + 1, 0);
    for (const Bigram& b : bigrams) ++bigram_begin_[b.h + 1];
    for (std::uint32_t w = 0; w < V; ++w) bigram_begin_[w + 1] += bigram_begin_[w];
    bigram_word_.reserve(bigrams.size());
    for (const Bigram& b : bigrams) {
      bigram_word_.push_back(b.w);
      bigram_prob_.push_back(b.p2);
      bigram_bo_.push_back(b.bo);
      bigram_tri_.push_back({b.tri_begin, b.tri_end});
    }
    for (const Trigram& tg : trigrams) {
      trigram_word_.push_back(tg.w);
      trigram_prob_.push_back(tg.p3);
    }
    // Word strings: an int32 byte count, then NUL-terminated words in id order.
    const std::int32_t bytes = r.get<std::int32_t>();
    if (bytes < 0 || r.at + std::size_t(bytes) > file.size()) throw std::runtime_error(path + ": truncated words");
    for (std::size_t at = r.at, end = r.at + std::size_t(bytes); at < end;) {
      const std::size_t len = std::strlen(file.data() + at);
      ids_.emplace(std::string(file.data() + at, len), std::int32_t(words_.size()));
      words_.emplace_back(file.data() + at, len);
      at += len + 1;
    }
    if (words_.size() != V) throw std::runtime_error(path + ": word list does not match the unigram count");
    bos_ = id("<s>");
    eos_ = id("</s>");
    if (bos_ < 0 || eos_ < 0) throw std::runtime_error(path + ": no <s> or </s>");
  }

  std::int32_t vocab() const { return std::int32_t(words_.size()); }
  std::int32_t bos() const { return bos_; }
  std::int32_t eos() const { return eos_; }
  const std::string& word(std::int32_t id) const { return words_[std::size_t(id)]; }
  /// -1 for a word outside the vocabulary (the model has no <unk>).
  std::int32_t id(const std::string& w) const {
    const auto it = ids_.find(w);
    return it == ids_.end() ? -1 : it->second;
  }
  std::size_t bigram_count() const { return bigram_word_.size(); }
  std::size_t trigram_count() const { return trigram_word_.size(); }
  /// p1(w) in log base 1.0001 units, the float the file stores.
  const std::vector<float>& unigram_scores() const { return unigram_; }

  /// Every stored bigram and trigram score, indexed as SparseRow::source names them: bigram
  /// entries first, then trigram entries (so a caller can transform each once, not once per row).
  std::size_t stored_count() const { return bigram_prob_.size() + trigram_prob_.size(); }
  float stored_score(std::size_t s) const {
    return s < bigram_prob_.size() ? bigram_prob_[s] : trigram_prob_[s - bigram_prob_.size()];
  }
  bool stored_is_bigram(std::size_t s) const { return s < bigram_prob_.size(); }

  /// A row of scores in sparse form: every word w scores default_add + unigram_scores()[w], except
  /// the listed words, which score exactly their listed value (log base 1.0001 units).
  struct SparseRow {
    float first_add = 0, second_add = 0;  // default: (p1 + first_add) + second_add, the library's order
    std::vector<std::pair<std::int32_t, float>> exact;  // sorted by word
    // The stored entry each exact score came from; in a two-word context a bigram entry's score
    // is its stored score + second_add (the back-off weight of the history).
    std::vector<std::uint32_t> source;
  };

  /// The row after a context of `n` words (n = 2: w1 w2; n = 1: the bigram row of w2; n = 0: p1).
  void sparse_row(const std::int32_t* context, std::int32_t n, SparseRow& out) const {
    out.exact.clear();
    out.source.clear();
    out.first_add = out.second_add = 0;
    if (n <= 0) return;
    const std::int32_t w2 = context[n - 1];
    const std::uint32_t b0 = bigram_begin_[std::size_t(w2)], b1 = bigram_begin_[std::size_t(w2) + 1];
    out.first_add = unigram_bo_[std::size_t(w2)];
    if (n == 1) {
      for (std::uint32_t i = b0; i < b1; ++i) {
        out.exact.emplace_back(bigram_word_[i], bigram_prob_[i]);
        out.source.push_back(i);
      }
      return;
    }
    const std::int32_t w1 = context[n - 2];
    const std::int32_t at = find_bigram(w1, w2);
    const float bo12 = at >= 0 ? bigram_bo_[std::size_t(at)] : 0.0f;
    out.second_add = bo12;
    const auto tri = at >= 0 ? bigram_tri_[std::size_t(at)] : std::pair<std::uint32_t, std::uint32_t>{0, 0};
    // Merge the bigram successors of w2 (p2 + bo12) with the trigram successors of w1 w2 (p3).
    std::uint32_t i = b0, j = tri.first;
    while (i < b1 || j < tri.second) {
      if (j < tri.second && (i >= b1 || trigram_word_[j] <= bigram_word_[i])) {
        if (i < b1 && trigram_word_[j] == bigram_word_[i]) ++i;
        out.exact.emplace_back(trigram_word_[j], trigram_prob_[j]);
        out.source.push_back(std::uint32_t(bigram_prob_.size()) + j);
        ++j;
      } else {
        out.exact.emplace_back(bigram_word_[i], bigram_prob_[i] + bo12);
        out.source.push_back(i);
        ++i;
      }
    }
  }

  /// The score of one word after a context, as sparse_row defines it.
  float score(const std::int32_t* context, std::int32_t n, std::int32_t w) const {
    if (n <= 0) return unigram_[std::size_t(w)];
    const std::int32_t w2 = context[n - 1];
    const std::int32_t b = find_in(w2, w);
    if (n == 1) return b >= 0 ? bigram_prob_[std::size_t(b)] : unigram_[std::size_t(w)] + unigram_bo_[std::size_t(w2)];
    const std::int32_t at = find_bigram(context[n - 2], w2);
    const float bo12 = at >= 0 ? bigram_bo_[std::size_t(at)] : 0.0f;
    if (at >= 0) {
      const auto [t0, t1] = bigram_tri_[std::size_t(at)];
      const auto first = trigram_word_.begin() + t0, last = trigram_word_.begin() + t1;
      const auto hit = std::lower_bound(first, last, w);
      if (hit != last && *hit == w) return trigram_prob_[std::size_t(hit - trigram_word_.begin())];
    }
    if (b >= 0) return bigram_prob_[std::size_t(b)] + bo12;
    return (unigram_[std::size_t(w)] + unigram_bo_[std::size_t(w2)]) + bo12;
  }

 private:
  struct Reader {
    const std::vector<char>& file;
    std::size_t at;
    template <class T>
    T get() {
      if (at + sizeof(T) > file.size()) throw std::runtime_error("trie language model: truncated");
      T v;
      std::memcpy(&v, file.data() + at, sizeof v);
      at += sizeof v;
      return v;
    }
    void floats(std::vector<float>& out) {
      if (at + out.size() * sizeof(float) > file.size()) throw std::runtime_error("trie language model: truncated");
      std::memcpy(out.data(), file.data() + at, out.size() * sizeof(float));
      at += out.size() * sizeof(float);
    }
  };
  struct Bigram {
    std::uint32_t h, w;
    float p2, bo;
    std::uint32_t tri_begin, tri_end;
  };
  struct Trigram {
    std::uint32_t w1, w2, w;
    float p3;
  };

  static std::uint8_t required_bits(std::uint32_t max_value) {
    std::uint8_t bits = 0;
    for (; max_value; max_value >>= 1) ++bits;
    return bits;
  }
  // Little-endian bit fields of at most 25 bits, as sphinxbase's bitarr reads them.
  static std::uint32_t read_bits(const char* base, std::uint64_t bit, std::uint8_t length) {
    std::uint32_t v;
    std::memcpy(&v, base + (bit >> 3), sizeof v);
    return (v >> (bit & 7)) & ((1u << length) - 1u);
  }
  std::int32_t find_in(std::int32_t h, std::int32_t w) const {
    const auto first = bigram_word_.begin() + bigram_begin_[std::size_t(h)];
    const auto last = bigram_word_.begin() + bigram_begin_[std::size_t(h) + 1];
    const auto hit = std::lower_bound(first, last, w);
    return hit != last && *hit == w ? std::int32_t(hit - bigram_word_.begin()) : -1;
  }
  std::int32_t find_bigram(std::int32_t w1, std::int32_t w2) const { return find_in(w1, w2); }

  std::vector<float> unigram_, unigram_bo_;
  std::vector<std::uint32_t> bigram_begin_;  // [V + 1], bigram entries by history word
  std::vector<std::int32_t> bigram_word_;
  std::vector<float> bigram_prob_, bigram_bo_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> bigram_tri_;  // trigram range of "h w"
  std::vector<std::int32_t> trigram_word_;
  std::vector<float> trigram_prob_;
  std::vector<std::string> words_;
  std::unordered_map<std::string, std::int32_t> ids_;
  std::int32_t bos_ = -1, eos_ = -1;
};

}  // namespace specverify::comparison
