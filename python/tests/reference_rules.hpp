// The rule a line of words names, for the C++ reference programs of the token-for-token tests:
// standard | greedy | coupled | ears BETA | fsd DIV THRESHOLD | rfsd DIV THRESHOLD | sprinter ETA |
// block | specdecpp THRESHOLD RULE... (these two: chains only).
#pragma once

#include <istream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <specverify/specverify.hpp>

namespace reference {

namespace sv = specverify;

inline sv::Divergence divergence(const std::string& name) {
  if (name == "kl_target_draft") return sv::Divergence::kl_target_draft;
  if (name == "kl_draft_target") return sv::Divergence::kl_draft_target;
  if (name == "js") return sv::Divergence::js;
  if (name == "js_fsd") return sv::Divergence::js_fsd;
  if (name == "tv") return sv::Divergence::tv;
  throw std::runtime_error("unknown divergence " + name);
}

/// Per-draft rule inputs, indexed like draft_tokens.
struct RuleInputs {
  const float* scores;
  const float* accept;
};

/// Calls fn with the rule the words name. kChains: Block and SpecDecPP (no tree form) are known.
template <bool kChains, bool kOuter = true, class Fn>
void with_rule(std::istream& words, const RuleInputs& in, Fn&& fn) {
  std::string name;
  words >> name;
  float a = 0;
  std::string d;
  if (name == "standard") return fn(sv::Standard{});
  if (name == "greedy") return fn(sv::Greedy{});
  if (name == "coupled") return fn(sv::Coupled{});
  if (name == "ears") return words >> a, fn(sv::Ears{a});
  if (name == "fsd") return words >> d >> a, fn(sv::Fsd{divergence(d), a});
  if (name == "rfsd") return words >> d >> a, fn(sv::ReducibleFsd{divergence(d), a});
  if (name == "sprinter") return words >> a, fn(sv::Sprinter{a, in.scores});
  if constexpr (kOuter) {
    if (name == "traversal") return fn(sv::Traversal{});
  }
  if constexpr (kChains && kOuter) {
    if (name == "block") return fn(sv::Block{});
    if (name == "specdecpp") {
      words >> a;
      return with_rule<kChains, false>(words, in, [&](const auto& inner) {
        fn(sv::SpecDecPP<std::decay_t<decltype(inner)>>{a, in.accept, inner});
      });
    }
  }
  throw std::runtime_error("unknown rule " + name);
}

}  // namespace reference
