// libFuzzer target: the C API (specverify.h) on whatever bytes come in, as a caller in another
// language would get it wrong: enums outside their range, struct_size too small, past the struct
// (with zeros, or with a field set there), null and non-null pointers in every combination,
// probability and logits rows in each row type (or both, or neither), ragged offsets and parents,
// bad tokens, rules with edge parameters, sampling parameters out of range, shards without a
// communicator or with one that fails, output rows too narrow, and sv_sample with its lists.
// The invariants (docs/c_api.md): the call returns SV_OK, SV_INVALID_INPUT or (its communicator
// failed) SV_COMMUNICATOR, never SV_INTERNAL or SV_OUT_OF_MEMORY on inputs this small; the error's
// code is the return value and its message is NUL-terminated within the struct; an error leaves
// every output untouched; a success writes each sequence's accepted drafts (chains: equal to its
// drafts) and one token in [0, V) after them. Buffers are sized exactly to what the input
// describes, so AddressSanitizer sees any read or write past them.
#include <fuzzer/FuzzedDataProvider.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.hpp"
#include "specverify/specverify.h"

namespace {

using fuzz::kInf;
using fuzz::kNaN;

/// Stores any int in a C enum field, as a C caller may (C++ may not cast a value outside the
/// enumerators' range to the enum).
template <class E>
void store_enum(E& field, int value) {
  static_assert(sizeof(E) == sizeof(int), "the C API's enums are int-sized");
  std::memcpy(&field, &value, sizeof value);
}

constexpr std::int32_t kUnwritten = 0x5a5a5a5a;  // what the outputs hold before the call

float probability(FuzzedDataProvider& in) {
  static const float edge[] = {0.0f,    1.0f, 0.5f, FLT_MIN, 0x1p-149f,
                               FLT_MAX, kNaN, kInf, -1.0f,   -0.0f};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 200) return static_cast<float>(pick % 100) / 99.0f;
  return edge[pick % (sizeof edge / sizeof *edge)];
}

float logit(FuzzedDataProvider& in) {
  static const float edge[] = {0.0f, -kInf, kInf, kNaN, 80.0f, -80.0f, FLT_MAX, -FLT_MAX};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 210) return static_cast<float>(pick) / 16.0f - 6.0f;
  return edge[pick % (sizeof edge / sizeof *edge)];
}

/// A parameter field: its usual value most of the time, else an edge.
float edge_float(FuzzedDataProvider& in, float usual) {
  static const float edge[] = {0.0f, 1.0f, 0.5f, -1.0f, 2.0f, 1e-30f, 1e30f, kNaN, kInf, -kInf};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 160) return usual;
  return edge[pick % (sizeof edge / sizeof *edge)];
}

/// An index that is usually in [lo, hi) and sometimes just outside it or anywhere.
std::int32_t edge_index(FuzzedDataProvider& in, std::int32_t lo, std::int32_t hi) {
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 230 && hi > lo)
    return lo + static_cast<std::int32_t>(pick % static_cast<std::uint32_t>(hi - lo));
  if (pick < 240) return lo - 1;
  if (pick < 250) return hi;
  return in.ConsumeIntegral<std::int32_t>();
}

/// A C struct as a caller hands it: its own bytes in a buffer with room past it, and a struct_size
/// that is sizeof(T), an older (smaller) size, too small to hold struct_size, or past the struct
/// with zeros or with a byte set there.
template <class T>
struct Versioned {
  std::vector<unsigned char> bytes = std::vector<unsigned char>(sizeof(T) + 16, 0);
  T& value() { return *reinterpret_cast<T*>(bytes.data()); }
  const T* get() const { return reinterpret_cast<const T*>(bytes.data()); }

  void set_size(FuzzedDataProvider& in) {
    const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
    std::size_t size = sizeof(T);
    if (pick >= 200 && pick < 215) size = sizeof(T) - sizeof(void*);  // an older caller's
    if (pick >= 215 && pick < 225) size = pick % sizeof(std::size_t);
    if (pick >= 225 && pick < 240) size = sizeof(T) + 16;  // a newer caller's, unknown fields zero
    if (pick >= 240) {
      size = sizeof(T) + 16;
      bytes[sizeof(T) + pick % 16] = 1;  // a newer caller's field set
    }
    value().struct_size = size;
  }
};

