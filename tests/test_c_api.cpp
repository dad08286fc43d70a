// The C API (specverify.h over libspecverify) against the C++ API on the same inputs: for chains
// and trees, probability rows and logits rows in float, float16 and bfloat16, every rule kind the
// C API maps, every Drafted kind, sampling parameters, penalties and bias, guidance, a bitmask, a
// reduced draft vocabulary, caller uniforms and per-sequence seeds, thread counts, a sharded call
// through an sv_communicator over ThreadGroup, and sv_sample. Every comparison is bit for bit:
// tokens, num_accepted, accepted_nodes, logprobs' bits, the four statistics, the error code and
// message. Then bad input (the C++ invalid_input's message, or the C API's own naming the field,
// and untouched outputs), versioned structs (older and newer callers), a failing communicator
// (SV_COMMUNICATOR), and a negative control showing the comparison sees a difference.
// Notation: p = target, q = draft.
#include <gtest/gtest.h>
#if defined(__linux__)
#include <malloc.h>  // malloc_usable_size
#endif

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bad_inputs.hpp"
#include "penalty_lists.hpp"
#include "sharded_chains.hpp"
#include "sharded_logit_chains.hpp"
#include "specverify/specverify.h"
#include "specverify/specverify.hpp"
#include "specverify/thread_communicator.hpp"
#include "trees.hpp"

namespace sv = specverify;

// operator new and delete over malloc and free, delete scribbling over the block first while
// poison_freed is set: a message read from an exception after it was freed then reads as garbage,
// in a build without AddressSanitizer too (CApiErrors.MessageIsCopiedBeforeItsExceptionIsFreed).
namespace {
thread_local bool poison_freed = false;
std::size_t usable_size(void* p) {
#if defined(__linux__)
  return malloc_usable_size(p);
#else
  return (void)p, 0;  // no poisoning: the test then checks only what it reads
#endif
}
}  // namespace
__attribute__((noinline)) void* operator new(std::size_t n) {
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept {
  if (p && poison_freed) {  // volatile: a store before free() would be dropped as dead
    volatile unsigned char* bytes = static_cast<unsigned char*>(p);
    for (std::size_t i = 0, n = usable_size(p); i < n; ++i) bytes[i] = 0x5a;
  }
  std::free(p);
}
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
__attribute__((noinline)) void* operator new[](std::size_t n) { return operator new(n); }
__attribute__((noinline)) void operator delete[](void* p) noexcept { operator delete(p); }
__attribute__((noinline)) void operator delete[](void* p, std::size_t) noexcept { operator delete(p); }

namespace {

using sv::testing::Trees;
using sv::testing::sharded::LogitChains;
using sv::testing::sharded::LogitFeatures;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------------------------------------
// Outcomes: everything a call writes or returns, from sentinel-filled outputs.

constexpr std::int32_t kSentinel = 12345;
constexpr float kSentinelLogprob = 777.0f;
constexpr std::int64_t kSentinelStat = -5;

struct Outcome {
  int code = SV_OK;
  std::string message;
  std::int32_t width = 0;
  std::vector<std::int32_t> tokens, accepted, nodes;
  std::vector<float> logprobs;
  std::array<std::int64_t, 4> stats{kSentinelStat, kSentinelStat, kSentinelStat, kSentinelStat};

  Outcome(std::int32_t B, std::int32_t w)
      : width(w),
        tokens(std::size_t(B) * std::size_t(std::max(w, 1)), kSentinel),
        accepted(std::size_t(B), kSentinel),
        nodes(tokens.size(), kSentinel),
        logprobs(tokens.size(), kSentinelLogprob) {}

  void set(const sv::VerifyStats& s) { stats = {s.drafted, s.accepted, s.relaxed, s.target_checked}; }
  void set(const sv_stats& s) { stats = {s.drafted, s.accepted, s.relaxed, s.target_checked}; }

  /// Whether no output was written (the statistics included).
  bool untouched() const {
    for (auto t : tokens) if (t != kSentinel) return false;
    for (auto t : accepted) if (t != kSentinel) return false;
    for (auto t : nodes) if (t != kSentinel) return false;
    for (auto l : logprobs) if (std::memcmp(&l, &kSentinelLogprob, sizeof l) != 0) return false;
    for (auto s : stats) if (s != kSentinelStat) return false;
    return true;
  }

  /// FNV-1a over every output and the error.
  std::uint64_t hash() const {
    std::uint64_t h = 14695981039346656037ull;
    const auto mix = [&](const void* data, std::size_t n) {
      const auto* bytes = static_cast<const unsigned char*>(data);
      for (std::size_t i = 0; i < n; ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    };
    mix(&code, sizeof code);
    mix(message.data(), message.size());
    mix(tokens.data(), tokens.size() * sizeof(std::int32_t));
    mix(accepted.data(), accepted.size() * sizeof(std::int32_t));
    mix(nodes.data(), nodes.size() * sizeof(std::int32_t));
    mix(logprobs.data(), logprobs.size() * sizeof(float));
    mix(stats.data(), sizeof stats);
    return h;
  }
};

bool operator==(const Outcome& a, const Outcome& b) {
  return a.code == b.code && a.message == b.message && a.tokens == b.tokens && a.accepted == b.accepted &&
         a.nodes == b.nodes && a.logprobs.size() == b.logprobs.size() &&
         (a.logprobs.empty() ||  // an empty vector's data() may be null, which memcmp must not see
          std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * sizeof(float)) == 0) &&
         a.stats == b.stats;
}

std::string describe(const Outcome& o) {
  std::string s = "code " + std::to_string(o.code);
  if (!o.message.empty()) s += " \"" + o.message + "\"";
  s += " accepted [";
  for (auto a : o.accepted) s += std::to_string(a) + " ";
  s += "] tokens [";
  for (auto t : o.tokens) s += std::to_string(t) + " ";
  s += "] nodes [";
  for (auto t : o.nodes) s += std::to_string(t) + " ";
  s += "] logprobs [";
  for (auto l : o.logprobs) s += std::to_string(l) + " ";
  s += "] stats {";
  for (auto v : o.stats) s += std::to_string(v) + " ";
  return s + "}";
}

/// Counts comparisons and how many were errors, so that a test can insist on mostly valid input.
struct Tally {
  std::int64_t cases = 0, errors = 0;
  void add(const Outcome& o) {
    ++cases;
    errors += o.code != SV_OK;
  }
};

void expect_same(const std::string& what, const Outcome& c, const Outcome& cpp, Tally* tally = nullptr) {
  EXPECT_TRUE(c == cpp) << what << "\n  C:   " << describe(c) << "\n  C++: " << describe(cpp);
  if (tally) tally->add(cpp);
}

// ---------------------------------------------------------------------------------------------
// The C++ side.

template <class Batch, class = void>
struct IsTree : std::false_type {};
template <class Batch>
struct IsTree<Batch, std::void_t<decltype(std::declval<const Batch&>().parents)>> : std::true_type {};

/// run(out) -> VerifyStats on sentinel-filled outputs; invalid_input becomes code 1 and its what().
template <bool kTree, class Run>
Outcome capture_cpp(std::int32_t B, std::int32_t width, Run run) {
  Outcome o(B, width);
  try {
    if constexpr (kTree) {
      o.set(run(sv::TreeOutput{o.tokens.data(), width, o.accepted.data(), o.nodes.data(), o.logprobs.data()}));
    } else {
      o.set(run(sv::ChainOutput{o.tokens.data(), width, o.accepted.data(), o.logprobs.data()}));
    }
  } catch (const sv::invalid_input& e) {
    o.code = SV_INVALID_INPUT;
    o.message = e.what();
  }
  return o;
}

template <class Rule, class Batch>
Outcome cpp_verify(const Rule& rule, const Batch& batch, const sv::Randomness& r, std::int32_t width,
                   int max_threads = 1) {
  return capture_cpp<IsTree<Batch>::value>(batch.batch_size, width, [&](const auto& out) {
    return sv::verify(rule, batch, r, out, sv::CpuOptions{max_threads});
  });
}

// ---------------------------------------------------------------------------------------------
// The C side: C structs built field by field from the C++ batch (the C API's own mapping is what
// the comparison tests, so none of it is reused here).

sv_sampling_params c_params(const sv::SamplingParams& p) {
  sv_sampling_params c;
  c.temperature = p.temperature;
  c.top_k = p.top_k;
  c.top_p = p.top_p;
  c.min_p = p.min_p;
  c.repetition_penalty = p.repetition_penalty;
  c.presence_penalty = p.presence_penalty;
  c.frequency_penalty = p.frequency_penalty;
  return c;
}

template <class L>
constexpr sv_row_type row_type_of() {
  if constexpr (std::is_same_v<L, sv::float16>) {
    return SV_F16;
  } else if constexpr (std::is_same_v<L, sv::bfloat16>) {
    return SV_BF16;
  } else {
    return SV_F32;
  }
}

const char* row_type_name(sv_row_type t) { return t == SV_F32 ? "f32" : t == SV_F16 ? "f16" : "bf16"; }

sv_vocab_shard c_shard(const sv::VocabShard& s) { return sv_vocab_shard{s.rank, s.ranks, s.vocab_start, s.local_vocab_size}; }

sv_randomness c_randomness(const sv::Randomness& r) {
  sv_randomness c;
  std::memset(&c, 0, sizeof c);
  c.struct_size = sizeof c;
  c.seed = r.seed;
  c.offset = r.offset;
  c.sequence_seeds = r.sequence_seeds;
  c.accept_uniforms = r.accept_uniforms;
  c.sample_uniforms = r.sample_uniforms;
  c.positions = r.positions;
  return c;
}

/// A C batch with the sampling parameters it points at (its own copies, converted field by field).
template <class CBatch>
struct Owned {
  CBatch b;
  std::vector<sv_sampling_params> tp, dp;
  Owned() {
    std::memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
  }
  Owned(const Owned&) = delete;
  Owned(Owned&&) = default;  // the vectors keep their buffers, so b's pointers stay valid
  Owned& operator=(Owned&&) = default;
};
using CChains = Owned<sv_chain_batch>;
using CTrees = Owned<sv_tree_batch>;

template <class CBatch, class Batch>
void copy_logits_fields(Owned<CBatch>& o, const Batch& x) {
  using L = std::remove_cv_t<std::remove_pointer_t<decltype(x.target_logits)>>;
  CBatch& c = o.b;
  c.row_type = row_type_of<L>();
  c.target_logits = x.target_logits;
  c.draft_logits = x.draft_logits;
  if (x.target_params) {
    for (std::int32_t i = 0; i < x.batch_size; ++i) o.tp.push_back(c_params(x.target_params[i]));
    c.target_params = o.tp.data();
  }
  if (x.draft_params) {
    for (std::int32_t i = 0; i < x.batch_size; ++i) o.dp.push_back(c_params(x.draft_params[i]));
    c.draft_params = o.dp.data();
  }
  c.draft_vocab_size = x.draft_vocab_size;
  c.draft_to_target = x.draft_to_target;
  c.unconditional_logits = x.unconditional_logits;
  c.unconditional_stride = x.unconditional_stride;
  c.unconditional_first_row = x.unconditional_first_row;
  c.guidance_scale = x.guidance_scale;
  c.allowed_tokens = x.allowed_tokens;
  c.history_offsets = x.history_offsets;
  c.history_tokens = x.history_tokens;
  c.history_counts = x.history_counts;
  c.bias_offsets = x.bias_offsets;
  c.bias_tokens = x.bias_tokens;
  c.bias_values = x.bias_values;
}

CChains to_c(const sv::ChainBatch<float>& x) {
  CChains o;
  sv_chain_batch& c = o.b;
  c.batch_size = x.batch_size;
  c.vocab_size = x.vocab_size;
  c.draft_offsets = x.draft_offsets;
  c.draft_tokens = x.draft_tokens;
  c.row_type = SV_F32;
  c.target_probs = x.target_probs;
  c.draft_probs = x.draft_probs;
  c.target_stride = x.target_stride;
  c.draft_stride = x.draft_stride;
  c.target_row_max = x.target_row_max;
  c.shard = c_shard(x.shard);
  return o;
}

template <class L>
CChains to_c(const sv::LogitsChainBatch<L>& x) {
  CChains o;
  sv_chain_batch& c = o.b;
  c.batch_size = x.batch_size;
  c.vocab_size = x.vocab_size;
  c.draft_offsets = x.draft_offsets;
  c.draft_tokens = x.draft_tokens;
  c.target_stride = x.target_stride;
  c.draft_stride = x.draft_stride;
  copy_logits_fields(o, x);
  c.shard = c_shard(x.shard);
  return o;
}

/// Stores any int in a C enum field, as a C caller may (C++ may not cast a value outside the
/// enumerators' range to the enum).
template <class E>
void store_c_enum(E& field, int value) {
  static_assert(sizeof(E) == sizeof(int), "the C API's enums are int-sized");
  std::memcpy(&field, &value, sizeof value);
}

/// An sv_rule whose kind is any int.
sv_rule far_rule(int kind, sv_divergence divergence) {
  sv_rule rule{SV_STANDARD, divergence, 0, 0};
  store_c_enum(rule.kind, kind);
  return rule;
}

sv_drafted c_drafted(sv::Drafted d) {
  switch (d) {
    case sv::Drafted::sampled: return SV_SAMPLED;
    case sv::Drafted::sampled_without_replacement: return SV_SAMPLED_WITHOUT_REPLACEMENT;
    case sv::Drafted::deterministic: return SV_DETERMINISTIC;
  }
  return static_cast<sv_drafted>(3);
}

template <class Batch>
void copy_tree_shape(sv_tree_batch& c, const Batch& x) {
  c.batch_size = x.batch_size;
  c.vocab_size = x.vocab_size;
  c.node_offsets = x.node_offsets;
  c.parents = x.parents;
  c.draft_tokens = x.draft_tokens;
  c.target_stride = x.target_stride;
  c.draft_stride = x.draft_stride;
  c.drafted = c_drafted(x.drafted);
  c.shard = c_shard(x.shard);
}

CTrees to_c(const sv::TreeBatch<float>& x) {
  CTrees o;
  copy_tree_shape(o.b, x);
  o.b.row_type = SV_F32;
  o.b.target_probs = x.target_probs;
  o.b.draft_probs = x.draft_probs;
  return o;
}

template <class L>
CTrees to_c(const sv::LogitsTreeBatch<L>& x) {
  CTrees o;
  copy_tree_shape(o.b, x);
  copy_logits_fields(o, x);
  return o;
}

/// A C output over sentinel-filled storage (chains: no accepted_nodes).
sv_chain_output c_output(Outcome& o, sv_stats& stats) {
  sv_chain_output out;
  std::memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  out.tokens = o.tokens.data();
  out.row_width = o.width;
  out.num_accepted = o.accepted.data();
  out.logprobs = o.logprobs.data();
  out.stats = &stats;
  return out;
}

sv_tree_output c_tree_output(Outcome& o, sv_stats& stats) {
  sv_tree_output out;
  std::memset(&out, 0, sizeof out);
  out.struct_size = sizeof out;
  out.tokens = o.tokens.data();
  out.row_width = o.width;
  out.num_accepted = o.accepted.data();
  out.accepted_nodes = o.nodes.data();
  out.logprobs = o.logprobs.data();
  out.stats = &stats;
  return out;
}

/// Records what the call returned into o; err, when passed, must agree with the return value and
/// hold "" on success.
void record(Outcome& o, int code, const sv_error* err, const sv_stats& stats) {
  o.code = code;
  o.set(stats);
  if (!err) return;
  EXPECT_EQ(err->code, code);
  EXPECT_NE(std::memchr(err->message, '\0', sizeof err->message), nullptr) << "err->message is not terminated";
  if (code == SV_OK) {
    EXPECT_STREQ(err->message, "");
  } else {
    o.message = err->message;
  }
}

sv_stats sentinel_stats() { return sv_stats{kSentinelStat, kSentinelStat, kSentinelStat, kSentinelStat}; }

sv_error garbage_error() {
  sv_error e;
  std::memset(&e, 'x', sizeof e);  // the call must set code and a terminated message
  return e;
}

Outcome c_verify(const sv_rule* rule, const sv_chain_batch* batch, const sv_randomness* r, std::int32_t B,
                 std::int32_t width, int max_threads = 1, bool pass_err = true) {
  Outcome o(B, width);
  sv_stats stats = sentinel_stats();
  const sv_chain_output out = c_output(o, stats);
  sv_error err = garbage_error();
  const int code = sv_verify_chains(rule, batch, r, &out, max_threads, pass_err ? &err : nullptr);
  record(o, code, pass_err ? &err : nullptr, stats);
  return o;
}

Outcome c_verify(const sv_rule* rule, const sv_tree_batch* batch, const sv_randomness* r, std::int32_t B,
                 std::int32_t width, int max_threads = 1, bool pass_err = true) {
  Outcome o(B, width);
  sv_stats stats = sentinel_stats();
  const sv_tree_output out = c_tree_output(o, stats);
  sv_error err = garbage_error();
  const int code = sv_verify_trees(rule, batch, r, &out, max_threads, pass_err ? &err : nullptr);
  record(o, code, pass_err ? &err : nullptr, stats);
  return o;
}

// ---------------------------------------------------------------------------------------------
// Rules: each kind with the C++ rule it names. The fields a rule does not name hold junk, which
// the C API must ignore.

template <bool kTree, class F>
void for_each_rule(F&& f) {
  const auto junk_divergence = static_cast<sv_divergence>(7);
  f("standard", sv_rule{SV_STANDARD, junk_divergence, -1.0f, -1.0f}, sv::Standard{});
  f("greedy", sv_rule{SV_GREEDY, junk_divergence, -2.0f, kNaN}, sv::Greedy{});
  f("ears", sv_rule{SV_EARS, junk_divergence, 0.3f, -1.0f}, sv::Ears{0.3f});
  const sv_divergence cd[] = {SV_KL_TARGET_DRAFT, SV_KL_DRAFT_TARGET, SV_JS, SV_JS_FSD, SV_TV};
  const sv::Divergence d[] = {sv::Divergence::kl_target_draft, sv::Divergence::kl_draft_target, sv::Divergence::js,
                              sv::Divergence::js_fsd, sv::Divergence::tv};
  const char* names[] = {"kl_pq", "kl_qp", "js", "js_fsd", "tv"};
  const float thresholds[] = {0.4f, 0.9f, 0.1f, 0.2f, 0.5f};
  for (int i = 0; i < 5; ++i) {
    f(std::string("fsd ") + names[i], sv_rule{SV_FSD, cd[i], -1.0f, thresholds[i]}, sv::Fsd{d[i], thresholds[i]});
    f(std::string("rfsd ") + names[i], sv_rule{SV_RFSD, cd[i], -1.0f, thresholds[i]},
      sv::ReducibleFsd{d[i], thresholds[i]});
  }
  if constexpr (!kTree) f("block", sv_rule{SV_BLOCK, junk_divergence, -1.0f, -1.0f}, sv::Block{});
  f("traversal", sv_rule{SV_TRAVERSAL, junk_divergence, -1.0f, -1.0f}, sv::Traversal{});
  f("coupled", sv_rule{SV_COUPLED, junk_divergence, -1.0f, -1.0f}, sv::Coupled{});
}

// ---------------------------------------------------------------------------------------------
// Randomness: the batch's seed, per-sequence seeds, caller uniforms; positions always (Coupled).

struct Streams {
  std::vector<std::uint64_t> seeds;
  std::vector<float> accept, sample;
  std::vector<std::int64_t> positions;

  Streams(std::int32_t B, std::int64_t drafts, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (std::int32_t b = 0; b < B; ++b) {
      seeds.push_back(rng());
      sample.push_back(std::min(u(rng), 0.99999994f));
      positions.push_back(40 + 11 * b);
    }
    for (std::int64_t j = 0; j < drafts; ++j) accept.push_back(std::min(u(rng), 0.99999994f));
  }

  /// Variant 0: the batch's seed; 1: per-sequence seeds; 2: caller uniforms.
  sv::Randomness make(int variant, std::uint64_t seed = 1234) const {
    sv::Randomness r{seed, 7};
    r.positions = positions.data();
    if (variant == 1) r.sequence_seeds = seeds.data();
    if (variant == 2) {
      r.accept_uniforms = accept.empty() ? nullptr : accept.data();
      r.sample_uniforms = sample.data();
    }
    return r;
  }
};

const char* variant_name(int v) { return v == 0 ? " batch seed" : v == 1 ? " sequence seeds" : " caller uniforms"; }

// ---------------------------------------------------------------------------------------------
// 16-bit rows: float values rounded to nearest, ties to even.

std::uint16_t half_bits(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // inf, or rounds to it
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half, an exact multiple of 2^-24
    float a;
    std::memcpy(&a, &ax, sizeof a);
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(a * 16777216.0f)));
  }
  std::uint32_t h = ((((ax >> 23) - 127u + 15u) << 10) | ((ax & 0x7fffffu) >> 13));
  const std::uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<std::uint16_t>(sign | h);
}

