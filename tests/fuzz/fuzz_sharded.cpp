// libFuzzer target: the sharded verify against the unsharded one on whatever bytes come in.
//
// The input decodes into a chain or tree batch (B, V, ragged drafts or random trees drafted any
// way, tokens, one-hot or not, rows drawn from a palette of ordinary, edge and invalid values: NaN,
// inf, negative, subnormal, huge and tiny), a rule, and a split of [0, V) over 1 to 5 ranks (uneven,
// empty slices allowed), each rank's rows copied to their own buffers sized exactly to the slice, so
// ASan sees any read past them. Ranks run as threads over a ThreadGroup. Half the inputs, chains and
// trees, are batches of logits instead (values with ties, -inf, NaN and +inf; per-sequence sampling
// parameters; a bitmask, guidance, penalties and a bias). The invariants (docs/api.md "Sharded
// vocabulary"): every rank returns or throws the same; where the unsharded verify succeeds on input
// every pass of the sharded one reads as valid, the outputs are bit for bit the unsharded ones; where
// either throws, no output changed.
//
// Run as fuzz_gathers (the same binary with SPECVERIFY_FUZZ_GATHERS=1 in its environment, as
// ctest runs it), one all_gather of each call returns corrupt bytes, alike on every rank (a rank that sent garbage, as its peers all receive it): then every
// rank still returns or throws the same, what it throws is invalid_input (anything else, an
// over-read, a hang or a huge allocation is a finding), and what it returns are tokens of [0, V).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fuzz_check.hpp"
#include "specverify/specverify.hpp"
#include "specverify/thread_communicator.hpp"
#include "support/penalty_lists.hpp"

namespace {

using namespace specverify;
using fuzz::kInf;
using fuzz::kNaN;

/// Whether this run is fuzz_gathers' (read once: libFuzzer calls the target from one thread).
const bool kTamper = [] {
  const char* mode = std::getenv("SPECVERIFY_FUZZ_GATHERS");
  return mode != nullptr && std::strcmp(mode, "1") == 0;
}();

/// fuzz_gathers' corruption: at the rank's all_gather number `call`, `bytes` written over what it
/// received from byte `at` on (wrapping).
struct Tamper {
  std::int32_t call = -1;
  std::uint32_t at = 0;
  std::vector<unsigned char> bytes;
};

/// A rank's communicator that applies a Tamper to what every all_gather returns.
class TamperedCommunicator {
 public:
  TamperedCommunicator(ThreadGroup& group, std::int32_t rank, const Tamper& tamper)
      : inner_(group.communicator(rank)), ranks_(group.ranks()), tamper_(&tamper) {}
  void all_gather(const void* send, std::size_t bytes, void* recv) const {
    inner_.all_gather(send, bytes, recv);
    const std::size_t total = bytes * static_cast<std::size_t>(ranks_);
    if (calls_++ != tamper_->call || total == 0) return;
    auto* out = static_cast<unsigned char*>(recv);
    for (std::size_t i = 0; i < tamper_->bytes.size(); ++i) out[(tamper_->at + i) % total] = tamper_->bytes[i];
  }

 private:
  ThreadGroup::Communicator inner_;
  std::int32_t ranks_;
  const Tamper* tamper_;
  mutable std::int32_t calls_ = 0;
};

float edge_value(FuzzedDataProvider& in) {
  static const float values[] = {0.0f, -0.0f, 1.0f, 0.5f, 1e-3f, FLT_MIN, 0x1p-149f, FLT_MAX, 1e30f, 3000.0f,
                                 1e-12f, 2.0f, kNaN, kInf, -1.0f};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 200) return static_cast<float>(pick) / 199.0f;
  return values[pick % (sizeof values / sizeof *values)];
}

struct Result {
  std::vector<std::int32_t> tokens, accepted, nodes;
  std::vector<float> logprobs;
  VerifyStats stats{};
  std::string error;
  bool same(const Result& o) const {
    return tokens == o.tokens && accepted == o.accepted && nodes == o.nodes &&
           std::memcmp(logprobs.data(), o.logprobs.data(), logprobs.size() * sizeof(float)) == 0 &&
           std::memcmp(&stats, &o.stats, sizeof stats) == 0 && error == o.error;
  }
};

