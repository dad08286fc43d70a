// The rows of logits of a sharded chain or tree batch (cpu/sharded_verify.hpp). Each rank reads its slice
// of every row with the unsharded pre-pass kernels (cpu/logit_kernels.hpp), and the ranks merge
// their slices' summaries into the view every rank would have of the whole row, in two phases:
//   scan: each slice's max g and the first token holding it, validity, and with top_k the slice's
//     k largest values and how many more of its values tie the k-th. Their union holds every value
//     top_k keeps with its multiplicity (a slice's k-th largest never exceeds the row's), so
//     top_k, top_p and min_p run on the merged candidates as prepare() runs them on the row's: the
//     threshold and the normaliser depend on the kept values alone, not on their order;
//   norm: rows without top_k sum their slice's kept weights against the row's max (a FixedSum,
//     and min_p's lowest kept value), merged exactly as split_weights_pass merges its parts;
//   top_p without top_k (where a batch has such rows): top_p's threshold is the largest value t
//     whose tokens g >= t hold top_p of the row's mass (the norm phase's total). Four rounds find
//     it a byte at a time, most significant first, of an order-preserving key of g: each slice
//     sends the mass of its values in each of the 256 keys under the prefix found so far (exact
//     FixedSums), and every rank picks the highest bin where the mass from the top reaches
//     top_p. Then one more norm phase sums the tokens kept (g >= t, and min_p's).
// A rank then reads p (and q) over its slice with the bits of the unsharded view, materialised
// into a float row one node at a time, so that the probability rows' phases run on them.
// Draft rows over a reduced draft vocabulary are whole on every rank: each prepares them alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "specverify/core/chain_layout.hpp"
#include "specverify/core/tree_layout.hpp"
#include "specverify/core/logit_source.hpp"
#include "specverify/core/overlay.hpp"
#include "specverify/core/validate_logits.hpp"
#include "specverify/cpu/logit_kernels.hpp"
#include "specverify/cpu/shard_messages.hpp"
#include "specverify/types.hpp"

namespace specverify::cpu::shard {

/// A row's pre-pass merged over the ranks: the whole row's view, the row itself aside.
struct MergedView {
  bool ok = true;
  bool greedy = false;
  float max = -core::kInf;
  std::int32_t argmax = -1;  // a token; -1: every token masked (no mass)
  float inv_temperature = 1.0f;
  float threshold = -core::kFloatMax;
  double norm = 0.0;
  float inv_norm = 0.0f;
  // The top_p rounds' search: the key's bytes found so far, and the mass of the keys above them.
  std::uint32_t top_p_key = 0;
  core::FixedSum top_p_above{};

  bool has_mass() const { return argmax >= 0; }
  /// max_v p(v), as LogitRows::max gives it.
  float max_p() const { return has_mass() ? (greedy ? 1.0f : inv_norm) : 0.0f; }
};

/// A rank's first bad row (in walk order: sequences, then depths, p before q) and its finding,
/// worded as the unsharded verify words it.
struct BadRow {
  std::int64_t key = -1;  // -1: none
  core::Finding finding{};
};

/// The logits rows of one rank's slice, and their merged views. A chain's draft row j belongs to
/// its sequence's position j - offsets[b]; a tree's draft rows are laid out like its target rows.
template <class Arch, class Logit, class Layout = core::ChainLayout>
class LogitSlices {
 public:
  static constexpr bool kTree = std::is_same_v<Layout, core::TreeLayout>;
  using Batch = std::conditional_t<kTree, LogitsTreeBatch<Logit>, LogitsChainBatch<Logit>>;
  using Row = core::LogitRow<Logit>;

  LogitSlices(const Batch& batch, const Layout& layout) : batch_(batch), layout_(layout) {}

  /// Whether the draft rows are read whole on every rank (a reduced draft vocabulary; a rank with
  /// an empty slice may pass them null all the same).
  bool whole_drafts() const { return batch_.draft_vocab_size > 0; }