std::uint16_t bfloat_bits(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // NaN stays NaN
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <class L>
std::vector<L> rows_as(const std::vector<float>& x) {
  std::vector<L> out;
  out.reserve(x.size());
  for (const float v : x) {
    if constexpr (std::is_same_v<L, sv::float16>) {
      out.push_back(sv::float16{half_bits(v)});
    } else if constexpr (std::is_same_v<L, sv::bfloat16>) {
      out.push_back(sv::bfloat16{bfloat_bits(v)});
    } else {
      out.push_back(v);
    }
  }
  return out;
}

/// The place in `to` of the element p points at in `from` (null, or p outside `from`: null).
template <class L>
const L* same_place(const float* p, const std::vector<float>& from, const std::vector<L>& to) {
  const auto at = reinterpret_cast<std::uintptr_t>(p), begin = reinterpret_cast<std::uintptr_t>(from.data());
  if (!p || at < begin || at > begin + from.size() * sizeof(float)) return nullptr;
  return to.data() + (at - begin) / sizeof(float);
}

/// Rows of a logits batch (target, draft, unconditional) in L.
template <class L>
struct TypedRows {
  std::vector<L> target, draft, uncond;
  TypedRows(const std::vector<float>& t, const std::vector<float>& d, const std::vector<float>& u)
      : target(rows_as<L>(t)), draft(rows_as<L>(d)), uncond(rows_as<L>(u)) {}

  /// The batch b over float rows (t, d, u) over these rows instead.
  template <template <class> class Batch>
  Batch<L> retype(const Batch<float>& b, const std::vector<float>& t, const std::vector<float>& d,
                  const std::vector<float>& u) const {
    Batch<L> o;
    o.batch_size = b.batch_size;
    o.vocab_size = b.vocab_size;
    if constexpr (IsTree<Batch<float>>::value) {
      o.node_offsets = b.node_offsets;
      o.parents = b.parents;
      o.drafted = b.drafted;
    } else {
      o.draft_offsets = b.draft_offsets;
    }
    o.draft_tokens = b.draft_tokens;
    o.target_logits = same_place(b.target_logits, t, target);
    o.draft_logits = same_place(b.draft_logits, d, draft);
    if (b.draft_logits && !o.draft_logits) o.draft_logits = same_place(b.draft_logits, t, target);
    o.target_stride = b.target_stride;
    o.draft_stride = b.draft_stride;
    o.target_params = b.target_params;
    o.draft_params = b.draft_params;
    o.draft_vocab_size = b.draft_vocab_size;
    o.draft_to_target = b.draft_to_target;
    o.unconditional_logits = same_place(b.unconditional_logits, u, uncond);
    o.unconditional_stride = b.unconditional_stride;
    o.unconditional_first_row = b.unconditional_first_row;
    o.guidance_scale = b.guidance_scale;
    o.allowed_tokens = b.allowed_tokens;
    o.history_offsets = b.history_offsets;
    o.history_tokens = b.history_tokens;
    o.history_counts = b.history_counts;
    o.bias_offsets = b.bias_offsets;
    o.bias_tokens = b.bias_tokens;
    o.bias_values = b.bias_values;
    o.shard = b.shard;
    return o;
  }
};

// ---------------------------------------------------------------------------------------------
// Logits trees: random_trees' shapes and drafts, logits log p and log q, with the optional inputs.

struct LogitTreeFeatures {
  bool penalties = false, mask = false, guidance = false, reduced_draft = false, draft_params = false;
};

struct LogitTrees {
  LogitTrees(Trees trees, const LogitTreeFeatures& features) : t(std::move(trees)), f(features) {}
  Trees t;  // shape, drafts, p and q
  LogitTreeFeatures f;
  std::int32_t Vd = 0;
  std::vector<float> target, draft, uncond;
  std::vector<std::int64_t> first_u;
  std::vector<float> scales;
  std::vector<std::uint32_t> mask;
  std::vector<sv::SamplingParams> tp, dp;
  sv::testing::PenaltyListArrays lists;
  std::vector<std::int32_t> d2t;

  std::int32_t words() const { return (t.V + 31) / 32; }

  sv::LogitsTreeBatch<float> batch() const {
    sv::LogitsTreeBatch<float> b;
    b.batch_size = t.size();
    b.vocab_size = t.V;
    b.node_offsets = t.offsets.data();
    b.parents = t.parents.data();
    b.draft_tokens = t.tokens.data();
    b.target_logits = target.data();
    b.draft_logits = t.with_q ? draft.data() : nullptr;
    b.drafted = t.drafted;
    b.target_params = tp.data();
    if (f.draft_params) b.draft_params = dp.data();
    if (f.reduced_draft) {
      b.draft_vocab_size = Vd;
      b.draft_to_target = d2t.data();
    }
    if (f.guidance) {
      b.unconditional_logits = uncond.data();
      b.unconditional_first_row = first_u.data();
      b.guidance_scale = scales.data();
    }
    if (f.mask) b.allowed_tokens = mask.data();
    if (f.penalties) lists.attach(b);
    return b;
  }
};

LogitTrees make_logit_trees(std::int32_t B, std::int32_t V, sv::Drafted how, const LogitTreeFeatures& f,
                            std::mt19937_64& rng) {
  LogitTrees l(sv::testing::random_trees(B, V, 7, how, rng), f);
  const auto log_of = [](float x) { return x > 0.0f ? std::log(x) : -kInf; };
  const std::int64_t rows = std::int64_t(l.t.tokens.size()) + B;
  for (const float x : l.t.p) l.target.push_back(log_of(x));
  l.Vd = V;
  if (f.reduced_draft) {  // a random injective map of about 3/4 of the vocabulary
    std::vector<std::int32_t> ids(std::size_t(V), 0);
    for (std::int32_t v = 0; v < V; ++v) ids[std::size_t(v)] = v;
    std::shuffle(ids.begin(), ids.end(), rng);
    l.Vd = std::max<std::int32_t>(1, 3 * V / 4);
    l.d2t.assign(ids.begin(), ids.begin() + l.Vd);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int32_t i = 0; i < l.Vd; ++i) l.draft.push_back(log_of(l.t.q[std::size_t(r * V + l.d2t[std::size_t(i)])]));
    }
  } else {
    for (const float x : l.t.q) l.draft.push_back(log_of(x));
  }
  const auto pool = sv::testing::sharded::params_pool(LogitFeatures{});
  for (std::int32_t b = 0; b < B; ++b) {
    sv::SamplingParams p = pool[(std::size_t(b) * 5 + rng() % 3) % pool.size()];
    sv::SamplingParams d = p;
    if (f.draft_params) d.temperature = d.temperature == 0.0f ? 0.0f : d.temperature * 1.3f, d.top_k = 0;
    if (f.penalties && b % 2 == 0) {
      p.repetition_penalty = 1.3f, p.presence_penalty = 0.5f, p.frequency_penalty = 0.2f;
      d.repetition_penalty = 1.1f, d.presence_penalty = 0.3f, d.frequency_penalty = 0.1f;
    }
    l.tp.push_back(p);
    l.dp.push_back(d);
  }
  if (f.guidance) {  // finite unconditional rows laid out like the target's; every third sequence unguided
    std::uniform_real_distribution<float> u(-5.0f, 5.0f);
    for (std::int64_t i = 0; i < rows * V; ++i) l.uncond.push_back(u(rng));
    const float pool_scales[] = {1.5f, 0.5f, 3.0f, 1.0f};
    for (std::int32_t b = 0; b < B; ++b) {
      l.first_u.push_back(b % 3 == 2 ? -1 : std::int64_t(l.t.offsets[std::size_t(b)]) + b);
      l.scales.push_back(pool_scales[rng() % 4]);
    }
  }
  if (f.mask) {  // about 3/4 of the tokens allowed, always the row's most likely one
    l.mask.resize(std::size_t(rows) * std::size_t(l.words()));
    for (auto& w : l.mask) w = static_cast<std::uint32_t>(rng()) | static_cast<std::uint32_t>(rng());
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* p = &l.t.p[std::size_t(r * V)];
      const auto top = std::int32_t(std::max_element(p, p + V) - p);
      l.mask[std::size_t(r) * std::size_t(l.words()) + std::size_t(top / 32)] |= 1u << (top % 32);
    }
  }
  if (f.penalties) {
    for (std::int32_t b = 0; b < B; ++b) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(V));
      for (std::int32_t v = 0; v < V; ++v) ids[std::size_t(v)] = v;
      std::shuffle(ids.begin(), ids.end(), rng);
      const std::int32_t h = std::min<std::int32_t>(V, std::int32_t(rng() % 7));
      std::vector<std::int32_t> history(ids.begin(), ids.begin() + h);
      std::sort(history.begin(), history.end());
      for (const std::int32_t x : history) {
        l.lists.h_tokens.push_back(x);
        l.lists.h_counts.push_back(std::int32_t(rng() % 4));
      }
      const std::int32_t n = std::min<std::int32_t>(V, std::int32_t(rng() % 5));
      for (std::int32_t i = 0; i < n; ++i) {
        l.lists.b_tokens.push_back(ids[std::size_t(V - 1 - i)]);
        l.lists.b_values.push_back(float(std::int32_t(rng() % 41) - 20) / 10.0f);
      }
      l.lists.end_sequence();
    }
  }
  return l;
}

