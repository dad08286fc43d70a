// The rule concept: what a verification rule is asked, and what it answers.
//
// A rule is a plain struct. The core walks each chain, fills a Position for the draft under test
// and asks `decide`; the first rejection ends the chain and the core draws the one extra token as
// the rule's `on_reject` says. A rule never touches rows, layouts or random streams.
//
//   struct MyRule {                                   // required:
//     static constexpr Draw on_reject = Draw::target; //   what to draw when a draft is rejected
//     SPECVERIFY_HD Decision decide(const Position& at) const;
//                                                     // optional (defaults in rule_traits):
//     static constexpr Draw on_bonus = Draw::target;  //   bonus token once every draft passed
//     SPECVERIFY_HD RowStats stats() const;           //   row statistics decide() reads
//     SPECVERIFY_HD std::int32_t cut(std::int32_t first_draft, std::int32_t k) const;
//                                                     //   drafts kept before walking (SpecDec++)
//     Problem check() const;                          //   parameters (host, before any work)
//     SPECVERIFY_HD Problem check_draft(std::int32_t draft) const;
//                                                     //   per-draft inputs such as scores (runs
//                                                     //   where the data lives: host or device)
//     template <class Visit> void parameters(Visit&& visit) const;
//                                                     //   visit(name, double) for each parameter,
//                                                     //   visit(name, const float*) for each
//                                                     //   per-draft input: what the ranks of a
//                                                     //   sharded verify must pass alike
//   };
//
// A joint rule decides a whole chain at once, so it has no per-draft decide(): it names the
// core's joint walk instead, which reads rows through the same row operations (Block):
//
//   struct Block {
//     static constexpr Joint joint = Joint::block;    // core/block_walk.hpp decides the chain
//     static constexpr Draw on_reject = Draw::residual;
//   };
//
// examples/custom_rule.cpp writes Medusa's typical acceptance this way, outside the library.
#pragma once

#include <cstdint>
#include <type_traits>

#include "specverify/config.hpp"

namespace specverify {

/// What to draw as the one extra token.
enum class Draw {
  residual,  // from max(p - q, 0); from p where that has zero mass (lossless rejection sampling)
  target,    // from p
  argmax,    // argmax p, lowest index on ties
  coupled,   // the Gumbel-max sample keyed by (seed, position, token): sample() of the row
};

/// How a rule decides a chain or tree: draft by draft through decide() (the default), or jointly
/// by one of the core's joint walks (a joint rule has no decide()).
enum class Joint {
  none,       // per draft: the first rejection ends the chain
  block,      // block verification (Sun et al. 2024), chains: core/block_walk.hpp
  traversal,  // traversal verification (Weng et al. 2025), trees and chains: core/traversal_walk.hpp
};

/// Divergences D(p, q) for FSD-style rules, natural log (docs/api.md "Divergence").
enum class Divergence { kl_target_draft, kl_draft_target, js, js_fsd, tv };

/// Which statistics of the target row (and draft row) a rule's decision reads. The core computes
/// each only when a chain reaches the position, never for positions after a rejection.
struct RowStats {
  bool max = false;         // max_v p(v)
  bool argmax = false;      // lowest index of max_v p(v)
  bool entropy = false;     // H(p) = -sum p log p
  bool divergence = false;  // D(p, q) of the kind below
  Divergence kind = Divergence::tv;

  SPECVERIFY_HD bool any() const { return max || argmax || entropy || divergence; }

  // One statistic each, for a rule's stats(): `return RowStats::of_divergence(kind);`
  SPECVERIFY_HD static RowStats of_max() { return {true, false, false, false, Divergence::tv}; }
  SPECVERIFY_HD static RowStats of_argmax() { return {false, true, false, false, Divergence::tv}; }
  SPECVERIFY_HD static RowStats of_entropy() { return {false, false, true, false, Divergence::tv}; }
  SPECVERIFY_HD static RowStats of_divergence(Divergence d) { return {false, false, false, true, d}; }
};

/// Everything a rule decides with at one draft position.
struct Position {
  std::int32_t sequence = 0;  // b
  std::int32_t index = 0;     // j: position within the chain
  std::int32_t draft = 0;     // index into draft_tokens (and into per-draft rule inputs)
  std::int32_t token = 0;     // x
  float p_x = 0;              // p(x)
  float q_x = 0;              // q(x); 1 for one-hot drafts
  float u = 0;                // acceptance uniform in [0, 1)
  // Filled only when the rule's stats() asks for them.
  float p_max = 0;
  std::int32_t p_argmax = 0;
  float entropy = 0;
  float divergence = 0;
  std::int32_t coupled = -1;  // a Draw::coupled rule's sample of this row (see sample())
};

/// A rule's answer. `relaxed` marks an acceptance the lossless test would not have given;
/// `target_checked` says whether the decision consulted p (SPRINTER's verifier path does not).
struct Decision {
  bool accepted = false;
  bool relaxed = false;
  bool target_checked = true;