  /// After validation: this rank's slice and the maps validation built.
  void bind(std::int32_t start, std::int32_t size, bool has_q, std::vector<std::int32_t> target_to_draft,
            std::vector<std::int32_t> bias_order) {
    start_ = start;
    size_ = size;
    target_to_draft_ = std::move(target_to_draft);
    bias_order_ = std::move(bias_order);
    Batch local = batch_;  // this rank's slices as rows of their own
    local.vocab_size = size;
    if (!local.target_stride) local.target_stride = size;
    if (!local.unconditional_stride) local.unconditional_stride = size;
    if (!whole_drafts()) {
      local.draft_vocab_size = 0;
      if (!local.draft_stride) local.draft_stride = size;
    }
    local.allowed_tokens = nullptr;  // the bitmask keeps its global layout: windowed per row
    local_ = core::LogitSource<Logit>::of(local, layout_.offsets, nullptr, bias_order_.data());
    whole_ = core::LogitSource<Logit>::of(batch_, layout_.offsets,
                                          target_to_draft_.empty() ? nullptr : target_to_draft_.data(),
                                          bias_order_.data());
    const std::int32_t B = batch_.batch_size;
    const std::int64_t drafts = std::int64_t{layout_.offsets[B]} + (kTree ? B : 0);
    target_seq_.clear();
    draft_seq_.clear();
    for (std::int32_t b = 0; b < B; ++b) {
      for (std::int32_t d = 0; d <= layout_.count(b); ++d) target_seq_.push_back(b);
      for (std::int32_t d = kTree ? 0 : 1; d <= layout_.count(b); ++d) draft_seq_.push_back(b);
    }
    targets_.assign(target_seq_.size(), {});
    drafts_.assign(has_q ? static_cast<std::size_t>(drafts) : 0, {});
    scratch_.resize(static_cast<std::size_t>(std::max(size, whole_drafts() ? batch_.draft_vocab_size : 0)) + 64);
  }

  /// The scan and norm phases: every row's merged view; every rank throws for a bad row alike
  /// (later, in walk order: see bad_row).
  template <class Comm>
  void prepare(const Comm& comm, const std::vector<std::int32_t>& sizes) {
    scan_phase(comm, sizes);
    norm_phase(comm, sizes, false);
    if (any_top_p_only()) {
      for (std::int32_t shift = 24; shift >= 0; shift -= 8) top_p_round(comm, sizes, shift);
      norm_phase(comm, sizes, true);
    }
  }

  const MergedView& target(std::int64_t t) const { return targets_[static_cast<std::size_t>(t)]; }
  const MergedView& draft(std::int64_t j) const { return drafts_[static_cast<std::size_t>(j)]; }
  /// The finding every rank reports for the first bad row at `key` (the lowest rank's naming).
  const BadRow& bad_row() const { return bad_; }
  static std::int64_t target_key(std::int64_t t) { return 2 * t; }
  std::int64_t draft_key(std::int64_t j) const {
    return 2 * (kTree ? j : j + draft_seq_[static_cast<std::size_t>(j)]) + 1;  // the slot's
  }

  /// p of target row t (q of draft row j) at this rank's tokens, the unsharded view's bits.
  void materialise_target(std::int64_t t, float* out) { materialise(false, t, out); }
  void materialise_draft(std::int64_t j, float* out) { materialise(true, j, out); }
  /// p of target row t (q of draft row j) at a token this rank holds: one element of the above.
  float target_value(std::int64_t t, std::int32_t token) { return value(false, t, token); }
  float draft_value(std::int64_t j, std::int32_t token) { return value(true, j, token); }