// ---------------------------------------------------------------------------------------------
// Sharded calls: the ranks as threads, each one's sv_communicator wrapping a ThreadGroup.

/// One rank's context for gather_through_group: it fails (returns 1) at call fail_at, which every
/// rank of a test sets alike, so that no rank waits for one that stopped.
struct RankContext {
  sv::ThreadGroup* group = nullptr;
  std::int32_t rank = 0;
  std::int64_t fail_at = -1;
  std::int64_t calls = 0;
};

int gather_through_group(void* context, const void* send, std::size_t bytes, void* recv) {
  auto& c = *static_cast<RankContext*>(context);
  if (c.calls++ == c.fail_at) return 1;
  try {
    c.group->communicator(c.rank).all_gather(send, bytes, recv);
  } catch (...) {
    return 2;  // an exception must not cross the C ABI
  }
  return 0;
}

/// Runs rank k's C call on its own thread for each of batches[k] (their communicator set here);
/// returns each rank's outcome.
template <class CBatch>
std::vector<Outcome> c_on_ranks(const sv_rule& rule, std::vector<Owned<CBatch>>& batches, const sv::Randomness& r,
                                std::int32_t width, sv::ThreadGroup& group, std::int64_t fail_at = -1) {
  const auto ranks = std::int32_t(batches.size());
  std::vector<RankContext> contexts(batches.size());
  std::vector<sv_communicator> comms(batches.size());
  std::vector<Outcome> outcomes(batches.size(), Outcome(0, 0));
  const sv_randomness cr = c_randomness(r);
  std::vector<std::thread> threads;
  for (std::int32_t k = 0; k < ranks; ++k) {
    contexts[std::size_t(k)] = RankContext{&group, k, fail_at, 0};
    comms[std::size_t(k)] = sv_communicator{gather_through_group, &contexts[std::size_t(k)]};
    batches[std::size_t(k)].b.communicator = &comms[std::size_t(k)];
    threads.emplace_back([&, k] {
      const CBatch& b = batches[std::size_t(k)].b;
      outcomes[std::size_t(k)] = c_verify(&rule, &b, &cr, b.batch_size, width, 1);
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

/// The same ranks through the C++ sharded verify (for a fault in one slice, whose message every
/// rank reports).
template <class Rule, class Batch>
std::vector<Outcome> cpp_on_ranks(const Rule& rule, const std::vector<Batch>& batches, const sv::Randomness& r,
                                  std::int32_t width) {
  sv::ThreadGroup group(std::int32_t(batches.size()));
  std::vector<Outcome> outcomes(batches.size(), Outcome(0, 0));
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < batches.size(); ++k) {
    threads.emplace_back([&, k] {
      outcomes[k] = capture_cpp<IsTree<Batch>::value>(batches[k].batch_size, width, [&](const auto& out) {
        return sv::verify(rule, batches[k], r, out, group.communicator(std::int32_t(k)));
      });
    });
  }
  for (auto& t : threads) t.join();
  return outcomes;
}

/// Bounds of `ranks` uneven slices of [0, V), the first empty when ranks > 2.
std::vector<std::int32_t> bounds_for(std::int32_t V, std::int32_t ranks, std::mt19937_64& rng) {
  auto bounds = sv::testing::sharded::random_bounds(V, ranks, rng);
  if (ranks > 2) bounds[1] = 0;
  return bounds;
}

// ---------------------------------------------------------------------------------------------
// Chains over probability rows.

/// Rows copied with stride V + 5, the padding NaN (the C API must pass the stride through).
std::vector<float> padded(const std::vector<float>& rows, std::int32_t V) {
  std::vector<float> out;
  for (std::size_t r = 0; r * std::size_t(V) < rows.size(); ++r) {
    out.insert(out.end(), rows.begin() + std::ptrdiff_t(r * std::size_t(V)),
               rows.begin() + std::ptrdiff_t((r + 1) * std::size_t(V)));
    out.insert(out.end(), 5, kNaN);
  }
  return out;
}

std::vector<float> row_maxima(const std::vector<float>& rows, std::int32_t V) {
  std::vector<float> out;
  for (std::size_t r = 0; r * std::size_t(V) < rows.size(); ++r) {
    out.push_back(*std::max_element(rows.begin() + std::ptrdiff_t(r * std::size_t(V)),
                                    rows.begin() + std::ptrdiff_t((r + 1) * std::size_t(V))));
  }
  return out;
}

TEST(CApiChains, ProbabilityRowsEveryRuleMatchCpp) {
  using sv::testing::sharded::Rows;
  std::mt19937_64 rng(1);
  Tally tally;
  for (const Rows kind : {Rows::normalised, Rows::peaked, Rows::close, Rows::unnormalised_large}) {
    const auto c = sv::testing::sharded::make_chains(4, 300, 4, kind, 10 + std::uint64_t(kind));
    const Streams streams(c.B, c.offsets.back(), rng);
    const std::vector<float> p_padded = padded(c.p, c.V), q_padded = padded(c.q, c.V), p_max = row_maxima(c.p, c.V);
    for (int layout = 0; layout < 3; ++layout) {  // 0: compact rows; 1: padded strides; 2: target_row_max
      for (const bool one_hot : {false, true}) {
        sv::ChainBatch<float> batch{c.B, c.V, c.offsets.data(), c.tokens.data(), c.p.data(), one_hot ? nullptr : c.q.data()};
        if (layout == 1) {
          batch.target_probs = p_padded.data();
          batch.draft_probs = one_hot ? nullptr : q_padded.data();
          batch.target_stride = batch.draft_stride = c.V + 5;
        }
        if (layout == 2) batch.target_row_max = p_max.data();
        const CChains cb = to_c(batch);
        for_each_rule<false>([&](const std::string& name, const sv_rule& rule, const auto& cpp_rule) {
          for (int variant = 0; variant < 3; ++variant) {
            const sv::Randomness r = streams.make(variant);
            const sv_randomness cr = c_randomness(r);
            for (const int threads : {1, 0}) {
              expect_same(name + variant_name(variant) + " layout " + std::to_string(layout) +
                              (one_hot ? " one-hot" : " q rows") + " max_threads " + std::to_string(threads),
                          c_verify(&rule, &cb.b, &cr, c.B, c.width(), threads),
                          cpp_verify(cpp_rule, batch, r, c.width(), threads), &tally);
            }
          }
        });
      }
    }
  }
  EXPECT_LT(tally.errors, tally.cases / 10) << "most calls must verify, not fail";
}

// row_width above the longest chain + 1 and sequences without drafts; r null (seed 0, offset 0).
TEST(CApiChains, WideRowsEmptyChainsAndNullRandomness) {
  const auto c = sv::testing::sharded::make_chains(4, 50, 3, sv::testing::sharded::Rows::normalised, 3);
  std::vector<std::int32_t> offsets = c.offsets;
  const sv::ChainBatch<float> batch{c.B, c.V, offsets.data(), c.tokens.data(), c.p.data(), c.q.data()};
  const CChains cb = to_c(batch);
  const sv_rule rule{SV_STANDARD, SV_JS, 0.0f, 0.0f};
  expect_same("row_width 9, null randomness", c_verify(&rule, &cb.b, nullptr, c.B, 9),
              cpp_verify(sv::Standard{}, batch, sv::Randomness{}, 9));
  // Coupled needs positions, which r == null has not: the C++ message.
  const sv_rule coupled{SV_COUPLED, SV_JS, 0.0f, 0.0f};
  const Outcome no_positions = c_verify(&coupled, &cb.b, nullptr, c.B, 9);
  expect_same("coupled, null randomness", no_positions, cpp_verify(sv::Coupled{}, batch, sv::Randomness{}, 9));
  EXPECT_EQ(no_positions.code, SV_INVALID_INPUT);
  const std::vector<std::int32_t> none{0, 0, 0};
  const sv::ChainBatch<float> empty{2, c.V, none.data(), c.tokens.data(), c.p.data(), c.q.data()};
  const CChains ce = to_c(empty);
  expect_same("chains without drafts", c_verify(&rule, &ce.b, nullptr, 2, 1),
              cpp_verify(sv::Standard{}, empty, sv::Randomness{}, 1));
  const sv::ChainBatch<float> zero{0, c.V, none.data(), nullptr, nullptr, nullptr};
  const CChains cz = to_c(zero);
  expect_same("an empty batch", c_verify(&rule, &cz.b, nullptr, 0, 1), cpp_verify(sv::Standard{}, zero, sv::Randomness{}, 1));
}

// ---------------------------------------------------------------------------------------------
// Chains over logits, in each row type.

struct NamedFeatures {
  const char* name;
  LogitFeatures f;
};

std::vector<NamedFeatures> logit_feature_sets() {
  std::vector<NamedFeatures> sets(7);
  sets[0].name = "plain parameters";
  sets[1].name = "guidance, bitmask";
  sets[1].f.guidance = sets[1].f.mask = true;
  sets[2].name = "penalties and bias";
  sets[2].f.penalties = true;
  sets[3].name = "reduced draft vocabulary, draft params";
  sets[3].f.reduced_draft = sets[3].f.draft_params = true;
  sets[4].name = "top_p alone, quantised";
  sets[4].f.top_p_alone = sets[4].f.quantised = true;
  sets[5].name = "sparse, penalties, draft params";
  sets[5].f.sparse = sets[5].f.penalties = sets[5].f.draft_params = true;
  sets[6].name = "everything";
  sets[6].f.guidance = sets[6].f.mask = sets[6].f.penalties = sets[6].f.reduced_draft = sets[6].f.draft_params = true;
  return sets;
}

template <class L>
void logit_chains_match(const LogitChains& c, const std::string& what, std::mt19937_64& rng, Tally& tally) {
  const TypedRows<L> rows(c.target, c.draft, c.uncond);
  const Streams streams(c.shape.B, c.shape.offsets.back(), rng);
  for (const bool one_hot : {false, true}) {
    const sv::LogitsChainBatch<L> batch = rows.retype(c.whole(one_hot), c.target, c.draft, c.uncond);
    const CChains cb = to_c(batch);
    for_each_rule<false>([&](const std::string& name, const sv_rule& rule, const auto& cpp_rule) {
      const int variant = int(rng() % 3), threads = int(rng() % 2);
      const sv::Randomness r = streams.make(variant);
      const sv_randomness cr = c_randomness(r);
      expect_same(what + " " + row_type_name(row_type_of<L>()) + (one_hot ? " one-hot " : " q rows ") + name +
                      variant_name(variant) + " max_threads " + std::to_string(threads),
                  c_verify(&rule, &cb.b, &cr, c.shape.B, c.shape.width(), threads),
                  cpp_verify(cpp_rule, batch, r, c.shape.width(), threads), &tally);
    });
  }
}

TEST(CApiChains, LogitsRowsInEveryRowTypeMatchCpp) {
  std::mt19937_64 rng(2);
  Tally tally;
  std::uint64_t seed = 100;
  for (const auto& set : logit_feature_sets()) {
    for (const std::int32_t V : {7, 300}) {
      const LogitChains c = sv::testing::sharded::make_logit_chains(4, V, 4, set.f, seed, seed * 7 + 1);
      ++seed;
      const std::string what = std::string(set.name) + " V=" + std::to_string(V);
      logit_chains_match<float>(c, what, rng, tally);
      logit_chains_match<sv::float16>(c, what, rng, tally);
      logit_chains_match<sv::bfloat16>(c, what, rng, tally);
    }
  }
  EXPECT_LT(tally.errors, tally.cases / 5) << "most calls must verify, not fail";
}

// ---------------------------------------------------------------------------------------------
// Trees.

const char* drafted_name(sv::Drafted d) {
  return d == sv::Drafted::sampled ? "sampled" : d == sv::Drafted::sampled_without_replacement ? "without replacement" : "deterministic";
}

TEST(CApiTrees, ProbabilityRowsEveryDraftedKindMatchCpp) {
  std::mt19937_64 rng(3);
  Tally tally;
  for (const sv::Drafted how : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    for (const std::int32_t V : {8, 300}) {
      const Trees t = sv::testing::random_trees(4, V, 7, how, rng);
      const Streams streams(t.size(), std::int64_t(t.tokens.size()), rng);
      const std::vector<float> p_padded = padded(t.p, V), q_padded = padded(t.q, V);
      for (const bool strided : {false, true}) {
        sv::TreeBatch<float> batch = t.batch();
        if (strided) {
          batch.target_probs = p_padded.data();
          batch.draft_probs = t.with_q ? q_padded.data() : nullptr;
          batch.target_stride = batch.draft_stride = V + 5;
        }
        const CTrees cb = to_c(batch);
        for_each_rule<true>([&](const std::string& name, const sv_rule& rule, const auto& cpp_rule) {
          for (int variant = 0; variant < 3; ++variant) {
            const sv::Randomness r = streams.make(variant);
            const sv_randomness cr = c_randomness(r);
            const int threads = variant == 1 ? 0 : 1;
            expect_same(std::string(drafted_name(how)) + " V=" + std::to_string(V) + (strided ? " strided " : " ") +
                            name + variant_name(variant),
                        c_verify(&rule, &cb.b, &cr, t.size(), t.width, threads),
                        cpp_verify(cpp_rule, batch, r, t.width, threads), &tally);
          }
        });
      }
    }
  }
  // Traversal refuses every Drafted but sampled, both ways alike: those are errors, the rest not.
  EXPECT_LT(tally.errors, tally.cases / 5) << "most calls must verify, not fail";
}

template <class L>
void logit_trees_match(const LogitTrees& l, const std::string& what, std::mt19937_64& rng, Tally& tally) {
  const TypedRows<L> rows(l.target, l.draft, l.uncond);
  const sv::LogitsTreeBatch<L> batch = rows.retype(l.batch(), l.target, l.draft, l.uncond);
  const CTrees cb = to_c(batch);
  const Streams streams(l.t.size(), std::int64_t(l.t.tokens.size()), rng);
  for_each_rule<true>([&](const std::string& name, const sv_rule& rule, const auto& cpp_rule) {
    const int variant = int(rng() % 3), threads = int(rng() % 2);
    const sv::Randomness r = streams.make(variant);
    const sv_randomness cr = c_randomness(r);
    expect_same(what + " " + row_type_name(row_type_of<L>()) + " " + name + variant_name(variant),
                c_verify(&rule, &cb.b, &cr, l.t.size(), l.t.width, threads),
                cpp_verify(cpp_rule, batch, r, l.t.width, threads), &tally);
  });
}

TEST(CApiTrees, LogitsRowsInEveryRowTypeMatchCpp) {
  std::mt19937_64 rng(4);
  Tally tally;
  std::vector<std::pair<const char*, LogitTreeFeatures>> sets(4);
  sets[0].first = "plain parameters";
  sets[1].first = "penalties and bias, bitmask";
  sets[1].second.penalties = sets[1].second.mask = true;
  sets[2].first = "guidance, reduced draft vocabulary";
  sets[2].second.guidance = sets[2].second.reduced_draft = true;
  sets[3].first = "everything";
  sets[3].second = LogitTreeFeatures{true, true, true, true, true};
  for (const sv::Drafted how : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    for (const auto& [name, f] : sets) {
      for (const std::int32_t V : {8, 300}) {
        const LogitTrees l = make_logit_trees(4, V, how, f, rng);
        const std::string what = std::string(drafted_name(how)) + " " + name + " V=" + std::to_string(V);
        logit_trees_match<float>(l, what, rng, tally);
        logit_trees_match<sv::float16>(l, what, rng, tally);
        logit_trees_match<sv::bfloat16>(l, what, rng, tally);
      }
    }
  }
  EXPECT_LT(tally.errors, tally.cases / 5) << "most calls must verify, not fail";
}

// ---------------------------------------------------------------------------------------------
// Sharded calls through an sv_communicator.

TEST(CApiSharded, LogitChainsOnEveryRankMatchUnshardedCpp) {
  using sv::testing::sharded::Layout;
  std::mt19937_64 rng(5);
  LogitFeatures f;
  f.guidance = f.mask = f.penalties = f.draft_params = true;
  for (const bool reduced : {false, true}) {
    f.reduced_draft = reduced;
    const LogitChains c = sv::testing::sharded::make_logit_chains(4, 300, 4, f, 50 + reduced, 51 + reduced);
    const Streams streams(c.shape.B, c.shape.offsets.back(), rng);
    for_each_rule<false>([&](const std::string& name, const sv_rule& rule, const auto& cpp_rule) {
      const sv::Randomness r = streams.make(int(rng() % 3));
      const Outcome whole = cpp_verify(cpp_rule, c.whole(false), r, c.shape.width());
      for (const std::int32_t ranks : {1, 2, 4}) {
        const auto bounds = bounds_for(c.V(), ranks, rng);
        const auto layout = static_cast<Layout>(rng() % 3);
        std::vector<sv::testing::sharded::RankRows> rows(static_cast<std::size_t>(ranks));
        std::vector<CChains> batches;
        for (std::int32_t k = 0; k < ranks; ++k) {
          sv::testing::sharded::rank_batch(c, false, bounds, k, layout, rows[std::size_t(k)]);
          batches.push_back(to_c(rows[std::size_t(k)].batch));  // an empty slice's rows may be null
        }
        sv::ThreadGroup group(ranks);
        const auto outcomes = c_on_ranks(rule, batches, r, c.shape.width(), group);
        for (std::int32_t k = 0; k < ranks; ++k) {
          expect_same(name + " f32 " + (reduced ? "reduced draft " : "") + "rank " + std::to_string(k) + " of " +
                          std::to_string(ranks) + " (" + sv::testing::sharded::name(layout) + ")",
                      outcomes[std::size_t(k)], whole);
        }
        EXPECT_GT(group.calls(), 0) << "the C API did not gather through the communicator";
      }
    });
  }
}

// docs/api.md "Sharded vocabulary": a rank holding an empty slice may pass null rows. A logits batch
// is one with target_params, so such a rank is not taken for a batch of probabilities and refused
// before the collective (its peers would wait in all_gather for ever). Here the rank runs alone
// with an all_gather that fails: a call that reached the collective, as the C++ verify does on
// these arguments, returns SV_COMMUNICATOR.
TEST(CApiSharded, EmptySliceOfLogitsWithNullRowsReachesTheCollective) {
  LogitFeatures f;
  const LogitChains c = sv::testing::sharded::make_logit_chains(2, 50, 3, f, 80, 81);
  sv::testing::sharded::RankRows rows;
  sv::testing::sharded::rank_batch(c, false, {0, 0, 50}, 0, sv::testing::sharded::Layout::copies, rows);
  ASSERT_EQ(rows.batch.target_logits, nullptr);
  CChains cb = to_c(rows.batch);
  static const sv_communicator failing{[](void*, const void*, std::size_t, void*) { return 1; }, nullptr};
  cb.b.communicator = &failing;
  std::mt19937_64 rng(1);
  const Streams streams(c.shape.B, c.shape.offsets.back(), rng);
  const sv_randomness cr = c_randomness(streams.make(0));
  const sv_rule rule{SV_STANDARD, SV_JS, 0, 0};
  const Outcome o = c_verify(&rule, &cb.b, &cr, c.shape.B, c.shape.width());
  EXPECT_EQ(o.code, SV_COMMUNICATOR) << describe(o);
  EXPECT_TRUE(o.untouched());
}

// bfloat16 rows held as views: each rank's pointers into the whole rows, stride V.
TEST(CApiSharded, BFloat16LogitChainsAsViewsMatchUnshardedCpp) {
  std::mt19937_64 rng(6);
  LogitFeatures f;
  f.penalties = f.mask = true;
  const LogitChains c = sv::testing::sharded::make_logit_chains(4, 300, 4, f, 60, 61);
  const TypedRows<sv::bfloat16> rows(c.target, c.draft, c.uncond);
  const sv::LogitsChainBatch<sv::bfloat16> whole_batch = rows.retype(c.whole(false), c.target, c.draft, c.uncond);
  const Streams streams(c.shape.B, c.shape.offsets.back(), rng);
  for_each_rule<false>([&](const std::string& name, const sv_rule& rule, const auto& cpp_rule) {
    const sv::Randomness r = streams.make(1);
    const Outcome whole = cpp_verify(cpp_rule, whole_batch, r, c.shape.width());
    const std::int32_t ranks = 3;
    const auto bounds = bounds_for(c.V(), ranks, rng);
    std::vector<CChains> batches;
    for (std::int32_t k = 0; k < ranks; ++k) {
      sv::LogitsChainBatch<sv::bfloat16> b = whole_batch;
      b.shard = {k, ranks, bounds[std::size_t(k)], bounds[std::size_t(k) + 1] - bounds[std::size_t(k)]};
      b.target_logits = rows.target.data() + bounds[std::size_t(k)];
      b.draft_logits = rows.draft.data() + bounds[std::size_t(k)];
      b.target_stride = b.draft_stride = c.V();
      batches.push_back(to_c(b));
    }
    sv::ThreadGroup group(ranks);
    const auto outcomes = c_on_ranks(rule, batches, r, c.shape.width(), group);
    for (std::int32_t k = 0; k < ranks; ++k) {
      expect_same(name + " bf16 rank " + std::to_string(k), outcomes[std::size_t(k)], whole);
    }
  });
}

/// Rank k's slice of a probability tree batch, as views into the whole rows.
sv::TreeBatch<float> tree_slice(const Trees& t, const std::vector<std::int32_t>& bounds, std::int32_t k) {
  sv::TreeBatch<float> b = t.batch();
  const std::int32_t start = bounds[std::size_t(k)], size = bounds[std::size_t(k) + 1] - start;
  b.shard = {k, std::int32_t(bounds.size()) - 1, start, size};
  b.target_probs = t.p.data() + start;
  b.draft_probs = t.with_q ? t.q.data() + start : nullptr;
  b.target_stride = b.draft_stride = t.V;
  return b;
}

TEST(CApiSharded, ProbabilityTreesOnEveryRankMatchUnshardedCpp) {
  std::mt19937_64 rng(7);
  for (const sv::Drafted how : {sv::Drafted::sampled, sv::Drafted::sampled_without_replacement, sv::Drafted::deterministic}) {
    const Trees t = sv::testing::random_trees(4, 300, 7, how, rng);
    const Streams streams(t.size(), std::int64_t(t.tokens.size()), rng);
    for_each_rule<true>([&](const std::string& name, const sv_rule& rule, const auto& cpp_rule) {
      const sv::Randomness r = streams.make(int(rng() % 3));
      const Outcome whole = cpp_verify(cpp_rule, t.batch(), r, t.width);
      const std::int32_t ranks = 1 + std::int32_t(rng() % 4);
      const auto bounds = bounds_for(t.V, ranks, rng);
      std::vector<CTrees> batches;
      for (std::int32_t k = 0; k < ranks; ++k) batches.push_back(to_c(tree_slice(t, bounds, k)));
      sv::ThreadGroup group(ranks);
      const auto outcomes = c_on_ranks(rule, batches, r, t.width, group);
      for (std::int32_t k = 0; k < ranks; ++k) {
        expect_same(std::string(drafted_name(how)) + " " + name + " rank " + std::to_string(k) + " of " +
                        std::to_string(ranks),
                    outcomes[std::size_t(k)], whole);
      }
    });
  }
}

// A NaN in one rank's slice: every rank returns 1 with the message the C++ sharded verify gives
// that rank, outputs untouched.
TEST(CApiSharded, BadValueInOneSliceIsReportedByEveryRank) {
  std::mt19937_64 rng(8);
  Trees t = sv::testing::random_trees(4, 300, 5, sv::Drafted::sampled, rng);
  // Token 250 (rank 2's slice below) NaN in every target row: the row of each extra token's draw
  // holds one.
  for (std::size_t row = 0; row * std::size_t(t.V) < t.p.size(); ++row) t.p[row * std::size_t(t.V) + 250] = kNaN;
  const std::vector<std::int32_t> bounds{0, 100, 200, 300};
  std::vector<sv::TreeBatch<float>> cpp_batches;
  std::vector<CTrees> batches;
  for (std::int32_t k = 0; k < 3; ++k) {
    cpp_batches.push_back(tree_slice(t, bounds, k));
    batches.push_back(to_c(cpp_batches.back()));
  }
  const Streams streams(t.size(), std::int64_t(t.tokens.size()), rng);
  const sv::Randomness r = streams.make(0);
  const auto cpp = cpp_on_ranks(sv::Standard{}, cpp_batches, r, t.width);
  sv::ThreadGroup group(3);
  const auto c = c_on_ranks(sv_rule{SV_STANDARD, SV_JS, 0, 0}, batches, r, t.width, group);
  for (std::size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(c[k].code, SV_INVALID_INPUT) << "rank " << k;
    EXPECT_TRUE(c[k].untouched()) << "rank " << k << ": " << describe(c[k]);
    expect_same("rank " + std::to_string(k), c[k], cpp[k]);
  }
  EXPECT_NE(c[0].message.find("nan"), std::string::npos) << c[0].message;
}

// An all_gather that returns non-zero: every rank returns SV_COMMUNICATOR, whichever call fails,
// with no output written. Every rank's callback fails at the same call, so none waits.
TEST(CApiSharded, FailingCommunicatorIsCode3AtEveryCall) {
  std::mt19937_64 rng(9);
  LogitFeatures f;
  f.penalties = true;
  const LogitChains c = sv::testing::sharded::make_logit_chains(4, 300, 4, f, 70, 71);
  const std::int32_t ranks = 3;
  const auto bounds = bounds_for(c.V(), ranks, rng);
  std::vector<sv::testing::sharded::RankRows> rows(static_cast<std::size_t>(ranks));
  const auto make_batches = [&] {
    std::vector<CChains> batches;
    for (std::int32_t k = 0; k < ranks; ++k) {
      sv::testing::sharded::rank_batch(c, false, bounds, k, sv::testing::sharded::Layout::views, rows[std::size_t(k)]);
      batches.push_back(to_c(rows[std::size_t(k)].batch));
    }
    return batches;
  };
  const Streams streams(c.shape.B, c.shape.offsets.back(), rng);
  const sv::Randomness r = streams.make(0);
  for (const sv_rule rule : {sv_rule{SV_STANDARD, SV_JS, 0, 0}, sv_rule{SV_BLOCK, SV_JS, 0, 0},
                             sv_rule{SV_FSD, SV_TV, 0, 0.3f}}) {
    std::int64_t calls = 0;
    {
      auto batches = make_batches();
      sv::ThreadGroup group(ranks);
      const auto ok = c_on_ranks(rule, batches, r, c.shape.width(), group);
      for (const auto& o : ok) ASSERT_EQ(o.code, SV_OK) << describe(o);
      calls = group.calls();
    }
    ASSERT_GT(calls, 1);
    for (std::int64_t fail_at = 0; fail_at < calls; ++fail_at) {
      auto batches = make_batches();
      sv::ThreadGroup group(ranks);
      const auto outcomes = c_on_ranks(rule, batches, r, c.shape.width(), group, fail_at);
      for (std::int32_t k = 0; k < ranks; ++k) {
        const Outcome& o = outcomes[std::size_t(k)];
        EXPECT_EQ(o.code, SV_COMMUNICATOR) << "rule " << rule.kind << " call " << fail_at << " of " << calls << " rank " << k;
        EXPECT_NE(o.message.find("all_gather"), std::string::npos) << o.message;
        EXPECT_TRUE(o.untouched()) << "rule " << rule.kind << " call " << fail_at << " of " << calls << " rank " << k
                                   << " wrote outputs: " << describe(o);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// sv_sample against specverify::sample.

struct SampleOutcome {
  int code = SV_OK;
  std::string message;
  std::int32_t token = kSentinel;
  bool operator==(const SampleOutcome& o) const { return code == o.code && message == o.message && token == o.token; }
};

struct SampleCall {
  const float* logits;
  std::int32_t V;
  sv::SamplingParams params;
  std::uint64_t seed;
  std::int64_t position;
  const std::int32_t* ht = nullptr;
  const std::int32_t* hc = nullptr;
  std::int32_t hn = 0;
  const std::int32_t* bt = nullptr;
  const float* bv = nullptr;
  std::int32_t bn = 0;
};

SampleOutcome c_sample(const SampleCall& s, bool pass_err = true) {
  SampleOutcome o;
  const sv_sampling_params params = c_params(s.params);
  sv_error err = garbage_error();
  o.code = sv_sample(s.logits, s.V, &params, s.seed, s.position, s.ht, s.hc, s.hn, s.bt, s.bv, s.bn, &o.token,
                     pass_err ? &err : nullptr);
  if (pass_err) {
    EXPECT_EQ(err.code, o.code);
    if (o.code != SV_OK) o.message = err.message;
    else EXPECT_STREQ(err.message, "");
  }
  return o;
}

SampleOutcome cpp_sample(const SampleCall& s) {
  SampleOutcome o;
  try {
    o.token = sv::sample(s.logits, s.V, s.params, s.seed, s.position, s.ht, s.hc, s.hn, s.bt, s.bv, s.bn);
  } catch (const sv::invalid_input& e) {
    o.code = SV_INVALID_INPUT;
    o.message = e.what();
  }
  return o;
}

TEST(CApiSample, MatchesCppSample) {
  std::mt19937_64 rng(10);
  constexpr std::int32_t V = 300;
  const std::int32_t ht[] = {3, 17, 120, 299}, hc[] = {0, 2, 1, 5}, bt[] = {5, 17, 200};
  const float bv[] = {2.5f, -1.0f, 0.75f};
  auto pool = sv::testing::sharded::params_pool(LogitFeatures{});
  const auto more = sv::testing::sharded::params_pool([] { LogitFeatures f; f.top_p_alone = true; return f; }());
  pool.insert(pool.end(), more.begin(), more.end());
  std::int64_t checked = 0;
  std::vector<std::int32_t> tokens_seen;
  for (std::size_t i = 0; i < pool.size(); ++i) {
    std::vector<float> row(V);
    for (auto& x : row) x = float(sv::testing::random_logits(1, rng)[0]);
    row[std::size_t(i) % V] = -kInf;
    for (const bool lists : {false, true}) {
      SampleCall s{row.data(), V, pool[i], 1 + rng() % 5, std::int64_t(rng() % 1000)};
      if (lists) {
        s.params.repetition_penalty = 1.2f, s.params.presence_penalty = 0.4f, s.params.frequency_penalty = 0.1f;
        s.ht = ht, s.hc = hc, s.hn = 4, s.bt = bt, s.bv = bv, s.bn = 3;
      }
      const SampleOutcome c = c_sample(s), cpp = cpp_sample(s);
      EXPECT_TRUE(c == cpp) << "params " << i << (lists ? " with lists" : "") << ": C " << c.code << " " << c.token
                            << " " << c.message << ", C++ " << cpp.code << " " << cpp.token << " " << cpp.message;
      EXPECT_EQ(c.code, SV_OK) << c.message;
      checked += c.code == SV_OK;
      tokens_seen.push_back(c.token);
    }
  }
  EXPECT_EQ(checked, std::int64_t(2 * pool.size()));
  std::sort(tokens_seen.begin(), tokens_seen.end());
  EXPECT_GT(std::unique(tokens_seen.begin(), tokens_seen.end()) - tokens_seen.begin(), 3) << "the draws are not varied";
}

TEST(CApiSample, BadInputGivesCppMessageAndLeavesTokenUntouched) {
  std::vector<float> row(20, 0.5f);
  std::vector<float> nan_row = row;
  nan_row[7] = kNaN;
  const std::int32_t unsorted[] = {5, 3}, counts[] = {1, 1}, negative[] = {1, -1}, out_of_range[] = {2, 20};
  sv::SamplingParams bad_top_p;
  bad_top_p.top_p = 0.0f;
  sv::SamplingParams bad_temperature;
  bad_temperature.temperature = -1.0f;
  const std::vector<std::pair<std::string, SampleCall>> cases = {
      {"NaN logit", SampleCall{nan_row.data(), 20, {}, 1, 0}},
      {"top_p 0", SampleCall{row.data(), 20, bad_top_p, 1, 0}},
      {"temperature -1", SampleCall{row.data(), 20, bad_temperature, 1, 0}},
      {"null logits", SampleCall{nullptr, 20, {}, 1, 0}},
      {"vocab_size 0", SampleCall{row.data(), 0, {}, 1, 0}},
      {"history not ascending", SampleCall{row.data(), 20, {}, 1, 0, unsorted, counts, 2}},
      {"negative count", SampleCall{row.data(), 20, {}, 1, 0, counts, negative, 2}},
      {"bias token = V", SampleCall{row.data(), 20, {}, 1, 0, nullptr, nullptr, 0, out_of_range, row.data(), 2}},
      {"negative history size", SampleCall{row.data(), 20, {}, 1, 0, counts, counts, -1}},
  };
  for (const auto& [name, s] : cases) {
    const SampleOutcome c = c_sample(s), cpp = cpp_sample(s);
    EXPECT_EQ(cpp.code, SV_INVALID_INPUT) << name;
    EXPECT_TRUE(c == cpp) << name << ": C " << c.code << " " << c.token << " \"" << c.message << "\", C++ " << cpp.code
                          << " \"" << cpp.message << "\"";
    EXPECT_EQ(c.token, kSentinel) << name;
    const SampleOutcome quiet = c_sample(s, false);
    EXPECT_EQ(quiet.code, SV_INVALID_INPUT) << name << " with err null";
    EXPECT_EQ(quiet.token, kSentinel) << name << " with err null";
  }
  // The C API's own checks name the argument.
  const sv_sampling_params params = sv_sampling_params_default();
  std::int32_t token = kSentinel;
  sv_error err;
  EXPECT_EQ(sv_sample(row.data(), 20, nullptr, 1, 0, nullptr, nullptr, 0, nullptr, nullptr, 0, &token, &err), SV_INVALID_INPUT);
  EXPECT_NE(std::string(err.message).find("params"), std::string::npos) << err.message;
  EXPECT_EQ(token, kSentinel);
  EXPECT_EQ(sv_sample(row.data(), 20, &params, 1, 0, nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr, &err), SV_INVALID_INPUT);
  EXPECT_NE(std::string(err.message).find("token"), std::string::npos) << err.message;
  EXPECT_EQ(sv_sample(row.data(), 20, &params, 1, 0, nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr, nullptr), SV_INVALID_INPUT);
}

// ---------------------------------------------------------------------------------------------
// Bad input: code 1, the C++ message where the C++ API throws (else the C API's own, naming the
// field), every output untouched, the same with err null.

/// A case: the C call (err passed or null), and the C++ outcome to equal, or fragments the C API's
/// own message must hold.
struct BadCase {
  std::string name;
  std::function<Outcome(bool pass_err)> c;
  std::function<Outcome()> cpp;  // empty: a check of the C API's own
  std::vector<std::string> fragments;
  std::shared_ptr<const void> hold;  // what the case's rows live in
};

BadCase held(BadCase bad, std::shared_ptr<const void> hold) {
  bad.hold = std::move(hold);
  return bad;
}

void check_bad_case(const BadCase& bad) {
  SCOPED_TRACE(bad.name);
  const Outcome c = bad.c(true);
  EXPECT_EQ(c.code, SV_INVALID_INPUT) << describe(c);
  EXPECT_TRUE(c.untouched()) << "outputs written: " << describe(c);
  EXPECT_FALSE(c.message.empty());
  if (bad.cpp) {
    const Outcome cpp = bad.cpp();
    EXPECT_EQ(cpp.code, SV_INVALID_INPUT) << "the C++ API accepts this: " << describe(cpp);
    EXPECT_EQ(c.message, cpp.message);
    expect_same("against C++", c, cpp);
  }
  for (const auto& fragment : bad.fragments) {
    EXPECT_NE(c.message.find(fragment), std::string::npos) << "\"" << c.message << "\" does not name " << fragment;
  }
  const Outcome quiet = bad.c(false);
  EXPECT_EQ(quiet.code, SV_INVALID_INPUT) << "err null";
  EXPECT_TRUE(quiet.untouched()) << "err null: outputs written: " << describe(quiet);
}

/// Two valid chain sequences (drafts {1, 2} and {3}, V = 8): probability rows, logits rows and a
/// float16 copy of the logits, each case breaking one thing.
struct ChainFixture {
  sv::testing::Chains probs = sv::testing::two_sequences(8);
  std::vector<float> logits;
  std::vector<sv::float16> logits16;
  std::vector<sv::SamplingParams> params{sv::SamplingParams{}, sv::SamplingParams{}};
  std::vector<std::int64_t> positions{5, 9};
  std::int32_t width = 3;

  ChainFixture() {
    for (std::size_t i = 0; i < probs.p.size(); ++i) logits.push_back(float(i % 5) * 0.25f);
    logits16 = rows_as<sv::float16>(logits);
  }
  sv::ChainBatch<float> prob_batch() const { return probs.batch(); }
  sv::LogitsChainBatch<float> logit_batch() const {
    sv::LogitsChainBatch<float> b;
    b.batch_size = 2;
    b.vocab_size = 8;
    b.draft_offsets = probs.offsets.data();
    b.draft_tokens = probs.tokens.data();
    b.target_logits = logits.data();
    b.draft_logits = logits.data();  // any rows of the right length
    b.target_params = params.data();
    return b;
  }
  sv::Randomness randomness() const {
    sv::Randomness r{3, 1};
    r.positions = positions.data();
    return r;
  }
};

/// A case that breaks a C++ batch (prob or logits) and compares with the C++ API.
template <class Batch, class Rule>
BadCase against_cpp(std::string name, const Batch& batch, const sv_rule& rule, const Rule& cpp_rule,
                    const sv::Randomness& r, std::int32_t width, int max_threads = 1) {
  auto cb = std::make_shared<decltype(to_c(batch))>(to_c(batch));
  BadCase bad;
  bad.name = std::move(name);
  bad.c = [=](bool pass_err) {
    const sv_randomness cr = c_randomness(r);
    return c_verify(&rule, &cb->b, &cr, batch.batch_size, width, max_threads, pass_err);
  };
  bad.cpp = [=] { return cpp_verify(cpp_rule, batch, r, width, max_threads); };
  return bad;
}

/// A case of the C API's own: the C batch edited after conversion.
template <class Batch, class Edit>
BadCase c_only(std::string name, const Batch& batch, const sv_rule& rule, const sv::Randomness& r, std::int32_t width,
               std::vector<std::string> fragments, Edit edit) {
  auto cb = std::make_shared<decltype(to_c(batch))>(to_c(batch));
  edit(cb->b);
  BadCase bad;
  bad.name = std::move(name);
  bad.fragments = std::move(fragments);
  bad.c = [=](bool pass_err) {
    const sv_randomness cr = c_randomness(r);
    return c_verify(&rule, &cb->b, &cr, batch.batch_size, width, 1, pass_err);
  };
  return bad;
}

TEST(CApiErrors, ChainBatchesGiveCppMessagesOrNameTheField) {
  const ChainFixture fx;
  const sv::Randomness r = fx.randomness();
  const sv_rule standard{SV_STANDARD, SV_JS, 0, 0};
  const auto edited = [&](auto edit) {
    auto b = fx.prob_batch();
    edit(b);
    return b;
  };
  const auto edited_logits = [&](auto edit) {
    auto b = fx.logit_batch();
    edit(b);
    return b;
  };
  std::vector<BadCase> cases;
  // Where the C++ API throws: its message.
  cases.push_back(against_cpp("null draft_tokens", edited([](auto& b) { b.draft_tokens = nullptr; }), standard,
                              sv::Standard{}, r, fx.width));
  cases.push_back(against_cpp("null target_probs", edited([](auto& b) { b.target_probs = nullptr; }), standard,
                              sv::Standard{}, r, fx.width));
  cases.push_back(against_cpp("null target_params", edited_logits([](auto& b) { b.target_params = nullptr; }),
                              standard, sv::Standard{}, r, fx.width));
  {
    auto keep = std::make_shared<sv::testing::Chains>(fx.probs);
    keep->tokens[2] = 8;
    cases.push_back(held(against_cpp("token = V", keep->batch(), standard, sv::Standard{}, r, fx.width), keep));
    auto keep_negative = std::make_shared<sv::testing::Chains>(fx.probs);
    keep_negative->tokens[0] = -1;
    cases.push_back(held(against_cpp("token -1", keep_negative->batch(), standard, sv::Standard{}, r, fx.width),
                         keep_negative));
    auto keep_p = std::make_shared<sv::testing::Chains>(fx.probs);
    keep_p->p[1] = kNaN;  // sequence 0's first target row at its draft, token 1
    cases.push_back(held(against_cpp("NaN in a target row", keep_p->batch(), standard, sv::Standard{}, r, fx.width),
                         keep_p));
    auto keep_q = std::make_shared<sv::testing::Chains>(fx.probs);
    keep_q->q[8 + 2] = -kInf;  // sequence 0's second draft row at its draft, token 2
    cases.push_back(held(against_cpp("-inf in a draft row", keep_q->batch(), standard, sv::Standard{}, r, fx.width),
                         keep_q));
    auto keep_offsets = std::make_shared<sv::testing::Chains>(fx.probs);
    keep_offsets->offsets = {0, 2, 1};
    cases.push_back(held(against_cpp("decreasing offsets", keep_offsets->batch(), standard, sv::Standard{}, r, fx.width),
                         keep_offsets));
  }
  {
    auto keep = std::make_shared<std::vector<sv::float16>>(fx.logits16);
    (*keep)[1] = sv::float16{0x7e00};  // NaN
    sv::LogitsChainBatch<sv::float16> b;
    b.batch_size = 2, b.vocab_size = 8, b.draft_offsets = fx.probs.offsets.data(),
    b.draft_tokens = fx.probs.tokens.data(), b.target_logits = keep->data(), b.target_params = fx.params.data();
    cases.push_back(held(against_cpp("NaN in a float16 logits row", b, standard, sv::Standard{}, r, fx.width), keep));
  }
  cases.push_back(against_cpp("row_width too small", fx.prob_batch(), standard, sv::Standard{}, r, 2));
  cases.push_back(against_cpp("negative beta", fx.prob_batch(), sv_rule{SV_EARS, SV_JS, -0.5f, 0}, sv::Ears{-0.5f}, r,
                              fx.width));
  cases.push_back(against_cpp("negative threshold", fx.prob_batch(), sv_rule{SV_FSD, SV_TV, 0, -0.5f},
                              sv::Fsd{sv::Divergence::tv, -0.5f}, r, fx.width));
  cases.push_back(against_cpp("divergence outside the enum", fx.prob_batch(),
                              sv_rule{SV_RFSD, static_cast<sv_divergence>(7), 0, 0.3f},
                              sv::ReducibleFsd{static_cast<sv::Divergence>(7), 0.3f}, r, fx.width));
  {
    auto keep = std::make_shared<std::vector<sv::SamplingParams>>(fx.params);
    (*keep)[1].top_p = 1.5f;
    auto b = fx.logit_batch();
    b.target_params = keep->data();
    cases.push_back(held(against_cpp("top_p 1.5", b, standard, sv::Standard{}, r, fx.width), keep));
    auto keep_k = std::make_shared<std::vector<sv::SamplingParams>>(fx.params);
    (*keep_k)[0].top_k = -2;
    auto bk = fx.logit_batch();
    bk.target_params = keep_k->data();
    cases.push_back(held(against_cpp("top_k -2", bk, standard, sv::Standard{}, r, fx.width), keep_k));
  }
  cases.push_back(against_cpp("shard.ranks 2 without a communicator",
                              edited([](auto& b) { b.shard = sv::VocabShard{0, 2, 0, 4}; }), standard, sv::Standard{},
                              r, fx.width));
  cases.push_back(against_cpp("coupled without positions", fx.prob_batch(), sv_rule{SV_COUPLED, SV_JS, 0, 0},
                              sv::Coupled{}, sv::Randomness{3, 1}, fx.width));
  cases.push_back(against_cpp("traversal on one-hot drafts", edited([](auto& b) { b.draft_probs = nullptr; }),
                              sv_rule{SV_TRAVERSAL, SV_JS, 0, 0}, sv::Traversal{}, r, fx.width));
  cases.push_back(against_cpp("max_threads -1", fx.prob_batch(), standard, sv::Standard{}, r, fx.width, -1));
  {
    auto u = std::make_shared<std::vector<float>>(std::vector<float>{0.5f, 1.0f, 0.5f});
    sv::Randomness bad_u = r;
    bad_u.accept_uniforms = u->data();
    cases.push_back(held(against_cpp("accept uniform 1", fx.prob_batch(), standard, sv::Standard{}, bad_u, fx.width), u));
  }

  // The C API's own checks: the message names the field.
  const auto prob = fx.prob_batch();
  const auto logit = fx.logit_batch();
  cases.push_back(c_only("rule kind outside the enum", prob, sv_rule{static_cast<sv_rule_kind>(15), SV_JS, 0, 0}, r,
                         fx.width, {"kind", "15"}, [](sv_chain_batch&) {}));
  cases.push_back(c_only("SV_TYPICAL", prob, sv_rule{SV_TYPICAL, SV_JS, 0.1f, 0.1f}, r, fx.width, {"SV_TYPICAL"},
                         [](sv_chain_batch&) {}));
  cases.push_back(c_only("row_type outside the enum on logits", logit, standard, r, fx.width, {"row_type", "3"},
                         [](sv_chain_batch& b) { b.row_type = static_cast<sv_row_type>(3); }));
  cases.push_back(c_only("row_type outside the enum on probabilities", prob, standard, r, fx.width, {"row_type", "3"},
                         [](sv_chain_batch& b) { b.row_type = static_cast<sv_row_type>(3); }));
  // Values C lets a caller store but C++ may not load as the enum (found by fuzz_c_api).
  cases.push_back(c_only("row_type far outside the enum", logit, standard, r, fx.width, {"row_type", "248"},
                         [](sv_chain_batch& b) { store_c_enum(b.row_type, 248); }));
  cases.push_back(c_only("rule kind far outside the enum", prob, far_rule(-5, SV_JS), r, fx.width, {"kind", "-5"},
                         [](sv_chain_batch&) {}));
  cases.push_back(c_only("probability rows as SV_F16", prob, standard, r, fx.width, {"row_type", "SV_F32"},
                         [](sv_chain_batch& b) { b.row_type = SV_F16; }));
  cases.push_back(c_only("probability rows as SV_BF16", prob, standard, r, fx.width, {"row_type"},
                         [](sv_chain_batch& b) { b.row_type = SV_BF16; }));
  cases.push_back(c_only("target_probs and target_logits", prob, standard, r, fx.width,
                         {"target_probs", "target_logits"},
                         [&](sv_chain_batch& b) { b.target_logits = fx.logits.data(); }));
  cases.push_back(c_only("draft_probs on logits", logit, standard, r, fx.width, {"draft_probs"},
                         [&](sv_chain_batch& b) { b.draft_probs = fx.probs.q.data(); }));
  cases.push_back(c_only("target_row_max on logits", logit, standard, r, fx.width, {"target_row_max"},
                         [&](sv_chain_batch& b) { b.target_row_max = fx.probs.p.data(); }));
  // Every logits-only field on a probability batch, by name.
  static const sv_sampling_params some_params[2] = {sv_sampling_params_default(), sv_sampling_params_default()};
  static const std::int32_t some_ints[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  static const std::int64_t some_rows[2] = {0, 3};
  static const float some_floats[2] = {1.0f, 1.0f};
  static const std::uint32_t some_words[8] = {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u};
  const std::vector<std::pair<const char*, std::function<void(sv_chain_batch&)>>> logits_only = {
      {"target_params", [](sv_chain_batch& b) { b.target_params = some_params; }},
      {"draft_params", [](sv_chain_batch& b) { b.draft_params = some_params; }},
      {"draft_logits", [&](sv_chain_batch& b) { b.draft_logits = fx.logits.data(); }},
      {"draft_vocab_size", [](sv_chain_batch& b) { b.draft_vocab_size = 4; }},
      {"draft_to_target", [](sv_chain_batch& b) { b.draft_to_target = some_ints; }},
      {"unconditional_logits", [&](sv_chain_batch& b) { b.unconditional_logits = fx.logits.data(); }},
      {"unconditional_first_row", [](sv_chain_batch& b) { b.unconditional_first_row = some_rows; }},
      {"guidance_scale", [](sv_chain_batch& b) { b.guidance_scale = some_floats; }},
      {"allowed_tokens", [](sv_chain_batch& b) { b.allowed_tokens = some_words; }},
      {"unconditional_stride", [](sv_chain_batch& b) { b.unconditional_stride = 8; }},
      {"history_offsets", [](sv_chain_batch& b) { b.history_offsets = some_ints; }},
      {"history_tokens", [](sv_chain_batch& b) { b.history_tokens = some_ints; }},
      {"history_counts", [](sv_chain_batch& b) { b.history_counts = some_ints; }},
      {"bias_offsets", [](sv_chain_batch& b) { b.bias_offsets = some_ints; }},
      {"bias_tokens", [](sv_chain_batch& b) { b.bias_tokens = some_ints; }},
      {"bias_values", [](sv_chain_batch& b) { b.bias_values = some_floats; }},
  };
  for (const auto& [field, edit] : logits_only) {
    cases.push_back(c_only(std::string(field) + " on probabilities", prob, standard, r, fx.width, {field}, edit));
  }
  // The communicator given without its function.
  static const sv_communicator no_function{nullptr, nullptr};
  cases.push_back(c_only("communicator without all_gather", prob, standard, r, fx.width, {"all_gather"},
                         [](sv_chain_batch& b) { b.communicator = &no_function; }));
  cases.push_back(c_only("struct_size 0", prob, standard, r, fx.width, {"sv_chain_batch", "struct_size"},
                         [](sv_chain_batch& b) { b.struct_size = 0; }));
  for (const auto& bad : cases) check_bad_case(bad);

  // Null rule, batch and output.
  const CChains cb = to_c(prob);
  const sv_randomness cr = c_randomness(r);
  const std::vector<std::pair<std::string, std::function<Outcome(bool)>>> nulls = {
      {"rule", [&](bool e) { return c_verify(nullptr, &cb.b, &cr, 2, fx.width, 1, e); }},
      {"batch", [&](bool e) { return c_verify(&standard, static_cast<const sv_chain_batch*>(nullptr), &cr, 2, fx.width, 1, e); }},
  };
  for (const auto& [field, call] : nulls) check_bad_case(BadCase{"null " + field, call, {}, {field}, {}});
  sv_error err;
  EXPECT_EQ(sv_verify_chains(&standard, &cb.b, &cr, nullptr, 1, &err), SV_INVALID_INPUT);
  EXPECT_NE(std::string(err.message).find("out"), std::string::npos) << err.message;
  EXPECT_EQ(sv_verify_chains(&standard, &cb.b, &cr, nullptr, 1, nullptr), SV_INVALID_INPUT);
}

// sv_error.message must be copied while the exception holding it is alive: a guarded() that kept
// `e.what()` past its catch handler and copied it after the exception was destroyed read freed
// memory (AddressSanitizer and valgrind report it; a release build usually still finds the text
// there). With freed blocks scribbled over, such a message comes out as garbage.
TEST(CApiErrors, MessageIsCopiedBeforeItsExceptionIsFreed) {
  const ChainFixture fx;
  auto keep = fx.probs;
  keep.tokens[2] = 8;
  const auto batch = keep.batch();
  const CChains cb = to_c(batch);
  const sv::Randomness r = fx.randomness();
  const sv_randomness cr = c_randomness(r);
  const sv_rule rule{SV_STANDARD, SV_JS, 0, 0};
  const Outcome cpp = cpp_verify(sv::Standard{}, batch, r, fx.width);
  ASSERT_EQ(cpp.code, SV_INVALID_INPUT);
  poison_freed = true;
  const Outcome c = c_verify(&rule, &cb.b, &cr, 2, fx.width);
  sv_error err;
  std::int32_t token = kSentinel;
  const float nan_row[4] = {0.0f, kNaN, 0.0f, 0.0f};
  const sv_sampling_params params = sv_sampling_params_default();
  const int sample_code = sv_sample(nan_row, 4, &params, 1, 0, nullptr, nullptr, 0, nullptr, nullptr, 0, &token, &err);
  poison_freed = false;
  EXPECT_EQ(c.message, cpp.message);
  EXPECT_EQ(sample_code, SV_INVALID_INPUT);
  EXPECT_EQ(std::string(err.message), cpp_sample(SampleCall{nan_row, 4, {}, 1, 0}).message);
}

TEST(CApiErrors, TreeBatchesGiveCppMessagesOrNameTheField) {
  std::vector<BadCase> cases;
  // Every malformed tree the C++ suites name (trees.hpp), but "drafted outside the enum", which
  // the C API checks itself (below).
  for (const auto& bad : sv::testing::bad_trees()) {
    if (bad.name == "drafted outside the enum") continue;
    auto keep = std::make_shared<Trees>(bad.trees);
    sv::TreeBatch<float> batch = keep->batch();
    bad.edit(batch);
    cases.push_back(held(against_cpp(bad.name, batch, sv_rule{SV_STANDARD, SV_JS, 0, 0}, sv::Standard{},
                                     keep->randomness(), keep->width),
                         keep));
  }
  auto keep = std::make_shared<Trees>(sv::testing::two_trees());
  const sv::TreeBatch<float> prob = keep->batch();
  const sv::Randomness r = keep->randomness();
  const sv_rule standard{SV_STANDARD, SV_JS, 0, 0};
  cases.push_back(against_cpp("traversal on deterministic children",
                              [&] { auto b = prob; b.drafted = sv::Drafted::deterministic; return b; }(),
                              sv_rule{SV_TRAVERSAL, SV_JS, 0, 0}, sv::Traversal{}, r, keep->width));
  cases.push_back(against_cpp("shard.ranks 2 without a communicator",
                              [&] { auto b = prob; b.shard = sv::VocabShard{1, 2, 4, 4}; return b; }(), standard,
                              sv::Standard{}, r, keep->width));
  cases.push_back(c_only("SV_BLOCK on a tree", prob, sv_rule{SV_BLOCK, SV_JS, 0, 0}, r, keep->width, {"SV_BLOCK"},
                         [](sv_tree_batch&) {}));
  cases.push_back(c_only("drafted outside the enum", prob, standard, r, keep->width, {"drafted", "3"},
                         [](sv_tree_batch& b) { b.drafted = static_cast<sv_drafted>(3); }));
  cases.push_back(c_only("drafted far outside the enum", prob, standard, r, keep->width, {"drafted", "248"},
                         [](sv_tree_batch& b) { store_c_enum(b.drafted, 248); }));
  cases.push_back(c_only("rule kind outside the enum", prob, sv_rule{static_cast<sv_rule_kind>(12), SV_JS, 0, 0}, r,
                         keep->width, {"kind", "12"}, [](sv_tree_batch&) {}));
  cases.push_back(c_only("probability rows as SV_F16", prob, standard, r, keep->width, {"row_type"},
                         [](sv_tree_batch& b) { b.row_type = SV_F16; }));
  static const sv_sampling_params some_params[2] = {sv_sampling_params_default(), sv_sampling_params_default()};
  cases.push_back(c_only("target_params on probabilities", prob, standard, r, keep->width, {"target_params"},
                         [](sv_tree_batch& b) { b.target_params = some_params; }));
  cases.push_back(c_only("target_probs and target_logits", prob, standard, r, keep->width,
                         {"target_probs", "target_logits"}, [&](sv_tree_batch& b) { b.target_logits = keep->p.data(); }));
  cases.push_back(c_only("draft_probs on logits", prob, standard, r, keep->width, {"draft_probs"}, [&](sv_tree_batch& b) {
    b.target_logits = keep->p.data(), b.target_probs = nullptr, b.target_params = some_params;
  }));
  cases.push_back(c_only("struct_size 4", prob, standard, r, keep->width, {"sv_tree_batch", "struct_size"},
                         [](sv_tree_batch& b) { b.struct_size = 4; }));
  for (const auto& bad : cases) check_bad_case(bad);
}

// ---------------------------------------------------------------------------------------------
// Versioned structs.

/// A struct as a newer caller compiled it: the fields this library knows, then more.
template <class T>
struct Grown {
  T s;
  unsigned char later[24];
};

struct VersionFixture {
  sv::testing::sharded::Chains c = sv::testing::sharded::make_chains(3, 40, 3, sv::testing::sharded::Rows::normalised, 77);
  std::mt19937_64 rng{11};
  Streams streams{c.B, c.offsets.back(), rng};
  sv::ChainBatch<float> batch{c.B, c.V, c.offsets.data(), c.tokens.data(), c.p.data(), c.q.data()};
  sv::Randomness r = streams.make(1);
  sv_rule rule{SV_STANDARD, SV_JS, 0, 0};
  Outcome expected = cpp_verify(sv::Standard{}, batch, r, c.width());
};

TEST(CApiVersioned, OlderChainOutputWithoutStatsOrLogprobs) {
  const VersionFixture fx;
  ASSERT_EQ(fx.expected.code, SV_OK);
  const CChains cb = to_c(fx.batch);
  const sv_randomness cr = c_randomness(fx.r);
  for (const std::size_t size : {offsetof(sv_chain_output, stats), offsetof(sv_chain_output, logprobs)}) {
    Outcome o(fx.c.B, fx.c.width());
    sv_stats stats = sentinel_stats();
    sv_chain_output out = c_output(o, stats);
    out.struct_size = size;  // the fields past it are set, but an older caller has none: unread
    sv_error err;
    o.code = sv_verify_chains(&fx.rule, &cb.b, &cr, &out, 1, &err);
    ASSERT_EQ(o.code, SV_OK) << err.message;
    o.set(stats);
    Outcome want = fx.expected;
    want.stats = Outcome(0, 0).stats;  // the statistics were not asked for
    if (size == offsetof(sv_chain_output, logprobs)) want.logprobs = Outcome(fx.c.B, fx.c.width()).logprobs;
    expect_same("sv_chain_output.struct_size = " + std::to_string(size), o, want);
  }
}

TEST(CApiVersioned, OlderChainBatchBeforeShardReadsShardAsZero) {
  const VersionFixture fx;
  CChains cb = to_c(fx.batch);
  // Past the cut: a shard and a communicator (one that fails) that must not be read.
  static const sv_communicator failing{[](void*, const void*, std::size_t, void*) { return 1; }, nullptr};
  cb.b.shard = sv_vocab_shard{1, 3, 10, 10};
  cb.b.communicator = &failing;
  cb.b.struct_size = offsetof(sv_chain_batch, shard);
  const sv_randomness cr = c_randomness(fx.r);
  expect_same("sv_chain_batch cut before shard", c_verify(&fx.rule, &cb.b, &cr, fx.c.B, fx.c.width()), fx.expected);
  // Cut before target_row_max: a wrong row maximum there is unread too (EARS would read it).
  const std::vector<float> wrong(std::size_t(fx.c.target_rows()), 5.0f);
  CChains cm = to_c(fx.batch);
  cm.b.target_row_max = wrong.data();
  cm.b.struct_size = offsetof(sv_chain_batch, target_row_max);
  const sv_rule ears{SV_EARS, SV_JS, 0.2f, 0};
  expect_same("sv_chain_batch cut before target_row_max", c_verify(&ears, &cm.b, &cr, fx.c.B, fx.c.width()),
              cpp_verify(sv::Ears{0.2f}, fx.batch, fx.r, fx.c.width()));
}

TEST(CApiVersioned, OlderRandomnessBeforePositions) {
  const VersionFixture fx;
  const CChains cb = to_c(fx.batch);
  sv_randomness cr = c_randomness(fx.r);
  cr.struct_size = offsetof(sv_randomness, positions);
  sv::Randomness without = fx.r;
  without.positions = nullptr;
  expect_same("standard", c_verify(&fx.rule, &cb.b, &cr, fx.c.B, fx.c.width()), fx.expected);
  // Coupled now has no positions: the C++ message for that.
  const sv_rule coupled{SV_COUPLED, SV_JS, 0, 0};
  const Outcome c = c_verify(&coupled, &cb.b, &cr, fx.c.B, fx.c.width());
  EXPECT_EQ(c.code, SV_INVALID_INPUT);
  expect_same("coupled", c, cpp_verify(sv::Coupled{}, fx.batch, without, fx.c.width()));
  // Cut before sequence_seeds: the batch's seed.
  cr.struct_size = offsetof(sv_randomness, sequence_seeds);
  without.sequence_seeds = nullptr;
  without.accept_uniforms = without.sample_uniforms = nullptr;
  expect_same("cut before sequence_seeds", c_verify(&fx.rule, &cb.b, &cr, fx.c.B, fx.c.width()),
              cpp_verify(sv::Standard{}, fx.batch, without, fx.c.width()));
}

TEST(CApiVersioned, OlderTreeBatchAndOutput) {
  std::mt19937_64 rng(12);
  const Trees t = sv::testing::random_trees(3, 30, 6, sv::Drafted::sampled, rng);
  const sv::Randomness r = t.randomness(5);
  const Outcome expected = cpp_verify(sv::Standard{}, t.batch(), r, t.width);
  ASSERT_EQ(expected.code, SV_OK);
  const sv_randomness cr = c_randomness(r);
  const sv_rule rule{SV_STANDARD, SV_JS, 0, 0};
  // A probability tree batch cut before target_params: a set target_params past the cut is unread.
  static const sv_sampling_params some_params[3] = {};
  CTrees cb = to_c(t.batch());
  cb.b.target_params = some_params;
  cb.b.struct_size = offsetof(sv_tree_batch, target_params);
  expect_same("sv_tree_batch cut before target_params", c_verify(&rule, &cb.b, &cr, t.size(), t.width), expected);
  // A tree output cut before accepted_nodes: neither nodes nor logprobs written.
  const CTrees full = to_c(t.batch());
  Outcome o(t.size(), t.width);
  sv_stats stats = sentinel_stats();
  sv_tree_output out = c_tree_output(o, stats);
  out.struct_size = offsetof(sv_tree_output, accepted_nodes);
  o.code = sv_verify_trees(&rule, &full.b, &cr, &out, 1, nullptr);
  o.set(stats);
  Outcome want = expected;
  const Outcome blank(t.size(), t.width);
  want.nodes = blank.nodes, want.logprobs = blank.logprobs, want.stats = blank.stats;
  expect_same("sv_tree_output cut before accepted_nodes", o, want);
}

// A newer caller's struct, larger than this library's: read when its later bytes are zero,
// refused naming the struct when one is set; struct_size 0 refused.
TEST(CApiVersioned, NewerStructsWithZeroTailWorkAndWithSetTailFail) {
  const VersionFixture fx;
  const CChains cb = to_c(fx.batch);
  const sv_randomness cr = c_randomness(fx.r);
  std::mt19937_64 rng(13);
  const Trees t = sv::testing::random_trees(3, 30, 6, sv::Drafted::sampled, rng);
  const sv::Randomness tr = t.randomness(5);
  const Outcome tree_expected = cpp_verify(sv::Standard{}, t.batch(), tr, t.width);
  const CTrees tb = to_c(t.batch());
  const sv_randomness tcr = c_randomness(tr);

  // tail: 0 = zero tail, 1 = one later byte set, 2 = struct_size 0. Returns the call's outcome.
  const auto chain_call = [&](int which, int tail) {
    Outcome o(fx.c.B, fx.c.width());
    sv_stats stats = sentinel_stats();
    Grown<sv_chain_batch> gb{};
    Grown<sv_chain_output> go{};
    Grown<sv_randomness> gr{};
    gb.s = cb.b, go.s = c_output(o, stats), gr.s = cr;
    const auto grow = [&](auto& g) {
      g.s.struct_size = tail == 2 ? 0 : sizeof g;
      if (tail == 1) g.later[13] = 1;
    };
    if (which == 0) grow(gb);
    if (which == 1) grow(go);
    if (which == 2) grow(gr);
    sv_error err = garbage_error();
    record(o, sv_verify_chains(&fx.rule, &gb.s, &gr.s, &go.s, 1, &err), &err, stats);
    return o;
  };
  const auto tree_call = [&](int which, int tail) {
    Outcome o(t.size(), t.width);
    sv_stats stats = sentinel_stats();
    Grown<sv_tree_batch> gb{};
    Grown<sv_tree_output> go{};
    gb.s = tb.b, go.s = c_tree_output(o, stats);
    const auto grow = [&](auto& g) {
      g.s.struct_size = tail == 2 ? 0 : sizeof g;
      if (tail == 1) g.later[0] = 0x80;
    };
    if (which == 0) grow(gb);
    if (which == 1) grow(go);
    sv_error err = garbage_error();
    record(o, sv_verify_trees(&fx.rule, &gb.s, &tcr, &go.s, 1, &err), &err, stats);
    return o;
  };
  const char* chain_names[] = {"sv_chain_batch", "sv_chain_output", "sv_randomness"};
  for (int which = 0; which < 3; ++which) {
    SCOPED_TRACE(chain_names[which]);
    expect_same("zero tail", chain_call(which, 0), fx.expected);
    for (const int tail : {1, 2}) {
      const Outcome o = chain_call(which, tail);
      EXPECT_EQ(o.code, SV_INVALID_INPUT) << (tail == 1 ? "a later byte set" : "struct_size 0");
      EXPECT_NE(o.message.find(chain_names[which]), std::string::npos) << o.message;
      EXPECT_NE(o.message.find("struct_size"), std::string::npos) << o.message;
      EXPECT_TRUE(o.untouched()) << describe(o);
    }
  }
  const char* tree_names[] = {"sv_tree_batch", "sv_tree_output"};
  for (int which = 0; which < 2; ++which) {
    SCOPED_TRACE(tree_names[which]);
    expect_same("zero tail", tree_call(which, 0), tree_expected);
    for (const int tail : {1, 2}) {
      const Outcome o = tree_call(which, tail);
      EXPECT_EQ(o.code, SV_INVALID_INPUT) << (tail == 1 ? "a later byte set" : "struct_size 0");
      EXPECT_NE(o.message.find(tree_names[which]), std::string::npos) << o.message;
      EXPECT_TRUE(o.untouched()) << describe(o);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The rest of the header, and a negative control.

TEST(CApiMisc, VersionIsaAndDefaults) {
  EXPECT_EQ(sv_version(), SV_VERSION);
  EXPECT_EQ(SV_VERSION, 100);  // 0.1.0
  const std::string isa = sv_isa();
  EXPECT_TRUE(isa == "sse2" || isa == "avx2" || isa == "avx512") << isa;
  const sv_sampling_params d = sv_sampling_params_default();
  const sv_sampling_params want = c_params(sv::SamplingParams{});
  EXPECT_EQ(std::memcmp(&d, &want, sizeof d), 0);
  EXPECT_EQ(d.temperature, 1.0f);
  EXPECT_EQ(d.top_p, 1.0f);
  EXPECT_EQ(d.repetition_penalty, 1.0f);
  // The layouts the header promises (sv_sampling_params is the C++ SamplingParams).
  static_assert(sizeof(sv_sampling_params) == sizeof(sv::SamplingParams));
  static_assert(offsetof(sv_sampling_params, top_k) == offsetof(sv::SamplingParams, top_k));
  static_assert(offsetof(sv_sampling_params, min_p) == offsetof(sv::SamplingParams, min_p));
  static_assert(offsetof(sv_sampling_params, presence_penalty) == offsetof(sv::SamplingParams, presence_penalty));
  static_assert(sizeof(sv_stats) == sizeof(sv::VerifyStats));
  static_assert(int(SV_TV) == int(sv::Divergence::tv) && int(SV_JS_FSD) == int(sv::Divergence::js_fsd));
}

TEST(CApiMisc, NegativeControlTheComparisonSeesADifference) {
  const auto c = sv::testing::sharded::make_chains(4, 300, 4, sv::testing::sharded::Rows::normalised, 21);
  const sv::ChainBatch<float> batch{c.B, c.V, c.offsets.data(), c.tokens.data(), c.p.data(), c.q.data()};
  const CChains cb = to_c(batch);
  const sv_rule rule{SV_STANDARD, SV_JS, 0, 0};
  sv::Randomness r{1, 0};
  sv_randomness cr = c_randomness(r);
  const Outcome one = c_verify(&rule, &cb.b, &cr, c.B, c.width());
  ASSERT_EQ(one.code, SV_OK);
  EXPECT_EQ(one.hash(), cpp_verify(sv::Standard{}, batch, r, c.width()).hash());
  // Another seed: other draws, another hash, and the comparison says so.
  cr.seed = 2;
  const Outcome two = c_verify(&rule, &cb.b, &cr, c.B, c.width());
  ASSERT_EQ(two.code, SV_OK);
  EXPECT_NE(one.hash(), two.hash());
  EXPECT_FALSE(one == two);
  // One bit of one logprob.
  Outcome flipped = one;
  std::uint32_t bits;
  std::memcpy(&bits, &flipped.logprobs[0], sizeof bits);
  bits ^= 1u;
  std::memcpy(&flipped.logprobs[0], &bits, sizeof bits);
  EXPECT_FALSE(one == flipped);
  EXPECT_NE(one.hash(), flipped.hash());
  // Another rule on the same rows.
  const sv_rule greedy{SV_GREEDY, SV_JS, 0, 0};
  EXPECT_NE(c_verify(&greedy, &cb.b, &cr, c.B, c.width()).hash(), two.hash());
}

}  // namespace