  /// Leviathan et al.'s lossless test: accept iff u * q(x) < p(x). Written as a product so that
  /// u = 0 can never accept a token with p(x) = 0.
  SPECVERIFY_HD static bool standard_test(const Position& at) { return at.u * at.q_x < at.p_x; }
  SPECVERIFY_HD static Decision exact(bool accepted) { return {accepted, false, true}; }
};

/// A parameter or per-draft input that is out of range: `what` names it, `value` is what was seen
/// (absent for a missing pointer).
struct Problem {
  const char* what = nullptr;
  double value = 0;
  bool has_value = true;

  SPECVERIFY_HD explicit operator bool() const { return what != nullptr; }
  SPECVERIFY_HD static Problem missing(const char* pointer) { return {pointer, 0, false}; }
  /// {what, value} unless lo <= value <= hi (NaN is out of every range).
  SPECVERIFY_HD static Problem unless_within(const char* what, double value, double lo, double hi) {
    return value >= lo && value <= hi ? Problem{} : Problem{what, value};
  }
};

namespace detail {
template <class, class = void>
struct has_on_bonus : std::false_type {};
template <class R>
struct has_on_bonus<R, std::void_t<decltype(R::on_bonus)>> : std::true_type {};
template <class, class = void>
struct has_stats : std::false_type {};
template <class R>
struct has_stats<R, std::void_t<decltype(std::declval<const R&>().stats())>> : std::true_type {};
template <class, class = void>
struct has_cut : std::false_type {};
template <class R>
struct has_cut<R, std::void_t<decltype(std::declval<const R&>().cut(0, 0))>> : std::true_type {};
template <class, class = void>
struct has_check : std::false_type {};
template <class R>
struct has_check<R, std::void_t<decltype(std::declval<const R&>().check())>> : std::true_type {};
template <class, class = void>
struct has_check_draft : std::false_type {};
template <class R>
struct has_check_draft<R, std::void_t<decltype(std::declval<const R&>().check_draft(0))>>
    : std::true_type {};
template <class, class = void>
struct has_parameters : std::false_type {};
struct IgnoreParameters {
  void operator()(const char*, double) const {}
  void operator()(const char*, const float*) const {}
};
template <class R>
struct has_parameters<R, std::void_t<decltype(std::declval<const R&>().parameters(IgnoreParameters{}))>>
    : std::true_type {};
template <class, class = void>
struct has_joint : std::false_type {};
template <class R>
struct has_joint<R, std::void_t<decltype(R::joint)>> : std::true_type {};
}  // namespace detail

/// The core's view of a rule: its required members and the defaults for the optional ones.
template <class Rule>
struct rule_traits {
  static constexpr Draw on_reject = Rule::on_reject;
  static constexpr Draw on_bonus = [] {
    if constexpr (detail::has_on_bonus<Rule>::value) {
      return Rule::on_bonus;
    } else {
      return Draw::target;
    }
  }();
  static constexpr Joint joint = [] {
    if constexpr (detail::has_joint<Rule>::value) {
      return Rule::joint;
    } else {
      return Joint::none;
    }
  }();

  SPECVERIFY_HD static RowStats stats(const Rule& rule) {
    if constexpr (detail::has_stats<Rule>::value) {
      return rule.stats();
    } else {
      return RowStats{};
    }
  }
  SPECVERIFY_HD static std::int32_t cut(const Rule& rule, std::int32_t first_draft,
                                        std::int32_t k) {
    if constexpr (detail::has_cut<Rule>::value) {
      return rule.cut(first_draft, k);
    } else {
      return k;
    }
  }
  static Problem check(const Rule& rule) {
    if constexpr (detail::has_check<Rule>::value) {
      return rule.check();
    } else {
      return {};
    }
  }
  SPECVERIFY_HD static Problem check_draft(const Rule& rule, std::int32_t draft) {
    if constexpr (detail::has_check_draft<Rule>::value) {
      return rule.check_draft(draft);
    } else {
      return {};
    }
  }
  /// The rule's parameters and per-draft inputs, to `visit` (none for a rule that names none).
  template <class Visit>
  static void parameters(const Rule& rule, Visit&& visit) {
    if constexpr (detail::has_parameters<Rule>::value) rule.parameters(visit);
  }
};

}  // namespace specverify