  /// Coupled sampling's winner over this rank's slice of target row t: the key (g - max)/T +
  /// Gumbel(seed, position, token) over kept tokens, as LogitRows::gumbel_argmax; p its value.
  GumbelBest gumbel_best(std::int64_t t, std::uint64_t seed, std::int64_t position) {
    const MergedView& m = target(t);
    GumbelBest best;
    if (!m.ok || !m.has_mass() || m.greedy) {  // the argmax, named by the rank holding it
      if (m.argmax >= start_ && m.argmax - start_ < size_) best = {0.0, m.argmax, value(false, t, m.argmax)};
      return best;
    }
    const core::LogitView<Logit> view = slice_view(false, t);
    const Row& row = view.row;
    std::uint32_t words[4];
    std::uint32_t cached = 0xffffffffu;
    for (std::int32_t i = 0; i < size_; ++i) {
      const float g = core::processed_logit(row, i).g;
      if (!(g >= m.threshold)) continue;
      const float a = core::weight_argument(g, m.max, m.inv_temperature);
      if (double(a) + core::kGumbelMax < best.key) continue;  // cannot reach the best key
      const auto token = static_cast<std::uint32_t>(start_ + i);
      if (token >> 2 != cached) {
        cached = token >> 2;
        core::gumbel_words(seed, position, cached, words);
      }
      const double key = double(a) + core::gumbel(words[token & 3]);
      if (key > best.key) best = {key, static_cast<std::int32_t>(token), 0.0f};
    }
    if (best.token >= 0) best.p = core::probability_at(view, best.token - start_);
    return best;
  }

 private:
  /// An opened row's room: its window of the bitmask and its overlay.
  struct Room {
    core::OverlayRoom overlay;
    std::vector<std::uint32_t> bits;
  };

  const SamplingParams& params(bool draft, std::int64_t r) const {
    const std::int32_t b = draft ? draft_seq_[static_cast<std::size_t>(r)] : target_seq_[static_cast<std::size_t>(r)];
    return draft ? local_.draft_params_of(b) : batch_.target_params[b];
  }
  /// Whether a sliced row's scan collects top_k candidates (prepare's test, on the whole row).
  std::int32_t top_k(const SamplingParams& params) const {
    const bool on = params.temperature != 0.0f && params.top_k > 0 && params.top_k < batch_.vocab_size;
    return on ? params.top_k : 0;
  }

  /// Whether a sliced row's kept set is top_p's without top_k (the top_p rounds find it).
  bool top_p_only(const SamplingParams& params) const {
    return params.temperature != 0.0f && top_k(params) == 0 && params.top_p < 1.0f;
  }
  bool any_top_p_only() const {
    for (std::size_t t = 0; t < targets_.size(); ++t) {
      if (top_p_only(params(false, static_cast<std::int64_t>(t)))) return true;
    }
    for (std::size_t j = 0; j < drafts_.size() && !whole_drafts(); ++j) {
      if (top_p_only(params(true, static_cast<std::int64_t>(j)))) return true;
    }
    return false;
  }
  /// Sliced row r of a kind's place among the sliced rows (targets, then drafts).
  std::size_t index(bool draft, std::int64_t r) const {
    return draft ? targets_.size() + static_cast<std::size_t>(r) : static_cast<std::size_t>(r);
  }
  /// Calls fn(draft, r, view) for every sliced row.
  template <class Fn>
  void for_sliced(Fn fn) {
    for (std::size_t t = 0; t < targets_.size(); ++t) fn(false, static_cast<std::int64_t>(t), targets_[t]);
    for (std::size_t j = 0; j < drafts_.size() && !whole_drafts(); ++j) fn(true, static_cast<std::int64_t>(j), drafts_[j]);
  }

  /// An order-preserving key of a finite float (-0 as +0).
  static std::uint32_t order_key(float g) {
    const std::uint32_t u = core::float_bits(g + 0.0f);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
  }
  static float key_value(std::uint32_t key) {
    return core::bits_float(key & 0x80000000u ? key & 0x7fffffffu : ~key);
  }

