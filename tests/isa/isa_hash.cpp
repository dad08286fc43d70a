// One answer everywhere (docs/api.md): prints a hash of every output of `verify` and `sample` over a
// fixed matrix of rules, layouts, row sources and sampling parameters, one line per case. ctest
// builds this file three times (SSE2 only, AVX2 + FMA, -march=native) and runs each build at
// several thread counts (tests/isa/CMakeLists.txt): every line must be the same everywhere.
//
// Inputs are made with integer arithmetic and exact float operations only, so the compile flags
// cannot change them (a compiler may contract a * b + c into one rounding on FMA targets).
//
// With a row type, the logits cases alone run on rows of that type: `float16` and `bfloat16` rows,
// and `float16-as-float` / `bfloat16-as-float`, float rows holding the same values, must print the
// same lines (docs/api.md "Rows in the model's dtype": a 16-bit row gives the bits of the float row
// holding its values).
//
// usage: isa_hash THREADS [float | float16 | bfloat16 | float16-as-float | bfloat16-as-float]
#include <specverify/specverify.hpp>

#include <typical_acceptance.hpp>

#include "penalty_lists.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace sv = specverify;

namespace {

std::int32_t g_threads = 1;

/// The logits cases' row type, and the values their rows hold.
enum class Rows { float32, float16, bfloat16 };
Rows g_values = Rows::float32;  // the values: floats, or rounded to float16 or bfloat16
bool g_as_float = true;         // held as float rows (else as 16-bit rows of g_values' type)

// ------------------------------------------------------------------------------ hashing

struct Hash {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  void bytes(const void* data, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  template <class T>
  void all(const std::vector<T>& v) { bytes(v.data(), v.size() * sizeof(T)); }
  void stats(const sv::VerifyStats& s) {
    const std::int64_t words[4] = {s.drafted, s.accepted, s.relaxed, s.target_checked};
    bytes(words, sizeof words);
  }
};

void print(const std::string& name, const Hash& h) {
  std::printf("%-48s %016llx\n", name.c_str(), static_cast<unsigned long long>(h.h));
}

// ------------------------------------------------------------------------------ inputs

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A row of probabilities: integer weights with a heavy head (a few large, most small), each
/// times the float of 1 / sum (one rounding, no sum of products).
void probability_row(std::uint64_t key, std::int32_t V, float* out) {
  std::vector<std::uint32_t> w(static_cast<std::size_t>(V));
  double sum = 0;
  for (std::int32_t v = 0; v < V; ++v) {
    const std::uint64_t r = mix(key * 1000003u + static_cast<std::uint64_t>(v));
    const std::uint32_t small = static_cast<std::uint32_t>(r % 97u);
    w[std::size_t(v)] = (r >> 40) % 61u == 0 ? small * 4099u + 1u : small;  // zeros included
    sum += w[std::size_t(v)];
  }
  if (sum == 0) {
    w[0] = 1;
    sum = 1;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (std::int32_t v = 0; v < V; ++v) out[v] = static_cast<float>(w[std::size_t(v)]) * inv;
}

/// A row of logits: multiples of 1/64 in [-16, 16) (exact floats), a few raised to a head.
void logit_row(std::uint64_t key, std::int32_t V, float* out) {
  for (std::int32_t v = 0; v < V; ++v) {
    const std::uint64_t r = mix(key * 7919u + static_cast<std::uint64_t>(v));
    float l = static_cast<float>(static_cast<std::int32_t>(r % 2048u) - 1024) / 64.0f;
    if ((r >> 32) % 50u == 0) l += 12.0f;
    out[v] = l;
  }
}

/// x as the nearest float16 or bfloat16 (ties to even): the logits cases' values in those modes.
/// The rows here are finite and, for float16, multiples of 1/64 below 2^11 / 64 in magnitude
/// (exact: 11 bits), which the encoder checks.
sv::float16 to_float16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const std::uint32_t sign = (u >> 16) & 0x8000u, exponent = (u >> 23) & 0xffu;
  const auto h = static_cast<std::uint16_t>(x == 0.0f ? sign : sign | ((exponent - 112u) << 10) | ((u >> 13) & 0x3ffu));
  if (static_cast<float>(sv::float16{h}) != x) std::abort();  // not exact in float16
  return sv::float16{h};
}

sv::bfloat16 to_bfloat16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return sv::bfloat16{static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

/// A logits vector rounded to the mode's values (in place).
void round_to_mode(std::vector<float>& rows) {
  for (float& x : rows) {
    if (g_values == Rows::float16) x = static_cast<float>(to_float16(x));
    if (g_values == Rows::bfloat16) x = static_cast<float>(to_bfloat16(x));
  }
}

/// Rows holding the values of `rows` (already rounded to the mode's values) as Logit.
template <class Logit>
std::vector<Logit> as_rows(const std::vector<float>& rows) {
  std::vector<Logit> out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if constexpr (std::is_same<Logit, float>::value) out[i] = rows[i];
    if constexpr (std::is_same<Logit, sv::float16>::value) out[i] = to_float16(rows[i]);
    if constexpr (std::is_same<Logit, sv::bfloat16>::value) out[i] = to_bfloat16(rows[i]);
  }
  return out;
}

struct Shape {
  std::int32_t B, V, K;
};

/// Penalty and bias lists, per draft position (docs/api.md "Penalties and logit bias"): per sequence
/// a history of about V / 8 tokens (counts 0 .. 3, the drafts' region included) and up to 5 biased
/// tokens in no order.
struct Lists : sv::testing::PenaltyListArrays {
  Lists(std::int32_t B, std::int32_t V, std::uint64_t key) {
    for (std::int32_t b = 0; b < B; ++b) {
      for (std::int32_t v = 0; v < V; ++v) {
        const std::uint64_t r = mix(key * 131u + std::uint64_t(b) * 1000003u + std::uint64_t(v));
        if (r % 8u != 0) continue;
        h_tokens.push_back(v);
        h_counts.push_back(static_cast<std::int32_t>((r >> 8) % 4u));
      }
      for (std::int32_t k = 0; k < 5 && k < V; ++k) {
        const auto v = static_cast<std::int32_t>((std::uint64_t(V) - 1u - std::uint64_t(k) * 7u % std::uint64_t(V)) % std::uint64_t(V));
        if (std::find(b_tokens.begin() + b_offsets.back(), b_tokens.end(), v) != b_tokens.end()) continue;
        b_tokens.push_back(v);
        b_values.push_back(static_cast<float>(static_cast<std::int32_t>(mix(key + std::uint64_t(k)) % 64u) - 32) / 8.0f);
      }
      end_sequence();
    }
  }
};

/// params with penalties: the target's strong, the drafter's its own.
sv::SamplingParams penalised(sv::SamplingParams params, bool draft) {
  params.repetition_penalty = draft ? 1.1f : 1.3f;
  params.presence_penalty = draft ? 0.0f : 0.4f;
  params.frequency_penalty = draft ? 0.1f : 0.25f;
  return params;
}

/// Drafts: mostly the target's argmax region (accepted often), some anywhere.
std::int32_t draft_token(std::uint64_t key, std::int32_t V, const float* p) {
  const std::uint64_t r = mix(key);
  if (r % 3u == 0) return static_cast<std::int32_t>((r >> 8) % static_cast<std::uint64_t>(V));
  std::int32_t best = 0;
  for (std::int32_t v = 0; v < V; ++v) best = p[v] > p[best] ? v : best;
  return (r >> 8) % 2u == 0 ? best : static_cast<std::int32_t>((static_cast<std::uint64_t>(best) + (r >> 16) % 5u) % static_cast<std::uint64_t>(V));
}

struct Chains {
  Shape s;
  std::vector<std::int32_t> offsets, tokens;
  std::vector<float> p, q, scores, accept_probs;
  std::vector<std::int64_t> positions;
  std::vector<std::uint64_t> seeds;