/// Rows [0, count) of `rows` (V apart), columns [start, start + size), in a buffer of their own
/// (sized exactly: ASan sees a read past the slice).
std::vector<float> slice_of(const std::vector<float>& rows, std::int32_t V, std::int32_t count, std::int32_t start,
                            std::int32_t size) {
  std::vector<float> out;
  for (std::int32_t row = 0; row < count; ++row) {
    out.insert(out.end(), &rows[std::size_t(row) * V + start], &rows[std::size_t(row) * V + start + size]);
  }
  return out;
}

/// Runs rank k's verify of batch_of(k) on a thread each; every rank returns or throws the same,
/// and where they return, what the unsharded verify (`whole`) returns: the sharded verify may read
/// rows the unsharded one does not (and so refuse them), but on input it accepts the unsharded
/// verify accepts it too, with the same outputs.
template <class Rule, class BatchOf, class Capture>
void expect_ranks(const Rule& rule, std::int32_t ranks, BatchOf batch_of, const Randomness& randomness,
                  const Tamper& tamper, std::int32_t V, const Result& whole, Capture capture) {
  ThreadGroup group(ranks);
  std::vector<Result> results(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (std::int32_t k = 0; k < ranks; ++k) {
    threads.emplace_back([&, batch = batch_of(k), k] {
      const TamperedCommunicator comm(group, k, tamper);
      results[k] = capture([&](const auto& out) { return verify(rule, batch, randomness, out, comm); });
    });
  }
  for (auto& t : threads) t.join();
  for (const Result& r : results) CHECK(r.same(results[0]));
  if (!results[0].error.empty()) return;
  if (kTamper) {
    for (const std::int32_t t : results[0].tokens) CHECK(t == kNoToken || (t >= 0 && t < V), t, V);
  } else {
    CHECK(results[0].same(whole));
  }
}

/// The rest of an input after the batch: Coupled's positions, a split of [0, V) over 1 to 5 ranks
/// (uneven, empty slices allowed), and the seeds.
struct Split {
  std::vector<std::int64_t> positions;
  std::vector<std::int32_t> cuts{0};
  Randomness randomness;
  Tamper tamper;  // fuzz_gathers' (none in fuzz_sharded)

  Split(FuzzedDataProvider& in, std::int32_t B, std::int32_t V) : positions(static_cast<std::size_t>(B)) {
    for (auto& x : positions) x = in.ConsumeIntegral<std::uint16_t>();
    const std::int32_t ranks = in.ConsumeIntegralInRange<std::int32_t>(1, 5);
    cuts.push_back(V);
    for (std::int32_t r = 1; r < ranks; ++r) cuts.push_back(in.ConsumeIntegralInRange<std::int32_t>(0, V));
    std::sort(cuts.begin(), cuts.end());
    randomness = {in.ConsumeIntegral<std::uint64_t>(), in.ConsumeIntegral<std::uint32_t>()};
    randomness.positions = positions.data();
    if (kTamper) {
      tamper.call = in.ConsumeIntegralInRange<std::int32_t>(0, 15);
      tamper.at = in.ConsumeIntegral<std::uint32_t>();
      tamper.bytes = in.ConsumeBytes<unsigned char>(in.ConsumeIntegralInRange<std::size_t>(1, 16));
    }
  }
};

/// A logit from a small palette (ties on purpose) or an edge value.
float edge_logit(FuzzedDataProvider& in) {
  static const float values[] = {-kInf, 0.0f, -0.0f, 88.0f, -88.0f, FLT_MAX, -FLT_MAX, 1e-30f, kNaN, kInf};
  const std::uint8_t pick = in.ConsumeIntegral<std::uint8_t>();
  if (pick < 230) return static_cast<float>(pick % 23) * 0.5f - 5.0f;
  return values[pick % (sizeof values / sizeof *values)];
}

SamplingParams fuzzed_params(FuzzedDataProvider& in, std::int32_t V) {
  SamplingParams p;
  static const float temperatures[] = {1.0f, 0.0f, 0.7f, 1e-3f, 3.0f};
  p.temperature = temperatures[in.ConsumeIntegralInRange<int>(0, 4)];
  p.top_k = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::int32_t>(0, V + 1) : 0;
  p.top_p = in.ConsumeBool() ? static_cast<float>(in.ConsumeIntegralInRange<int>(1, 10)) / 10.0f : 1.0f;
  p.min_p = in.ConsumeBool() ? static_cast<float>(in.ConsumeIntegralInRange<int>(0, 9)) / 10.0f : 0.0f;
  if (in.ConsumeBool()) {
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = -0.25f;
  }
  return p;
}

const std::int32_t* first_drafts(const LogitsChainBatch<float>& batch) { return batch.draft_offsets; }
const std::int32_t* first_drafts(const LogitsTreeBatch<float>& batch) { return batch.node_offsets; }

/// As run() and run_tree() below over rows of logits: `whole_batch` holds the layout (chain or
/// tree), `rows` target rows, `q_rows` draft rows; `with_q`: draft rows are given (not one-hot or
/// deterministic drafts), also where there are none (a chain without drafts).
template <class Rule, class Batch, class Capture>
void run_logits(const Rule& rule, FuzzedDataProvider& in, Batch whole_batch, std::int32_t rows, std::int32_t q_rows,
                bool with_q, const Split& split, Capture capture) {
  const std::int32_t B = whole_batch.batch_size, V = whole_batch.vocab_size;
  const std::int32_t ranks = static_cast<std::int32_t>(split.cuts.size()) - 1;
  std::vector<float> l(static_cast<std::size_t>(rows) * V), d(static_cast<std::size_t>(q_rows) * V),
      u(static_cast<std::size_t>(rows) * V);
  for (auto& v : l) v = edge_logit(in);
  for (auto& v : d) v = edge_logit(in);
  const bool guided = in.ConsumeBool(), masked = in.ConsumeBool(), listed = in.ConsumeBool();
  if (guided) {
    for (auto& v : u) v = edge_logit(in);
  }
  std::vector<SamplingParams> target(static_cast<std::size_t>(B)), draft(static_cast<std::size_t>(B));
  for (auto& p : target) p = fuzzed_params(in, V);
  for (auto& p : draft) p = fuzzed_params(in, V);
  // Sequence b's rows start at row (its first draft) + b in both layouts.
  const std::int32_t* firsts = first_drafts(whole_batch);
  std::vector<std::int64_t> first_row(static_cast<std::size_t>(B));
  std::vector<float> scales(static_cast<std::size_t>(B), 1.5f);
  for (std::int32_t b = 0; b < B; ++b) first_row[b] = in.ConsumeBool() ? firsts[b] + b : -1;
  const std::int32_t words = (V + 31) / 32;
  std::vector<std::uint32_t> allowed(static_cast<std::size_t>(rows) * words);
  for (auto& w : allowed) w = in.ConsumeIntegral<std::uint32_t>() | in.ConsumeIntegral<std::uint32_t>();
  specverify::testing::PenaltyListArrays lists;
  for (std::int32_t b = 0; b < B; ++b) {
    for (std::int32_t v = in.ConsumeIntegralInRange<std::int32_t>(0, V); v < V; v += in.ConsumeIntegralInRange<std::int32_t>(1, 9)) {
      lists.h_tokens.push_back(v);
      lists.h_counts.push_back(in.ConsumeIntegralInRange<std::int32_t>(0, 3));
    }
    if (in.ConsumeBool()) {
      lists.b_tokens.push_back(in.ConsumeIntegralInRange<std::int32_t>(0, V - 1));
      lists.b_values.push_back(edge_logit(in));
    }
    lists.end_sequence();
  }
  whole_batch.target_params = target.data();
  whole_batch.draft_params = draft.data();
  if (guided) {
    whole_batch.unconditional_first_row = first_row.data();
    whole_batch.guidance_scale = scales.data();
  }
  if (masked) whole_batch.allowed_tokens = allowed.data();
  if (listed) lists.attach(whole_batch);
  // Draft rows are said to be there with a pointer, also where there are none to point at, as the
  // slices below say it (Traversal refuses a batch without draft rows).
  Batch rank_batch = whole_batch;  // the parameters and lists, before the rows
  whole_batch.target_logits = l.data();
  whole_batch.draft_logits = !with_q ? nullptr : d.empty() ? l.data() : d.data();
  if (guided) whole_batch.unconditional_logits = u.data();
  const Result whole = capture([&](const auto& out) { return verify(rule, whole_batch, split.randomness, out); });

  std::vector<std::vector<float>> ls(static_cast<std::size_t>(ranks)), ds(ls), us(ls);
  expect_ranks(rule, ranks, [&](std::int32_t k) {
    const std::int32_t start = split.cuts[k], size = split.cuts[k + 1] - split.cuts[k];
    ls[k] = slice_of(l, V, rows, start, size);
    ds[k] = slice_of(d, V, q_rows, start, size);
    us[k] = slice_of(u, V, rows, start, size);
    Batch batch = rank_batch;
    batch.target_logits = size ? ls[k].data() : nullptr;
    batch.draft_logits = with_q && size ? (ds[k].empty() ? ls[k].data() : ds[k].data()) : nullptr;
    if (guided && size) batch.unconditional_logits = us[k].data();
    batch.shard = {k, ranks, start, size};
    return batch;
  }, split.randomness, split.tamper, V, whole, capture);
}

template <class Rule>
void run(const Rule& rule, FuzzedDataProvider& in) {
  const std::int32_t B = in.ConsumeIntegralInRange<std::int32_t>(1, 4);
  const std::int32_t V = in.ConsumeIntegralInRange<std::int32_t>(1, 70);
  const std::int32_t K = in.ConsumeIntegralInRange<std::int32_t>(0, 4);
  const bool one_hot = in.ConsumeBool(), logits = in.ConsumeBool();
  std::vector<std::int32_t> offsets{0};
  for (std::int32_t b = 0; b < B; ++b) offsets.push_back(offsets.back() + in.ConsumeIntegralInRange<std::int32_t>(0, K));
  const std::int32_t N = offsets.back();
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(N));
  for (auto& t : tokens) t = in.ConsumeIntegralInRange<std::int32_t>(0, V - 1);
  std::vector<float> p(static_cast<std::size_t>(N + B) * V), q(static_cast<std::size_t>(N) * V);
  for (auto& v : p) v = edge_value(in);
  for (auto& v : q) v = edge_value(in);
  const Split split(in, B, V);
  const std::vector<std::int32_t>& cuts = split.cuts;
  const std::int32_t ranks = static_cast<std::int32_t>(cuts.size()) - 1;
  const Randomness& randomness = split.randomness;

  const auto capture = [&](auto verify_one) {
    Result r;
    r.tokens.assign(static_cast<std::size_t>(B) * (K + 1), -7);
    r.accepted.assign(static_cast<std::size_t>(B), -7);
    r.logprobs.assign(r.tokens.size(), 0.5f);
    try {
      r.stats = verify_one(ChainOutput{r.tokens.data(), K + 1, r.accepted.data(), r.logprobs.data()});
    } catch (const invalid_input& e) {
      r.error = e.what();
      CHECK(r.tokens == std::vector<std::int32_t>(r.tokens.size(), -7));
      CHECK(r.accepted == std::vector<std::int32_t>(r.accepted.size(), -7));
    }
    return r;
  };
  if (logits) {
    const LogitsChainBatch<float> batch{B, V, offsets.data(), tokens.data()};
    return run_logits(rule, in, batch, N + B, N, !one_hot, split, capture);
  }
  const float* draft_rows = one_hot ? nullptr : q.empty() ? p.data() : q.data();  // as in run_logits
  const ChainBatch<float> whole_batch{B, V, offsets.data(), tokens.data(), p.data(), draft_rows};
  const Result whole = capture([&](const ChainOutput& out) { return verify(rule, whole_batch, randomness, out); });

  std::vector<std::vector<float>> ps(static_cast<std::size_t>(ranks)), qs(ps);
  expect_ranks(rule, ranks, [&](std::int32_t k) {
    const std::int32_t start = cuts[k], size = cuts[k + 1] - cuts[k];
    ps[k] = slice_of(p, V, N + B, start, size);
    qs[k] = slice_of(q, V, N, start, size);
    ChainBatch<float> batch{B, V, offsets.data(), tokens.data(), size ? ps[k].data() : nullptr, nullptr};
    if (!one_hot && size) batch.draft_probs = qs[k].empty() ? ps[k].data() : qs[k].data();
    batch.shard = {k, ranks, start, size};
    return batch;
  }, randomness, split.tamper, V, whole, capture);
}