  /// One top_p round: the byte of the threshold's key at `shift`.
  template <class Comm>
  void top_p_round(const Comm& comm, const std::vector<std::int32_t>& sizes, std::int32_t shift) {
    constexpr std::int32_t kBins = 256;
    const auto searched = [&](bool draft, std::int64_t r, const MergedView& v) {
      return top_p_only(params(draft, r)) && v.ok && v.has_mass();
    };
    Message m;
    std::vector<core::FixedSum> bins(kBins);
    for_sliced([&](bool draft, std::int64_t r, MergedView& v) {
      if (!top_p_only(params(draft, r))) return;
      std::fill(bins.begin(), bins.end(), core::FixedSum{});
      if (size_ > 0 && searched(draft, r, v)) {
        const Row row = open(room_, draft, r);
        float* const g = scratch_.data();
        using B = logits_detail::F<Arch>;
        constexpr std::int32_t W = B::size;
        logits_detail::FB<Arch> unused(true);
        std::int32_t i = 0;
        for (; i + W <= size_; i += W) logits_detail::load_g<Arch, logits_detail::Entries::patched>(row, i, unused).store_unaligned(g + i);
        for (; i < size_; ++i) g[i] = core::processed_logit(row, i).g;
        const std::uint32_t prefix = v.top_p_key;
        for (i = 0; i < size_; ++i) {
          if (!(g[i] > -core::kInf)) continue;
          const std::uint32_t key = order_key(g[i]);
          if (shift < 24 && (key >> (shift + 8)) != (prefix >> (shift + 8))) continue;
          bins[(key >> shift) & 255u].add_coarse(core::exp_weight(core::weight_argument(g[i], v.max, v.inv_temperature)));
        }
      }
      for (const core::FixedSum& bin : bins) m.put(bin);
    });
    const std::int32_t ranks = static_cast<std::int32_t>(sizes.size());
    const auto all = gather(comm, m, ranks);
    std::size_t at = 0;  // this row's bins in each rank's message
    for_sliced([&](bool draft, std::int64_t r, MergedView& v) {
      if (!top_p_only(params(draft, r))) return;
      const std::size_t offset = at;
      at += kBins * sizeof(core::FixedSum);
      if (!searched(draft, r, v)) return;
      std::fill(bins.begin(), bins.end(), core::FixedSum{});
      for (std::int32_t rank = 0; rank < ranks; ++rank) {
        Reader in = part(all, m, rank, "top_p (logits)");
        in.skip(offset);
        for (core::FixedSum& bin : bins) bin.merge(in.sum());
      }
      // The highest bin where the mass from the top reaches top_p of the row's: the threshold's.
      const double need = double(params(draft, r).top_p) * v.norm;
      core::FixedSum above = v.top_p_above;
      std::int32_t bin = kBins - 1;
      for (; bin > 0; --bin) {
        core::FixedSum through = above;
        through.merge(bins[static_cast<std::size_t>(bin)]);
        if (through.value() >= need) break;
        above = through;
      }
      v.top_p_above = above;
      v.top_p_key |= static_cast<std::uint32_t>(bin) << shift;
      if (shift == 0) v.threshold = key_value(v.top_p_key);
    });
  }

  /// Row r of a kind, ready for the kernels: this rank's slice (its bitmask window, its overlay
  /// with the overlay's values computed), or a whole reduced draft row.
  Row open(Room& room, bool draft, std::int64_t r) {
    const std::int32_t b = draft ? draft_seq_[static_cast<std::size_t>(r)] : target_seq_[static_cast<std::size_t>(r)];
    const bool whole = draft && whole_drafts();
    Row row = whole ? whole_.draft_row(b, r) : draft ? local_.draft_row(b, r) : local_.target_row(b, r);
    if (!draft && batch_.allowed_tokens) {  // bits start_ .. start_ + size_ of the row's global words
      const std::uint32_t* words = batch_.allowed_tokens + r * ((std::int64_t{batch_.vocab_size} + 31) / 32);
      room.bits.assign(static_cast<std::size_t>(size_ + 31) / 32, 0u);
      for (std::int32_t i = 0; i < size_; ++i) {
        const std::int32_t v = start_ + i;
        if ((words[v >> 5] >> (v & 31)) & 1u) room.bits[static_cast<std::size_t>(i >> 5)] |= 1u << (i & 31);
      }
      row.allowed = room.bits.data();
    }
    if (whole) {
      room.overlay.build(row);
    } else {
      room.overlay.build_window(row, start_);
    }
    if (row.overlay.size) {  // the values the patched reads take
      logits_detail::FB<Arch> ok(true);
      logits_detail::entry_values<Arch>(row, row.n, ok, [](const logits_detail::F<Arch>&) {});
    }
    return row;
  }

