// The sharded verify on the CPU (docs/api.md "Sharded vocabulary"): each rank holds a slice of every
// row, and the ranks exchange summaries of their slices, never the rows, through the caller's
// all_gather. Every summary merges bit for bit (FixedSums, maxima, first indices), so every rank
// gets the unsharded verify's outputs.
//
// In phases, each one all_gather for the whole batch (docs/sharded.md), their number and bytes a
// function of B, the drafts' shape, the rule and the sampling parameters alone:
//   1. shard: each rank's slice, its local findings (validation), a digest of the shared input;
//   (rows of logits) the pre-pass's phases, cpu/sharded_logits.hpp: each row's merged view (max,
//      kept set, normaliser): 2 phases, 7 where a sliced row has top_p without top_k;
//   2. rows: at every row that may be read, p(x) and q(x) of each child x from the rank holding x,
//      and the statistics the rule asks for (max, argmax, entropy, divergence at scale 1, the
//      coupled sample's winner), each with the first invalid value its pass met;
//   3. (rules with statistics, rows of probabilities) the sums whose largest term leaves
//      FixedSum's domain, again at the scale the whole row's largest term gives (rows of logits
//      keep them at scale 1, as LogitRows sums them);
//   (block and traversal verification with draft rows) a first walk records the masses Z_i it may
//      read, which two phases sum (at scale 1, then where the bound leaves FixedSum's domain at the
//      row's);
//   then every rank walks every sequence with core::walk over the merged summaries, which decides
//   identically everywhere and leaves one draw per sequence (its weights and uniform) undone;
//   (trees: residual rules, Traversal) a walk that rejects a child asks for the mass of what is left of p
//      and stops there: two phases sum the asked masses (one per sequence, as the masses Z_i) and
//      the sequences that asked walk again, for as many rounds as one path of the trees may ask
//      (each node's children but the last, and without replacement its q's total once; Traversal,
//      which may absorb every node into its parent: the nodes but one);
//   4. draws: each slice's sum of the draw's weights (and of p, in case the residual has no mass);
//   5. those sums again at the scale the whole row's bound gives, where it is not 1;
//   6. tokens: the rank whose slice holds u times the total draws in it, from the exact sum of the
//      slices before it.
// So a rank sends 6 (5 without statistics, 7 for Block with draft rows and for Traversal) messages
// per call over probability rows, 7 over logits (12 with top_p alone; Block and Traversal: 2 more),
// and a tree's rounds 2 each; a phase with nothing to send (the same on every rank) makes no call.
// Chains with every rule and trees with every rule that has a tree form, over rows of
// probabilities or logits.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "specverify/communicator_ref.hpp"
#include "specverify/core/chain_layout.hpp"
#include "specverify/core/output.hpp"
#include "specverify/core/validate.hpp"
#include "specverify/core/walk.hpp"
#include "specverify/cpu/divergence_kernels.hpp"
#include "specverify/cpu/logit_kernels.hpp"
#include "specverify/cpu/row_kernels.hpp"
#include "specverify/cpu/shard_messages.hpp"
#include "specverify/cpu/sharded_logits.hpp"
#include "specverify/cpu/verify.hpp"
#include "specverify/rule.hpp"
#include "specverify/types.hpp"

namespace specverify {
namespace cpu::shard {

/// A TermSum as it crosses ranks (cpu/divergence_kernels.hpp).
struct TermWire {
  std::int64_t hi = 0, lo = 0;
  double max_term = 0.0;
  std::uint8_t infinite = 0, ok = 1;

  static TermWire of(const detail::TermSum& t) {
    return {t.sum.hi, t.sum.lo, t.max_term, std::uint8_t(t.infinite), std::uint8_t(t.ok)};
  }
  static TermWire read(Reader& in) {
    const TermWire w = in.get<TermWire>();
    in.expect(core::FixedSum{w.hi, w.lo}.canonical() && w.infinite <= 1 && w.ok <= 1, "a statistic's sum");
    return w;
  }
  detail::TermSum sum(double scale) const {
    detail::TermSum t;
    t.sum.hi = hi;
    t.sum.lo = lo;
    t.scale = scale;
    t.max_term = max_term;
    t.infinite = infinite != 0;
    t.ok = ok != 0;
    return t;
  }
};

/// The first invalid value a pass met in a row: its token (-1: none) and value. Merged in rank
/// order, the first rank's is the row's first.
struct BadValue {
  std::int32_t token = -1;
  float value = 0.0f;

  void merge(const BadValue& later) {
    if (token < 0) *this = later;
  }
  /// One sent by the rank holding [start, start + size).
  static BadValue read(Reader& in, std::int32_t start, std::int32_t size) {
    BadValue v = in.get<BadValue>();
    in.token(v.token, start, size);
    return v;
  }
};

/// A GumbelBest as it crosses ranks (its flag a byte: a bool read from a peer may hold anything).
struct GumbelWire {
  double key = 0.0;
  std::int32_t token = -1;
  float p = 0.0f;
  std::uint8_t ok = 1;

  static GumbelWire of(const GumbelBest& g) { return {g.key, g.token, g.p, std::uint8_t(g.ok)}; }
  static GumbelBest read(Reader& in, std::int32_t start, std::int32_t size) {
    const GumbelWire w = in.get<GumbelWire>();
    in.expect(w.ok <= 1, "a flag");
    GumbelBest g;
    g.key = w.key;
    g.token = in.token(w.token, start, size);
    g.p = w.p;
    g.ok = w.ok != 0;
    return g;
  }
};

inline BadValue first_bad(const float* row, std::int32_t n, std::int32_t start) {
  float value = 0.0f;
  const std::int32_t i = core::first_invalid(row, n, value);
  return {i < 0 ? -1 : start + i, value};
}

/// One node's slice summary (phase 2): p at its draft, q there, and the statistics.
struct NodeSlice {
  float p_x = 0.0f, q_x = 0.0f;  // meaningful from the rank holding x
  float max = 0.0f;
  std::int32_t argmax = -1;      // first token of this slice holding its max
  std::uint8_t max_ok = 1;
  TermWire entropy, divergence, after;  // after: a one-hot divergence's mass past x
  GumbelBest coupled;
  BadValue p_bad, q_bad;
};

/// Which of a NodeSlice's fields a rule reads: only those cross ranks (Standard sends p(x), q(x)).
struct NodeFields {
  bool max = false, entropy = false, divergence = false, after = false, coupled = false;
  bool any_pass() const { return max || entropy || divergence || coupled; }

  void put(Message& m, const NodeSlice& n) const {
    m.put(n.p_x);
    m.put(n.q_x);
    if (max) {
      m.put(n.max);
      m.put(n.argmax);
      m.put(n.max_ok);
    }
    if (entropy) m.put(n.entropy);
    if (divergence) m.put(n.divergence);
    if (after) m.put(n.after);
    if (coupled) m.put(GumbelWire::of(n.coupled));
    if (any_pass()) {
      m.put(n.p_bad);
      m.put(n.q_bad);
    }
  }
  /// What the rank holding [start, start + size) sent.
  NodeSlice get(Reader& in, std::int32_t start, std::int32_t size) const {
    NodeSlice n;
    n.p_x = in.get<float>();
    n.q_x = in.get<float>();
    if (max) {
      n.max = in.get<float>();
      n.argmax = in.token(in.get<std::int32_t>(), start, size);
      n.max_ok = in.flag();
    }
    if (entropy) n.entropy = TermWire::read(in);
    if (divergence) n.divergence = TermWire::read(in);
    if (after) n.after = TermWire::read(in);
    if (coupled) n.coupled = GumbelWire::read(in, start, size);
    if (any_pass()) {
      n.p_bad = BadValue::read(in, start, size);
      n.q_bad = BadValue::read(in, start, size);
    }
    return n;
  }
};

/// A tree node's later child (after its first) as it crosses ranks: its token, and p(x), q(x)
/// from the rank holding x.
struct Child {
  std::int32_t token = -1;
  float p = 0.0f, q = 0.0f;
};

/// One sequence's draw (phase 4, 5): the sums of the residual's and of p's weights over the slice.
struct DrawSlice {
  core::FixedSum residual, target;
  double residual_bound = 0.0, target_bound = 0.0;  // fixed_bound of the slice's largest p
  std::uint8_t ok = 1;
  BadValue p_bad, q_bad;

  /// One sent by the rank holding [start, start + size).
  static DrawSlice read(Reader& in, std::int32_t start, std::int32_t size) {
    const DrawSlice d = in.get<DrawSlice>();
    in.expect(d.residual.canonical() && d.target.canonical() && d.ok <= 1, "a draw's sums");
    in.token(d.p_bad.token, start, size);
    in.token(d.q_bad.token, start, size);
    return d;
  }
};

/// A node's row for the walk: the target row (p) or the draft row (q) of node `slot`.
struct RowRef {
  std::int64_t slot = 0;
  bool draft = false;
  bool ok = true, has_mass = true;  // the merged pre-pass's (rows of logits)
};

inline bool view_ok(const RowRef& r) { return r.ok; }
inline bool view_has_mass(const RowRef& r) { return r.has_mass; }

/// What is left of p at a tree node after rejected siblings (core::Residual), copied out of the
/// walk: a mass it asks for, or the draw it leaves.
struct ResidualState {
  RowRef p, q;
  double p_scale = 1.0;
  bool has_q = false;
  Drafted drafted = Drafted::sampled;
  std::int32_t x = kNoToken;  // the sibling rejected now (kNoToken: r itself)
  std::vector<std::int32_t> tokens, live;
  std::vector<double> scale, inv_mass, left;
  core::StepSums sums;
  double removed = 0.0, q_total = 1.0;

  static ResidualState of(const core::Residual<RowRef>& r, std::int32_t x) {
    ResidualState s;
    s.p = r.p;
    s.q = r.q;
    s.p_scale = r.p_scale;
    s.has_q = r.has_q;
    s.drafted = r.drafted;
    s.x = x;
    s.tokens.assign(r.siblings.token, r.siblings.token + r.steps);
    s.scale.assign(r.siblings.scale, r.siblings.scale + r.steps);
    s.inv_mass.assign(r.siblings.inv_mass, r.siblings.inv_mass + r.steps);
    if (r.tracked()) {
      s.left.assign(r.siblings.left, r.siblings.left + r.steps);
      s.live.assign(r.siblings.live, r.siblings.live + r.live);
    }
    s.sums = r.sums;
    s.removed = r.removed;
    s.q_total = r.q_total;
    return s;
  }
};

/// The draw a walk leaves for phase 4: sequence b's at `depth`, from p (residual: minus q, or the
/// one-hot at x), with uniform u; where it lands in the outputs, and the fault's words if it fails.
struct PendingDraw {
  bool active = false, residual = false;
  std::int64_t slot = 0;  // the node's row of p
  std::int32_t x = -1;    // the rejected draft
  float u = 0.0f;
  std::int32_t depth = 0, node = -1;
  std::int64_t p_row = -1, q_row = -1;
  double p_scale = 1.0;   // a joint walk's residual max(s p - q, 0): s
  bool absorbed = false;  // a tree node's residual after absorbed siblings: `state`
  ResidualState state;

