// Python classes for the rules: the C++ fields as keyword arguments, with the C++ defaults.
#include "rules.hpp"

#include <pybind11/operators.h>

#include <sstream>
#include <string>

namespace specverify::python {

namespace {

std::string divergence_name(Divergence d) {
  switch (d) {
    case Divergence::kl_target_draft: return "kl_target_draft";
    case Divergence::kl_draft_target: return "kl_draft_target";
    case Divergence::js: return "js";
    case Divergence::js_fsd: return "js_fsd";
    case Divergence::tv: return "tv";
  }
  return "?";
}

std::string number(float x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// The rules' float parameters are taken as double and rounded by as_float32 (arrays.hpp), which
// refuses what float32 would make infinite or 0, rather than by pybind11's silent conversion.
template <class Rule>
void bind_fsd(py::module_& m, const char* name, const char* threshold_name, const char* doc) {
  using namespace pybind11::literals;
  py::class_<Rule> cls(m, name, doc);
  cls.def(py::init([threshold_name](Divergence divergence, double threshold) {
            return Rule{divergence, as_float32(threshold, threshold_name)};
          }),
          "divergence"_a = Divergence::js, "threshold"_a = 0.0)
      .def_readwrite("divergence", &Rule::divergence);
  float32_property(cls, "threshold", threshold_name, &Rule::threshold);
  cls.def("__repr__", [name](const Rule& r) {
        return std::string(name) + "(divergence=Divergence." + divergence_name(r.divergence) +
               ", threshold=" + number(r.threshold) + ")";
      });
}

}  // namespace

void bind_rules(py::module_& m) {
  using namespace pybind11::literals;

  py::enum_<Divergence>(m, "Divergence", "D(p, q) for the FSD rules, natural log.")
      .value("kl_target_draft", Divergence::kl_target_draft, "KL(p || q)")
      .value("kl_draft_target", Divergence::kl_draft_target, "KL(q || p)")
      .value("js", Divergence::js, "Jensen-Shannon, at most ln 2")
      .value("js_fsd", Divergence::js_fsd, "the form the FSD authors' code computes")
      .value("tv", Divergence::tv, "total variation");

  py::class_<Standard>(m, "Standard",
                       "Accept x iff u q(x) < p(x); on rejection draw from max(p - q, 0). Lossless.")
      .def(py::init<>())
      .def("__repr__", [](const Standard&) { return "Standard()"; });
  py::class_<Coupled>(m, "Coupled",
                      "Accept draft j iff it equals sample(target row j, params, seed_b, positions[b] + j) and\n"
                      "emit that sample: the same text as plain sv.sample decoding, token for token. Lossless;\n"
                      "needs Randomness(positions=...), ignores offset.")
      .def(py::init<>())
      .def("__repr__", [](const Coupled&) { return "Coupled()"; });
  py::class_<Block>(m, "Block",
                    "Block verification (Sun et al. 2024): decides the whole chain jointly; lossless, accepts at\n"
                    "least as many drafts as Standard in expectation, Standard bit for bit for one draft.\n"
                    "Chains only (ChainBatch, LogitsChainBatch).")
      .def(py::init<>())
      .def("__repr__", [](const Block&) { return "Block()"; });
  py::class_<Traversal>(m, "Traversal",
                        "Traversal verification (Weng et al. 2025): decides a tree jointly from the leaves up;\n"
                        "lossless, accepts at least as many tokens as Standard in expectation over the drafting, Block\n"
                        "in law on chains. Needs children drafted i.i.d. from q (Drafted.sampled, with draft rows).")
      .def(py::init<>())
      .def("__repr__", [](const Traversal&) { return "Traversal()"; });
  py::class_<Greedy>(m, "Greedy", "Accept x iff x == argmax p (lowest index on ties); emit argmax p.")
      .def(py::init<>())
      .def("__repr__", [](const Greedy&) { return "Greedy()"; });
  py::class_<Ears> ears(m, "Ears", "Accept x iff p(x) > 0 and u < p(x)/q(x) + beta (1 - max p).");
  ears.def(py::init([](double beta) { return Ears{as_float32(beta, "Ears beta")}; }), "beta"_a = 0.0)
      .def("__repr__", [](const Ears& r) { return "Ears(beta=" + number(r.beta) + ")"; });
  float32_property(ears, "beta", "Ears beta", &Ears::beta);
  bind_fsd<Fsd>(m, "Fsd", "Fsd threshold", "Accept x iff p(x) > 0 and D(p, q) <= threshold; on rejection draw from p.");
  bind_fsd<ReducibleFsd>(m, "ReducibleFsd", "ReducibleFsd threshold",
                         "Accept x iff (p(x) > 0 and D(p, q) < threshold) or the Standard test.");

  py::class_<PySprinter> sprinter(m, "Sprinter",
                                  "Accept x without the target test iff p(x) > 0 and verifier_scores[i] >= eta,\n"
                                  "else the Standard test. verifier_scores: float32 [N], like draft_tokens.");
  float32_property(sprinter, "eta", "Sprinter eta", &PySprinter::eta);
  sprinter
      .def(py::init([](double eta, py::object scores) {
             return PySprinter{as_float32(eta, "Sprinter eta"),
                               as_array(scores, "Sprinter.verifier_scores", Elem::float32, 1, false, true)};
           }),
           "eta"_a = 0.5, "verifier_scores"_a = py::none())
      // Read-only: replacing an array while verify runs without the GIL would free it.
      .def_property_readonly("verifier_scores",
                             [](const PySprinter& s) { return source_or_none(s.verifier_scores); })
      .def("__repr__", [](const PySprinter& s) { return "Sprinter(eta=" + number(s.eta) + ", ...)"; });

  py::class_<PySpecDecPP> specdecpp(m, "SpecDecPP",
                                    "Cut each chain after the first j with 1 - prod accept_probs[..j] > threshold,\n"
                                    "then verify what is left with `inner` (any other rule). Chains only.\n"
                                    "accept_probs: float32 [N], like draft_tokens.");
  float32_property(specdecpp, "threshold", "SpecDecPP threshold", &PySpecDecPP::threshold);
  specdecpp
      .def(py::init([](double threshold, py::object accept_probs, py::object inner) {
             if (inner.is_none()) inner = py::cast(Standard{});
             if (!is_inner_rule(inner)) {
               throw py::type_error(std::string("specverify: SpecDecPP.inner must be one of ") +
                                    kInnerRuleNames + ", got " +
                                    std::string(py::str(py::type::handle_of(inner).attr("__name__"))));
             }
             return PySpecDecPP{as_float32(threshold, "SpecDecPP threshold"),
                                as_array(accept_probs, "SpecDecPP.accept_probs", Elem::float32, 1, false, true),
                                inner};
           }),
           "threshold"_a = 0.5, "accept_probs"_a = py::none(), "inner"_a = py::none())
      .def_property_readonly("accept_probs",
                             [](const PySpecDecPP& s) { return source_or_none(s.accept_probs); })
      .def_property_readonly("inner", [](const PySpecDecPP& s) { return s.inner; })
      .def("__repr__", [](const PySpecDecPP& s) {
        return "SpecDecPP(threshold=" + number(s.threshold) + ", inner=" +
               std::string(py::repr(s.inner)) + ", ...)";
      });
}

}  // namespace specverify::python