  /// The finding for bad row r of a kind, opened as `row`: its first bad logit (a token).
  core::Finding name_bad(bool draft, std::int64_t r, const Row& row) const {
    const std::int32_t b = draft ? draft_seq_[static_cast<std::size_t>(r)] : target_seq_[static_cast<std::size_t>(r)];
    const bool whole = draft && whole_drafts();
    float value = 0.0f;
    const std::int32_t i = core::detail::first_bad_logit(row, value);
    const auto [depth, node] = place_of(b, draft, r);
    core::Fault f{core::FaultKind::bad_value, depth, node, draft ? -1 : r, draft ? r : -1,
                  i < 0 ? -1 : (whole ? i : start_ + i), value};
    core::Finding finding = core::detail::logits_fault_finding(f, b, kTree ? core::Place::node : core::Place::position);
    core::detail::name_guidance_fault(finding, f, b, local_, start_);
    core::detail::name_penalty_fault(finding, f, b, whole ? whole_ : local_, whole ? 0 : start_);
    return finding;
  }

  /// Where the walk reads row r of a kind: its depth there, and the node a fault names (the child
  /// it tests there, or at the bonus row the last node).
  std::pair<std::int32_t, std::int32_t> place_of(std::int32_t b, bool draft, std::int64_t r) const {
    if constexpr (kTree) {
      const auto node = static_cast<std::int32_t>(r - layout_.target_row(b, -1)) - 1;  // both kinds: slots
      std::int32_t depth = 0;
      for (std::int32_t n = node; n >= 0; n = layout_.parent(b, n)) ++depth;
      const std::int32_t c = layout_.child(b, node, -1);
      return {depth, c >= 0 ? c : node};
    } else {
      const auto d = static_cast<std::int32_t>(draft ? r - layout_.offsets[b] : r - layout_.target_row(b, -1));
      return {d, d < layout_.count(b) ? d : d - 1};
    }
  }