struct Outcome {
  int rc = -1;
  sv_error err{};
};

void check_error(const Outcome& o, bool has_err) {
  CHECK(o.rc == SV_OK || o.rc == SV_INVALID_INPUT || o.rc == SV_COMMUNICATOR, o.rc);
  if (!has_err) return;
  CHECK(o.err.code == o.rc, o.err.code, o.rc);
  CHECK(std::memchr(o.err.message, 0, sizeof o.err.message) != nullptr);
  if (o.rc != SV_OK) CHECK(o.err.message[0] != 0);
}

/// Rows for `count` rows of `stride` elements, of the row type (a type outside the enum gets
/// float rows: the call must refuse it before reading them).
std::vector<unsigned char> rows(FuzzedDataProvider& in, int type, std::int64_t count,
                                std::int64_t stride, bool logits) {
  const std::size_t n = static_cast<std::size_t>(count * stride);
  if (type == SV_F16 || type == SV_BF16) {
    std::vector<unsigned char> out(n * 2);
    for (std::size_t i = 0; i < n; ++i) {
      float f = logits ? logit(in) : probability(in);
      std::uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      // bfloat16: the top half; float16: any bits at all now and then, else a rough conversion.
      std::uint16_t h = static_cast<std::uint16_t>(bits >> 16);
      if (type == SV_F16)
        h = in.ConsumeBool() ? in.ConsumeIntegral<std::uint16_t>()
                             : static_cast<std::uint16_t>(0x3c00 - (i % 7) * 0x200);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
  }
  std::vector<unsigned char> out(n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) {
    const float f = logits ? logit(in) : probability(in);
    std::memcpy(out.data() + sizeof(float) * i, &f, sizeof f);
  }
  return out;
}

sv_sampling_params params(FuzzedDataProvider& in) {
  sv_sampling_params p = sv_sampling_params_default();
  p.temperature = edge_float(in, in.ConsumeBool() ? 1.0f : 0.7f);
  p.top_k = in.ConsumeBool() ? 0 : edge_index(in, 0, 9);
  p.top_p = edge_float(in, in.ConsumeBool() ? 1.0f : 0.8f);
  p.min_p = edge_float(in, 0.0f);
  p.repetition_penalty = edge_float(in, 1.0f);
  p.presence_penalty = edge_float(in, 0.0f);
  p.frequency_penalty = edge_float(in, 0.0f);
  return p;
}

int failing_gather(void*, const void*, size_t, void*) {
  return 1;
}

/// What the chain and tree batches share, and the buffers they point into.
struct Common {
  std::int32_t B = 0, V = 0, N = 0;
  int row_type = SV_F32;
  bool logits = false;
  std::vector<std::int32_t> offsets, tokens;
  std::vector<unsigned char> target, draft;
  std::int64_t target_stride = 0, draft_stride = 0;
  std::vector<sv_sampling_params> target_params, draft_params;
  std::vector<std::int32_t> history_offsets, history_tokens, history_counts, bias_offsets,
      bias_tokens;
  std::vector<float> bias_values;
  std::vector<float> accept_uniforms, sample_uniforms;
  std::vector<std::uint64_t> sequence_seeds;
  std::vector<std::int64_t> positions;
  sv_communicator communicator{failing_gather, nullptr};
  sv_vocab_shard shard{};
  bool has_communicator = false;
  std::uint8_t rows_set = 2;  // 0: both probabilities and logits set, 1: neither, else one

  /// Offsets, tokens and rows for `nodes(b)` items per sequence: draft rows `draft_rows` (chains
  /// N, trees N + B).
  void build(FuzzedDataProvider& in, bool trees) {
    B = in.ConsumeIntegralInRange<std::int32_t>(0, 3);
    V = in.ConsumeIntegralInRange<std::int32_t>(1, 8);
    offsets.assign(1, in.ConsumeIntegralInRange<std::uint8_t>(0, 20) == 0 ? 1 : 0);
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int32_t k = in.ConsumeIntegralInRange<std::uint8_t>(0, 30) == 0
                                 ? -1
                                 : in.ConsumeIntegralInRange<std::int32_t>(0, 4);
      offsets.push_back(offsets.back() + k);
    }
    N = 0;
    for (const std::int32_t o : offsets) N = o > N ? o : N;
    for (std::int32_t i = 0; i < N; ++i) tokens.push_back(edge_index(in, 0, V));
    const std::uint8_t type = in.ConsumeIntegral<std::uint8_t>();
    row_type = type < 240 ? type % 3 : type;
    logits = in.ConsumeBool();
    rows_set = in.ConsumeIntegralInRange<std::uint8_t>(0, 24);
    if (!logits && in.ConsumeIntegralInRange<std::uint8_t>(0, 8) != 0) row_type = SV_F32;
    target_stride = in.ConsumeIntegralInRange<std::uint8_t>(0, 10) == 0
                        ? V - 1
                        : V + in.ConsumeIntegralInRange<std::int32_t>(0, 2);
    draft_stride = in.ConsumeIntegralInRange<std::uint8_t>(0, 10) == 0 ? 0 : target_stride;
    const std::int64_t stride = target_stride > V ? target_stride : V;
    target = rows(in, row_type, std::int64_t{N} + B, stride, logits);
    if (in.ConsumeIntegralInRange<std::uint8_t>(0, 3) != 0) {
      draft = rows(in, row_type, trees ? std::int64_t{N} + B : N,
                   draft_stride > V ? draft_stride : V, logits);
    }
    if (logits) {
      for (std::int32_t b = 0; b < B; ++b) target_params.push_back(params(in));
      if (in.ConsumeBool()) {
        for (std::int32_t b = 0; b < B; ++b) draft_params.push_back(params(in));
      }
      if (in.ConsumeIntegralInRange<std::uint8_t>(0, 3) == 0)
        lists(in, history_offsets, history_tokens, &history_counts, nullptr);
      if (in.ConsumeIntegralInRange<std::uint8_t>(0, 3) == 0)
        lists(in, bias_offsets, bias_tokens, nullptr, &bias_values);
    }
    if (in.ConsumeIntegralInRange<std::uint8_t>(0, 4) == 0) {
      for (std::int32_t i = 0; i < N; ++i) accept_uniforms.push_back(edge_float(in, 0.3f));
    }
    if (in.ConsumeIntegralInRange<std::uint8_t>(0, 4) == 0) {
      for (std::int32_t b = 0; b < B; ++b) sample_uniforms.push_back(edge_float(in, 0.6f));
    }
    if (in.ConsumeBool()) {
      for (std::int32_t b = 0; b < B; ++b)
        sequence_seeds.push_back(in.ConsumeIntegral<std::uint64_t>());
    }
    if (in.ConsumeBool()) {
      for (std::int32_t b = 0; b < B; ++b)
        positions.push_back(in.ConsumeIntegralInRange<std::int64_t>(-1, 100));
    }
    if (in.ConsumeIntegralInRange<std::uint8_t>(0, 12) == 0) {
      shard.ranks = in.ConsumeIntegralInRange<std::int32_t>(-1, 3);
      shard.rank = in.ConsumeIntegralInRange<std::int32_t>(-1, 3);
      shard.vocab_start = in.ConsumeIntegralInRange<std::int32_t>(-1, V);
      shard.local_vocab_size = in.ConsumeIntegralInRange<std::int32_t>(-1, V);
      has_communicator = in.ConsumeBool();
    }
  }

  /// Per-sequence lists ([B + 1] offsets, ascending tokens mostly): history or bias.
  void lists(FuzzedDataProvider& in, std::vector<std::int32_t>& offs,
             std::vector<std::int32_t>& toks, std::vector<std::int32_t>* counts,
             std::vector<float>* values) {
    offs.assign(1, 0);
    for (std::int32_t b = 0; b < B; ++b) {
      const std::int32_t n = in.ConsumeIntegralInRange<std::int32_t>(0, 3);
      std::int32_t t = -1;
      for (std::int32_t i = 0; i < n; ++i) {
        t = in.ConsumeIntegralInRange<std::uint8_t>(0, 15) == 0 || t == INT32_MAX
                ? edge_index(in, 0, V)
                : t + 1;
        toks.push_back(t);
        if (counts) counts->push_back(in.ConsumeIntegralInRange<std::int32_t>(-1, 3));
        if (values) values->push_back(edge_float(in, -1.5f));
      }
      offs.push_back(offs.back() + n);
    }
  }

  template <class CBatch>
  void fill(CBatch& b) const {
    b.batch_size = B;
    b.vocab_size = V;
    b.draft_tokens = tokens.empty() ? nullptr : tokens.data();
    store_enum(b.row_type, row_type);
    const void* t = target.data();
    const void* d = draft.empty() ? nullptr : draft.data();
    (logits ? b.target_logits : b.target_probs) = rows_set == 1 ? nullptr : t;
    (logits ? b.draft_logits : b.draft_probs) = d;
    if (rows_set == 0) (logits ? b.target_probs : b.target_logits) = t;
    b.target_stride = target_stride;
    b.draft_stride = draft_stride;
    b.target_params = target_params.empty() ? nullptr : target_params.data();
    b.draft_params = draft_params.empty() ? nullptr : draft_params.data();
    b.history_offsets = history_offsets.empty() ? nullptr : history_offsets.data();
    b.history_tokens = history_tokens.empty() ? nullptr : history_tokens.data();
    b.history_counts = history_counts.empty() ? nullptr : history_counts.data();
    b.bias_offsets = bias_offsets.empty() ? nullptr : bias_offsets.data();
    b.bias_tokens = bias_tokens.empty() ? nullptr : bias_tokens.data();
    b.bias_values = bias_values.empty() ? nullptr : bias_values.data();
    b.shard = shard;
    b.communicator = has_communicator ? &communicator : nullptr;
  }

  void fill(sv_randomness& r, FuzzedDataProvider& in) const {
    r.seed = in.ConsumeIntegral<std::uint64_t>();
    r.offset = in.ConsumeIntegral<std::uint8_t>();
    r.sequence_seeds = sequence_seeds.empty() ? nullptr : sequence_seeds.data();
    r.accept_uniforms = accept_uniforms.empty() ? nullptr : accept_uniforms.data();
    r.sample_uniforms = sample_uniforms.empty() ? nullptr : sample_uniforms.data();
    r.positions = positions.empty() ? nullptr : positions.data();
  }
};

