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

template <class Rule>
void bind_fsd(py::module_& m, const char* name, const char* doc) {
  using namespace pybind11::literals;
  py::class_<Rule>(m, name, doc)
      .def(py::init([](Divergence divergence, float threshold) { return Rule{divergence, threshold}; }),
           "divergence"_a = Divergence::js, "threshold"_a = 0.0f)
      .def_readwrite("divergence", &Rule::divergence)
      .def_readwrite("threshold", &Rule::threshold)
      .def("__repr__", [name](const Rule& r) {
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
  py::class_<Ears>(m, "Ears", "Accept x iff p(x) > 0 and u < p(x)/q(x) + beta (1 - max p).")
      .def(py::init([](float beta) { return Ears{beta}; }), "beta"_a = 0.0f)
      .def_readwrite("beta", &Ears::beta)
      .def("__repr__", [](const Ears& r) { return "Ears(beta=" + number(r.beta) + ")"; });
  bind_fsd<Fsd>(m, "Fsd", "Accept x iff p(x) > 0 and D(p, q) <= threshold; on rejection draw from p.");
  bind_fsd<ReducibleFsd>(m, "ReducibleFsd",
                         "Accept x iff (p(x) > 0 and D(p, q) < threshold) or the Standard test.");

  py::class_<PySprinter>(m, "Sprinter",
                         "Accept x without the target test iff p(x) > 0 and verifier_scores[i] >= eta,\n"
                         "else the Standard test. verifier_scores: float32 [N], like draft_tokens.")
      .def(py::init([](float eta, py::object scores) {
             return PySprinter{eta, as_array(scores, "Sprinter.verifier_scores", Elem::float32, 1,
                                             false, true)};
           }),
           "eta"_a = 0.5f, "verifier_scores"_a = py::none())
      .def_readwrite("eta", &PySprinter::eta)
      // Read-only: replacing an array while verify runs without the GIL would free it.
      .def_property_readonly("verifier_scores",
                             [](const PySprinter& s) { return source_or_none(s.verifier_scores); })
      .def("__repr__", [](const PySprinter& s) { return "Sprinter(eta=" + number(s.eta) + ", ...)"; });

  py::class_<PySpecDecPP>(m, "SpecDecPP",
                          "Cut each chain after the first j with 1 - prod accept_probs[..j] > threshold,\n"
                          "then verify what is left with `inner` (any other rule). Chains only.\n"
                          "accept_probs: float32 [N], like draft_tokens.")
      .def(py::init([](float threshold, py::object accept_probs, py::object inner) {
             if (inner.is_none()) inner = py::cast(Standard{});
             if (!is_inner_rule(inner)) {
               throw py::type_error(std::string("specverify: SpecDecPP.inner must be one of ") +
                                    kInnerRuleNames + ", got " +
                                    std::string(py::str(py::type::handle_of(inner).attr("__name__"))));
             }
             return PySpecDecPP{threshold, as_array(accept_probs, "SpecDecPP.accept_probs",
                                                    Elem::float32, 1, false, true),
                                inner};
           }),
           "threshold"_a = 0.5f, "accept_probs"_a = py::none(), "inner"_a = py::none())
      .def_readwrite("threshold", &PySpecDecPP::threshold)
      .def_property_readonly("accept_probs",
                             [](const PySpecDecPP& s) { return source_or_none(s.accept_probs); })
      .def_property_readonly("inner", [](const PySpecDecPP& s) { return s.inner; })
      .def("__repr__", [](const PySpecDecPP& s) {
        return "SpecDecPP(threshold=" + number(s.threshold) + ", inner=" +
               std::string(py::repr(s.inner)) + ", ...)";
      });
}

}  // namespace specverify::python