  static PendingDraw of(bool residual, std::int64_t slot, std::int32_t x, float u) {
    PendingDraw d;
    d.active = true;
    d.residual = residual;
    d.slot = slot;
    d.x = x;
    d.u = u;
    return d;
  }
};

/// A joint walk's Z_i at a node (core/block_walk.hpp; on a chain, core/traversal_walk.hpp asks the
/// same, with its weight w as s): the scale s = p_i the walk asked it with (0: not asked), then the
/// merged mass and the first bad value its pass met.
struct BlockMass {
  double p_scale = 0.0;
  double z = 0.0;
  bool ok = true;
  BadValue p_bad, q_bad;
};

/// One slice's part of a BlockMass (the block phases).
struct MassSlice {
  core::FixedSum sum;
  double bound = 0.0;  // core::Residual::weight_bound of the slice's largest p
  std::uint8_t ok = 1;
  BadValue p_bad, q_bad;

  /// One sent by the rank holding [start, start + size).
  static MassSlice read(Reader& in, std::int32_t start, std::int32_t size) {
    const MassSlice s = in.get<MassSlice>();
    in.expect(s.sum.canonical() && s.ok <= 1, "a mass's sum");
    in.token(s.p_bad.token, start, size);
    in.token(s.q_bad.token, start, size);
    return s;
  }
};

/// The walk's row source: row indices, keyed by the node slot (a chain's target row index).
struct Source {
  using Row = RowRef;
  bool has_q = false;
  const float* target_row_max{};
  bool tree = false;

  bool has_draft() const { return has_q; }
  RowRef target_row(std::int32_t, std::int64_t row) const { return {row, false}; }
  // A chain's draft row j is slot j + b; a tree's draft rows are laid out like its target rows.
  RowRef draft_row(std::int32_t b, std::int64_t row) const { return {tree ? row : row + b, true}; }
  const float* known_max(std::int64_t row) const { return target_row_max ? target_row_max + row : nullptr; }
};

/// A node's merged summary, what the walk reads.
struct Node {
  std::int32_t x = -1;  // the draft at this node (-1: the bonus row)
  float p_x = 0.0f, q_x = 0.0f;
  float max = 0.0f;
  std::int32_t argmax = -1;
  bool max_ok = true;
  detail::TermSum entropy, divergence, after;
  GumbelBest coupled;
  BadValue p_bad, q_bad;
  bool p_ok = true, q_ok = true, q_mass = true;  // rows of logits: their merged pre-pass
  std::int32_t first_later = 0, later_children = 0;  // a tree node's children after x, in the Child list
};

/// The walk's rows: answers from the merged summaries; the one draw is left pending.
struct Rows {
  using View = RowRef;
  const std::vector<Node>* nodes{};
  PendingDraw* pending{};
  bool logits = false;
  std::vector<BlockMass>* masses{};  // a joint walk's, by the node of p
  bool recording = false;            // the first of a joint walk's two walks

  // A tree's residuals after absorbed siblings: their masses, one asked per walk (the tree
  // rounds). `known` answers the walk's first masses in the order it asks them; the first it asks
  // past them is copied to `ask`, and the rest of that walk is discarded.
  const std::vector<Child>* children{};
  SiblingRoom* room{};
  const std::vector<BlockMass>* known{};
  ResidualState* ask{};
  bool asked = false;
  std::size_t masses_read = 0;

  const Node& at(const RowRef& r) const { return (*nodes)[static_cast<std::size_t>(r.slot)]; }
  /// A later child's value of p (q) at v, if v is one of them.
  const Child* later(const Node& n, std::int32_t v) const {
    for (std::int32_t i = 0; i < n.later_children; ++i) {
      const Child& c = (*children)[static_cast<std::size_t>(n.first_later + i)];
      if (c.token == v) return &c;
    }
    return nullptr;
  }

  RowRef open(RowRef r) const {
    const Node& n = at(r);
    r.ok = r.draft ? n.q_ok : n.p_ok;
    r.has_mass = !r.draft || n.q_mass;
    return r;
  }
  float value(const RowRef& r, std::int32_t v) const {
    const Node& n = at(r);
    if (v != n.x) {
      if (const Child* c = n.later_children > 0 ? later(n, v) : nullptr) return r.draft ? c->q : c->p;
    }
    if (r.draft) return n.q_x;  // the walk reads q only at its drafts
    if (v == n.x) return n.p_x;
    if (v == n.argmax) return n.max;
    if (v == n.coupled.token) return n.coupled.p;
    return std::numeric_limits<float>::quiet_NaN();  // a pending draw's token: phase 6 writes its log p
  }
  Checked<float> max(const RowRef& p) const { return {at(p).max, at(p).max_ok}; }
  Checked<std::int32_t> argmax(const RowRef& p) const {
    const Node& n = at(p);
    return {n.max_ok && n.max > 0.0f ? n.argmax : -1, n.max_ok};
  }
  Checked<float> entropy(const RowRef& p) const { return detail::scaled(at(p).entropy, 1.0); }
  Checked<float> divergence(Divergence d, const RowRef& p, const RowRef* q, std::int32_t x) const {
    const Node& n = at(p);
    if (q) {
      const double factor = detail::divergence_factor(d);
      if (!n.divergence.ok || factor == 0.0) return {std::numeric_limits<float>::quiet_NaN(), false};
      return detail::scaled(n.divergence, factor);
    }
    (void)x;
    if (logits) {  // as LogitRows: from a = p(x) and the rest of p's mass, 1 - a
      const double a = n.p_x, rest = std::max(0.0, 1.0 - a);
      const double off = rest > 0.0 ? rest * core::divergence_term(d, 1.0, 0.0) : 0.0;
      return {static_cast<float>(off + core::divergence_term(d, a, 1.0)), n.p_ok};
    }
    // As one_hot_divergence: `divergence` holds the mass before x and `after` the mass past it,
    // each summed at its own scale.
    const bool ok = n.divergence.ok && n.after.ok && valid_probability(n.p_x);
    const bool off_x = n.divergence.max_term > 0.0 || n.after.max_term > 0.0;
    double rest;
    if (n.divergence.scale == n.after.scale) {
      detail::TermSum both = n.divergence;
      both.merge(n.after);
      rest = both.value();
    } else {
      rest = n.divergence.value() + n.after.value();
    }
    return {detail::one_hot_value(d, n.p_x, rest, off_x), ok};
  }
  Checked<std::int32_t> draw_residual(const RowRef& p, const RowRef* q, std::int32_t x, float u) {
    *pending = PendingDraw::of(true, p.slot, q ? -1 : x, u);
    return {0, true};  // a placeholder token: phase 6 writes the drawn one
  }
  Checked<std::int32_t> draw_target(const RowRef& p, float u) {
    *pending = PendingDraw::of(false, p.slot, -1, u);
    return {0, true};
  }
  Checked<std::int32_t> gumbel_argmax(const RowRef& p, std::uint64_t, std::int64_t) const {
    const GumbelBest& g = at(p).coupled;
    return {g.ok ? g.token : -1, g.ok};
  }
  // A chain's node has one child: no sibling is ever absorbed. Its residuals are the joint
  // walks' max(s p - q, 0): their masses Z_i, summed in the block phases (the first walk records
  // what it asks and reads 0, which fails every test that needs one, so it asks for every Z the
  // second walk may read), and their draw. A tree's are what is left after rejected siblings.
  core::Siblings siblings(std::int32_t count) { return room->siblings(count); }
  Checked<double> mass(const core::Residual<RowRef>& r, std::int32_t x) {
    if (known) {
      const std::size_t i = masses_read++;
      if (i < known->size()) return {(*known)[i].z, (*known)[i].ok};
      if (!asked) *ask = ResidualState::of(r, x);
      asked = true;
      return {1.0, true};  // a stand-in: this walk is walked again once the mass is known
    }
    BlockMass& m = (*masses)[static_cast<std::size_t>(r.p.slot)];
    if (recording) {
      m.p_scale = r.p_scale;
      return {0.0, true};
    }
    return {m.z, m.ok};
  }
  Checked<std::int32_t> draw(const core::Residual<RowRef>& r, std::int32_t x, float u) const {
    *pending = PendingDraw::of(true, r.p.slot, -1, u);
    pending->p_scale = r.p_scale;
    if (r.steps > 0) {
      pending->absorbed = true;
      pending->state = ResidualState::of(r, x);
    }
    return {0, true};
  }
};


/// The arguments every rank must pass alike, each digested on its own so that a mismatch names
/// what differs: ranks that disagree would walk different drafts, draw other uniforms or decide
/// by other parameters, and so return other tokens than their peers.
enum class Agreed : std::uint8_t { sizes, drafts, rule, randomness, sampling, bitmask, draft_map, guidance, lists, count };
inline constexpr std::size_t kAgreed = static_cast<std::size_t>(Agreed::count);

inline const char* agreed_text(Agreed a) {
  switch (a) {
    case Agreed::sizes: return "sizes (batch_size, vocab_size, the output's row_width, ranks)";
    case Agreed::drafts: return "drafts (offsets, draft tokens, parents, drafted)";
    case Agreed::rule: return "rule or rule parameters";
    case Agreed::randomness: return "randomness (seed, offset, sequence_seeds, caller uniforms, positions)";
    case Agreed::sampling: return "sampling parameters (target_params, draft_params)";
    case Agreed::bitmask: return "bitmask (whether allowed_tokens is given)";
    case Agreed::draft_map: return "draft vocabulary (draft_vocab_size, draft_to_target)";
    case Agreed::guidance: return "guidance (unconditional_first_row, guidance_scale)";
    case Agreed::lists: return "penalty or bias lists";
    default: return "arguments";
  }
}

/// Phase 1's message: a rank's slice, and what it found wrong locally (the text every rank throws).
struct Header {
  std::int32_t rank = 0, ranks = 1, start = 0, size = 0;
  std::uint8_t has_q = 0, has_guidance = 0, failed = 0;
  std::uint64_t digest[kAgreed] = {};
  char message[400] = {};
};

/// FNV-1a over the input every rank must share.
class Digest {
 public:
  template <class T>
  void add(const T* v, std::int64_t count) {
    if (!v) count = 0;  // an absent array (its presence is digested by the caller where it matters)
    const auto* bytes = reinterpret_cast<const unsigned char*>(v);
    for (std::int64_t i = 0; i < count * std::int64_t(sizeof(T)); ++i) h_ = (h_ ^ bytes[i]) * 1099511628211ull;
  }
  void add_text(const char* text) { add(text, static_cast<std::int64_t>(std::strlen(text)) + 1); }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 14695981039346656037ull;
};

/// A rule's identity and parameters into a Digest: what its traits make of it, its type where
/// RTTI names it, and each parameter's name and value (per-draft inputs over every draft).
template <class Rule>
void digest_rule(Digest& d, const Rule& rule, std::int64_t drafts) {
  using traits = rule_traits<Rule>;
  const RowStats stats = traits::stats(rule);
  const std::int32_t kinds[8] = {static_cast<std::int32_t>(traits::on_reject), static_cast<std::int32_t>(traits::on_bonus),
                                 static_cast<std::int32_t>(traits::joint),     stats.max,
                                 stats.argmax,                                 stats.entropy,
                                 stats.divergence,                             static_cast<std::int32_t>(stats.kind)};
  d.add(kinds, 8);
#if defined(__cpp_rtti) || defined(__GXX_RTTI)
  d.add_text(typeid(Rule).name());  // the ABI's mangled name: the same in every rank's build
#endif
  struct Visit {
    Digest& d;
    std::int64_t drafts;
    void operator()(const char* name, double value) const {
      d.add_text(name);
      d.add(&value, 1);
    }
    void operator()(const char* name, const float* per_draft) const {
      d.add_text(name);
      d.add(per_draft, drafts);
    }
  };
  traits::parameters(rule, Visit{d, drafts});
}

/// The layout and output of a batch kind.
template <class Batch>
struct ShapeOf {
  using Layout = core::ChainLayout;
  using Output = ChainOutput;
};
template <class Prob>
struct ShapeOf<TreeBatch<Prob>> {
  using Layout = core::TreeLayout;
  using Output = TreeOutput;
};
template <class Logit>
struct ShapeOf<LogitsTreeBatch<Logit>> : ShapeOf<TreeBatch<Logit>> {};

template <class Batch>
struct LogitsOf {
  using type = void;  // rows of probabilities
};
template <class Logit>
struct LogitsOf<LogitsChainBatch<Logit>> {
  using type = Logit;
};
template <class Logit>
struct LogitsOf<LogitsTreeBatch<Logit>> : LogitsOf<LogitsChainBatch<Logit>> {};

/// What a sharded verify's phases need of its rule, known per call: the same type for every
/// rule, so that the phases are compiled once per batch kind rather than once per rule.
struct RuleNeeds {
  RowStats stats;             // the row statistics its decisions read
  bool argmax_draw = false;   // a draw by argmax: the rows' max and argmax
  bool coupled = false;       // Coupled's draws: the rows' Gumbel maxima
  bool chain_masses = false;  // a joint chain walk's masses Z_i (Block, Traversal)

