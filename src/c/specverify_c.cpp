// The C API (specverify.h) over the compiled library, for the instruction set this translation
// unit is compiled for (dispatch.cpp picks among the copies): each entry point reads the caller's
// versioned structs, builds the C++ batch they describe, calls the library's verify for the rule
// it names, and turns whatever is thrown into an sv_status and a message. Nothing is written to
// the caller's outputs before the C++ verify has validated them, which in turn writes nothing on
// invalid input.
#include "specverify/specverify.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>

#include "entry_points.hpp"
#include "specverify/compiled.hpp"
#include "specverify/sample.hpp"

#ifndef SPECVERIFY_C_ISA_COPY
#error "specverify_c.cpp: -DSPECVERIFY_C_ISA_COPY=<name> names this copy's table (src/CMakeLists.txt)"
#endif

static_assert(SV_VERSION == (SPECVERIFY_PROJECT_VERSION_NUMBER), "specverify.h's SV_VERSION is the project's version");

namespace {

using specverify::invalid_input;

/// A sharded call's collective returned non-zero: the ranks are out of step, not the input wrong.
struct communicator_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void reject(const std::string& what) { throw invalid_input("specverify: " + what); }

/// The caller's struct as this library knows it: the bytes its struct_size covers, later fields
/// zero. A newer caller's struct is read too when the fields this library does not know are zero
/// (they cannot ask for anything then).
template <class T>
T read_versioned(const T* given, const char* name) {
  T value;
  std::memset(&value, 0, sizeof value);
  if (!given) return value;
  const std::size_t size = given->struct_size;
  if (size < sizeof(std::size_t)) {
    reject(std::string(name) + ".struct_size = " + std::to_string(size) + ": set it to sizeof(" + name + ")");
  }
  const auto* bytes = reinterpret_cast<const unsigned char*>(given);
  for (std::size_t i = sizeof(T); i < size; ++i) {
    if (bytes[i] != 0) {
      reject(std::string(name) + ".struct_size = " + std::to_string(size) + " is past the " + std::to_string(sizeof(T)) +
             " bytes this library knows (version " + std::to_string(SV_VERSION) + "), and a field there is set");
    }
  }
  std::memcpy(&value, given, size < sizeof(T) ? size : sizeof(T));
  value.struct_size = sizeof(T);
  return value;
}

struct CCommunicator {
  const sv_communicator* c;
  void all_gather(const void* send, std::size_t bytes, void* recv) const {
    if (c->all_gather(c->context, send, bytes, recv) != 0) {
      throw communicator_failure("specverify: the communicator's all_gather returned non-zero");
    }
  }
};

/// A C enum field as the int its caller stored: C lets a caller store any int there, which C++
/// may not load as the enum (a value outside the enumerators' range is undefined behaviour).
template <class E>
int enum_value(const E& field) {
  static_assert(std::is_enum<E>::value && sizeof(E) == sizeof(int), "the C API's enums are int-sized");
  int value;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

specverify::Randomness randomness_of(const sv_randomness* given) {
  const sv_randomness r = read_versioned(given, "sv_randomness");
  specverify::Randomness out;
  out.seed = r.seed;
  out.offset = r.offset;
  out.sequence_seeds = r.sequence_seeds;
  out.accept_uniforms = r.accept_uniforms;
  out.sample_uniforms = r.sample_uniforms;
  out.positions = r.positions;
  return out;
}

specverify::VocabShard shard_of(const sv_vocab_shard& s) {
  return {s.rank, s.ranks == 0 ? 1 : s.ranks, s.vocab_start, s.local_vocab_size};
}

static_assert(sizeof(sv_sampling_params) == sizeof(specverify::SamplingParams) &&
                  offsetof(sv_sampling_params, frequency_penalty) ==
                      offsetof(specverify::SamplingParams, frequency_penalty),
              "sv_sampling_params has the C++ SamplingParams layout (docs/api.md \"C API\")");
const specverify::SamplingParams* params_of(const sv_sampling_params* p) {
  return reinterpret_cast<const specverify::SamplingParams*>(p);
}

/// The logits fields a probability batch must leave unset, by name: set, they would be ignored.
template <class CBatch>
void check_probability_batch(const CBatch& b) {
  const std::pair<const char*, bool> logits_only[] = {
      {"target_params", b.target_params != nullptr},
      {"draft_params", b.draft_params != nullptr},
      {"draft_logits", b.draft_logits != nullptr},
      {"draft_vocab_size", b.draft_vocab_size != 0},
      {"draft_to_target", b.draft_to_target != nullptr},
      {"unconditional_logits", b.unconditional_logits != nullptr},
      {"unconditional_first_row", b.unconditional_first_row != nullptr},
      {"guidance_scale", b.guidance_scale != nullptr},
      {"allowed_tokens", b.allowed_tokens != nullptr},
      {"unconditional_stride", b.unconditional_stride != 0},
      {"history_offsets", b.history_offsets != nullptr},
      {"history_tokens", b.history_tokens != nullptr},
      {"history_counts", b.history_counts != nullptr},
      {"bias_offsets", b.bias_offsets != nullptr},
      {"bias_tokens", b.bias_tokens != nullptr},
      {"bias_values", b.bias_values != nullptr},
  };
  for (const auto& [field, set] : logits_only) {
    if (set) reject(std::string(field) + " is set on a batch of probability rows: it is for logits rows (target_logits)");
  }
  if (enum_value(b.row_type) != SV_F32) {
    reject("row_type = " + std::to_string(enum_value(b.row_type)) +
           ": probability rows are SV_F32 (16-bit rows are for logits)");
  }
}

/// The rows and their fields: a LogitsChainBatch's or LogitsTreeBatch's (the two C batches share
/// them), or a probability batch's (below).
template <template <class> class Batch, class Logit, class CBatch>
void copy_rows(Batch<Logit>& o, const CBatch& b) {
  o.target_logits = static_cast<const Logit*>(b.target_logits);
  o.draft_logits = static_cast<const Logit*>(b.draft_logits);
  o.target_params = params_of(b.target_params);
  o.draft_params = params_of(b.draft_params);
  o.draft_vocab_size = b.draft_vocab_size;
  o.draft_to_target = b.draft_to_target;
  o.unconditional_logits = static_cast<const Logit*>(b.unconditional_logits);
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
}

void copy_rows(specverify::ChainBatch<float>& o, const sv_chain_batch& b) {
  o.target_probs = static_cast<const float*>(b.target_probs);
  o.draft_probs = static_cast<const float*>(b.draft_probs);
  o.target_row_max = b.target_row_max;
}
void copy_rows(specverify::TreeBatch<float>& o, const sv_tree_batch& b) {
  o.target_probs = static_cast<const float*>(b.target_probs);
  o.draft_probs = static_cast<const float*>(b.draft_probs);
}

/// The C++ batch a C batch describes: Batch is the C++ kind (probabilities or logits of a type).
/// The fields both C batches share, by their common names; batch_of adds each shape's own.
template <class Batch, class CBatch>
Batch shared_fields_of(const CBatch& b) {
  Batch o;
  o.batch_size = b.batch_size;
  o.vocab_size = b.vocab_size;
  o.draft_tokens = b.draft_tokens;
  o.target_stride = b.target_stride;
  o.draft_stride = b.draft_stride;
  o.shard = shard_of(b.shard);
  copy_rows(o, b);
  return o;
}

template <class Batch>
Batch batch_of(const sv_chain_batch& b) {
  Batch o = shared_fields_of<Batch>(b);
  o.draft_offsets = b.draft_offsets;
  return o;
}

template <class Batch>
Batch batch_of(const sv_tree_batch& b) {
  Batch o = shared_fields_of<Batch>(b);
  o.node_offsets = b.node_offsets;
  o.parents = b.parents;
  switch (enum_value(b.drafted)) {
    case SV_SAMPLED: o.drafted = specverify::Drafted::sampled; break;
    case SV_SAMPLED_WITHOUT_REPLACEMENT: o.drafted = specverify::Drafted::sampled_without_replacement; break;
    case SV_DETERMINISTIC: o.drafted = specverify::Drafted::deterministic; break;
    default: reject("drafted = " + std::to_string(enum_value(b.drafted)) + " is not an sv_drafted");
  }
  return o;
}

specverify::ChainOutput output_of(const sv_chain_output& o) {
  return {o.tokens, o.row_width, o.num_accepted, o.logprobs};
}
specverify::TreeOutput output_of(const sv_tree_output& o) {
  return {o.tokens, o.row_width, o.num_accepted, o.accepted_nodes, o.logprobs};
}

/// The C++ batch kinds of a C batch, and the names its messages use.
template <class CBatch>
struct Shape;
template <>
struct Shape<sv_chain_batch> {
  static constexpr bool kTree = false;
  using Probs = specverify::ChainBatch<float>;
  template <class Logit>
  using Logits = specverify::LogitsChainBatch<Logit>;
  static constexpr const char* kBatch = "sv_chain_batch";
  static constexpr const char* kOutput = "sv_chain_output";
  static bool has_row_max(const sv_chain_batch& b) { return b.target_row_max != nullptr; }
};
template <>
struct Shape<sv_tree_batch> {
  static constexpr bool kTree = true;
  using Probs = specverify::TreeBatch<float>;
  template <class Logit>
  using Logits = specverify::LogitsTreeBatch<Logit>;
  static constexpr const char* kBatch = "sv_tree_batch";
  static constexpr const char* kOutput = "sv_tree_output";
  static bool has_row_max(const sv_tree_batch&) { return false; }
};

/// Calls visit(rule) with the C++ rule `given` names. Trees take no rule that decides whole
/// chains (Block) or cuts them.
template <bool kTree, class Visit>
void with_rule(const sv_rule* given, const Visit& visit) {
  if (!given) reject("rule is null");
  const sv_rule& r = *given;
  const auto divergence = static_cast<specverify::Divergence>(enum_value(r.divergence));
  switch (enum_value(r.kind)) {
    case SV_STANDARD: return visit(specverify::Standard{});
    case SV_GREEDY: return visit(specverify::Greedy{});
    case SV_EARS: return visit(specverify::Ears{r.beta});
    case SV_FSD: return visit(specverify::Fsd{divergence, r.threshold});
    case SV_RFSD: return visit(specverify::ReducibleFsd{divergence, r.threshold});
    case SV_BLOCK:
      if constexpr (kTree) {
        reject("rule SV_BLOCK decides chains jointly: it has no tree form (SV_TRAVERSAL is its tree rule)");
      } else {
        return visit(specverify::Block{});
      }
    case SV_TRAVERSAL: return visit(specverify::Traversal{});
    case SV_COUPLED: return visit(specverify::Coupled{});
    case SV_TYPICAL:
      reject("rule SV_TYPICAL is not in this library: Medusa's typical acceptance is a C++ rule of the caller's "
             "own (examples/typical_acceptance.hpp)");
  }
  reject("rule kind = " + std::to_string(enum_value(r.kind)) + " is not an sv_rule_kind");
}

specverify::CpuOptions options_of(int max_threads) {
  return specverify::CpuOptions{static_cast<std::int32_t>(max_threads)};
}

/// The verify of one C++ batch: sharded where the caller passes a communicator.
template <class Rule, class Batch, class Output>
specverify::VerifyStats run(const Rule& rule, const Batch& batch, const specverify::Randomness& r, const Output& out,
                            const sv_communicator* comm, int max_threads) {
  if (!comm) return specverify::verify(rule, batch, r, out, options_of(max_threads));
  if (!comm->all_gather) reject("communicator->all_gather is null");
  return specverify::verify(rule, batch, r, out, CCommunicator{comm}, options_of(max_threads));
}

void write_stats(sv_stats* to, const specverify::VerifyStats& s) {
  if (to) *to = sv_stats{s.drafted, s.accepted, s.relaxed, s.target_checked};
}

/// Runs body, reporting what it throws; err may be null. The message is copied while the
/// exception lives.
template <class Body>
int guarded(sv_error* err, const Body& body) noexcept {
  int code = SV_OK;
  std::string message;
  try {
    try {
      body();
    } catch (const invalid_input& e) {
      code = SV_INVALID_INPUT;
      message = e.what();
    } catch (const std::bad_alloc&) {
      code = SV_OUT_OF_MEMORY;
      message = "specverify: out of memory";
    } catch (const communicator_failure& e) {
      code = SV_COMMUNICATOR;
      message = e.what();
    } catch (const std::exception& e) {
      code = SV_INTERNAL;
      message = e.what();
    } catch (...) {
      code = SV_INTERNAL;
      message = "specverify: an unknown exception";
    }
  } catch (...) {  // copying a message ran out of memory
    code = code == SV_OK ? SV_INTERNAL : code;
  }
  if (err) {
    err->code = code;
    const std::size_t n = std::min(message.size(), sizeof err->message - 1);
    std::memcpy(err->message, message.data(), n);
    err->message[n] = '\0';
  }
  return code;
}

template <class Visit>
void with_logit_type(int type, const Visit& visit) {
  switch (type) {
    case SV_F32: return visit(static_cast<const float*>(nullptr));
    case SV_F16: return visit(static_cast<const specverify::float16*>(nullptr));
    case SV_BF16: return visit(static_cast<const specverify::bfloat16*>(nullptr));
  }
  reject("row_type = " + std::to_string(type) + " is not an sv_row_type");
}

/// sv_verify_chains and sv_verify_trees: the C++ verify of the batch the C structs describe.
template <class CBatch, class COutput>
int verify_c(const sv_rule* rule, const CBatch* batch, const sv_randomness* r, const COutput* out, int max_threads,
             sv_error* err) {
  using S = Shape<CBatch>;
  return guarded(err, [&] {
    if (!batch) reject("batch is null");
    if (!out) reject("out is null");
    const CBatch b = read_versioned(batch, S::kBatch);
    const COutput o = read_versioned(out, S::kOutput);
    const specverify::Randomness randomness = randomness_of(r);
    const auto output = output_of(o);
    specverify::VerifyStats stats;
    if (b.target_logits && b.target_probs) reject("target_probs and target_logits are both set: rows are one or the other");
    // Logits rows, or an empty slice of them (a rank's null rows): target_params is required
    // there and means nothing to probability rows.
    if (!b.target_probs && (b.target_logits || b.target_params)) {
      if (b.draft_probs) reject("draft_probs is set on a batch of logits rows: draft rows are draft_logits");
      if (S::has_row_max(b)) reject("target_row_max is set on a batch of logits rows: it is for probability rows");
      with_logit_type(enum_value(b.row_type), [&](const auto* type) {
        using Logit = std::remove_cv_t<std::remove_pointer_t<decltype(type)>>;
        const auto logits = batch_of<typename S::template Logits<Logit>>(b);
        with_rule<S::kTree>(rule, [&](const auto& rl) { stats = run(rl, logits, randomness, output, b.communicator, max_threads); });
      });
    } else {
      check_probability_batch(b);
      const auto probs = batch_of<typename S::Probs>(b);
      with_rule<S::kTree>(rule, [&](const auto& rl) { stats = run(rl, probs, randomness, output, b.communicator, max_threads); });
    }
    write_stats(o.stats, stats);
  });
}

int verify_chains(const sv_rule* rule, const sv_chain_batch* batch, const sv_randomness* r, const sv_chain_output* out,
                  int max_threads, sv_error* err) {
  return verify_c(rule, batch, r, out, max_threads, err);
}

int verify_trees(const sv_rule* rule, const sv_tree_batch* batch, const sv_randomness* r, const sv_tree_output* out,
                 int max_threads, sv_error* err) {
  return verify_c(rule, batch, r, out, max_threads, err);
}

int sample(const float* logits, int32_t vocab_size, const sv_sampling_params* params, uint64_t seed, int64_t position,
           const int32_t* history_tokens, const int32_t* history_counts, int32_t history_size,
           const int32_t* bias_tokens, const float* bias_values, int32_t bias_size, int32_t* token, sv_error* err) {
  return guarded(err, [&] {
    if (!params) reject("params is null");
    if (!token) reject("token is null");
    *token = specverify::sample(logits, vocab_size, *params_of(params), seed, position, history_tokens, history_counts,
                                history_size, bias_tokens, bias_values, bias_size);
  });
}

/// What the kernels of this copy were compiled for.
constexpr const char* kIsa =
#if defined(__AVX512F__)
    "avx512";
#elif defined(__AVX2__)
    "avx2";
#elif defined(__SSE2__) || defined(__x86_64__)
    "sse2";
#else
    "generic";
#endif

constexpr specverify_entry_points kEntryPoints{kIsa, verify_chains, verify_trees, sample};

}  // namespace

extern "C" const specverify_entry_points* SPECVERIFY_C_ENTRY_POINTS_NAME(SPECVERIFY_C_ISA_COPY)(void) {
  return &kEntryPoints;
}
