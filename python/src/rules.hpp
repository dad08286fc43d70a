// The rules as Python sees them, and the dispatch from a Python rule object to the C++ struct
// that verify() is instantiated with. Rules holding per-draft arrays keep them alive here.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>
#include <vector>

#include <specverify/specverify.hpp>

#include "arrays.hpp"
#include "batches.hpp"

namespace specverify::python {

/// Sprinter with its verifier scores held: float32 [N], indexed like draft_tokens.
struct PySprinter {
  float eta = 0.5f;
  Array verifier_scores;

  PySprinter fresh() const {
    return {eta, again(verifier_scores, "Sprinter.verifier_scores", Elem::float32, 1)};
  }
  Sprinter build(std::int64_t drafts) const {
    if (verifier_scores.present()) {
      expect_extent(verifier_scores, "Sprinter.verifier_scores", 0, drafts,
                    "it needs one score per draft token (" + std::to_string(drafts) + ")");
    }
    return {eta, verifier_scores.as<const float>()};
  }
};

/// SpecDecPP with its acceptance probabilities (float32 [N]) and the inner rule (a Python object
/// of one of the other rule classes).
struct PySpecDecPP {
  float threshold = 0.5f;
  Array accept_probs;
  py::object inner;

  PySpecDecPP fresh() const {
    return {threshold, again(accept_probs, "SpecDecPP.accept_probs", Elem::float32, 1), inner};
  }
  const float* probs(std::int64_t drafts) const {
    if (accept_probs.present()) {
      expect_extent(accept_probs, "SpecDecPP.accept_probs", 0, drafts,
                    "it needs one probability per draft token (" + std::to_string(drafts) + ")");
    }
    return accept_probs.as<const float>();
  }
};

inline constexpr const char* kInnerRuleNames = "Standard, Greedy, Ears, Fsd, ReducibleFsd, Sprinter or Coupled";
inline constexpr const char* kRuleNames =
    "Standard, Greedy, Ears, Fsd, ReducibleFsd, Sprinter, Coupled, Block, Traversal or SpecDecPP";

/// Whether `rule` is a rule object SpecDecPP can wrap (any but SpecDecPP itself).
inline bool is_inner_rule(py::handle rule) {
  return py::isinstance<Standard>(rule) || py::isinstance<Greedy>(rule) ||
         py::isinstance<Ears>(rule) || py::isinstance<Fsd>(rule) ||
         py::isinstance<ReducibleFsd>(rule) || py::isinstance<PySprinter>(rule) ||
         py::isinstance<Coupled>(rule);
}

/// Calls fn with the C++ rule for the Python rule object `rule`. SpecDecPP may not nest (nor wrap
/// Block or Traversal, which have no per-draft test). Neither has a tree form: for trees they raise here, before
/// a tree verify is instantiated with them.
template <Shape kShape, bool kOuter = true, class Fn>
decltype(auto) with_rule(py::handle rule, std::int64_t drafts, Fn&& fn) {
  if (py::isinstance<Standard>(rule)) return fn(rule.cast<Standard>());
  if (py::isinstance<Greedy>(rule)) return fn(rule.cast<Greedy>());
  if (py::isinstance<Ears>(rule)) return fn(rule.cast<Ears>());
  if (py::isinstance<Fsd>(rule)) return fn(rule.cast<Fsd>());
  if (py::isinstance<ReducibleFsd>(rule)) return fn(rule.cast<ReducibleFsd>());
  if (py::isinstance<PySprinter>(rule)) {
    const PySprinter now = rule.cast<const PySprinter&>().fresh();  // its scores as they are now
    return fn(now.build(drafts));
  }
  if (py::isinstance<Coupled>(rule)) return fn(rule.cast<Coupled>());
  if constexpr (kOuter) {
    if (py::isinstance<Traversal>(rule)) return fn(rule.cast<Traversal>());
    if (py::isinstance<Block>(rule)) {
      if constexpr (kShape == Shape::tree) {
        throw py::type_error(
            "specverify: Block has no tree form (it decides a whole chain jointly); verify it with a "
            "ChainBatch or LogitsChainBatch");
      } else {
        return fn(rule.cast<Block>());
      }
    }
    if (py::isinstance<PySpecDecPP>(rule)) {
      if constexpr (kShape == Shape::tree) {
        throw py::type_error(
            "specverify: SpecDecPP has no tree form (it decides where a chain stops); verify it with a "
            "ChainBatch or LogitsChainBatch");
      } else {
        const PySpecDecPP s = rule.cast<const PySpecDecPP&>().fresh();
        const float* probs = s.probs(drafts);
        return with_rule<kShape, false>(s.inner, drafts, [&](const auto& inner) {
          using Inner = std::decay_t<decltype(inner)>;
          return fn(SpecDecPP<Inner>{s.threshold, probs, inner});
        });
      }
    }
  }
  throw py::type_error(std::string("specverify: ") + (kOuter ? "rule" : "SpecDecPP.inner") +
                       " must be one of " + (kOuter ? kRuleNames : kInnerRuleNames) + ", got " +
                       std::string(py::str(py::type::handle_of(rule).attr("__name__"))));
}

/// Extents of the arrays a rule object holds (and its inner rule's), as they are now.
inline void add_rule_inputs(py::handle rule, std::vector<Extent>& inputs) {
  if (py::isinstance<PySprinter>(rule)) {
    inputs.push_back(extent_of(rule.cast<const PySprinter&>().fresh().verifier_scores, "Sprinter.verifier_scores",
                               Elem::float32));
  } else if (py::isinstance<PySpecDecPP>(rule)) {
    const PySpecDecPP s = rule.cast<const PySpecDecPP&>().fresh();
    inputs.push_back(extent_of(s.accept_probs, "SpecDecPP.accept_probs", Elem::float32));
    add_rule_inputs(s.inner, inputs);
  }
}

/// Binds the rule classes and the Divergence enum.
void bind_rules(py::module_& m);

}  // namespace specverify::python