  Chains(Shape shape, std::uint64_t key, bool logits) : s(shape) {
    offsets.push_back(0);
    for (std::int32_t b = 0; b < s.B; ++b) offsets.push_back(offsets.back() + 1 + static_cast<std::int32_t>(mix(key + 77u * b) % std::uint64_t(s.K)));
    const std::int32_t N = offsets.back();
    const std::size_t V = std::size_t(s.V);
    p.resize((std::size_t(N) + std::size_t(s.B)) * V);
    q.resize(std::size_t(N) * V);
    for (std::size_t r = 0; r < std::size_t(N + s.B); ++r) (logits ? logit_row : probability_row)(key * 31u + r, s.V, &p[r * V]);
    for (std::size_t r = 0; r < std::size_t(N); ++r) (logits ? logit_row : probability_row)(key * 37u + r + 5u, s.V, &q[r * V]);
    if (logits) {
      round_to_mode(p);
      round_to_mode(q);
    }
    for (std::int32_t b = 0; b < s.B; ++b) {
      for (std::int32_t j = offsets[std::size_t(b)]; j < offsets[std::size_t(b) + 1]; ++j) {
        tokens.push_back(draft_token(key * 41u + std::uint64_t(j), s.V, &q[std::size_t(j) * V]));
        scores.push_back(static_cast<float>(mix(key + std::uint64_t(j)) % 101u) / 100.0f);
        accept_probs.push_back(0.5f + static_cast<float>(mix(key * 3u + std::uint64_t(j)) % 50u) / 100.0f);
      }
      positions.push_back(100 + 13 * b);
      seeds.push_back(mix(key + 1000u + std::uint64_t(b)));
    }
  }
  std::int32_t width() const { return s.K + 1; }
};

template <class Batch, class Rule>
void run_chain(const std::string& name, const Rule& rule, const Batch& batch, const Chains& c) {
  Hash h;
  for (const bool per_sequence : {false, true}) {
    std::vector<std::int32_t> tokens(std::size_t(c.s.B * c.width()), -7), accepted(std::size_t(c.s.B), -7);
    std::vector<float> logprobs(tokens.size(), 0.5f);
    sv::ChainOutput out{tokens.data(), c.width(), accepted.data(), logprobs.data()};
    sv::Randomness rnd{12345u, 6u};
    rnd.positions = c.positions.data();
    if (per_sequence) rnd.sequence_seeds = c.seeds.data();
    const sv::VerifyStats stats = sv::verify(rule, batch, rnd, out, sv::CpuOptions{g_threads});
    h.all(tokens);
    h.all(accepted);
    h.all(logprobs);
    h.stats(stats);
  }
  print(name, h);
}

template <class Batch>
void every_chain_rule(const std::string& name, const Batch& batch, const Chains& c) {
  run_chain(name + " standard", sv::Standard{}, batch, c);
  run_chain(name + " greedy", sv::Greedy{}, batch, c);
  run_chain(name + " ears", sv::Ears{0.3f}, batch, c);
  const char* names[] = {"kl_pq", "kl_qp", "js", "js_fsd", "tv"};
  int i = 0;
  for (const sv::Divergence d : {sv::Divergence::kl_target_draft, sv::Divergence::kl_draft_target, sv::Divergence::js,
                                 sv::Divergence::js_fsd, sv::Divergence::tv}) {
    run_chain(name + " fsd " + names[i], sv::Fsd{d, 0.4f}, batch, c);
    run_chain(name + " rfsd " + names[i++], sv::ReducibleFsd{d, 0.4f}, batch, c);
  }
  run_chain(name + " sprinter", sv::Sprinter{0.5f, c.scores.data()}, batch, c);
  run_chain(name + " specdecpp", sv::SpecDecPP<sv::Standard>{0.7f, c.accept_probs.data(), {}}, batch, c);
  run_chain(name + " block", sv::Block{}, batch, c);
  run_chain(name + " coupled", sv::Coupled{}, batch, c);
  run_chain(name + " typical", TypicalAcceptance{}, batch, c);
}

void probability_chains(Shape s) {
  const Chains c(s, std::uint64_t(s.V) * 17u + std::uint64_t(s.B), false);
  sv::ChainBatch<float> batch{s.B, s.V, c.offsets.data(), c.tokens.data(), c.p.data(), c.q.data()};
  const std::string name = "prob B" + std::to_string(s.B) + " V" + std::to_string(s.V);
  every_chain_rule(name, batch, c);
  batch.draft_probs = nullptr;
  every_chain_rule(name + " onehot", batch, c);
}

template <class Logit>
void logits_chains(Shape s) {
  const Chains c(s, std::uint64_t(s.V) * 19u + std::uint64_t(s.B), true);
  const std::vector<Logit> p = as_rows<Logit>(c.p), q = as_rows<Logit>(c.q);
  struct Setting {
    const char* name;
    sv::SamplingParams target, draft;
  };
  const Setting settings[] = {
      {"T0.8", {0.8f, 0, 1.0f, 0.0f}, {0.8f, 0, 1.0f, 0.0f}},
      {"greedy", {0.0f, 0, 1.0f, 0.0f}, {0.7f, 0, 1.0f, 0.0f}},
      {"topk50", {1.0f, 50, 1.0f, 0.0f}, {1.0f, 50, 1.0f, 0.0f}},
      {"topp0.9", {0.9f, 0, 0.9f, 0.0f}, {1.0f, 0, 0.95f, 0.0f}},
      {"minp0.05", {1.1f, 0, 1.0f, 0.05f}, {1.0f, 0, 1.0f, 0.0f}},
      {"topk50topp0.9", {0.8f, 50, 0.9f, 0.0f}, {0.8f, 40, 0.8f, 0.02f}},
      {"topk2000topp0.95", {1.3f, 2000, 0.95f, 0.0f}, {1.0f, 0, 1.0f, 0.0f}},
  };
  const std::int32_t rows = c.offsets.back() + s.B;
  std::vector<std::int64_t> first_row(std::size_t(s.B));
  std::vector<float> guidance(std::size_t(s.B));
  for (std::int32_t b = 0; b < s.B; ++b) {
    first_row[std::size_t(b)] = b % 3 == 1 ? -1 : c.offsets[std::size_t(b)] + b;
    guidance[std::size_t(b)] = 1.5f;
  }
  std::vector<float> unconditional(c.p.size());
  for (std::size_t r = 0; r < std::size_t(rows); ++r) logit_row(991u + r, s.V, &unconditional[r * std::size_t(s.V)]);
  round_to_mode(unconditional);
  const std::vector<Logit> u = as_rows<Logit>(unconditional);
  const std::int32_t words = (s.V + 31) / 32;
  std::vector<std::uint32_t> mask(std::size_t(rows) * std::size_t(words));
  for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = static_cast<std::uint32_t>(mix(i) | mix(i + 1));  // ~3/4 allowed
  for (std::int32_t r = 0; r < rows; ++r) mask[std::size_t(r) * std::size_t(words)] |= 1u;  // token 0 always allowed
  const Lists lists(s.B, s.V, std::uint64_t(s.V) + 3u);
  for (const Setting& st : settings) {
    std::vector<sv::SamplingParams> tp(std::size_t(s.B), st.target), dp(std::size_t(s.B), st.draft);
    sv::LogitsChainBatch<Logit> batch;
    batch.batch_size = s.B;
    batch.vocab_size = s.V;
    batch.draft_offsets = c.offsets.data();
    batch.draft_tokens = c.tokens.data();
    batch.target_logits = p.data();
    batch.draft_logits = q.data();
    batch.target_params = tp.data();
    batch.draft_params = dp.data();
    const std::string name = std::string("logits ") + st.name + " B" + std::to_string(s.B) + " V" + std::to_string(s.V);
    every_chain_rule(name, batch, c);
    sv::LogitsChainBatch<Logit> guided = batch;
    guided.unconditional_logits = u.data();
    guided.unconditional_first_row = first_row.data();
    guided.guidance_scale = guidance.data();
    guided.allowed_tokens = mask.data();
    run_chain(name + " guided+mask standard", sv::Standard{}, guided, c);
    run_chain(name + " guided+mask fsd js", sv::Fsd{sv::Divergence::js, 0.4f}, guided, c);
    guided.draft_logits = nullptr;
    run_chain(name + " guided+mask onehot standard", sv::Standard{}, guided, c);
    if (s.V >= 8) {  // a reduced draft vocabulary: every other target id, drafts mapped onto it
      const std::int32_t Vd = s.V / 2;
      std::vector<std::int32_t> d2t(static_cast<std::size_t>(Vd)), tokens(c.tokens);
      for (std::int32_t d = 0; d < Vd; ++d) d2t[std::size_t(d)] = 2 * d;
      for (auto& t : tokens) t = t / 2 * 2;
      std::vector<float> small_q(std::size_t(c.offsets.back()) * std::size_t(Vd));
      for (std::size_t r = 0; r < std::size_t(c.offsets.back()); ++r) logit_row(555u + r, Vd, &small_q[r * std::size_t(Vd)]);
      round_to_mode(small_q);
      const std::vector<Logit> reduced_q = as_rows<Logit>(small_q);
      sv::LogitsChainBatch<Logit> reduced = batch;
      reduced.draft_tokens = tokens.data();
      reduced.draft_logits = reduced_q.data();
      reduced.draft_vocab_size = Vd;
      reduced.draft_to_target = d2t.data();
      run_chain(name + " reduced standard", sv::Standard{}, reduced, c);
      run_chain(name + " reduced fsd kl", sv::Fsd{sv::Divergence::kl_target_draft, 0.4f}, reduced, c);
      lists.attach(reduced);
      std::vector<sv::SamplingParams> tpp(std::size_t(s.B), penalised(st.target, false)), dpp(std::size_t(s.B), penalised(st.draft, true));
      reduced.target_params = tpp.data();
      reduced.draft_params = dpp.data();
      run_chain(name + " reduced penalised standard", sv::Standard{}, reduced, c);
    }
    // Penalties and bias: the overlay's tokens read in every pass (every rule), with guidance and
    // the bitmask too.
    std::vector<sv::SamplingParams> tpp(std::size_t(s.B), penalised(st.target, false)), dpp(std::size_t(s.B), penalised(st.draft, true));
    sv::LogitsChainBatch<Logit> listed = batch;
    lists.attach(listed);
    listed.target_params = tpp.data();
    listed.draft_params = dpp.data();
    every_chain_rule(name + " penalised", listed, c);
    lists.attach(guided);
    guided.draft_logits = batch.draft_logits;
    guided.target_params = tpp.data();
    guided.draft_params = dpp.data();
    run_chain(name + " guided+mask penalised standard", sv::Standard{}, guided, c);
  }
}

// ------------------------------------------------------------------------------ trees

struct Trees {
  Shape s;
  std::vector<std::int32_t> offsets, parents, tokens;
  std::vector<float> p, q, scores;
  std::vector<std::int64_t> positions;
  std::int32_t width = 1;