  template <class Rule, bool kTree>
  static RuleNeeds of(const Rule& rule) {
    using traits = rule_traits<Rule>;
    RuleNeeds n;
    n.stats = traits::stats(rule);
    n.argmax_draw = traits::on_reject == Draw::argmax || traits::on_bonus == Draw::argmax;
    n.coupled = traits::on_reject == Draw::coupled || traits::on_bonus == Draw::coupled;
    // Block and Traversal: on a chain both read the masses Z_i = sum max(s P_i - Q_i, 0) at nodes
    // 1 .. k - 1 (Traversal's root never asks: |R| = 1 passes) and draw from max(s P - Q, 0). On a
    // tree, Traversal's masses are those of R after absorbed children: the tree rounds ask them.
    n.chain_masses = traits::joint != Joint::none && !kTree;
    return n;
  }
};

/// The phases of a sharded verify of one batch on one rank, whatever its rule: chains or trees of
/// probability rows (ChainBatch, TreeBatch), or of logits (LogitsChainBatch, LogitsTreeBatch), whose
/// slices LogitSlices reads as probability rows. ShardedVerify drives them with its rule's walk.
template <class Arch, class Comm, class Batch>
class ShardedPhases {
 protected:
  using Layout = typename ShapeOf<Batch>::Layout;
  using Output = typename ShapeOf<Batch>::Output;
  static constexpr bool kTree = std::is_same_v<Layout, core::TreeLayout>;
  static constexpr core::Place kPlace = kTree ? core::Place::node : core::Place::position;  // a fault's
  using Logit = typename LogitsOf<Batch>::type;
  static constexpr bool kLogits = !std::is_void_v<Logit>;
  struct NoLogits {};
  using Logits = std::conditional_t<kLogits, LogitSlices<Arch, Logit, Layout>, NoLogits>;

  ShardedPhases(const RuleNeeds& needs, const Batch& batch, const Randomness& randomness, const Comm& comm)
      : needs_(needs), batch_(batch), randomness_(randomness), comm_(comm), layout_(Layout::of(batch)),
        logits_(make_logits(batch, layout_)) {}

  /// This rank's header, before its checks.
  Header header() const {
    Header h;
    const VocabShard& s = batch_.shard;
    h.rank = s.rank;
    h.ranks = s.ranks;
    h.start = s.vocab_start;
    h.size = s.ranks == 1 && s.local_vocab_size == 0 ? batch_.vocab_size : s.local_vocab_size;
    h.has_q = draft_rows() != nullptr;
    if constexpr (kLogits) h.has_guidance = batch_.unconditional_logits != nullptr;
    return h;
  }
  static void fail(Header& h, const invalid_input& e) {
    h.failed = 1;
    std::strncpy(h.message, e.what(), sizeof h.message - 1);
  }

  /// Phase 1 after this rank's checks: every rank learns every slice, or every rank throws the
  /// lowest rank's finding.
  void exchange(const Header& h, std::vector<std::int32_t> target_to_draft, std::vector<std::int32_t> bias_order) {
    const VocabShard& s = batch_.shard;
    Message m;
    m.put(h);
    const std::int32_t ranks = std::max(1, s.ranks);
    const auto all = gather(comm_, m, ranks);
    headers_.resize(static_cast<std::size_t>(ranks));
    for (std::int32_t r = 0; r < ranks; ++r) {
      Reader in(all.data() + std::size_t(r) * m.size(), m.size(), r, "1 (shard)");
      Header& o = headers_[static_cast<std::size_t>(r)];
      o = in.get<Header>();
      in.expect(o.has_q <= 1 && o.has_guidance <= 1 && o.failed <= 1, "a flag");
      in.expect(std::memchr(o.message, '\0', sizeof o.message) != nullptr, "an unterminated message");
    }
    // The lowest rank's finding, from a rank with a slice where one failed: an empty slice
    // validates draft rows it cannot see as a stand-in, so it may name a later check.
    const Header* failed = nullptr;
    for (const Header& other : headers_) {
      if (other.failed && (!failed || (failed->size == 0 && other.size > 0))) failed = &other;
    }
    if (failed) throw invalid_input(failed->message);
    std::int64_t end = 0;
    has_q_ = false;
    for (std::int32_t r = 0; r < s.ranks; ++r) {
      const Header& o = headers_[r];
      if (o.rank != r || o.ranks != s.ranks || o.start != end || o.size < 0) {  // (gathered values only: every rank alike)
        core::detail::reject("batch.shard: rank ", r, " holds [", o.start, ", ", std::int64_t{o.start} + o.size,
                             ") as rank ", o.rank, " of ", o.ranks,
                             "; the slices must follow in rank order from 0 to vocab_size = ", batch_.vocab_size);
      }
      for (std::size_t a = 0; a < kAgreed; ++a) {
        if (o.digest[a] != headers_[0].digest[a]) {
          core::detail::reject("rank ", r, " passes other ", agreed_text(static_cast<Agreed>(a)),
                               " than rank 0: every rank must pass the same");
        }
      }
      end += o.size;
      has_q_ = has_q_ || (o.size > 0 && o.has_q);
    }
    if (end != batch_.vocab_size) {
      core::detail::reject("batch.shard: the slices cover [0, ", end, "), not [0, vocab_size = ", batch_.vocab_size, ")");
    }
    for (std::int32_t r = 0; r < s.ranks; ++r) {
      if (headers_[r].size > 0 && !headers_[r].has_q && has_q_) {
        core::detail::reject("rank ", r, " passes no ", kLogits ? "draft_logits" : "draft_probs", " while another rank does");
      }
      for (std::int32_t o = 0; o < r; ++o) {
        if (headers_[r].size > 0 && headers_[o].size > 0 && headers_[r].has_guidance != headers_[o].has_guidance) {
          core::detail::reject("rank ", headers_[r].has_guidance ? o : r,
                               " passes no unconditional_logits while another rank does");
        }
      }
    }
    start_ = h.start;
    size_ = h.size;
    if constexpr (kLogits) {
      logits_.bind(start_, size_, has_q_, std::move(target_to_draft), std::move(bias_order));
      p_buffer_.resize(static_cast<std::size_t>(size_));
      q_buffer_.resize(static_cast<std::size_t>(size_));
    }
  }

  /// Phases 2 and 3: every node's rows summarised and merged, ready for the walks.
  void summary_phases(std::vector<float>& staged, const core::OutputRows& out) {
    const std::int32_t B = batch_.batch_size;
    const std::int64_t slots = std::int64_t{layout_.offsets[B]} + B;
    if constexpr (kLogits) {
      std::vector<std::int32_t> sizes;
      for (const Header& h : headers_) sizes.push_back(h.size);
      logits_.prepare(comm_, sizes);
    }
    rows_phase(slots);
    // Rows of logits keep their statistics at scale 1, as LogitRows sums them (p <= 1).
    if (!kLogits && (needs_.stats.entropy || needs_.stats.divergence)) rescale_phase();
    staged.assign(out.logprobs ? std::size_t(B) * std::size_t(out.row_width) : 0, 0.0f);
    results_.assign(static_cast<std::size_t>(B), {});
    pending_.assign(static_cast<std::size_t>(B), {});
  }

  /// After the walks and the draws: a fault raised, or the outputs written.
  VerifyStats report(std::vector<float>& staged, const core::OutputRows& out) {
    const std::int32_t B = batch_.batch_size;
    for (std::int32_t b = 0; b < B; ++b) {
      core::Fault f = results_[b].fault;
      if (f.kind == core::FaultKind::none) continue;
      if constexpr (kLogits) {  // a bad logit: named by the first rank holding one in that row
        if (f.kind == core::FaultKind::bad_value) core::raise(logits_.bad_row().finding);
        core::raise(core::detail::logits_fault_finding(f, b, kPlace));
      }
      core::raise(core::from_fault(f, b, kPlace));
    }
    VerifyStats total;
    for (std::int32_t b = 0; b < B; ++b) {
      core::write_sequence(layout_, b, results_[b], out, stage(staged, out, b));
      core::add_stats(total, results_[b]);
    }
    return total;
  }

