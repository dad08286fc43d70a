// CUDA verify against the memory-bandwidth bound, over the shapes engines run (issue 18):
// FlashInfer's published chain shapes (B = 16, V = 32000, K = 5; B = 32, V = 128256, K = 8) and
// V in {32000, 128256, 151936, 262144} with B in {1, 4, 16, 32, 64, 256}; float probability rows
// and logits (T = 0.8, and T = 0.8 with top-k 50 + top-p 0.9); chains (Standard, Greedy) and the
// 32-node tree of bench/tree_shape.hpp (Standard, sampled children). Each verify is timed next to
// a plain read kernel over the bytes its walk must read, in the same binary: for probability
// chains the distinct rows it needs (the rejecting row pair for a residual draw, the bonus row);
// for logits and trees every target row on the accepted path and the draft row of each decided
// node (a logits row is read whole to be normalised). Prints a note and exits 0 where there is no
// device.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "specverify/cuda.cuh"
#include "tree_shape.hpp"

namespace {

using namespace specverify;

void cuda_ok(cudaError_t status) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(status));
    std::exit(1);
  }
}

template <class T>
T* device_copy(const std::vector<T>& host) {
  T* d = nullptr;
  cuda_ok(cudaMalloc(&d, std::max<std::size_t>(host.size(), 1) * sizeof(T)));
  if (!host.empty()) cuda_ok(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

std::uint32_t host_mix(std::uint64_t a) {
  a ^= a >> 33;
  a *= 0xff51afd7ed558ccdull;
  a ^= a >> 33;
  a *= 0xc4ceb9fe1a85ec53ull;
  return static_cast<std::uint32_t>(a ^ (a >> 33));
}

__device__ std::uint32_t mix(std::uint64_t a) {
  a ^= a >> 33;
  a *= 0xff51afd7ed558ccdull;
  a ^= a >> 33;
  a *= 0xc4ceb9fe1a85ec53ull;
  return static_cast<std::uint32_t>(a ^ (a >> 33));
}

/// Rows of logits 4 u (u uniform) with the token planted[row] raised by 9, so chains run a few
/// positions as real ones do; probability rows hold their exp / V (unnormalised: verify scales
/// the uniform by the mass). q rows are p's with noise of mean 0 (`salt` != 0), so p - q has
/// mass where a draft is rejected, as a real pair has (noise >= 0 made q >= p everywhere: each
/// rejection found no residual and drew again from p, a second pass no real pair takes).
__global__ void fill(float* rows, const std::int32_t* planted, std::int64_t count, std::int32_t V, bool logits,
                     std::uint64_t salt) {
  const std::int64_t total = count * V;
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < total;
       e += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t row = e / V;
    const auto v = static_cast<std::int32_t>(e % V);
    float logit = 4.0f * (mix(e) * 0x1p-32f) + (v == planted[row] ? 9.0f : 0.0f);
    if (salt) logit += 0.5f * (mix(e ^ salt) * 0x1p-32f - 0.5f);
    rows[e] = logits ? logit : __expf(logit) / V;
  }
}

__global__ void read_kernel(const float4* data, std::int64_t n, float* sink) {
  float4 acc{0, 0, 0, 0};
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const float4 v = data[i];
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  if (acc.x + acc.y + acc.z + acc.w == -1.0f) *sink = acc.x;  // keeps the loads
}

enum class Shape { chain, tree };
enum class Rows { probs, logits_t08, logits_topk_topp };

/// One batch on the device: B chains of K drafts or B copies of the 32-node tree, its rows filled
/// (p, then q, in one allocation so the read kernel can read either), outputs and workspace.
struct DeviceBatch {
  std::int32_t B, V, nodes;  // nodes: K for a chain, 32 for the tree
  Shape shape;
  float* rows{};
  std::int64_t p_rows = 0, q_rows = 0;
  std::int32_t *offsets{}, *parents{}, *tokens{}, *out_tokens{}, *accepted{}, *planted{};
  SamplingParams* params{};
  void* workspace{};
  specverify::cuda::Workspace ws;
  std::int32_t row_width = 0;

  DeviceBatch(Shape s, Rows kind, std::int32_t b, std::int32_t v, std::int32_t k)
      : B(b), V(v), nodes(s == Shape::tree ? 32 : k), shape(s) {
    // Host layout: sequence b's nodes from b * nodes, its target rows from b * (nodes + 1); a
    // chain's draft rows follow its drafts, a tree's are laid out like its target rows.
    const std::vector<std::int32_t> tree = bench::tree_parents();
    std::vector<std::int32_t> host_offsets, host_parents, host_tokens, host_planted;
    p_rows = std::int64_t{B} * (nodes + 1);
    q_rows = s == Shape::tree ? p_rows : std::int64_t{B} * nodes;
    host_planted.assign(std::size_t(p_rows + q_rows), -1);
    for (std::int32_t i = 0; i <= B; ++i) host_offsets.push_back(i * nodes);
    for (std::int32_t seq = 0; seq < B; ++seq) {
      for (std::int32_t n = 0; n < nodes; ++n) {
        const std::int64_t g = std::int64_t{seq} * nodes + n;
        const std::int32_t token = static_cast<std::int32_t>(host_mix(~g) % std::uint32_t(V));
        const std::int32_t parent = s == Shape::tree ? tree[std::size_t(n)] : n - 1;
        host_tokens.push_back(token);
        host_parents.push_back(parent);
        // The row each node is decided at: p (and a tree's q) after its parent; a chain's q row g.
        const std::int64_t at = std::int64_t{seq} * (nodes + 1) + parent + 1;
        if (host_planted[std::size_t(at)] < 0) host_planted[std::size_t(at)] = token;  // the first child
        const std::int64_t q_at = p_rows + (s == Shape::tree ? at : g);
        if (host_planted[std::size_t(q_at)] < 0) host_planted[std::size_t(q_at)] = token;
      }
    }
    offsets = device_copy(host_offsets);
    parents = device_copy(host_parents);
    tokens = device_copy(host_tokens);
    planted = device_copy(host_planted);
    cuda_ok(cudaMalloc(&rows, std::size_t(p_rows + q_rows) * std::size_t(V) * sizeof(float)));
    const bool logits = kind != Rows::probs;
    fill<<<1024, 256>>>(rows, planted, p_rows, V, logits, 0);
    fill<<<1024, 256>>>(rows + p_rows * V, planted + p_rows, q_rows, V, logits, 0x5bd1e995);
    SamplingParams one;
    one.temperature = 0.8f;
    if (kind == Rows::logits_topk_topp) {
      one.top_k = 50;
      one.top_p = 0.9f;
    }
    params = device_copy(std::vector<SamplingParams>(std::size_t(B), one));
    row_width = (s == Shape::tree ? 6 : nodes) + 1;  // the tree is 5 deep
    cuda_ok(cudaMalloc(&out_tokens, std::size_t(B) * row_width * sizeof(std::int32_t)));
    cuda_ok(cudaMalloc(&accepted, std::size_t(B) * sizeof(std::int32_t)));
    cuda_ok(cudaDeviceSynchronize());
  }
  ~DeviceBatch() {
    for (void* ptr : {static_cast<void*>(rows), static_cast<void*>(offsets), static_cast<void*>(parents),
                      static_cast<void*>(tokens), static_cast<void*>(planted), static_cast<void*>(params),
                      static_cast<void*>(out_tokens), static_cast<void*>(accepted), workspace}) {
      cudaFree(ptr);
    }
  }
  void reserve(std::size_t bytes) {
    cuda_ok(cudaMalloc(&workspace, std::max<std::size_t>(bytes, 1)));
    ws = {workspace, bytes};
  }

  ChainBatch<float> chain() const { return {B, V, offsets, tokens, rows, rows + p_rows * V}; }
  LogitsChainBatch<float> logits_chain() const {
    LogitsChainBatch<float> batch{B, V, offsets, tokens, rows, rows + p_rows * V};
    batch.target_params = params;
    return batch;
  }
  TreeBatch<float> tree() const {
    TreeBatch<float> batch{B, V, offsets, parents, tokens, rows, rows + p_rows * V};
    batch.drafted = Drafted::sampled;
    return batch;
  }
  LogitsTreeBatch<float> logits_tree() const {
    LogitsTreeBatch<float> batch;
    batch.batch_size = B;
    batch.vocab_size = V;
    batch.node_offsets = offsets;
    batch.parents = parents;
    batch.draft_tokens = tokens;
    batch.target_logits = rows;
    batch.draft_logits = rows + p_rows * V;
    batch.target_params = params;
    batch.drafted = Drafted::sampled;
    return batch;
  }
  ChainOutput chain_out() const { return {out_tokens, row_width, accepted}; }
  TreeOutput tree_out() const { return {out_tokens, row_width, accepted}; }
};

/// Bytes the walk must read, from the outcome (see the file comment).
template <class Rule>
std::int64_t must_read_bytes(const Rule& rule, const DeviceBatch& d, bool whole_rows) {
  std::vector<std::int32_t> n(static_cast<std::size_t>(d.B));
  cuda_ok(cudaMemcpy(n.data(), d.accepted, n.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost));
  const RowStats stats = rule_traits<Rule>::stats(rule);
  std::int64_t rows = 0;
  for (const std::int32_t accepted : n) {
    const bool bonus = d.shape == Shape::chain && accepted == d.nodes;
    if (whole_rows) {
      rows += (accepted + 1) + (bonus ? accepted : accepted + 1);
      continue;
    }
    const std::int64_t decided = accepted + (bonus ? 0 : 1);
    if (stats.any()) rows += decided * (stats.divergence ? 2 : 1);
    if (bonus) {
      rows += 1;
    } else {
      if (!stats.any()) rows += 1;
      if (rule_traits<Rule>::on_reject == Draw::residual && !stats.divergence) rows += 1;
    }
  }
  return rows * d.V * std::int64_t{sizeof(float)};
}

template <class Rule>
void run(benchmark::State& state, Shape shape, Rows kind, Rule rule, specverify::cuda::Launch launch) {
  DeviceBatch d(shape, kind, static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)),
                static_cast<std::int32_t>(state.range(2)));
  const auto verify = [&](std::uint64_t step) {
    const Randomness randomness{42, step};
    if (shape == Shape::chain && kind == Rows::probs) {
      return specverify::cuda::verify(rule, d.chain(), randomness, d.chain_out(), d.ws, nullptr, launch);
    }
    if (shape == Shape::chain) {
      return specverify::cuda::verify(rule, d.logits_chain(), randomness, d.chain_out(), d.ws, nullptr);
    }
    if constexpr (!specverify::detail::has_cut<Rule>::value) {
      if (kind == Rows::probs) {
        return specverify::cuda::verify(rule, d.tree(), randomness, d.tree_out(), d.ws, nullptr, launch);
      }
      return specverify::cuda::verify(rule, d.logits_tree(), randomness, d.tree_out(), d.ws, nullptr);
    }
    return cudaErrorInvalidValue;
  };
  if (shape == Shape::chain) {
    d.reserve(kind == Rows::probs ? specverify::cuda::workspace_bytes(rule, d.chain(), d.chain_out())
                                  : specverify::cuda::workspace_bytes(rule, d.logits_chain(), d.chain_out()));
  } else {
    d.reserve(kind == Rows::probs ? specverify::cuda::workspace_bytes(rule, d.tree(), d.tree_out())
                                  : specverify::cuda::workspace_bytes(rule, d.logits_tree(), d.tree_out()));
  }
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start));
  cuda_ok(cudaEventCreate(&stop));
  std::uint64_t step = 0;
  for (auto _ : state) {
    cuda_ok(cudaEventRecord(start));
    cuda_ok(verify(step++));
    cuda_ok(cudaEventRecord(stop));
    cuda_ok(cudaEventSynchronize(stop));
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
  }
  specverify::cuda::check(d.ws, nullptr);
  const std::int64_t bytes = must_read_bytes(rule, d, kind != Rows::probs || shape == Shape::tree);
  const VerifyStats s = specverify::cuda::read_stats(d.ws, nullptr);

  // The plain read of as many bytes, timed the same way.
  float* sink;
  cuda_ok(cudaMalloc(&sink, sizeof(float)));
  int sms = 0;
  cuda_ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  constexpr int kRepeats = 50;
  cuda_ok(cudaEventRecord(start));
  for (int r = 0; r < kRepeats; ++r) {
    read_kernel<<<sms * 8, 256>>>(reinterpret_cast<const float4*>(d.rows), bytes / 16, sink);
  }
  cuda_ok(cudaEventRecord(stop));
  cuda_ok(cudaEventSynchronize(stop));
  float read_ms = 0;
  cuda_ok(cudaEventElapsedTime(&read_ms, start, stop));
  cudaFree(sink);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);

  state.counters["must_read_MB"] = double(bytes) / 1e6;
  state.counters["verify_GB/s"] = benchmark::Counter(double(bytes) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_us"] = read_ms * 1e3 / kRepeats;
  state.counters["read_GB/s"] = double(bytes) / 1e9 / (read_ms * 1e-3 / kRepeats);
  state.counters["accept/draft"] = s.drafted ? double(s.accepted) / double(s.drafted) : 0.0;
}