  /// Scan phase (above). A rank with an empty slice sends nothing found.
  template <class Comm>
  void scan_phase(const Comm& comm, const std::vector<std::int32_t>& sizes) {
    Message m;
    BadRow mine;
    std::vector<float> top;
    const auto note_bad = [&](bool draft, std::int64_t r, const Row& row) {
      const std::int64_t key = draft ? draft_key(r) : target_key(r);
      if (mine.key < 0 || key < mine.key) mine = {key, name_bad(draft, r, row)};
    };
    const auto sliced = [&](bool draft, std::int64_t r) {
      const std::int32_t k = top_k(params(draft, r));
      float max = -core::kInf;
      std::int32_t argmax = -1, count = 0, ties = 0;
      std::uint8_t ok = 1, full = 0;
      top.assign(static_cast<std::size_t>(k), -core::kInf);
      if (size_ > 0) {
        const Row row = open(room_, draft, r);
        if (scratch_.size() < static_cast<std::size_t>(size_ + row.overlay.size) + 64) {
          scratch_.resize(static_cast<std::size_t>(size_ + row.overlay.size) + 64);
        }
        const logits_detail::Scan s =
            row.overlay.size ? logits_detail::scan<Arch, logits_detail::Entries::excluded>(row, k > 0, k, scratch_.data())
                             : logits_detail::scan<Arch, logits_detail::Entries::none>(row, k > 0, k, scratch_.data());
        max = s.max;
        argmax = s.argmax >= 0 ? start_ + s.argmax : -1;
        ok = s.ok;
        if (!s.ok) note_bad(draft, r, row);
        if (k > 0 && s.ok) {
          float* const cs = scratch_.data();
          if (s.collected >= k) {  // its k largest, and how many more of its values tie the k-th
            std::nth_element(cs, cs + k - 1, cs + s.collected, std::greater<float>());
            full = 1;
            count = k;
            ties = static_cast<std::int32_t>(std::count(cs + k, cs + s.collected, cs[k - 1]));
          } else {
            count = s.collected;
          }
          std::copy(cs, cs + count, top.begin());
        }
      }
      m.put(max);
      m.put(argmax);
      m.put(ok);
      if (k > 0) {
        m.put(count);
        m.put(ties);
        m.put(full);
        for (const float v : top) m.put(v);
      }
    };
    for (std::size_t t = 0; t < targets_.size(); ++t) sliced(false, static_cast<std::int64_t>(t));
    for (std::size_t j = 0; j < drafts_.size(); ++j) {
      if (!whole_drafts()) {
        sliced(true, static_cast<std::int64_t>(j));
        continue;
      }
      MergedView v;  // a whole row: prepared alike by every rank with a slice
      if (size_ > 0) {
        const Row row = open(room_, true, static_cast<std::int64_t>(j));
        const core::LogitView<Logit> view = cpu::prepare<Arch>(row, scratch_.data());
        v.ok = view.ok;
        v.argmax = view.argmax;
        if (!view.ok) note_bad(true, static_cast<std::int64_t>(j), row);
      }
      m.put(v.argmax);
      m.put(std::uint8_t(v.ok));
    }
    m.put(mine.key);
    m.put(mine.finding);
    const std::int32_t ranks = static_cast<std::int32_t>(sizes.size());
    const auto all = gather(comm, m, ranks);

    std::vector<std::vector<float>> candidates(targets_.size() + drafts_.size());
    std::vector<std::int32_t> counted(candidates.size(), 0);
    std::vector<std::uint8_t> any_full(candidates.size(), 0);
    bad_ = {};
    bool whole_taken = false;
    std::int32_t start = 0;  // the rank's slice: [start, start + sizes[rank])
    for (std::int32_t rank = 0; rank < ranks; start += sizes[static_cast<std::size_t>(rank)], ++rank) {
      Reader in = part(all, m, rank, "scan (logits)");
      const std::int32_t size = sizes[static_cast<std::size_t>(rank)];
      bool sent_bad = false;  // a row this rank found bad: it names one below
      const auto merge = [&](bool draft, std::int64_t r, MergedView& v) {
        const std::int32_t k = top_k(params(draft, r));
        const float max = in.get<float>();
        const std::int32_t argmax = in.token(in.get<std::int32_t>(), start, size);
        const bool ok = in.flag();  // read whatever v.ok is: the reads keep their order
        sent_bad = sent_bad || !ok;
        v.ok = v.ok && ok;
        if (max > v.max) {  // ranks in token order: the first holding the max names the lowest token
          v.max = max;
          v.argmax = argmax;
        }
        if (k == 0) return;
        const std::size_t at = index(draft, r);
        const std::int32_t count = in.get<std::int32_t>(), ties = in.get<std::int32_t>();
        const bool full = in.flag();
        // What a slice can hold: up to k candidates, k exactly when full, and ties among the rest.
        in.expect(count >= 0 && count <= k && count <= size && (!full || count == k) && ties >= 0 &&
                      (ties == 0 || full) && std::int64_t{ties} <= std::int64_t{size} - count,
                  "a candidate count");
        std::vector<float>& c = candidates[at];
        for (std::int32_t i = 0; i < k; ++i) {
          const float value = in.get<float>();
          if (i < count) c.push_back(value);
        }
        if (full) c.insert(c.end(), static_cast<std::size_t>(ties), c.back());
        counted[at] += count;
        any_full[at] = any_full[at] || full;
      };
      for (std::size_t t = 0; t < targets_.size(); ++t) merge(false, static_cast<std::int64_t>(t), targets_[t]);
      for (std::size_t j = 0; j < drafts_.size(); ++j) {
        if (!whole_drafts()) {
          merge(true, static_cast<std::int64_t>(j), drafts_[j]);
          continue;
        }
        const std::int32_t argmax = in.get<std::int32_t>();
        const bool ok = in.flag();
        in.expect(argmax >= -1 && argmax < batch_.draft_vocab_size, "a draft row's argmax");
        sent_bad = sent_bad || (size > 0 && !ok);
        if (!whole_taken && sizes[static_cast<std::size_t>(rank)] > 0) {
          drafts_[j].argmax = argmax;
          drafts_[j].ok = ok;
        }
      }
      whole_taken = whole_taken || sizes[static_cast<std::size_t>(rank)] > 0;
      const std::int64_t key = in.get<std::int64_t>();
      const core::Finding finding = in.get<core::Finding>();
      in.expect(key >= -1 && (key < 0 || finding.well_formed()) && (key >= 0 || !sent_bad), "a finding");
      if (key >= 0 && (bad_.key < 0 || key < bad_.key)) bad_ = {key, finding};
    }
    // The views of rows with top_k: prepare()'s steps on the merged candidates.
    const auto finish = [&](bool draft, std::int64_t r, MergedView& v) {
      const SamplingParams& p = params(draft, r);
      v.greedy = p.temperature == 0.0f;
      v.inv_temperature = v.greedy ? 0.0f : std::min(1.0f / p.temperature, core::kFloatMax);
      if (!v.ok || !v.has_mass()) return;
      if (v.greedy) {
        v.norm = 1.0;
        v.inv_norm = 1.0f;
        return;
      }
      const std::int32_t k = top_k(p);
      if (k == 0) return;  // the norm phase's
      const std::size_t at = index(draft, r);
      std::vector<float>& c = candidates[at];
      float* const cs = c.data();
      auto m = static_cast<std::int32_t>(c.size());
      if (any_full[at] || counted[at] >= k) {
        std::nth_element(cs, cs + k - 1, cs + m, std::greater<float>());
        v.threshold = cs[k - 1];
        m = static_cast<std::int32_t>(std::partition(cs, cs + m, [&](float g) { return g >= v.threshold; }) - cs);
      }
      if (p.top_p < 1.0f) v.threshold = logits_detail::top_p_threshold<Arch>(cs, m, v.max, v.inv_temperature, p.top_p);
      core::LogitView<Logit> view;
      view.row.params = p;
      view.max = v.max;
      view.inv_temperature = v.inv_temperature;
      view.threshold = v.threshold;
      logits_detail::min_p_on_candidates(view, cs, m);
      v.threshold = view.threshold;
      v.norm = logits_detail::candidate_sum<Arch>(cs, m, v.threshold, v.max, v.inv_temperature).value();
      v.inv_norm = static_cast<float>(1.0 / v.norm);
    };
    for_sliced(finish);
  }