sv_rule rule(FuzzedDataProvider& in) {
  sv_rule r{};
  const std::uint8_t kind = in.ConsumeIntegral<std::uint8_t>();
  store_enum(r.kind, kind < 240 ? kind % (SV_TYPICAL + 1) : kind);
  const std::uint8_t divergence = in.ConsumeIntegral<std::uint8_t>();
  store_enum(r.divergence, divergence < 240 ? divergence % (SV_TV + 1) : divergence);
  r.beta = edge_float(in, 0.2f);
  r.threshold = edge_float(in, 0.3f);
  return r;
}

/// The output's rows, filled with kUnwritten, and whether the call left them so.
struct Outputs {
  std::vector<std::int32_t> tokens, accepted, nodes;
  std::vector<float> logprobs;
  std::vector<unsigned char> stats;
  std::int32_t width = 0;

  void build(FuzzedDataProvider& in, std::int32_t B, std::int32_t needed, bool trees) {
    width = needed + in.ConsumeIntegralInRange<std::int32_t>(-1, 1);
    if (width < 0) width = 0;
    const std::size_t cells = static_cast<std::size_t>(B) * static_cast<std::size_t>(width);
    tokens.assign(cells, kUnwritten);
    accepted.assign(static_cast<std::size_t>(B), kUnwritten);
    if (trees && in.ConsumeBool()) nodes.assign(cells, kUnwritten);
    if (in.ConsumeBool()) logprobs.assign(cells, 7.0f);
    if (in.ConsumeBool()) stats.assign(sizeof(sv_stats), 0x5a);
  }
  bool untouched() const {
    for (const std::int32_t t : tokens)
      if (t != kUnwritten) return false;
    for (const std::int32_t t : accepted)
      if (t != kUnwritten) return false;
    for (const std::int32_t t : nodes)
      if (t != kUnwritten) return false;
    for (const float f : logprobs)
      if (f != 7.0f) return false;
    for (const unsigned char c : stats)
      if (c != 0x5a) return false;
    return true;
  }
  template <class COut>
  void fill(COut& o) {
    o.tokens = tokens.empty() ? nullptr : tokens.data();
    o.row_width = width;
    o.num_accepted = accepted.empty() ? nullptr : accepted.data();
    o.logprobs = logprobs.empty() ? nullptr : logprobs.data();
    o.stats = stats.empty() ? nullptr : reinterpret_cast<sv_stats*>(stats.data());
  }
};