/// Registers name/B/V/K over the shape matrix (the tree's K is its 32 nodes).
template <class Rule>
void add(const std::string& name, Shape shape, Rows kind, Rule rule, specverify::cuda::Launch launch = {}) {
  auto* b = benchmark::RegisterBenchmark(name.c_str(),
                                         [=](benchmark::State& state) { run(state, shape, kind, rule, launch); });
  b->UseManualTime()->Unit(benchmark::kMicrosecond)->ArgNames({"B", "V", "K"});
  const std::pair<std::int64_t, std::int64_t> vocab_drafts[] = {{32000, 5}, {128256, 8}, {151936, 5}, {262144, 5}};
  for (const auto& [V, K] : vocab_drafts) {
    for (const std::int64_t B : {1, 4, 16, 32, 64, 256}) b->Args({B, V, shape == Shape::tree ? 32 : K});
  }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_cuda: no CUDA device, nothing to measure\n");
    return 0;
  }
  add("chain/probs/Standard", Shape::chain, Rows::probs, Standard{});
  // Side by side: the same walk with one block per sequence (no row split).
  add("chain/probs/Standard/one_block_per_row", Shape::chain, Rows::probs, Standard{}, specverify::cuda::Launch{1});
  add("chain/probs/Greedy", Shape::chain, Rows::probs, Greedy{});
  add("chain/logits_t0.8/Standard", Shape::chain, Rows::logits_t08, Standard{});
  add("chain/logits_topk50_topp0.9/Standard", Shape::chain, Rows::logits_topk_topp, Standard{});
  add("tree32/probs/Standard", Shape::tree, Rows::probs, Standard{});
  add("tree32/logits_topk50_topp0.9/Standard", Shape::tree, Rows::logits_topk_topp, Standard{});
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