  /// Norm phase (above): rows with a temperature and no top_k; after the top_p rounds, the rows
  /// they searched (the first phase summed those rows' whole mass, top_p's 100%).
  template <class Comm>
  void norm_phase(const Comm& comm, const std::vector<std::int32_t>& sizes, bool after_top_p) {
    const auto summed = [&](bool draft, std::int64_t r) {
      const SamplingParams& p = params(draft, r);
      return after_top_p ? top_p_only(p) : p.temperature != 0.0f && top_k(p) == 0;
    };
    const auto min_w = [&](bool draft, std::int64_t r) {
      const SamplingParams& p = params(draft, r);
      return top_p_only(p) && !after_top_p ? 0.0f : p.min_p;
    };
    Message m;
    const auto put = [&](bool draft, std::int64_t r, const MergedView&) {
      if (!summed(draft, r)) return;
      logits_detail::WeightSums sums;
      if (const core::LogitView<Logit> view = slice_view(draft, r); view.ok) {  // the max and threshold so far
        const float w = min_w(draft, r);
        sums = view.row.overlay.size
                   ? logits_detail::weights_sums<Arch, logits_detail::Entries::excluded>(view, w, scratch_.data())
                   : logits_detail::weights_sums<Arch, logits_detail::Entries::none>(view, w, scratch_.data());
      }
      m.put(sums.norm);
      m.put(sums.lowest);
    };
    for_sliced(put);
    const std::int32_t ranks = static_cast<std::int32_t>(sizes.size());
    const auto all = gather(comm, m, ranks);
    std::vector<logits_detail::WeightSums> merged(targets_.size() + drafts_.size());
    for (std::int32_t rank = 0; rank < ranks; ++rank) {
      Reader in = part(all, m, rank, "normaliser (logits)");
      const auto take = [&](bool draft, std::int64_t r, const MergedView&) {
        if (!summed(draft, r)) return;
        logits_detail::WeightSums& s = merged[index(draft, r)];
        s.norm.merge(in.sum());
        s.lowest = std::min(s.lowest, in.get<float>());
      };
      for_sliced(take);
    }
    const auto apply = [&](bool draft, std::int64_t r, MergedView& v) {
      if (!summed(draft, r) || !v.ok || !v.has_mass()) return;
      const logits_detail::WeightSums& s = merged[index(draft, r)];
      if (min_w(draft, r) > 0.0f) v.threshold = s.lowest;
      v.norm = s.norm.value();
      v.inv_norm = static_cast<float>(1.0 / v.norm);
    };
    for_sliced(apply);
  }

