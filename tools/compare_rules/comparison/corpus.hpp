// A word-level corpus from the fortunes files: lowercased words, one sentence per sequence,
// split into training and held-out sets by fortune (never within one).
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace specverify::comparison {

/// Every word of the corpus has an id, plus <s>, </s> and <unk>.
struct Corpus {
  std::vector<std::string> words;  // id -> word
  std::unordered_map<std::string, std::int32_t> ids;
  std::int32_t bos = 0, eos = 1, unk = 2;
  std::vector<std::vector<std::int32_t>> train, heldout;  // sentences, without <s> and </s>

  std::int32_t vocab() const { return static_cast<std::int32_t>(words.size()); }
  std::int32_t id(const std::string& w) {
    const auto [it, fresh] = ids.emplace(w, vocab());
    if (fresh) words.push_back(w);
    return it->second;
  }
};

/// Fortune texts of one fortune-format file: entries separated by lines holding only '%'.
inline std::vector<std::string> read_fortune_file(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out(1);
  for (std::string line; std::getline(in, line);) {
    if (line == "%") {
      out.emplace_back();
    } else {
      out.back() += line;
      out.back() += '\n';
    }
  }
  return out;
}

/// Sentences of one text: runs of letters, digits and apostrophes, lowercased; '.', '!' and '?'
/// end a sentence.
inline std::vector<std::vector<std::string>> sentences_of(const std::string& text) {
  std::vector<std::vector<std::string>> out(1);
  std::string word;
  const auto flush = [&] {
    if (!word.empty()) out.back().push_back(word);
    word.clear();
  };
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '\'') {
      word += static_cast<char>(std::tolower(c));
    } else {
      flush();
      if ((c == '.' || c == '!' || c == '?') && !out.back().empty()) out.emplace_back();
    }
  }
  flush();
  if (out.back().empty()) out.pop_back();
  return out;
}

/// Builds the corpus from fortunes; every `heldout_every`-th fortune (counted across files) goes to
/// the held-out set. The vocabulary holds every word of both sets.
inline Corpus build_corpus(const std::vector<std::string>& fortunes, std::int32_t heldout_every) {
  Corpus c;
  c.id("<s>");
  c.id("</s>");
  c.id("<unk>");
  std::int64_t n = 0;
  for (const std::string& f : fortunes) {
    auto& dest = (heldout_every > 0 && n++ % heldout_every == heldout_every - 1) ? c.heldout : c.train;
    for (const auto& sentence : sentences_of(f)) {
      std::vector<std::int32_t> ids;
      for (const std::string& w : sentence) ids.push_back(c.id(w));
      dest.push_back(std::move(ids));
    }
  }
  return c;
}

/// All fortunes of the plain-text fortune files in `dir` (names without a dot: the .dat and .u8
/// files are indexes and duplicates).
inline std::vector<std::string> read_fortune_dir(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.find('.') == std::string::npos) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());  // directory order is not deterministic
  std::vector<std::string> out;
  for (const auto& f : files) {
    for (auto& text : read_fortune_file(f)) out.push_back(std::move(text));
  }
  return out;
}

}  // namespace specverify::comparison