/// Calls `call(rule, randomness, err)` with a rule from the input, the randomness or null, and an
/// sv_error or null; checks its code and message, and that an error left the outputs untouched.
/// Whether it succeeded.
template <class Call>
bool succeeded(FuzzedDataProvider& in, const Outputs& outs, const Call& call,
               const Versioned<sv_randomness>& r) {
  const sv_rule ru = rule(in);
  const bool has_err = in.ConsumeIntegralInRange<std::uint8_t>(0, 15) != 0;
  Outcome o;
  o.rc = call(&ru, in.ConsumeBool() ? r.get() : nullptr, has_err ? &o.err : nullptr);
  check_error(o, has_err);
  if (o.rc == SV_OK) return true;
  CHECK(outs.untouched());
  return false;
}

void chains(FuzzedDataProvider& in) {
  Common c;
  c.build(in, false);
  Versioned<sv_chain_batch> batch;
  c.fill(batch.value());
  batch.value().draft_offsets = c.offsets.data();
  batch.set_size(in);
  Versioned<sv_randomness> r;
  c.fill(r.value(), in);
  r.set_size(in);
  std::int32_t longest = 0;
  for (std::int32_t b = 0; b < c.B; ++b) {
    const std::int32_t k =
        c.offsets[static_cast<std::size_t>(b) + 1] - c.offsets[static_cast<std::size_t>(b)];
    longest = k > longest ? k : longest;
  }
  Outputs outs;
  outs.build(in, c.B, longest + 1, false);
  Versioned<sv_chain_output> out;
  outs.fill(out.value());
  out.set_size(in);
  const bool ok = succeeded(
      in, outs,
      [&](const sv_rule* ru, const sv_randomness* rn, sv_error* err) {
        return sv_verify_chains(ru, batch.get(), rn, out.get(), 1, err);
      },
      r);
  if (!ok) return;
  // A well-formed call, then (an empty batch reads neither offsets nor rows).
  CHECK(c.B == 0 || (c.offsets[0] == 0 && c.rows_set > 1), c.offsets[0], c.rows_set);
  for (std::int32_t b = 0; b < c.B; ++b) {
    const std::int32_t first = c.offsets[static_cast<std::size_t>(b)];
    const std::int32_t k = c.offsets[static_cast<std::size_t>(b) + 1] - first;
    const std::int32_t n = outs.accepted[static_cast<std::size_t>(b)];
    CHECK(n >= 0 && n <= k, n, k);
    const std::int32_t* row =
        outs.tokens.data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(outs.width);
    for (std::int32_t j = 0; j < n; ++j)
      CHECK(row[j] == c.tokens[static_cast<std::size_t>(first + j)], row[j]);
    CHECK(row[n] >= 0 && row[n] < c.V, row[n], c.V);
  }
}