  /// Sequence b: up to K nodes; node i hangs under the root or an earlier node, at most 3
  /// children a node (and no more than V, so siblings' tokens differ).
  Trees(Shape shape, std::uint64_t key, bool logits) : s(shape) {
    offsets.push_back(0);
    const std::size_t V = std::size_t(s.V);
    for (std::int32_t b = 0; b < s.B; ++b) {
      const std::int32_t n = 1 + static_cast<std::int32_t>(mix(key + 5u * b) % std::uint64_t(s.K));
      std::vector<std::int32_t> children(std::size_t(n) + 1, 0), depth(std::size_t(n), 1);
      const std::int32_t fan = s.V < 3 ? s.V : 3;
      for (std::int32_t i = 0; i < n; ++i) {
        std::int32_t parent = -1;
        for (std::int32_t tries = 0; tries < 4; ++tries) {
          const std::int32_t c = static_cast<std::int32_t>(mix(key * 13u + 97u * b + 7u * i + tries) % std::uint64_t(i + 1)) - 1;
          if (children[std::size_t(c + 1)] < fan) {
            parent = c;
            break;
          }
        }
        if (parent == -1 && children[0] >= fan) break;  // the root is full too: a smaller tree
        parents.push_back(parent);
        const std::int32_t sibling = children[std::size_t(parent + 1)]++;
        depth[std::size_t(i)] = parent < 0 ? 1 : depth[std::size_t(parent)] + 1;
        width = std::max(width, depth[std::size_t(i)] + 1);
        const std::uint64_t r = mix(key * 29u + std::uint64_t(parents.size()));
        tokens.push_back(static_cast<std::int32_t>((r % V + static_cast<std::uint64_t>(sibling)) % V));
        scores.push_back(static_cast<float>(r % 101u) / 100.0f);
      }
      offsets.push_back(static_cast<std::int32_t>(parents.size()));
      positions.push_back(40 + 3 * b);
    }
    // Siblings share their parent's rows, so their tokens must differ: spread them (fan <= V).
    const std::size_t rows = parents.size() + std::size_t(s.B);
    p.resize(rows * V);
    q.resize(rows * V);
    for (std::size_t r = 0; r < rows; ++r) {
      (logits ? logit_row : probability_row)(key * 43u + r, s.V, &p[r * V]);
      (logits ? logit_row : probability_row)(key * 47u + r + 3u, s.V, &q[r * V]);
    }
    if (logits) {
      round_to_mode(p);
      round_to_mode(q);
    }
  }
};

template <class Batch, class Rule>
void run_tree(const std::string& name, const Rule& rule, const Batch& batch, const Trees& t) {
  Hash h;
  std::vector<std::int32_t> tokens(std::size_t(t.s.B * t.width), -7), accepted(std::size_t(t.s.B), -7),
      nodes(tokens.size(), -7);
  std::vector<float> logprobs(tokens.size(), 0.5f);
  sv::TreeOutput out{tokens.data(), t.width, accepted.data(), nodes.data(), logprobs.data()};
  sv::Randomness rnd{777u, 3u};
  rnd.positions = t.positions.data();
  const sv::VerifyStats stats = sv::verify(rule, batch, rnd, out, sv::CpuOptions{g_threads});
  h.all(tokens);
  h.all(accepted);
  h.all(nodes);
  h.all(logprobs);
  h.stats(stats);
  print(name, h);
}

template <class Batch>
void every_tree_rule(const std::string& name, Batch batch, const Trees& t) {
  const char* drafted_names[] = {"sampled", "without", "deterministic"};
  for (const sv::Drafted d : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    batch.drafted = d;
    const std::string n = name + " " + drafted_names[static_cast<int>(d)];
    run_tree(n + " standard", sv::Standard{}, batch, t);
    run_tree(n + " ears", sv::Ears{0.3f}, batch, t);
    run_tree(n + " rfsd js", sv::ReducibleFsd{sv::Divergence::js, 0.4f}, batch, t);
    run_tree(n + " sprinter", sv::Sprinter{0.5f, t.scores.data()}, batch, t);
    if (d == sv::Drafted::sampled) {
      run_tree(n + " greedy", sv::Greedy{}, batch, t);
      run_tree(n + " fsd tv", sv::Fsd{sv::Divergence::tv, 0.4f}, batch, t);
      run_tree(n + " coupled", sv::Coupled{}, batch, t);
      run_tree(n + " typical", TypicalAcceptance{}, batch, t);
      run_tree(n + " traversal", sv::Traversal{}, batch, t);
    }
  }
}

void probability_trees(Shape s) {
  const Trees t(s, std::uint64_t(s.V) * 23u + std::uint64_t(s.B), false);
  sv::TreeBatch<float> batch{s.B, s.V, t.offsets.data(), t.parents.data(), t.tokens.data(), t.p.data(), t.q.data()};
  every_tree_rule("prob tree B" + std::to_string(s.B) + " V" + std::to_string(s.V), batch, t);
}

template <class Logit>
void logits_trees(Shape s) {
  const Trees t(s, std::uint64_t(s.V) * 29u + std::uint64_t(s.B), true);
  const std::vector<Logit> p = as_rows<Logit>(t.p), q = as_rows<Logit>(t.q);
  const Lists lists(s.B, s.V, std::uint64_t(s.V) + 5u);
  for (const sv::SamplingParams params : {sv::SamplingParams{0.8f, 0, 1.0f, 0.0f}, sv::SamplingParams{1.0f, 50, 0.9f, 0.0f}}) {
    std::vector<sv::SamplingParams> tp(std::size_t(s.B), params);
    sv::LogitsTreeBatch<Logit> batch;
    batch.batch_size = s.B;
    batch.vocab_size = s.V;
    batch.node_offsets = t.offsets.data();
    batch.parents = t.parents.data();
    batch.draft_tokens = t.tokens.data();
    batch.target_logits = p.data();
    batch.draft_logits = q.data();
    batch.target_params = tp.data();
    const std::string name = "logits tree top_k " + std::to_string(params.top_k) + " B" + std::to_string(s.B) + " V" + std::to_string(s.V);
    every_tree_rule(name, batch, t);
    std::vector<sv::SamplingParams> tpp(std::size_t(s.B), penalised(params, false)), dpp(std::size_t(s.B), penalised(params, true));
    lists.attach(batch);
    batch.target_params = tpp.data();
    batch.draft_params = dpp.data();
    every_tree_rule(name + " penalised", batch, t);
  }
}

// ------------------------------------------------------------------------------ row statistics

/// The sums behind the outputs, bit for bit: a statistic's last bits rarely move a token, so the
/// outputs alone would let an order-dependent sum through.
template <class Rows, class View>
void hash_statistics(Hash& h, const Rows& rows, const View& p, const View& q, std::int32_t V) {
  const auto put = [&](double v) { h.bytes(&v, sizeof v); };
  put(rows.entropy(p).value);
  for (const sv::Divergence d : {sv::Divergence::kl_target_draft, sv::Divergence::kl_draft_target, sv::Divergence::js,
                                 sv::Divergence::js_fsd, sv::Divergence::tv}) {
    put(rows.divergence(d, p, &q, -1).value);
    put(rows.divergence(d, p, nullptr, V / 3).value);
  }
  for (std::int32_t k = 0; k < 16; ++k) {
    const float u = static_cast<float>(k) / 16.0f + 1.0f / 64.0f;
    const std::int32_t t[3] = {rows.draw_residual(p, &q, -1, u).value, rows.draw_residual(p, nullptr, V / 2, u).value,
                               rows.draw_target(p, u).value};
    h.bytes(t, sizeof t);
  }
}

/// A tree node's residual after rejected siblings, for every Drafted: each step's mass and draws.
template <class Rows, class View>
void hash_residuals(Hash& h, Rows& rows, const View& p, const View& q, std::int32_t V) {
  for (const sv::Drafted d : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    sv::core::Residual<View> r;
    r.p = p;
    r.q = q;
    r.has_q = d != sv::Drafted::deterministic;
    r.drafted = d;
    r.siblings = rows.siblings(4);
    for (std::int32_t step = 0; step < 4 && step < V; ++step) {
      const std::int32_t x = static_cast<std::int32_t>(mix(std::uint64_t(step) + 11u) % std::uint64_t(V));
      bool taken = false;
      for (std::int32_t s = 0; s < r.steps; ++s) taken = taken || r.siblings.token[s] == x;
      if (taken) continue;
      const double z = rows.mass(r, x).value;
      h.bytes(&z, sizeof z);
      for (std::int32_t k = 0; k < 8; ++k) {
        const std::int32_t t = rows.draw(r, x, static_cast<float>(k) / 8.0f + 0.03f).value;
        h.bytes(&t, sizeof t);
      }
      if (!(z > 0.0)) break;
      r.absorb(rows, x, z);
    }
  }
}

/// A target and a draft row of logits p and q opened with what the rows carry (parameters,
/// lists): their views' sums and every statistic, draw and residual over them.
void hash_rows(const std::string& name, const std::vector<float>& p, const std::vector<float>& q, std::int32_t V,
               sv::core::LogitRow<float> target_row, sv::core::LogitRow<float> draft_row) {
  Hash h;
  sv::cpu::OpenedLogitRows<> rows(V, V);
  target_row.logits = p.data();
  draft_row.logits = q.data();
  target_row.n = draft_row.n = V;
  const auto pv = rows.open(target_row);
  const auto qv = rows.open(draft_row);
  h.bytes(&pv.norm, sizeof pv.norm);
  h.bytes(&qv.norm, sizeof qv.norm);
  h.bytes(&pv.threshold, sizeof pv.threshold);
  h.bytes(&pv.argmax, sizeof pv.argmax);
  hash_statistics(h, rows, pv, qv, V);
  hash_residuals(h, rows, pv, qv, V);
  print(name, h);
}

void statistics(std::int32_t V) {
  std::vector<float> p(std::size_t(V) * 2), q(std::size_t(V) * 2);
  probability_row(61u, V, p.data());
  probability_row(62u, V, q.data());
  {
    Hash h;
    sv::cpu::Rows<> rows{V};
    hash_statistics(h, rows, static_cast<const float*>(p.data()), static_cast<const float*>(q.data()), V);
    hash_residuals(h, rows, static_cast<const float*>(p.data()), static_cast<const float*>(q.data()), V);
    print("prob statistics V" + std::to_string(V), h);
  }
  logit_row(63u, V, p.data());
  logit_row(64u, V, q.data());
  for (const sv::SamplingParams params : {sv::SamplingParams{0.8f, 0, 1.0f, 0.0f}, sv::SamplingParams{1.0f, 0, 0.9f, 0.0f},
                                          sv::SamplingParams{1.0f, 3000, 1.0f, 0.01f}}) {
    sv::core::LogitRow<float> target_row, draft_row;
    target_row.params = draft_row.params = params;
    hash_rows("logits statistics V" + std::to_string(V) + " top_p " + std::to_string(params.top_p), p, q, V,
              target_row, draft_row);
  }
  {  // a row with penalties and bias: the overlay's tokens in every statistic and draw
    const Lists lists(1, V, 77u);
    std::vector<std::int32_t> order(lists.b_tokens.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = static_cast<std::int32_t>(k);
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return lists.b_tokens[std::size_t(a)] < lists.b_tokens[std::size_t(b)]; });
    sv::core::LogitRow<float> target_row, draft_row;
    target_row.params = penalised(sv::SamplingParams{0.9f, 0, 1.0f, 0.0f}, false);
    draft_row.params = penalised(sv::SamplingParams{0.9f, 0, 1.0f, 0.0f}, true);
    for (sv::core::LogitRow<float>* row : {&target_row, &draft_row}) {
      row->lists.history_tokens = lists.h_tokens.data();
      row->lists.history_counts = lists.h_counts.data();
      row->lists.history_size = lists.h_offsets[1];
    }
    target_row.lists.bias_tokens = lists.b_tokens.data();
    target_row.lists.bias_values = lists.b_values.data();
    target_row.lists.bias_order = order.data();
    target_row.lists.bias_size = lists.b_offsets[1];
    hash_rows("logits statistics penalised V" + std::to_string(V), p, q, V, target_row, draft_row);
  }
}

void samples(std::int32_t V) {
  std::vector<float> logits(std::size_t(V) * 8);
  for (std::size_t r = 0; r < 8; ++r) logit_row(4242u + r, V, &logits[r * std::size_t(V)]);
  Hash h;
  for (const sv::SamplingParams params : {sv::SamplingParams{0.8f, 0, 1.0f, 0.0f}, sv::SamplingParams{1.0f, 50, 0.9f, 0.0f},
                                          sv::SamplingParams{1.2f, 0, 0.8f, 0.05f}, sv::SamplingParams{0.0f, 0, 1.0f, 0.0f}}) {
    for (std::int64_t pos = 0; pos < 8; ++pos) {
      const std::int32_t t = sv::sample(&logits[std::size_t(pos) * std::size_t(V)], V, params, 99u, pos);
      h.bytes(&t, sizeof t);
      const Lists lists(1, V, std::uint64_t(pos) + 9u);
      const std::int32_t with = sv::sample(&logits[std::size_t(pos) * std::size_t(V)], V, penalised(params, false), 99u, pos,
                                           lists.h_tokens.data(), lists.h_counts.data(), lists.h_offsets[1],
                                           lists.b_tokens.data(), lists.b_values.data(), lists.b_offsets[1]);
      h.bytes(&with, sizeof with);
    }
  }
  print("sample V" + std::to_string(V), h);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s THREADS [ROWS]\n", argv[0]);
    return 2;
  }
  g_threads = std::atoi(argv[1]);
  const std::string rows = argc > 2 ? argv[2] : "float";
  g_values = rows.rfind("float16", 0) == 0 ? Rows::float16 : rows.rfind("bfloat16", 0) == 0 ? Rows::bfloat16 : Rows::float32;
  g_as_float = g_values == Rows::float32 || rows.find("-as-float") != std::string::npos;
  if (g_values == Rows::float32 && rows != "float") {
    std::fprintf(stderr, "unknown row type %s\n", rows.c_str());
    return 2;
  }
  // The logits cases on the mode's rows; the rest only with float rows.
  const auto logits_cases = [&](auto logit) {
    using Logit = decltype(logit);
    for (const Shape s : {Shape{16, 1, 3}, Shape{16, 7, 4}, Shape{1, 1000, 5}, Shape{16, 1000, 5},
                          Shape{3, 40000, 3}, Shape{1, 128256, 5}}) {
      if (g_values == Rows::float32) probability_chains(s);
      logits_chains<Logit>(s);
    }
    for (const Shape s : {Shape{16, 7, 8}, Shape{16, 1000, 12}, Shape{2, 128256, 12}}) {
      if (g_values == Rows::float32) probability_trees(s);
      logits_trees<Logit>(s);
    }
  };
  if (g_as_float) {
    logits_cases(float{});
  } else if (g_values == Rows::float16) {
    logits_cases(sv::float16{});
  } else {
    logits_cases(sv::bfloat16{});
  }
  if (g_values != Rows::float32) return 0;
  for (const std::int32_t V : {1, 1000, 128256}) {
    samples(V);
    statistics(V);
  }
  return 0;
}