/// As run() over a batch of trees: up to 6 nodes per sequence under random parents, drafted in any
/// of the three ways (deterministic: no draft rows), rows of probabilities or of logits.
template <class Rule>
void run_tree(const Rule& rule, FuzzedDataProvider& in) {
  const std::int32_t B = in.ConsumeIntegralInRange<std::int32_t>(1, 4);
  const std::int32_t V = in.ConsumeIntegralInRange<std::int32_t>(1, 70);
  const auto how = static_cast<Drafted>(in.ConsumeIntegralInRange<int>(0, 2));
  const bool logits = in.ConsumeBool();
  std::vector<std::int32_t> offsets{0}, parents, tokens, depth;
  std::int32_t width = 1;
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t n = in.ConsumeIntegralInRange<std::int32_t>(0, 6);
    offsets.push_back(offsets.back() + n);
    depth.assign(static_cast<std::size_t>(n), 1);
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int32_t parent = in.ConsumeIntegralInRange<std::int32_t>(-1, i - 1);
      parents.push_back(parent);
      tokens.push_back(in.ConsumeIntegralInRange<std::int32_t>(0, V - 1));
      if (parent >= 0) depth[static_cast<std::size_t>(i)] = depth[static_cast<std::size_t>(parent)] + 1;
      width = std::max(width, depth[static_cast<std::size_t>(i)] + 1);
    }
  }
  const std::int32_t rows = offsets.back() + B;
  const bool with_q = how != Drafted::deterministic;
  std::vector<float> p(static_cast<std::size_t>(rows) * V), q(with_q ? p.size() : 0);
  for (auto& v : p) v = edge_value(in);
  for (auto& v : q) v = edge_value(in);
  const Split split(in, B, V);
  const std::vector<std::int32_t>& cuts = split.cuts;
  const std::int32_t ranks = static_cast<std::int32_t>(cuts.size()) - 1;
  const Randomness& randomness = split.randomness;

  const auto capture = [&](auto verify_one) {
    Result r;
    r.tokens.assign(static_cast<std::size_t>(B) * width, -7);
    r.nodes.assign(r.tokens.size(), -7);
    r.accepted.assign(static_cast<std::size_t>(B), -7);
    r.logprobs.assign(r.tokens.size(), 0.5f);
    try {
      r.stats = verify_one(TreeOutput{r.tokens.data(), width, r.accepted.data(), r.nodes.data(), r.logprobs.data()});
    } catch (const invalid_input& e) {
      r.error = e.what();
      CHECK(r.tokens == std::vector<std::int32_t>(r.tokens.size(), -7));
      CHECK(r.nodes == std::vector<std::int32_t>(r.nodes.size(), -7));
      CHECK(r.accepted == std::vector<std::int32_t>(r.accepted.size(), -7));
    }
    return r;
  };
  if (logits) {
    LogitsTreeBatch<float> batch{B, V, offsets.data(), parents.data(), tokens.data()};
    batch.drafted = how;
    return run_logits(rule, in, batch, rows, with_q ? rows : 0, with_q, split, capture);
  }
  TreeBatch<float> whole_batch{B, V, offsets.data(), parents.data(), tokens.data(), p.data(), with_q ? q.data() : nullptr};
  whole_batch.drafted = how;
  const Result whole = capture([&](const TreeOutput& out) { return verify(rule, whole_batch, randomness, out); });

  std::vector<std::vector<float>> ps(static_cast<std::size_t>(ranks)), qs(ps);
  expect_ranks(rule, ranks, [&](std::int32_t k) {
    const std::int32_t start = cuts[k], size = cuts[k + 1] - cuts[k];
    ps[k] = slice_of(p, V, rows, start, size);
    if (with_q) qs[k] = slice_of(q, V, rows, start, size);
    TreeBatch<float> batch = whole_batch;
    batch.target_probs = size ? ps[k].data() : nullptr;
    batch.draft_probs = with_q && size ? qs[k].data() : nullptr;
    batch.shard = {k, ranks, start, size};
    return batch;
  }, randomness, split.tamper, V, whole, capture);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 13)) {
    case 0: run(Standard{}, in); break;
    case 1: run(Greedy{}, in); break;
    case 2: run(Ears{0.3f}, in); break;
    case 3: run(Fsd{static_cast<Divergence>(in.ConsumeIntegralInRange<int>(0, 4)), 0.4f}, in); break;
    case 4: run(ReducibleFsd{static_cast<Divergence>(in.ConsumeIntegralInRange<int>(0, 4)), 0.4f}, in); break;
    case 5: run(Coupled{}, in); break;
    case 6: run(Block{}, in); break;
    case 7: run(Traversal{}, in); break;
    case 8: run_tree(Standard{}, in); break;
    case 9: run_tree(Greedy{}, in); break;
    case 10: run_tree(Ears{0.3f}, in); break;
    case 11: run_tree(Fsd{static_cast<Divergence>(in.ConsumeIntegralInRange<int>(0, 4)), 0.4f}, in); break;
    case 12: run_tree(ReducibleFsd{static_cast<Divergence>(in.ConsumeIntegralInRange<int>(0, 4)), 0.4f}, in); break;
    default:  // the last two share a value, so the seeds' first byte picks what it picked before
      if (in.ConsumeBool()) {
        run_tree(Traversal{}, in);
      } else {
        run_tree(Coupled{}, in);
      }
      break;
  }
  return 0;
}