  /// The view of sliced row r over this rank's slice (row indices local) with the merged view's
  /// parameters; valid until room_ is reused. ok = false: the row has no p to read (a bad logit,
  /// or no kept token).
  core::LogitView<Logit> slice_view(bool draft, std::int64_t r) {
    const MergedView& m = draft ? drafts_[static_cast<std::size_t>(r)] : targets_[static_cast<std::size_t>(r)];
    core::LogitView<Logit> view;
    view.ok = m.ok && m.has_mass() && size_ > 0;
    if (!view.ok) return view;
    view.row = open(room_, draft, r);
    view.greedy = m.greedy;
    view.max = m.max;
    view.argmax = m.argmax >= start_ && m.argmax - start_ < size_ ? m.argmax - start_ : -1;
    view.inv_temperature = m.inv_temperature;
    view.threshold = m.threshold;
    view.norm = m.norm;
    view.inv_norm = m.inv_norm;
    return view;
  }
  /// A whole reduced draft row's view (read at target ids); ok as slice_view's.
  core::LogitView<Logit> whole_view(std::int64_t j) {
    core::LogitView<Logit> view;
    if (size_ == 0) {
      view.ok = false;
      return view;
    }
    view = cpu::prepare<Arch>(open(room_, true, j), whole_scratch());
    view.ok = view.ok && view.has_mass();
    return view;
  }

  float value(bool draft, std::int64_t r, std::int32_t token) {
    if (draft && whole_drafts()) {
      const core::LogitView<Logit> view = whole_view(r);
      return view.ok ? logits_detail::probability(view, token) : 0.0f;
    }
    const core::LogitView<Logit> view = slice_view(draft, r);
    return view.ok ? core::probability_at(view, token - start_) : 0.0f;
  }

  void materialise(bool draft, std::int64_t r, float* out) {
    if (draft && whole_drafts()) {  // q at this rank's tokens, through the draft vocabulary's map
      const core::LogitView<Logit> view = whole_view(r);
      for (std::int32_t i = 0; i < size_; ++i) out[i] = view.ok ? logits_detail::probability(view, start_ + i) : 0.0f;
      return;
    }
    const core::LogitView<Logit> view = slice_view(draft, r);
    if (!view.ok) {
      std::fill(out, out + size_, 0.0f);
      return;
    }
    using B = logits_detail::F<Arch>;
    constexpr std::int32_t W = B::size;
    std::int32_t i = 0;
    for (; i + W <= size_; i += W) logits_detail::probs<Arch>(view, i).store_unaligned(out + i);
    for (; i < size_; ++i) out[i] = logits_detail::probability(view, i);
  }

  /// A whole reduced draft row's scratch, beside the slice's.
  float* whole_scratch() {
    whole_scratch_.resize(static_cast<std::size_t>(whole_.draft_vocab_size) + 64);
    return whole_scratch_.data();
  }

  const Batch& batch_;
  const Layout& layout_;
  std::int32_t start_ = 0, size_ = 0;
  std::vector<std::int32_t> target_to_draft_, bias_order_;
  core::LogitSource<Logit> local_{}, whole_{};
  std::vector<std::int32_t> target_seq_, draft_seq_;
  std::vector<MergedView> targets_, drafts_;
  std::vector<float> scratch_, whole_scratch_;
  Room room_;  // the phases' rows, one at a time
  BadRow bad_;
};

}  // namespace specverify::cpu::shard