  void check_slice(const Header& h) const {
    const VocabShard& s = batch_.shard;
    if (s.ranks < 1 || s.rank < 0 || s.rank >= s.ranks) {
      core::detail::reject("batch.shard: rank ", s.rank, " of ", s.ranks, " (rank must lie in [0, ranks))");
    }
    if (h.start < 0 || h.size < 0 || std::int64_t{h.start} + h.size > batch_.vocab_size) {
      core::detail::reject("batch.shard: rank ", s.rank, " holds [", h.start, ", ", std::int64_t{h.start} + h.size,
                           "), outside [0, vocab_size = ", batch_.vocab_size, ")");
    }
    if (h.size > 0 && !target_rows()) core::detail::reject(kLogits ? "target_logits" : "target_probs", " is null on rank ", s.rank);
    if (batch_.target_stride != 0 && batch_.target_stride < h.size) {
      core::detail::reject("target_stride = ", batch_.target_stride, " is below rank ", s.rank, "'s slice of ", h.size);
    }
    if (!whole_drafts() && batch_.draft_stride != 0 && batch_.draft_stride < h.size) {
      core::detail::reject("draft_stride = ", batch_.draft_stride, " is below rank ", s.rank, "'s slice of ", h.size);
    }
    if constexpr (kLogits) {
      if (batch_.unconditional_stride != 0 && batch_.unconditional_stride < h.size) {
        core::detail::reject("unconditional_stride = ", batch_.unconditional_stride, " is below rank ", s.rank,
                             "'s slice of ", h.size);
      }
    }
  }

  static Logits make_logits(const Batch& batch, const Layout& layout) {
    if constexpr (kLogits) {
      return Logits(batch, layout);
    } else {
      return {};
    }
  }
  const void* target_rows() const {
    if constexpr (kLogits) return batch_.target_logits;
    else return batch_.target_probs;
  }
  const void* draft_rows() const {
    if constexpr (kLogits) return batch_.draft_logits;
    else return batch_.draft_probs;
  }
  bool whole_drafts() const {
    if constexpr (kLogits) return logits_.whole_drafts();
    else return false;
  }
  const float* known_max() const {
    if constexpr (kLogits || kTree) return nullptr;  // (trees: TreeBatch has no target_row_max)
    else return batch_.target_row_max;
  }

  /// The digests of what every rank must pass alike (Agreed), of a batch that validated; the
  /// rule's (digest_rule) from the caller.
  void digest(const Output& out, std::uint64_t rule_digest, std::uint64_t (&digests)[kAgreed]) const {
    Digest d[kAgreed];
    const auto part = [&](Agreed a) -> Digest& { return d[static_cast<std::size_t>(a)]; };
    const std::int32_t B = batch_.batch_size;
    const std::int32_t shape[4] = {B, batch_.vocab_size, out.row_width, batch_.shard.ranks};
    part(Agreed::sizes).add(shape, 4);
    const std::int64_t drafts = B > 0 ? layout_.offsets[B] : 0;
    const Randomness& r = randomness_;
    const std::uint64_t words[2] = {r.seed, r.offset};
    // Positions key Coupled's noise alone (other rules ignore them, as check_positions does).
    const std::int64_t* positions = needs_.coupled ? r.positions : nullptr;
    const std::uint8_t given[4] = {r.sequence_seeds != nullptr, r.accept_uniforms != nullptr,
                                   r.sample_uniforms != nullptr, positions != nullptr};
    part(Agreed::randomness).add(words, 2);
    part(Agreed::randomness).add(given, 4);
    if (B > 0) {
      Digest& draws = part(Agreed::drafts);
      draws.add(layout_.offsets, B + 1);
      draws.add(batch_.draft_tokens, drafts);
      if constexpr (kTree) {
        draws.add(batch_.parents, drafts);
        const std::int32_t drafted = static_cast<std::int32_t>(batch_.drafted);
        draws.add(&drafted, 1);
      }
      Digest& random = part(Agreed::randomness);
      random.add(r.sequence_seeds, B);
      random.add(r.accept_uniforms, drafts);
      random.add(r.sample_uniforms, B);
      random.add(positions, B);
      if constexpr (kLogits) digest_logits(part);
    }
    for (std::size_t a = 0; a < kAgreed; ++a) digests[a] = d[a].value();
    digests[static_cast<std::size_t>(Agreed::rule)] = rule_digest;
  }

  static float* stage(std::vector<float>& staged, const core::OutputRows& out, std::int32_t b) {
    return staged.empty() ? nullptr : staged.data() + std::size_t(b) * out.row_width;
  }

  /// The parameters, lists, maps and guidance every rank of a logits batch must share (of the
  /// bitmask only whether it is given: its rows are as long as the vocabulary's). Not whether
  /// row pointers are null: a rank with an empty slice may pass null rows.
  template <class Part>
  void digest_logits(Part& part) const {
    const std::int32_t B = batch_.batch_size;
    const std::uint8_t draft_params = batch_.draft_params != nullptr;
    part(Agreed::sampling).add(batch_.target_params, B);
    part(Agreed::sampling).add(&draft_params, 1);
    part(Agreed::sampling).add(batch_.draft_params, B);
    const std::uint8_t mask = batch_.allowed_tokens != nullptr;
    part(Agreed::bitmask).add(&mask, 1);
    part(Agreed::draft_map).add(&batch_.draft_vocab_size, 1);
    if (batch_.draft_vocab_size > 0) part(Agreed::draft_map).add(batch_.draft_to_target, batch_.draft_vocab_size);
    part(Agreed::guidance).add(batch_.unconditional_first_row, B);
    part(Agreed::guidance).add(batch_.guidance_scale, B);
    Digest& lists = part(Agreed::lists);
    const std::uint8_t given[2] = {batch_.history_offsets != nullptr, batch_.bias_offsets != nullptr};
    lists.add(given, 2);
    if (batch_.history_offsets) {
      lists.add(batch_.history_offsets, B + 1);
      lists.add(batch_.history_tokens, batch_.history_offsets[B]);
      lists.add(batch_.history_counts, batch_.history_offsets[B]);
    }
    if (batch_.bias_offsets) {
      lists.add(batch_.bias_offsets, B + 1);
      lists.add(batch_.bias_tokens, batch_.bias_offsets[B]);
      lists.add(batch_.bias_values, batch_.bias_offsets[B]);
    }
  }

  /// This rank's slice of node `slot`'s p (of draft row `draft`'s q): the rows as given, or for
  /// logits their probabilities, materialised into a row of their own.
  const float* p_row(std::int64_t slot) {
    if constexpr (kLogits) {
      if (p_buffered_ != slot) logits_.materialise_target(slot, p_buffer_.data());
      p_buffered_ = slot;
      return p_buffer_.data();
    } else {
      const std::int64_t stride = batch_.target_stride ? batch_.target_stride : size_;
      return size_ > 0 ? batch_.target_probs + slot * stride : nullptr;
    }
  }
  const float* q_row(std::int64_t draft) {
    if (!has_q_) return nullptr;
    if constexpr (kLogits) {
      if (q_buffered_ != draft) logits_.materialise_draft(draft, q_buffer_.data());
      q_buffered_ = draft;
      return q_buffer_.data();
    } else {
      const std::int64_t stride = batch_.draft_stride ? batch_.draft_stride : size_;
      return size_ > 0 ? batch_.draft_probs + draft * stride : nullptr;
    }
  }
  /// p(x) and q(x) of child c of the node whose row of p is `slot`, x held by this slice.
  Child child_values(std::int32_t b, std::int64_t slot, std::int32_t c) {
    const std::int32_t x = layout_.token(b, c);
    Child v{x};
    if constexpr (kLogits) {
      v.p = logits_.target_value(slot, x);
      if (has_q_) v.q = logits_.draft_value(layout_.draft_row(b, c), x);
    } else {
      v.p = p_row(slot)[x - start_];
      if (const float* q = q_row(layout_.draft_row(b, c))) v.q = q[x - start_];
    }
    return v;
  }
  bool holds(std::int32_t token) const { return token >= start_ && token - start_ < size_; }

  /// Every slot (a node's row of p, the root's first) in slot order: its sequence, its depth (the
  /// walk's, where it reads that row) and its first child (-1: none, the bonus row).
  template <class Fn>
  void for_nodes(Fn fn) const {
    for (std::int32_t b = 0; b < batch_.batch_size; ++b) for_nodes_of(b, [&](auto... a) { fn(b, a...); });
  }
  template <class Fn>
  void for_nodes_of(std::int32_t b, Fn fn) const {
    if constexpr (kTree) {
      depth_.assign(static_cast<std::size_t>(layout_.count(b)) + 1, 0);
      for (std::int32_t node = -1; node < layout_.count(b); ++node) {
        const std::int32_t d = node < 0 ? 0 : depth_[static_cast<std::size_t>(layout_.parent(b, node) + 1)] + 1;
        depth_[static_cast<std::size_t>(node + 1)] = d;
        fn(d, layout_.target_row(b, node), layout_.child(b, node, -1));
      }
    } else {
      for (std::int32_t d = 0; d <= layout_.count(b); ++d) {
        fn(d, layout_.target_row(b, d - 1), d < layout_.count(b) ? d : -1);
      }
    }
  }
  /// A tree node's children after its first, in slot order (their p(x) and q(x) cross ranks after
  /// the slots' summaries): sequence, the parent's slot, the child.
  template <class Fn>
  void for_later_children(Fn fn) const {
    if constexpr (kTree) {
      for (std::int32_t b = 0; b < batch_.batch_size; ++b) {
        for (std::int32_t node = -1; node < layout_.count(b); ++node) {
          const std::int32_t first = layout_.child(b, node, -1);
          for (std::int32_t c = first < 0 ? -1 : layout_.child(b, node, first); c >= 0; c = layout_.child(b, node, c)) {
            fn(b, layout_.target_row(b, node), c);
          }
        }
      }
    } else {
      (void)fn;
    }
  }

  /// Divergence d's sum over the slice [lo, hi) of p and q at `scale` (q null: p's mass).
  detail::TermSum divergence_part(const float* p, const float* q, std::int32_t lo, std::int32_t hi, double scale) const {
    const std::int32_t n = std::max(0, hi - lo);
    if (!q) return detail::sum_terms_at<Arch>(p + lo, nullptr, n, detail::MassTerm{}, scale);
    double factor;
    return detail::with_divergence_term(needs_.stats.kind, factor, [&](auto term, bool swapped) {
      return swapped ? detail::sum_terms_at<Arch>(q + lo, p + lo, n, term, scale)
                     : detail::sum_terms_at<Arch>(p + lo, q + lo, n, term, scale);
    });
  }
  /// The two parts of a one-hot divergence around x, as local ranges: [0, x) and (x, V).
  std::pair<std::int32_t, std::int32_t> before_x(std::int32_t x) const {
    return {0, std::clamp(x - start_, 0, size_)};
  }
  std::pair<std::int32_t, std::int32_t> after_x(std::int32_t x) const {
    return {std::clamp(x + 1 - start_, 0, size_), size_};
  }

