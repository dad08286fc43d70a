// CUDA verify per rule against the memory-bandwidth bound: for each rule, batch size and
// vocabulary (K = 5 drafts per sequence, float rows), the bytes the rule must read (the distinct
// rows its walk needs: the rejecting row pair for a residual draw, every decided row for rules
// with row statistics) divided by the time of one verify, next to a plain read kernel over the
// same number of bytes in the same binary. Prints a note and exits 0 where there is no device.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "specverify/cuda.cuh"

namespace {

using namespace specverify;

constexpr std::int32_t kDrafts = 5;

void cuda_ok(cudaError_t status) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(status));
    std::exit(1);
  }
}

__device__ std::uint32_t mix(std::uint64_t a) {
  a ^= a >> 33;
  a *= 0xff51afd7ed558ccdull;
  a ^= a >> 33;
  a *= 0xc4ceb9fe1a85ec53ull;
  return static_cast<std::uint32_t>(a ^ (a >> 33));
}

/// Heavy-ish rows (unnormalised: verify scales the uniform by the mass) with the drafted token
/// planted high in p, and q = p with noise: chains run a few positions, as real ones do.
__global__ void fill(float* p, float* q, std::int32_t* tokens, std::int32_t B, std::int32_t V) {
  const std::int64_t rows = std::int64_t{B} * (kDrafts + 1), total = rows * V;
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < total;
       e += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t row = e / V;
    const auto v = static_cast<std::int32_t>(e % V);
    const std::int64_t b = row / (kDrafts + 1), j = row % (kDrafts + 1), g = b * kDrafts + j;
    const std::int32_t x = static_cast<std::int32_t>(mix(~g) % V);
    const float logit = 4.0f * (mix(e) * 0x1p-32f) + (j < kDrafts && v == x ? 9.0f : 0.0f);
    p[e] = __expf(logit) / V;
    if (j < kDrafts) {
      q[g * V + v] = __expf(logit + 0.5f * (mix(e ^ 0x5bd1e995) * 0x1p-32f)) / V;
      if (v == 0) tokens[g] = x;
    }
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

struct DeviceBatch {
  std::int32_t B, V;
  float* rows{};  // p, then q: one allocation so the read kernel can read either
  std::int32_t *offsets{}, *tokens{}, *out_tokens{}, *accepted{};
  void* workspace{};
  ChainBatch<float> batch;
  ChainOutput out;
  specverify::cuda::Workspace ws;

  DeviceBatch(std::int32_t b, std::int32_t v) : B(b), V(v) {
    const std::int64_t p_elems = std::int64_t{B} * (kDrafts + 1) * V, q_elems = std::int64_t{B} * kDrafts * V;
    cuda_ok(cudaMalloc(&rows, (p_elems + q_elems) * sizeof(float)));
    cuda_ok(cudaMalloc(&tokens, std::size_t(B) * kDrafts * sizeof(std::int32_t)));
    cuda_ok(cudaMalloc(&offsets, (std::size_t(B) + 1) * sizeof(std::int32_t)));
    cuda_ok(cudaMalloc(&out_tokens, std::size_t(B) * (kDrafts + 1) * sizeof(std::int32_t)));
    cuda_ok(cudaMalloc(&accepted, std::size_t(B) * sizeof(std::int32_t)));
    std::vector<std::int32_t> host_offsets(std::size_t(B) + 1);
    for (std::int32_t i = 0; i <= B; ++i) host_offsets[i] = i * kDrafts;
    cuda_ok(cudaMemcpy(offsets, host_offsets.data(), host_offsets.size() * sizeof(std::int32_t),
                       cudaMemcpyHostToDevice));
    fill<<<1024, 256>>>(rows, rows + p_elems, tokens, B, V);
    batch = ChainBatch<float>{B, V, offsets, tokens, rows, rows + p_elems};
    out = ChainOutput{out_tokens, kDrafts + 1, accepted};
    ws.bytes = specverify::cuda::workspace_bytes(Standard{}, batch);
    cuda_ok(cudaMalloc(&workspace, ws.bytes));
    ws.data = workspace;
    cuda_ok(cudaDeviceSynchronize());
  }
  ~DeviceBatch() {
    for (void* ptr : {static_cast<void*>(rows), static_cast<void*>(offsets), static_cast<void*>(tokens),
                      static_cast<void*>(out_tokens), static_cast<void*>(accepted), workspace}) {
      cudaFree(ptr);
    }
  }
};

/// Distinct row bytes the walk must read, from the chains' outcome (see the file comment).
template <class Rule>
std::int64_t must_read_bytes(const Rule& rule, const DeviceBatch& d) {
  std::vector<std::int32_t> n(static_cast<std::size_t>(d.B));
  cuda_ok(cudaMemcpy(n.data(), d.accepted, n.size() * sizeof(std::int32_t), cudaMemcpyDeviceToHost));
  const RowStats stats = rule_traits<Rule>::stats(rule);
  std::int64_t rows = 0;
  for (const std::int32_t accepted : n) {
    const std::int64_t decided = accepted + (accepted < kDrafts ? 1 : 0);
    if (stats.any()) rows += decided * (stats.divergence ? 2 : 1);
    if (accepted == kDrafts) {
      rows += 1;  // the bonus row
    } else {
      if (!stats.any()) rows += 1;
      if (rule_traits<Rule>::on_reject == Draw::residual && !stats.divergence) rows += 1;
    }
  }
  return rows * d.V * std::int64_t{sizeof(float)};
}

template <class Rule>
void run(benchmark::State& state, Rule rule) {
  DeviceBatch d(static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)));
  cudaEvent_t start, stop;
  cuda_ok(cudaEventCreate(&start));
  cuda_ok(cudaEventCreate(&stop));
  std::uint64_t step = 0;
  for (auto _ : state) {
    cuda_ok(cudaEventRecord(start));
    cuda_ok(specverify::cuda::verify(rule, d.batch, Randomness{42, step++}, d.out, d.ws, nullptr));
    cuda_ok(cudaEventRecord(stop));
    cuda_ok(cudaEventSynchronize(stop));
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, start, stop));
    state.SetIterationTime(ms * 1e-3);
  }
  specverify::cuda::check(d.ws, nullptr);
  const std::int64_t bytes = must_read_bytes(rule, d);
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

template <class Rule>
void add(const char* name, Rule rule) {
  auto* b = benchmark::RegisterBenchmark(name, [rule](benchmark::State& state) { run(state, rule); });
  b->UseManualTime()->Unit(benchmark::kMicrosecond)->ArgNames({"B", "V"});
  for (const std::int64_t V : {32000, 128256}) {
    for (const std::int64_t B : {1, 16, 64, 256}) b->Args({B, V});
  }
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_cuda: no CUDA device, nothing to measure\n");
    return 0;
  }
  add("Standard", Standard{});
  add("Greedy", Greedy{});
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
