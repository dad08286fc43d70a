// Every rule of the comparison with its settings, handed one by one to a visitor as
// (spec, drafting policy, factory building the rule from the per-draft head outputs).
#pragma once

#include <string>
#include <vector>

#include "comparison/decode_loop.hpp"
#include "specverify/specverify.hpp"
#include "synthetic_acceptance.hpp"
#include "typical_acceptance.hpp"

namespace specverify::comparison {

struct RuleSpec {
  std::string name;    // e.g. "FSD tv 0.3"
  std::string family;  // Standard, Greedy, EARS, FSD-<divergence>, rFSD, SPRINTER, SpecDec++, Typical
  double parameter = 0;
  // Rules with the same key have the same quality trials (one-draft chains, or one-level trees,
  // do not see K or the tree's depth), so the run measures them once; empty: this rule's own.
  std::string quality_key;
};

/// A drafted tree setting: its shape, how its children are drafted, and the rule verifying it.
struct TreeSetting {
  TreeShape shape;
  Drafted drafted = Drafted::deterministic;
  bool greedy = false;     // verified by Greedy
  bool traversal = false;  // verified by Traversal (i.i.d. children); else Standard
};

struct Sweep {
  std::vector<std::int32_t> standard_k{1, 2, 3, 4, 6, 8};
  std::vector<std::int32_t> block_k{4, 6};
  std::vector<std::int32_t> traversal_k{4, 6};  // on chains, against Block at the same K
  // Trees at the node budgets of chains above: {2, 1} has 4 nodes (against K = 4), {2, 2} 6.
  std::vector<TreeSetting> trees{{{{2, 1}}, Drafted::deterministic},
                                 {{{2, 2}}, Drafted::deterministic},
                                 {{{2, 1}}, Drafted::sampled_without_replacement},
                                 {{{2, 2}}, Drafted::sampled_without_replacement},
                                 {{{2, 2}}, Drafted::sampled},
                                 {{{2, 2}}, Drafted::sampled, false, true},
                                 {{{3, 2}}, Drafted::sampled},
                                 {{{3, 2}}, Drafted::sampled, false, true}};
  std::int32_t k = 4;          // chain length of every other fixed-length rule
  std::int32_t k_max = 16;     // SPRINTER and SpecDec++ chains end by their heads, or here
  std::vector<float> ears_beta{0.05f, 0.1f, 0.2f};
  std::vector<Divergence> divergences{Divergence::tv, Divergence::js, Divergence::js_fsd,
                                      Divergence::kl_target_draft, Divergence::kl_draft_target};
  std::vector<float> fsd_scale{0.05f, 0.15f, 0.3f, 0.6f};  // times the divergence's reference below
  std::vector<float> rfsd_tv{0.2f, 0.4f};
  std::vector<float> sprinter_eta{0.7f, 0.8f, 0.9f};
  std::vector<float> specdecpp_threshold{0.3f, 0.7f};
  // Synthetic acceptance (benchmarking): conditional rate per chain position, K = k.
  std::vector<std::vector<float>> synthetic_rates{{0.6f}, {0.9f, 0.8f, 0.7f, 0.6f}};
};

inline const char* divergence_name(Divergence d) {
  switch (d) {
    case Divergence::kl_target_draft: return "kl_pq";
    case Divergence::kl_draft_target: return "kl_qp";
    case Divergence::js: return "js";
    case Divergence::js_fsd: return "js_fsd";
    case Divergence::tv: return "tv";
  }
  return "?";
}

/// A divergence's scale for the threshold sweep: its maximum for TV and JS, 2 nats for KL.
inline float divergence_reference(Divergence d) {
  return d == Divergence::tv ? 1.0f : d == Divergence::js || d == Divergence::js_fsd ? 0.6931f : 2.0f;
}

template <class Visit>
void for_each_rule(const Sweep& s, Visit&& visit) {
  const auto fixed = [](std::int32_t k) { return DraftPolicy{Drafting::fixed, k, 0, {}, Drafted::sampled}; };
  const auto gated = [&s](Drafting kind, float parameter) {
    return DraftPolicy{kind, s.k_max, parameter, {}, Drafted::sampled};
  };
  char name[64];
  for (const std::int32_t k : s.standard_k) {
    std::snprintf(name, sizeof name, "Standard K=%d", k);
    visit(RuleSpec{name, "Standard", double(k), "Standard"}, fixed(k), [](const float*) { return Standard{}; });
  }
  for (const std::int32_t k : s.block_k) {
    std::snprintf(name, sizeof name, "Block K=%d", k);
    visit(RuleSpec{name, "Block", double(k), "Block"}, fixed(k), [](const float*) { return Block{}; });
  }
  for (const std::int32_t k : s.traversal_k) {
    std::snprintf(name, sizeof name, "Traversal K=%d", k);
    visit(RuleSpec{name, "Traversal", double(k), "Traversal"}, fixed(k), [](const float*) { return Traversal{}; });
  }
  for (const TreeSetting& t : s.trees) {
    const char* how = t.drafted == Drafted::deterministic ? "top-k"
                      : t.drafted == Drafted::sampled     ? "iid"
                                                          : "w/o-repl";
    // Greedy: top-k trees; Traversal: the Standard "Tree iid" of the same shape is its baseline.
    const std::string family = t.greedy ? "Greedy tree" : t.traversal ? std::string("Traversal ") + how
                                                                       : std::string("Tree ") + how;
    std::snprintf(name, sizeof name, "%s %s (%d)", family.c_str(), t.shape.name().c_str(), t.shape.nodes());
    const DraftPolicy policy{Drafting::tree, t.shape.nodes(), 0, t.shape, t.drafted};
    const RuleSpec spec{name, family, double(t.shape.nodes()), family + " " + std::to_string(t.shape.branching.at(0))};
    if (t.greedy) {
      visit(spec, policy, [](const float*) { return Greedy{}; });
    } else if (t.traversal) {
      visit(spec, policy, [](const float*) { return Traversal{}; });
    } else {
      visit(spec, policy, [](const float*) { return Standard{}; });
    }
  }
  visit(RuleSpec{"Greedy", "Greedy", 0, ""}, fixed(s.k), [](const float*) { return Greedy{}; });
  for (const float beta : s.ears_beta) {
    std::snprintf(name, sizeof name, "EARS b=%g", beta);
    visit(RuleSpec{name, "EARS", beta, ""}, fixed(s.k), [beta](const float*) { return Ears{beta}; });
  }
  for (const Divergence d : s.divergences) {
    for (const float scale : s.fsd_scale) {
      const float t = scale * divergence_reference(d);
      std::snprintf(name, sizeof name, "FSD %s %.3g", divergence_name(d), t);
      visit(RuleSpec{name, std::string("FSD ") + divergence_name(d), t, ""}, fixed(s.k),
            [d, t](const float*) { return Fsd{d, t}; });
    }
  }
  for (const float t : s.rfsd_tv) {
    std::snprintf(name, sizeof name, "rFSD tv %.3g", t);
    visit(RuleSpec{name, "rFSD", t, ""}, fixed(s.k), [t](const float*) { return ReducibleFsd{Divergence::tv, t}; });
  }
  for (const float eta : s.sprinter_eta) {
    std::snprintf(name, sizeof name, "SPRINTER eta=%g", eta);
    visit(RuleSpec{name, "SPRINTER", eta, ""}, gated(Drafting::sprinter, eta),
          [eta](const float* scores) { return Sprinter{eta, scores}; });
  }
  for (const float h : s.specdecpp_threshold) {
    std::snprintf(name, sizeof name, "SpecDec++ h=%g", h);
    visit(RuleSpec{name, "SpecDec++", h, ""}, gated(Drafting::specdecpp, h),
          [h](const float* probs) { return SpecDecPP<Standard>{h, probs, Standard{}}; });
  }
  visit(RuleSpec{"Typical", "Typical", 0.09, ""}, fixed(s.k), [](const float*) { return TypicalAcceptance{}; });
  for (const auto& rates : s.synthetic_rates) {
    std::string label = "Synth";  // e.g. "Synth 0.9/0.8/0.7/0.6"
    for (const float r : rates) {
      std::snprintf(name, sizeof name, "%s%g", label.size() == 5 ? " " : "/", r);
      label += name;
    }
    const SyntheticAcceptance rule{rates.data(), std::int32_t(rates.size())};
    visit(RuleSpec{label, "Synthetic", expected_tokens_per_call(rule, s.k), ""}, fixed(s.k),
          [rule](const float*) { return rule; });
  }
}

}  // namespace specverify::comparison