  /// Phase 2: the summaries of every node's rows.
  NodeFields fields() const {
    const RowStats& need = needs_.stats;
    NodeFields f;
    f.max = need.max || need.argmax || needs_.argmax_draw;
    f.entropy = need.entropy;
    f.divergence = need.divergence && (has_q_ || !kLogits);
    f.after = need.divergence && !has_q_ && !kLogits;
    if (kLogits) f.max = false;  // the merged views'

    f.coupled = needs_.coupled;
    return f;
  }

  void rows_phase(std::int64_t slots) {
    const RowStats& need = needs_.stats;
    const NodeFields fields = this->fields();
    const bool want_max = fields.max;
    Message m;
    for_nodes([&](std::int32_t b, std::int32_t d, std::int64_t slot, std::int32_t c) {
      NodeSlice n;
      const bool child = c >= 0;
      const std::int32_t x = child ? layout_.token(b, c) : -1;
      // Rows of logits are materialised only for the sums over the slice; p(x) and q(x) alone
      // are one element each.
      const bool dense = !kLogits || need.entropy || (need.divergence && has_q_);
      const float* p = dense ? p_row(slot) : nullptr;
      const float* q = dense && child ? q_row(layout_.draft_row(b, c)) : nullptr;
      if (size_ > 0) {
        if (child && holds(x)) {
          const Child v = child_values(b, slot, c);
          n.p_x = v.p;
          n.q_x = v.q;
        }
        bool p_ok = true, q_ok = true;
        if (want_max) {
          const Checked<float> mx = row_max<Arch>(p, size_);
          n.max = mx.value;
          n.max_ok = mx.ok;
          p_ok = mx.ok;
          if (mx.ok && mx.value > 0.0f) n.argmax = start_ + row_argmax<Arch>(p, size_).value;
        }
        if (need.entropy) {
          const detail::TermSum e = detail::sum_terms_at<Arch>(p, nullptr, size_, detail::EntropyTerm{}, 1.0);
          n.entropy = TermWire::of(e);
          p_ok = p_ok && e.ok;
        }
        if (need.divergence && child) {
          if (q) {
            const detail::TermSum t = divergence_part(p, q, 0, size_, 1.0);
            n.divergence = TermWire::of(t);
            if (!t.ok) q_ok = p_ok = false;  // named below by a scan of each
          } else if (!kLogits) {  // (logits: from p(x) alone, in Rows)
            const auto [lo, mid] = before_x(x);
            const auto [mid2, hi] = after_x(x);
            const detail::TermSum a = divergence_part(p, nullptr, lo, mid, 1.0);
            const detail::TermSum c = divergence_part(p, nullptr, mid2, hi, 1.0);
            n.divergence = TermWire::of(a);
            n.after = TermWire::of(c);
            p_ok = p_ok && a.ok && c.ok;
          }
        }
        if (needs_.coupled) {
          const std::uint64_t seed = core::coupled_seed(randomness_, b);
          const std::int64_t position = core::coupled_position(randomness_, b, d);
          if constexpr (kLogits) {
            n.coupled = logits_.gumbel_best(slot, seed, position);
          } else {
            n.coupled = gumbel_best(p, size_, start_, seed, position);
          }
          p_ok = p_ok && n.coupled.ok;
        }
        if (!p_ok) n.p_bad = first_bad(p, size_, start_);
        if (!q_ok && q) n.q_bad = first_bad(q, size_, start_);
      }
      fields.put(m, n);
    });
    for_later_children([&](std::int32_t b, std::int64_t slot, std::int32_t c) {
      const std::int32_t x = layout_.token(b, c);
      m.put(size_ > 0 && holds(x) ? child_values(b, slot, c) : Child{x});
    });
    const auto all = gather(comm_, m, ranks());
    nodes_.assign(static_cast<std::size_t>(slots), {});
    children_.clear();
    for_later_children([&](std::int32_t b, std::int64_t slot, std::int32_t c) {
      Node& node = nodes_[static_cast<std::size_t>(slot)];
      if (node.later_children == 0) node.first_later = static_cast<std::int32_t>(children_.size());
      ++node.later_children;
      children_.push_back({layout_.token(b, c)});
    });
    for (std::int32_t r = 0; r < ranks(); ++r) {
      Reader in = part(all, m, r, "2 (rows)");
      const Header& o = headers_[r];
      const auto held = [&](std::int32_t x) { return x >= o.start && x - o.start < o.size; };
      for_nodes([&](std::int32_t b, std::int32_t, std::int64_t slot, std::int32_t c) {
        const NodeSlice n = fields.get(in, o.start, o.size);
        Node& node = nodes_[static_cast<std::size_t>(slot)];
        if (r == 0) {
          node.x = c >= 0 ? layout_.token(b, c) : -1;
          node.entropy = n.entropy.sum(1.0);
          node.divergence = n.divergence.sum(1.0);
          node.after = n.after.sum(1.0);
          node.coupled = n.coupled;
        } else {
          node.entropy.merge(n.entropy.sum(1.0));
          node.divergence.merge(n.divergence.sum(1.0));
          node.after.merge(n.after.sum(1.0));
          node.coupled.merge(n.coupled);
        }
        if (held(node.x)) {
          node.p_x = n.p_x;
          node.q_x = n.q_x;
        }
        node.max_ok = node.max_ok && n.max_ok;
        if (n.max > node.max) {  // the first rank holding the max names its first token
          node.max = n.max;
          node.argmax = n.argmax;
        }
        node.p_bad.merge(n.p_bad);
        node.q_bad.merge(n.q_bad);
      });
      for (Child& child : children_) {
        const Child v = in.get<Child>();
        if (held(child.token)) child = v;
      }
    }
    if constexpr (kLogits) {
      for_nodes([&](std::int32_t b, std::int32_t, std::int64_t slot, std::int32_t c) {
        Node& node = nodes_[static_cast<std::size_t>(slot)];
        const MergedView& p = logits_.target(slot);
        node.max = p.max_p();
        node.argmax = p.argmax;
        node.max_ok = node.p_ok = p.ok;
        if (has_q_ && c >= 0) {
          const MergedView& q = logits_.draft(layout_.draft_row(b, c));
          node.q_ok = q.ok;
          node.q_mass = q.has_mass();
        }
      });
    }
  }

  /// Phase 3: the statistics whose largest term leaves FixedSum's domain at scale 1, summed again
  /// at the scale the whole row's largest term gives (as cpu::detail::sum_terms).
  void rescale_phase() {
    const RowStats& need = needs_.stats;
    const std::int64_t V = batch_.vocab_size;
    // The row length each sum covers: the row, or a one-hot divergence's parts around x.
    const auto lengths = [&](const Node& n) {
      const bool one_hot = !has_q_;
      return std::array<std::int64_t, 3>{V, one_hot ? std::int64_t{n.x} : V, V - n.x - 1};
    };
    const auto needs = [&](const detail::TermSum& t, std::int64_t n) { return t.ok && !core::fixed_fits(t.max_term, n); };
    Message m;
    for_nodes([&](std::int32_t b, std::int32_t, std::int64_t slot, std::int32_t c) {
      const Node& n = nodes_[static_cast<std::size_t>(slot)];
      const auto len = lengths(n);
      const bool child = c >= 0;
      const float* p = p_row(slot);
      const float* q = child ? q_row(layout_.draft_row(b, c)) : nullptr;
      TermWire e, dv, af;
      if (size_ > 0 && need.entropy && needs(n.entropy, len[0])) {
        e = TermWire::of(detail::sum_terms_at<Arch>(p, nullptr, size_, detail::EntropyTerm{},
                                                     core::fixed_scale(n.entropy.max_term, len[0])));
      }
      if (size_ > 0 && need.divergence && child) {
        if (has_q_ && needs(n.divergence, len[0])) {
          dv = TermWire::of(divergence_part(p, q, 0, size_, core::fixed_scale(n.divergence.max_term, len[0])));
        } else if (!has_q_) {
          const auto [lo, mid] = before_x(n.x);
          const auto [mid2, hi] = after_x(n.x);
          if (needs(n.divergence, len[1])) {
            dv = TermWire::of(divergence_part(p, nullptr, lo, mid, core::fixed_scale(n.divergence.max_term, len[1])));
          }
          if (needs(n.after, len[2])) {
            af = TermWire::of(divergence_part(p, nullptr, mid2, hi, core::fixed_scale(n.after.max_term, len[2])));
          }
        }
      }
      if (need.entropy) m.put(e);
      if (need.divergence) m.put(dv);
      if (need.divergence && !has_q_) m.put(af);
    });
    const auto all = gather(comm_, m, ranks());
    std::vector<Node> before = nodes_;
    for (std::int32_t r = 0; r < ranks(); ++r) {
      Reader in = part(all, m, r, "3 (rescaled statistics)");
      for_nodes([&](std::int32_t, std::int32_t, std::int64_t slot, std::int32_t) {
        const Node& was = before[static_cast<std::size_t>(slot)];
        Node& node = nodes_[static_cast<std::size_t>(slot)];
        const auto len = lengths(was);
        const std::pair<const detail::TermSum*, detail::TermSum*> sums[3] = {
            {&was.entropy, &node.entropy}, {&was.divergence, &node.divergence}, {&was.after, &node.after}};
        const bool sent[3] = {need.entropy, need.divergence, need.divergence && !has_q_};
        for (int k = 0; k < 3; ++k) {
          if (!sent[k]) continue;
          const TermWire w = TermWire::read(in);
          if (!needs(*sums[k].first, len[k])) continue;
          const double scale = core::fixed_scale(sums[k].first->max_term, len[k]);
          detail::TermSum t = w.sum(scale);
          t.max_term = sums[k].first->max_term;
          t.infinite = sums[k].first->infinite;
          t.ok = sums[k].first->ok;
          if (r == 0) {
            *sums[k].second = t;
          } else {
            sums[k].second->sum.merge(t.sum);
          }
        }
      });
    }
  }