void trees(FuzzedDataProvider& in) {
  Common c;
  c.build(in, true);
  std::vector<std::int32_t> parents;
  for (std::int32_t b = 0; b < c.B; ++b) {
    const std::int32_t first = c.offsets[static_cast<std::size_t>(b)];
    const std::int32_t end = c.offsets[static_cast<std::size_t>(b) + 1];
    for (std::int32_t i = first; i < end; ++i) parents.push_back(edge_index(in, -1, i - first));
  }
  parents.resize(static_cast<std::size_t>(c.N), -1);
  Versioned<sv_tree_batch> batch;
  c.fill(batch.value());
  batch.value().node_offsets = c.offsets.data();
  batch.value().parents = parents.empty() ? nullptr : parents.data();
  const std::uint8_t drafted = in.ConsumeIntegral<std::uint8_t>();
  store_enum(batch.value().drafted, drafted < 240 ? drafted % 3 : drafted);
  batch.set_size(in);
  Versioned<sv_randomness> r;
  c.fill(r.value(), in);
  r.set_size(in);
  Outputs outs;
  outs.build(in, c.B, 5, true);  // the deepest path of up to 4 nodes, and one token
  Versioned<sv_tree_output> out;
  outs.fill(out.value());
  out.value().accepted_nodes = outs.nodes.empty() ? nullptr : outs.nodes.data();
  out.set_size(in);
  const bool ok = succeeded(
      in, outs,
      [&](const sv_rule* ru, const sv_randomness* rn, sv_error* err) {
        return sv_verify_trees(ru, batch.get(), rn, out.get(), 1, err);
      },
      r);
  if (!ok) return;
  for (std::int32_t b = 0; b < c.B; ++b) {
    const std::int32_t k =
        c.offsets[static_cast<std::size_t>(b) + 1] - c.offsets[static_cast<std::size_t>(b)];
    const std::int32_t n = outs.accepted[static_cast<std::size_t>(b)];
    CHECK(n >= 0 && n <= k && n < outs.width, n, k);
    const std::int32_t* row =
        outs.tokens.data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(outs.width);
    for (std::int32_t j = 0; j <= n; ++j) CHECK(row[j] >= 0 && row[j] < c.V, row[j], c.V);
    if (outs.nodes.empty()) continue;
    // The accepted path: each node a child of the one before, its token the row's.
    const std::int32_t first = c.offsets[static_cast<std::size_t>(b)];
    const std::int32_t* nodes =
        outs.nodes.data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(outs.width);
    for (std::int32_t j = 0; j < n; ++j) {
      CHECK(nodes[j] >= 0 && nodes[j] < k, nodes[j], k);
      CHECK(parents[static_cast<std::size_t>(first + nodes[j])] == (j == 0 ? -1 : nodes[j - 1]), j);
      CHECK(row[j] == c.tokens[static_cast<std::size_t>(first + nodes[j])], row[j]);
    }
  }
}

