// The C API's exported functions: each forwards to the entry points of one instruction set, chosen
// once, at the first call, from the copies this library holds (SPECVERIFY_C_WITH_<SET>, set by
// src/CMakeLists.txt: "build" always, compiled with the build's own flags; sse2, avx2 and avx512
// where the library carries them) and what this CPU runs, or as SPECVERIFY_ISA forces.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "entry_points.hpp"
#include "specverify/sampling.hpp"

extern "C" {
const specverify_entry_points* SPECVERIFY_C_ENTRY_POINTS_NAME(build)(void);
#if SPECVERIFY_C_WITH_SSE2
const specverify_entry_points* SPECVERIFY_C_ENTRY_POINTS_NAME(sse2)(void);
#endif
#if SPECVERIFY_C_WITH_AVX2
const specverify_entry_points* SPECVERIFY_C_ENTRY_POINTS_NAME(avx2)(void);
#endif
#if SPECVERIFY_C_WITH_AVX512
const specverify_entry_points* SPECVERIFY_C_ENTRY_POINTS_NAME(avx512)(void);
#endif
}

namespace {

/// The instruction sets best first; a table compiled for one runs where the CPU has its features.
constexpr const char* kBestFirst[] = {"avx512", "avx2", "sse2", "generic"};

bool cpu_runs(const char* isa) {
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
  __builtin_cpu_init();  // also checks that the OS saves the vector registers
  if (std::strcmp(isa, "avx512") == 0) {
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }
  if (std::strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return true;  // SSE2 is x86-64's baseline; "generic" is the build's own
}

struct Choice {
  const specverify_entry_points* table = nullptr;  // null: SPECVERIFY_ISA cannot be honoured
  char why[192] = {};
};

Choice choose() {
  const specverify_entry_points* held[] = {
    SPECVERIFY_C_ENTRY_POINTS_NAME(build)(),
#if SPECVERIFY_C_WITH_SSE2
    SPECVERIFY_C_ENTRY_POINTS_NAME(sse2)(),
#endif
#if SPECVERIFY_C_WITH_AVX2
    SPECVERIFY_C_ENTRY_POINTS_NAME(avx2)(),
#endif
#if SPECVERIFY_C_WITH_AVX512
    SPECVERIFY_C_ENTRY_POINTS_NAME(avx512)(),
#endif
  };
  auto held_for = [&](const char* isa) -> const specverify_entry_points* {
    for (const auto* t : held) {
      if (std::strcmp(t->isa, isa) == 0) return t;
    }
    return nullptr;
  };
  Choice c;
  const char* forced = std::getenv("SPECVERIFY_ISA");
  if (forced && *forced) {
    const specverify_entry_points* t = held_for(forced);
    if (!t) {
      char names[64] = {};
      for (const char* isa : kBestFirst) {
        if (held_for(isa)) std::snprintf(names + std::strlen(names), sizeof names - std::strlen(names), " %s", isa);
      }
      std::snprintf(c.why, sizeof c.why, "specverify: SPECVERIFY_ISA=%.32s is not an instruction set this library holds (it holds:%s)",
                    forced, names);
    } else if (!cpu_runs(t->isa)) {
      std::snprintf(c.why, sizeof c.why, "specverify: SPECVERIFY_ISA=%s, which this CPU does not run", t->isa);
    } else {
      c.table = t;
    }
    return c;
  }
  for (const char* isa : kBestFirst) {
    const specverify_entry_points* t = held_for(isa);
    if (t && cpu_runs(isa)) {
      c.table = t;
      return c;
    }
  }
  std::snprintf(c.why, sizeof c.why, "specverify: this CPU runs none of the instruction sets this library holds");
  return c;
}

const Choice& chosen() {
  static const Choice c = choose();
  return c;
}

int unsupported(sv_error* err) {
  if (err) {
    err->code = SV_UNSUPPORTED;
    std::snprintf(err->message, sizeof err->message, "%s", chosen().why);
  }
  return SV_UNSUPPORTED;
}

}  // namespace

extern "C" {

int sv_version(void) { return SV_VERSION; }

const char* sv_isa(void) { return chosen().table ? chosen().table->isa : "none"; }

sv_sampling_params sv_sampling_params_default(void) {
  const specverify::SamplingParams d;
  return {d.temperature, d.top_k, d.top_p, d.min_p, d.repetition_penalty, d.presence_penalty, d.frequency_penalty};
}

int sv_verify_chains(const sv_rule* rule, const sv_chain_batch* batch, const sv_randomness* r,
                     const sv_chain_output* out, int max_threads, sv_error* err) {
  const specverify_entry_points* t = chosen().table;
  return t ? t->verify_chains(rule, batch, r, out, max_threads, err) : unsupported(err);
}

int sv_verify_trees(const sv_rule* rule, const sv_tree_batch* batch, const sv_randomness* r,
                    const sv_tree_output* out, int max_threads, sv_error* err) {
  const specverify_entry_points* t = chosen().table;
  return t ? t->verify_trees(rule, batch, r, out, max_threads, err) : unsupported(err);
}

int sv_sample(const float* logits, int32_t vocab_size, const sv_sampling_params* params, uint64_t seed,
              int64_t position, const int32_t* history_tokens, const int32_t* history_counts, int32_t history_size,
              const int32_t* bias_tokens, const float* bias_values, int32_t bias_size, int32_t* token, sv_error* err) {
  const specverify_entry_points* t = chosen().table;
  return t ? t->sample(logits, vocab_size, params, seed, position, history_tokens, history_counts, history_size,
                       bias_tokens, bias_values, bias_size, token, err)
           : unsupported(err);
}

}  // extern "C"