  /// After sequence b's walk: its place for the pending draw, and a bad value its rows' passes
  /// met that the walk did not stop at (a sharded verify reports every bad value it reads).
  /// `limit`: the rule's cut of the chain (rule_traits::cut).
  void settle(std::int32_t b, std::int32_t limit) {
    core::WalkResult& r = results_[b];
    PendingDraw& pd = pending_[b];
    const std::int64_t base = layout_.target_row(b, -1);
    // A row's fault names the child the walk tests there, or at the bonus row the node itself.
    const auto named_node = [&](std::int64_t slot, std::int32_t c) { return c >= 0 ? c : static_cast<std::int32_t>(slot - base) - 1; };
    bool found = false;
    if constexpr (kLogits) {  // a bad logit in any of the sequence's rows comes first (run() names it)
      for_nodes_of(b, [&](std::int32_t d, std::int64_t slot, std::int32_t c) {
        const Node& n = nodes_[static_cast<std::size_t>(slot)];
        if (found || (n.p_ok && n.q_ok)) return;
        found = true;
        const bool p_bad = !n.p_ok;
        r.fault = core::Fault{core::FaultKind::bad_value, d, named_node(slot, c), p_bad ? slot : -1,
                              p_bad ? -1 : layout_.draft_row(b, c)};
      });
      if (found) {
        pd.active = false;
        return;
      }
    }
    if (r.fault.kind == core::FaultKind::bad_value && r.fault.column < 0) {
      const std::int64_t row = r.fault.target_row >= 0 ? r.fault.target_row : r.fault.draft_row;
      const auto slot = static_cast<std::size_t>(r.fault.target_row >= 0 || kTree ? row : row + b);
      const std::vector<BlockMass>& known = known_[static_cast<std::size_t>(b)];
      if (needs_.chain_masses && !masses_[slot].ok) {  // a Z_i's pass met it
        name(r.fault, masses_[slot].p_bad, masses_[slot].q_bad);
      } else if (!known.empty() && !known.back().ok) {  // a tree residual's mass met it
        name(r.fault, known.back().p_bad, known.back().q_bad);
      } else {
        name(r.fault, nodes_[slot].p_bad, nodes_[slot].q_bad);
      }
    }
    if (r.fault.kind != core::FaultKind::none) {
      pd.active = false;
      return;
    }
    for_nodes_of(b, [&](std::int32_t d, std::int64_t slot, std::int32_t c) {
      const Node& n = nodes_[static_cast<std::size_t>(slot)];
      if (found || (n.p_bad.token < 0 && n.q_bad.token < 0)) return;
      found = true;
      r.fault = core::Fault{core::FaultKind::bad_value, d, named_node(slot, c), slot, -1};
      name(r.fault, n.p_bad, n.q_bad);
    });
    if (found) {
      pd.active = false;
      return;
    }
    if (!pd.active) return;
    const std::int32_t node = static_cast<std::int32_t>(pd.slot - base) - 1;
    std::int32_t last = -1;  // the last child the walk tested at the draw's row (-1: the bonus row)
    for (std::int32_t c = layout_.child(b, node, -1); c >= 0 && c < limit; c = layout_.child(b, node, c)) last = c;
    pd.depth = kTree ? r.accepted : node + 1;
    pd.node = last >= 0 ? last : node;
    pd.p_row = pd.slot;
    pd.q_row = pd.residual && has_q_ ? layout_.draft_row(b, kTree ? last : pd.depth) : -1;
  }

  /// A row-level fault named by the first bad value its passes met: p's, else q's.
  static void name(core::Fault& f, const BadValue& p_bad, const BadValue& q_bad) {
    if (p_bad.token >= 0) {
      f.column = p_bad.token;
      f.value = p_bad.value;
    } else if (q_bad.token >= 0) {
      f.target_row = -1;
      f.column = q_bad.token;
      f.value = q_bad.value;
    }
  }

  /// A joint walk's residual max(s p - q, 0) of node `slot`'s p and draft row `q`, over the
  /// slice.
  core::Residual<const float*> scaled_residual(std::int64_t slot, std::int64_t q, double s) {
    core::Residual<const float*> r;
    r.p = p_row(slot);
    r.q = q_row(q);
    r.has_q = true;
    r.p_scale = s;
    return r;
  }

  /// A token as an index into this slice: one this slice does not hold becomes size_, which no
  /// index of the slice matches (never kNoToken).
  std::int32_t local(std::int32_t token) const { return holds(token) ? token - start_ : size_; }

  /// Calls `f` with a pass over this slice's weights of a tree residual after rejecting `current`
  /// (kNoToken: the residual itself). A tree's draft rows are indexed like its slots.
  template <class F>
  auto with_state(const ResidualState& s, std::int32_t current, F f) {
    core::Residual<const float*> r;
    r.p = s.p.draft ? q_row(s.p.slot) : p_row(s.p.slot);
    r.q = s.has_q ? q_row(s.q.slot) : nullptr;
    r.p_scale = s.p_scale;
    r.has_q = s.has_q;
    r.drafted = s.drafted;
    r.steps = static_cast<std::int32_t>(s.tokens.size());
    r.siblings = slice_room_.siblings(r.steps + 1, size_);
    for (std::int32_t i = 0; i < r.steps; ++i) {
      r.siblings.token[i] = local(s.tokens[static_cast<std::size_t>(i)]);
      r.siblings.scale[i] = s.scale[static_cast<std::size_t>(i)];
      r.siblings.inv_mass[i] = s.inv_mass[static_cast<std::size_t>(i)];
      if (r.tracked()) r.siblings.left[i] = s.left[static_cast<std::size_t>(i)];  // the walk's r there
    }
    r.live = static_cast<std::int32_t>(s.live.size());
    std::copy(s.live.begin(), s.live.end(), r.siblings.live);
    r.sums = s.sums;
    if (r.marked()) r.mark_copied();
    r.removed = s.removed;
    r.q_total = s.q_total;
    detail::ResidualPass<Arch, const float*> pass{
        detail::ResidualLanes<Arch, const float*>(r, current < 0 ? current : local(current), size_)};
    return f(pass);
  }

  /// Calls `f` with a pass over this slice's weights (cpu/draw.hpp: the vectors', one weight's,
  /// and the bound's functor) of pd's residual, or of p (a tree residual's fallback: itself).
  template <class F>
  auto with_pass(const PendingDraw& pd, bool residual, F f) {
    if (pd.absorbed) return with_state(pd.state, residual ? pd.state.x : kNoToken, f);
    const float* p = p_row(pd.slot);
    if (residual && pd.p_scale != 1.0) {
      // Any draft token stands for the rejected one: a sampled draft's q is q at every token.
      detail::ResidualPass<Arch, const float*> pass{
          detail::ResidualLanes<Arch, const float*>(scaled_residual(pd.slot, pd.q_row, pd.p_scale), 0, size_)};
      return f(pass);
    }
    const Weights w = !residual ? Weights::target(p, size_)
                                : Weights::residual(p, has_q_ ? q_row(pd.q_row) : nullptr,
                                                    holds(pd.x) ? pd.x - start_ : -1, size_);
    WeightsPass<Arch> pass{w};
    return f(pass);
  }

  /// This slice's chunk sums of a draw's weights at `scale`, and the bound of the slice.
  Checked<double> slice_sums(const PendingDraw& pd, bool residual, double scale, ChunkSums& sums) {
    return with_pass(pd, residual, [&](auto& pass) {
      sum_chunks<Arch>(pass, pass, size_, scale, sums);
      return pass.check();
    });
  }

  /// The block phases' sums (Block with draft rows, Traversal): the masses Z_i their walks
  /// recorded (Rows::mass), summed by gather_masses. Every position of every chain sends one,
  /// asked or not, so the bytes depend on the shape alone.
  void chain_mass_phases() {
    // Z_i's node: P_i's (i = 1 .. k - 1), its q row Q_i's.
    std::vector<std::pair<std::size_t, std::int64_t>> at;
    for (std::int32_t b = 0; b < batch_.batch_size; ++b) {
      for (std::int32_t i = 1; i < layout_.count(b); ++i) {
        at.emplace_back(static_cast<std::size_t>(layout_.target_row(b, i - 1)), layout_.draft_row(b, i));
      }
    }
    // Z_i is the mass of the residual a draw after a pass at i would take: the same pass.
    const auto z = gather_masses(
        at.size(), [&](std::size_t k) { return masses_[at[k].first].p_scale > 0.0; },
        [&](std::size_t k, double scale, ChunkSums& sums) {
          PendingDraw pd;
          pd.slot = static_cast<std::int64_t>(at[k].first);
          pd.q_row = at[k].second;
          pd.p_scale = masses_[at[k].first].p_scale;
          return slice_sums(pd, true, scale, sums);
        },
        [&](std::size_t k, MassSlice& s) {
          s.p_bad = first_bad(p_row(static_cast<std::int64_t>(at[k].first)), size_, start_);
          s.q_bad = first_bad(q_row(at[k].second), size_, start_);
        });
    for (std::size_t k = 0; k < at.size(); ++k) {
      BlockMass& m = masses_[at[k].first];
      const double p_scale = m.p_scale;
      m = z[k];
      m.p_scale = p_scale;
    }
  }

  /// Masses of residuals over the whole rows from each slice's part, as cpu::residual_mass sums a
  /// whole row: at scale 1 with each slice's bound, then again at the scale the whole row's bound
  /// gives where that leaves FixedSum's domain. `asked(k)`: whether residual k is wanted;
  /// `sum(k, scale, sums)`: its chunk sums over this slice and the slice's bound; `bad(k, slice)`:
  /// the first bad values of its rows. Two calls, each `count` parts whether asked or not.
  template <class Asked, class Sum, class Bad>
  std::vector<BlockMass> gather_masses(std::size_t count, Asked asked, Sum sum, Bad bad) {
    Message m;
    for (std::size_t k = 0; k < count; ++k) {
      MassSlice s;
      if (asked(k) && size_ > 0) {
        ChunkSums sums;
        const Checked<double> bound = sum(k, 1.0, sums);
        s.sum = sums.total;
        s.bound = bound.value;
        if (!bound.ok) {
          s.ok = 0;
          bad(k, s);
        }
      }
      m.put(s);
    }
    const auto all = gather(comm_, m, ranks());
    std::vector<MassSlice> merged(count);
    for (std::int32_t r = 0; r < ranks(); ++r) {
      Reader in = part(all, m, r, "masses");
      for (MassSlice& t : merged) {
        const MassSlice s = MassSlice::read(in, headers_[r].start, headers_[r].size);
        t.sum.merge(s.sum);
        t.bound = std::max(t.bound, s.bound);
        t.ok = t.ok && s.ok;
        t.p_bad.merge(s.p_bad);
        t.q_bad.merge(s.q_bad);
      }
    }
    const std::int64_t V = batch_.vocab_size;
    const auto rescaled = [&](std::size_t k) { return asked(k) && merged[k].ok && !core::fixed_in_domain(merged[k].bound, V); };
    Message m2;
    for (std::size_t k = 0; k < count; ++k) {
      ChunkSums sums;
      if (rescaled(k) && size_ > 0) sum(k, core::fixed_scale(merged[k].bound, V), sums);
      m2.put(sums.total);
    }
    const auto all2 = gather(comm_, m2, ranks());
    for (std::int32_t r = 0; r < ranks(); ++r) {
      Reader in = part(all2, m2, r, "masses, rescaled");
      for (std::size_t k = 0; k < count; ++k) {
        const core::FixedSum s = in.sum();
        if (!rescaled(k)) continue;
        if (r == 0) merged[k].sum = {};
        merged[k].sum.merge(s);
      }
    }
    std::vector<BlockMass> z(count);
    for (std::size_t k = 0; k < count; ++k) {
      const MassSlice& t = merged[k];
      z[k].ok = t.ok;
      z[k].p_bad = t.p_bad;
      z[k].q_bad = t.q_bad;
      z[k].z = !t.ok ? 0.0 : rescaled(k) ? t.sum.value() / core::fixed_scale(t.bound, V) : t.sum.value();
    }
    return z;
  }