void sample(FuzzedDataProvider& in) {
  const std::int32_t V = in.ConsumeIntegralInRange<std::int32_t>(-1, 8);
  std::vector<float> logits(static_cast<std::size_t>(V > 0 ? V : 0));
  for (float& x : logits) x = logit(in);
  const sv_sampling_params p = params(in);
  std::vector<std::int32_t> history, counts, bias;
  std::vector<float> values;
  const std::int32_t h = in.ConsumeIntegralInRange<std::int32_t>(-1, 3),
                     n_bias = in.ConsumeIntegralInRange<std::int32_t>(-1, 3);
  for (std::int32_t i = 0; i < h; ++i) {
    history.push_back(edge_index(in, 0, V));
    counts.push_back(in.ConsumeIntegralInRange<std::int32_t>(-1, 3));
  }
  for (std::int32_t i = 0; i < n_bias; ++i) {
    bias.push_back(edge_index(in, 0, V));
    values.push_back(edge_float(in, 2.0f));
  }
  std::int32_t token = kUnwritten;
  const bool has_err = in.ConsumeIntegralInRange<std::uint8_t>(0, 15) != 0;
  Outcome o;
  o.rc = sv_sample(
      logits.empty() ? nullptr : logits.data(), V,
      in.ConsumeIntegralInRange<std::uint8_t>(0, 10) ? &p : nullptr,
      in.ConsumeIntegral<std::uint64_t>(), in.ConsumeIntegralInRange<std::int64_t>(-1, 50),
      history.empty() ? nullptr : history.data(), counts.empty() ? nullptr : counts.data(), h,
      bias.empty() ? nullptr : bias.data(), values.empty() ? nullptr : values.data(), n_bias,
      in.ConsumeIntegralInRange<std::uint8_t>(0, 20) ? &token : nullptr,
      has_err ? &o.err : nullptr);
  check_error(o, has_err);
  CHECK(o.rc != SV_COMMUNICATOR, o.rc);
  if (o.rc == SV_OK) {
    CHECK(token >= 0 && token < V, token, V);
  } else {
    CHECK(token == kUnwritten, token);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::uint8_t call = in.ConsumeIntegral<std::uint8_t>();
  if (call < 120) {
    chains(in);
  } else if (call < 220) {
    trees(in);
  } else {
    sample(in);
  }
  return 0;
}