  /// The walk's rows over the merged summaries, leaving its draw in `pending`.
  Rows rows_for(PendingDraw* pending) {
    Rows rows{&nodes_, pending, kLogits, &masses_};
    rows.children = &children_;
    rows.room = &walk_room_;
    return rows;
  }

  /// A tree round's masses: the residuals the walks asked for (asks[b] where asked[b]), after
  /// their rejected siblings, summed over the slices and appended to known_.
  void asked_mass_phases(const std::vector<char>& asked, const std::vector<ResidualState>& asks) {
    const std::size_t size = asked.size();
    const auto z = gather_masses(
        size, [&](std::size_t b) { return asked[b] != 0; },
        [&](std::size_t b, double scale, ChunkSums& sums) {
          return with_state(asks[b], asks[b].x, [&](auto& pass) {
            sum_chunks<Arch>(pass, pass, size_, scale, sums);
            return pass.check();
          });
        },
        [&](std::size_t b, MassSlice& s) {
          const ResidualState& a = asks[b];
          (a.p.draft ? s.q_bad : s.p_bad) = first_bad(a.p.draft ? q_row(a.p.slot) : p_row(a.p.slot), size_, start_);
          if (a.has_q) s.q_bad = first_bad(q_row(a.q.slot), size_, start_);
        });
    for (std::size_t b = 0; b < size; ++b) {
      if (asked[b]) known_[b].push_back(z[b]);
    }
  }

  /// Phases 4 to 6: the pending draws.
  void draw_phases(std::vector<float>& staged, const core::OutputRows& out) {
    const std::int32_t B = batch_.batch_size;
    // Phase 4: each slice's sums at scale 1, residual and target.
    std::vector<ChunkSums> sums(std::size_t(2) * B);
    Message m4;
    for (std::int32_t b = 0; b < B; ++b) {
      const PendingDraw& pd = pending_[b];
      DrawSlice ds;
      if (pd.active && size_ > 0) {
        for (int k = 0; k < 2; ++k) {
          const bool residual = k == 0;
          if (residual && !pd.residual) continue;
          const Checked<double> bound = slice_sums(pd, residual, 1.0, sums[2 * b + k]);
          (residual ? ds.residual : ds.target) = sums[2 * b + k].total;
          (residual ? ds.residual_bound : ds.target_bound) = bound.value;
          if (!bound.ok) {
            ds.ok = 0;
            ds.p_bad = first_bad(p_row(pd.slot), size_, start_);
            if (pd.residual && has_q_) ds.q_bad = first_bad(q_row(pd.q_row), size_, start_);
          }
        }
      }
      m4.put(ds);
    }
    const auto all4 = gather(comm_, m4, ranks());
    std::vector<DrawSlice> merged(static_cast<std::size_t>(B));
    for (std::int32_t r = 0; r < ranks(); ++r) {
      Reader in = part(all4, m4, r, "4 (draw sums)");
      for (std::int32_t b = 0; b < B; ++b) {
        const DrawSlice ds = DrawSlice::read(in, headers_[r].start, headers_[r].size);
        DrawSlice& t = merged[b];
        t.residual.merge(ds.residual);
        t.target.merge(ds.target);
        t.residual_bound = std::max(t.residual_bound, ds.residual_bound);
        t.target_bound = std::max(t.target_bound, ds.target_bound);
        t.ok = t.ok && ds.ok;
        t.p_bad.merge(ds.p_bad);
        t.q_bad.merge(ds.q_bad);
      }
    }
    // Phase 5: rows whose bound leaves the domain, summed again at the whole row's scale; every
    // rank's sums at the final scale are kept (phase 6 finds the slice holding the crossing).
    const std::int64_t V = batch_.vocab_size;
    std::vector<double> scale(std::size_t(2) * B, 1.0);
    Message m5;
    for (std::int32_t b = 0; b < B; ++b) {
      const PendingDraw& pd = pending_[b];
      for (int k = 0; k < 2; ++k) {
        const double bound = k == 0 ? merged[b].residual_bound : merged[b].target_bound;
        if (pd.active && merged[b].ok && (k == 1 || pd.residual) && !core::fixed_in_domain(bound, V)) {
          scale[2 * b + k] = core::fixed_scale(bound, V);
          if (size_ > 0) slice_sums(pd, k == 0, scale[2 * b + k], sums[2 * b + k]);
        }
        m5.put(size_ > 0 && pd.active ? sums[2 * b + k].total : core::FixedSum{});
      }
    }
    const auto all5 = gather(comm_, m5, ranks());
    std::vector<core::FixedSum> totals5(std::size_t(ranks()) * 2 * std::size_t(B));
    for (std::int32_t r = 0; r < ranks(); ++r) {
      Reader in = part(all5, m5, r, "5 (draw sums, rescaled)");
      for (std::size_t i = 0; i < 2 * std::size_t(B); ++i) totals5[std::size_t(r) * 2 * std::size_t(B) + i] = in.sum();
    }
    const auto slice_total = [&](std::int32_t r, std::int32_t b, int k) {
      return totals5[(std::size_t(r) * B + std::size_t(b)) * 2 + std::size_t(k)];
    };
    // Phase 6: the rank whose slice holds the crossing draws, and sends the token and its p.
    struct Drawn {
      std::int32_t token = -1;
      float p = 0.0f;
    };
    std::vector<int> kind(static_cast<std::size_t>(B), -1);
    std::vector<std::int32_t> owners(static_cast<std::size_t>(B), -1);
    Message m6;
    for (std::int32_t b = 0; b < B; ++b) {
      const PendingDraw& pd = pending_[b];
      Drawn drawn;
      if (pd.active && merged[b].ok) {
        core::FixedSum totals[2];
        for (std::int32_t r = 0; r < ranks(); ++r) {
          for (int k = 0; k < 2; ++k) totals[k].merge(slice_total(r, b, k));
        }
        const int k = pd.residual && totals[0].positive() ? 0 : 1;
        if (totals[k].positive()) {
          kind[b] = k;
          const double threshold = static_cast<double>(pd.u) * totals[k].value();
          core::FixedSum before;
          std::int32_t owner = -1;
          for (std::int32_t r = 0; r < ranks() && owner < 0; ++r) {
            core::FixedSum through = before;
            through.merge(slice_total(r, b, k));
            if (through.value() > threshold) {
              owner = r;
            } else {
              before = through;
            }
          }
          owners[b] = owner;
          if (owner == batch_.shard.rank) {
            const std::int32_t i = with_pass(pd, k == 0, [&](auto& pass) {
              return locate<Arch>(pass, pass, size_, scale[2 * b + k], sums[2 * b + k], before, threshold);
            });
            if (i >= 0) drawn = {start_ + i, p_row(pd.slot)[i]};
          }
        }
      }
      m6.put(drawn);
    }
    const auto all6 = gather(comm_, m6, ranks());
    // Only the owner of a draw's crossing sends its token, one of its slice.
    std::vector<Drawn> drawns(static_cast<std::size_t>(B));
    for (std::int32_t rk = 0; rk < ranks(); ++rk) {
      Reader in = part(all6, m6, rk, "6 (tokens)");
      const Header& o = headers_[rk];
      for (std::int32_t b = 0; b < B; ++b) {
        const Drawn d = in.get<Drawn>();
        in.token(d.token, rk == owners[b] ? o.start : 0, rk == owners[b] ? o.size : 0);
        if (d.token >= 0) drawns[b] = d;
      }
    }
    for (std::int32_t b = 0; b < B; ++b) {
      const PendingDraw& pd = pending_[b];
      if (!pd.active) continue;
      core::WalkResult& r = results_[b];
      if (!merged[b].ok) {
        r.fault = core::Fault{core::FaultKind::bad_value, pd.depth, pd.node, pd.p_row, pd.q_row};
        name(r.fault, merged[b].p_bad, merged[b].q_bad);
        continue;
      }
      const Drawn& drawn = drawns[b];
      if (kind[b] < 0 || drawn.token < 0) {
        r.fault = core::Fault{core::FaultKind::target_no_mass, pd.depth, pd.node, pd.p_row, -1};
        continue;
      }
      r.extra = drawn.token;
      if (float* s = stage(staged, out, b)) s[pd.depth] = static_cast<float>(::log(static_cast<double>(drawn.p)));
    }
  }

  std::int32_t ranks() const { return std::max(1, batch_.shard.ranks); }

  const RuleNeeds needs_;
  const Batch& batch_;
  const Randomness& randomness_;
  const Comm& comm_;
  Layout layout_;
  std::vector<Header> headers_;
  std::int32_t start_ = 0, size_ = 0;
  bool has_q_ = false;
  std::vector<Node> nodes_;
  std::vector<core::WalkResult> results_;
  std::vector<PendingDraw> pending_;
  std::vector<BlockMass> masses_;  // a joint walk's, by node
  std::vector<std::vector<BlockMass>> known_;  // a tree walk's masses, by sequence, as it asks them
  std::vector<Child> children_;    // trees: the later children's p(x) and q(x), by slot
  SiblingRoom walk_room_, slice_room_;  // the walk's absorbed siblings; a tree residual's over the slice
  mutable std::vector<std::int32_t> depth_;  // for_nodes_of's, by node
  Logits logits_;
  std::vector<float> p_buffer_, q_buffer_;  // rows of logits: a node's p and q over the slice
  std::int64_t p_buffered_ = -1, q_buffered_ = -1;  // the rows they hold
};

/// A sharded verify of one batch on one rank by one rule: ShardedPhases driven by the rule's
/// checks and walks (the walks run over the merged summaries: core::walk with shard::Rows).
template <class Arch, class Rule, class Comm, class Batch>
class ShardedVerify : ShardedPhases<Arch, Comm, Batch> {
  using Base = ShardedPhases<Arch, Comm, Batch>;
  using traits = rule_traits<Rule>;
  using Output = typename Base::Output;
  using Logit = typename Base::Logit;
  using Base::kLogits;
  using Base::kTree;
  static_assert(!kTree || !specverify::detail::has_cut<Rule>::value,
                "a rule that cuts chains (SpecDecPP) decides chain lengths: it has no tree form");
  static_assert(!kTree || traits::joint != Joint::block, "Block verification decides chains: it has no tree form");

 public:
  ShardedVerify(const Rule& rule, const Batch& batch, const Randomness& randomness, const Comm& comm)
      : Base(RuleNeeds::of<Rule, kTree>(rule), batch, randomness, comm), rule_(rule) {}

  /// Phase 1: every rank learns every slice, or every rank throws the lowest rank's finding.
  void agree(const Output& out, const CpuOptions& options) {
    Header h = this->header();
    std::vector<std::int32_t> target_to_draft, bias_order;
    try {
      this->check_slice(h);
      Batch whole = batch_;  // validated as the unsharded verify would see it
      whole.shard = {};
      whole.target_stride = 0;
      // An empty slice's null rows say nothing of the draft rows the other ranks pass (its has_q
      // is ignored below): Traversal and trees of sampled children, which need draft rows, leave
      // their check to those ranks.
      bool needs_q = traits::joint == Joint::traversal;
      if constexpr (kTree) needs_q = needs_q || batch_.drafted != Drafted::deterministic;
      const bool draft_rows_unknown = h.size == 0 && !h.has_q && needs_q;
      if constexpr (kLogits) {
        static const Logit placeholder{};  // validation reads no row; an empty slice may pass null
        if (!this->whole_drafts()) whole.draft_stride = 0;
        whole.unconditional_stride = 0;
        if (!whole.target_logits) whole.target_logits = &placeholder;
        if (draft_rows_unknown) whole.draft_logits = &placeholder;
        core::validate_logits(rule_, whole, randomness_, out, target_to_draft, bias_order);
      } else {
        static const float placeholder = 0.0f;
        whole.draft_stride = 0;
        if (!whole.target_probs) whole.target_probs = &placeholder;
        if (draft_rows_unknown) whole.draft_probs = &placeholder;
        core::validate(rule_, whole, randomness_, out);
      }
      core::check_positions<Rule>(randomness_);
      detail::check_options(options);
      Digest rule_digest;
      digest_rule(rule_digest, rule_, batch_.batch_size > 0 ? layout_.offsets[batch_.batch_size] : 0);
      this->digest(out, rule_digest.value(), h.digest);
    } catch (const invalid_input& e) {
      Base::fail(h, e);
    }
    this->exchange(h, std::move(target_to_draft), std::move(bias_order));
  }

  VerifyStats run(const Output& output) {
    const core::OutputRows out = core::OutputRows::of(output);
    std::vector<float> staged;
    this->summary_phases(staged, out);
    Source source{has_q_, this->known_max(), kTree};
    if (this->needs_.chain_masses) block_phases(source);
    walk_all(source, staged, out);
    this->draw_phases(staged, out);
    return this->report(staged, out);
  }

 private:
  using Base::batch_;
  using Base::has_q_;
  using Base::known_;
  using Base::layout_;
  using Base::pending_;
  using Base::randomness_;
  using Base::results_;

  /// The block phases (Block with draft rows, Traversal): a first walk records the masses Z_i
  /// its walk may read (Rows::mass); chain_mass_phases sums them.
  void block_phases(const Source& source) {
    this->masses_.assign(this->nodes_.size(), {});
    if (!has_q_) return;  // one-hot drafts: every Z_i in closed form
    for (std::int32_t b = 0; b < batch_.batch_size; ++b) {
      PendingDraw ignored;
      Rows rows = this->rows_for(&ignored);
      rows.recording = true;
      core::walk(rule_, layout_, source, randomness_, b, rows, nullptr);
    }
    this->chain_mass_phases();
  }

  /// Walks every sequence over the merged summaries. A tree's walk may ask for the masses of what
  /// is left of p after rejected siblings, one after another: each round sums the masses the walks
  /// asked (one per sequence) and walks those sequences again, for as many rounds as the trees'
  /// shapes allow masses on one path (tree_rounds), asked or not, so the calls are the shape's.
  void walk_all(const Source& source, std::vector<float>& staged, const core::OutputRows& out) {
    const std::int32_t B = batch_.batch_size;
    const auto size = static_cast<std::size_t>(B);
    known_.assign(size, {});
    std::vector<char> done(size, 0), asked(size, 0);
    std::vector<ResidualState> asks(size);
    const std::int32_t rounds = tree_rounds();
    for (std::int32_t round = 0;; ++round) {
      for (std::int32_t b = 0; b < B; ++b) {
        if (done[b]) continue;
        pending_[b] = {};
        Rows rows = this->rows_for(&pending_[b]);
        if (kTree) {
          rows.known = &known_[b];
          rows.ask = &asks[b];
        }
        results_[b] = core::walk(rule_, layout_, source, randomness_, b, rows, Base::stage(staged, out, b));
        asked[b] = rows.asked;
        if (rows.asked) continue;
        done[b] = 1;
        this->settle(b, traits::cut(rule_, layout_.first(b), layout_.count(b)));
      }
      if (round == rounds) break;
      this->asked_mass_phases(asked, asks);
    }
    if (std::find(done.begin(), done.end(), 0) != done.end()) {
      throw std::logic_error("specverify: a sharded tree walk asked for more masses than its shape allows");
    }
  }

  /// The most masses one walk of a tree may ask for (0 for chains): on a path, each node's
  /// rejected children but the last, and without replacement its q row's total at the first.
  /// Traversal visits the whole tree: one mass per child absorbed, so every node's but the root's
  /// last child's (the root passes without it).
  std::int32_t tree_rounds() const {
    if constexpr (kTree && traits::joint == Joint::traversal) {
      std::int32_t most = 0;
      for (std::int32_t b = 0; b < batch_.batch_size; ++b) most = std::max(most, layout_.count(b) - 1);
      return most;
    } else if constexpr (!kTree || traits::on_reject != Draw::residual) {
      return 0;
    } else {
      const bool without = has_q_ && batch_.drafted == Drafted::sampled_without_replacement;
      std::int32_t most = 0;
      std::vector<std::int32_t> upto;
      for (std::int32_t b = 0; b < batch_.batch_size; ++b) {
        const std::int32_t n = layout_.count(b);
        std::vector<std::int32_t> children(static_cast<std::size_t>(n) + 1, 0);
        for (std::int32_t i = 0; i < n; ++i) ++children[static_cast<std::size_t>(layout_.parent(b, i) + 1)];
        upto.assign(static_cast<std::size_t>(n) + 1, 0);
        for (std::int32_t node = -1; node < n; ++node) {
          const std::int32_t k = children[static_cast<std::size_t>(node + 1)];
          const std::int32_t own = k > 1 ? k - 1 + (without ? 1 : 0) : 0;
          const std::int32_t above = node < 0 ? 0 : upto[static_cast<std::size_t>(layout_.parent(b, node) + 1)];
          upto[static_cast<std::size_t>(node + 1)] = above + own;
          most = std::max(most, above + own);
        }
      }
      return most;
    }
  }

  const Rule& rule_;
};

}  // namespace cpu::shard

namespace cpu::shard {

/// The sharded verify of one rule and batch kind, whatever the communicator: compiled once per
/// rule and batch (compiled.hpp holds the built-in rules').
template <class Rule, class Batch>
VerifyStats verify_sharded(const Rule& rule, const Batch& batch, const Randomness& randomness,
                           const typename ShapeOf<Batch>::Output& out, const CommunicatorRef& comm,
                           const CpuOptions& options) {
  ShardedVerify<DefaultArch, Rule, CommunicatorRef, Batch> v(rule, batch, randomness, comm);
  v.agree(out, options);
  if (batch.batch_size == 0) return {};
  return v.run(out);
}

}  // namespace cpu::shard

/// Verifies this rank's slice of a sharded chain batch (docs/api.md "Sharded vocabulary"): every rank
/// passes its slice (batch.shard) and otherwise the same arguments, and gets the outputs the
/// unsharded verify gives on the whole rows. `comm` is any type with
/// `void all_gather(const void* send, std::size_t bytes, void* recv) const` (recv: ranks * bytes in
/// rank order), e.g. ThreadGroup::Communicator (thread_communicator.hpp) or MpiCommunicator (mpi.hpp).
///
///   specverify::ChainBatch<float> batch{B, V, offsets, drafts, p_slice, q_slice};
///   batch.shard = {rank, ranks, vocab_start, local_vocab_size};
///   auto stats = specverify::verify(specverify::Standard{}, batch, {seed, step}, out, comm);
template <class Rule, class Comm,
          class = decltype(std::declval<const Comm&>().all_gather(nullptr, std::size_t{}, nullptr))>
VerifyStats verify(const Rule& rule, const ChainBatch<float>& batch, const Randomness& randomness,
                   const ChainOutput& out, const Comm& comm, const CpuOptions& options = {}) {
  return cpu::shard::verify_sharded(rule, batch, randomness, out, CommunicatorRef(comm), options);
}

/// Verifies this rank's slice of a sharded tree batch (rows of probabilities), as above; a node's
/// residual after rejected siblings costs two calls per mass a path may ask for (docs/sharded.md).
template <class Rule, class Comm,
          class = decltype(std::declval<const Comm&>().all_gather(nullptr, std::size_t{}, nullptr))>
VerifyStats verify(const Rule& rule, const TreeBatch<float>& batch, const Randomness& randomness,
                   const TreeOutput& out, const Comm& comm, const CpuOptions& options = {}) {
  return cpu::shard::verify_sharded(rule, batch, randomness, out, CommunicatorRef(comm), options);
}

/// Verifies this rank's slice of a sharded chain batch of logits: target, draft and guidance rows
/// sliced alike, the bitmask in its global layout, a reduced draft vocabulary's rows whole on every
/// rank (cpu/sharded_logits.hpp), in any row type the unsharded verify reads; otherwise as above.
template <class Rule, class Logit, class Comm,
          class = decltype(std::declval<const Comm&>().all_gather(nullptr, std::size_t{}, nullptr))>
VerifyStats verify(const Rule& rule, const LogitsChainBatch<Logit>& batch, const Randomness& randomness,
                   const ChainOutput& out, const Comm& comm, const CpuOptions& options = {}) {
  static_assert(is_cpu_row_type<Logit>, "the CPU reads rows of float, specverify::float16 or specverify::bfloat16");
  return cpu::shard::verify_sharded(rule, batch, randomness, out, CommunicatorRef(comm), options);
}

/// Verifies this rank's slice of a sharded tree batch of logits, as the chains' above.
template <class Rule, class Logit, class Comm,
          class = decltype(std::declval<const Comm&>().all_gather(nullptr, std::size_t{}, nullptr))>
VerifyStats verify(const Rule& rule, const LogitsTreeBatch<Logit>& batch, const Randomness& randomness,
                   const TreeOutput& out, const Comm& comm, const CpuOptions& options = {}) {
  static_assert(is_cpu_row_type<Logit>, "the CPU reads rows of float, specverify::float16 or specverify::bfloat16");
  return cpu::shard::verify_sharded(rule, batch, randomness, out, CommunicatorRef(comm), options);
}

}  // namespace specverify
