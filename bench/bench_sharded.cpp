// The sharded verify against what engines do today, ranks as MPI processes on this machine:
//   sharded/...  each rank verifies its slice (specverify::verify over MpiCommunicator);
//   gather/...   each rank gathers every row whole (MPI_Allgather of its slices, then the rows put
//                back together), then runs the unsharded verify;
//   read/...     one pass over this rank's slices (the floor of any per-step work on them);
//   sharded_logits/..., gather_logits/...: the same over rows of logits, at T = 0.8 (sampling:0)
//                or top-k 50 + top-p 0.9 (sampling:1);
//   sharded_block/..., gather_block/...: Block verification over probability rows (its two
//                phases of masses Z_i included);
//   sharded_tree/..., gather_tree/...: trees of 16 sampled nodes (TreeStep), whose masses after
//                rejected siblings take 6 rounds of 2 collectives (Standard), or 15 (Traversal:
//                sharded_tree_traversal/..., gather_tree_traversal/...).
// Every other benchmark verifies with Standard.
// Counters: bytes_sent, what one rank sends per step; calls, its collectives per step.
//
//   mpirun -np 4 build/release/bench/bench_sharded --benchmark_counters_tabular=true
//
// Every rank runs the same fixed iterations in lockstep (collectives inside); rank 0 reports.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "read_pass.hpp"
#include "specverify/mpi.hpp"
#include "support.hpp"

namespace sv = specverify;

namespace {

int g_rank = 0, g_ranks = 1;

/// Counts the collectives and bytes one rank makes.
struct CountingCommunicator {
  sv::MpiCommunicator mpi;
  mutable std::int64_t calls = 0, bytes = 0;
  void all_gather(const void* send, std::size_t n, void* recv) const {
    ++calls;
    bytes += static_cast<std::int64_t>(n);
    mpi.all_gather(send, n, recv);
  }
};

/// B chains of K drafts; this rank's slices of their rows (K + 1 target and K draft rows each):
/// probabilities, or with `logits` their logs.
struct Step {
  std::int32_t B, V, K, start, size;
  std::vector<std::int32_t> offsets, tokens;
  std::vector<float> p, q;  // this rank's slices, stride size
  std::vector<sv::SamplingParams> params;

  Step(std::int32_t b, std::int32_t v, std::int32_t k, bool logits = false, std::int64_t sampling = 0)
      : B(b), V(v), K(k), params(static_cast<std::size_t>(b)) {
    start = static_cast<std::int32_t>(std::int64_t{V} * g_rank / g_ranks);
    size = static_cast<std::int32_t>(std::int64_t{V} * (g_rank + 1) / g_ranks) - start;
    std::mt19937_64 rng(5);
    for (std::int32_t s = 0; s <= B; ++s) offsets.push_back(s * K);
    // Eight distinct rows, reused: making 704 rows of 262144 would cost more than the runs.
    std::vector<std::vector<float>> pool;
    for (int i = 0; i < 8; ++i) {
      pool.push_back(sv::testing::random_distribution(V, rng));
      if (logits) {
        for (float& x : pool.back()) x = std::log(x);
      }
    }
    for (sv::SamplingParams& sp : params) {
      sp.temperature = 0.8f;
      if (sampling == 1) {
        sp.top_k = 50;
        sp.top_p = 0.9f;
      }
    }
    for (std::int32_t r = 0; r < B * (K + 1) + B * K; ++r) {
      const std::vector<float>& row = pool[static_cast<std::size_t>(r) % pool.size()];
      auto& into = r < B * (K + 1) ? p : q;
      into.insert(into.end(), row.begin() + start, row.begin() + start + size);
      if (r >= B * (K + 1)) tokens.push_back(static_cast<std::int32_t>(rng() % V));
    }
  }
  std::int64_t rows() const { return std::int64_t{B} * (2 * K + 1); }
};

/// B trees of 16 nodes, drafted by sampling: a root with four children, below them 3, 2 and 1, and
/// deeper ones (depth 4; the most masses one path may ask: 3 + 2 + 1). This rank's slices of their
/// 17 target and 17 draft rows; random tokens, so most children are rejected and the residual
/// after each decides the next.
struct TreeStep {
  static constexpr std::int32_t kNodes = 16, kWidth = 5;
  std::int32_t B, V, start, size;
  std::vector<std::int32_t> offsets, parents, tokens;
  std::vector<float> p, q;  // this rank's slices, stride size

  TreeStep(std::int32_t b, std::int32_t v) : B(b), V(v) {
    start = static_cast<std::int32_t>(std::int64_t{V} * g_rank / g_ranks);
    size = static_cast<std::int32_t>(std::int64_t{V} * (g_rank + 1) / g_ranks) - start;
    std::mt19937_64 rng(6);
    const std::int32_t shape[kNodes] = {-1, -1, -1, -1, 0, 0, 0, 1, 1, 2, 4, 4, 5, 7, 10, 13};
    std::vector<std::vector<float>> pool;
    for (int i = 0; i < 8; ++i) pool.push_back(sv::testing::random_distribution(V, rng));
    for (std::int32_t s = 0; s <= B; ++s) offsets.push_back(s * kNodes);
    for (std::int32_t s = 0; s < B; ++s) {
      parents.insert(parents.end(), shape, shape + kNodes);
      for (std::int32_t i = 0; i < kNodes; ++i) tokens.push_back(static_cast<std::int32_t>(rng() % V));
    }
    for (std::int64_t r = 0; r < 2 * rows_of_each(); ++r) {
      const std::vector<float>& row = pool[static_cast<std::size_t>(r) % pool.size()];
      auto& into = r < rows_of_each() ? p : q;
      into.insert(into.end(), row.begin() + start, row.begin() + start + size);
    }
  }
  std::int64_t rows_of_each() const { return std::int64_t{B} * (kNodes + 1); }
  std::int64_t rows() const { return 2 * rows_of_each(); }
};

template <class S>
void report(benchmark::State& state, const S& s, std::int64_t calls, std::int64_t bytes) {
  state.counters["calls"] = benchmark::Counter(static_cast<double>(calls) / state.iterations());
  state.counters["bytes_sent"] = benchmark::Counter(static_cast<double>(bytes) / state.iterations());
  state.counters["bytes_per_row"] = benchmark::Counter(static_cast<double>(bytes) / state.iterations() / s.rows());
}

/// What engines do before verifying: every rank gathers `rows` rows whole from the ranks' slices
/// (one all_gather, every rank sending the widest slice, as an all_gather must), then puts them
/// back together.
class RowGather {
 public:
  RowGather(std::int32_t V, std::int64_t rows) : V_(V), rows_(rows), sizes_(g_ranks), starts_(g_ranks) {
    for (int r = 0; r < g_ranks; ++r) {
      starts_[r] = static_cast<std::int32_t>(std::int64_t{V} * r / g_ranks);
      sizes_[r] = static_cast<std::int32_t>(std::int64_t{V} * (r + 1) / g_ranks) - starts_[r];
    }
    widest_ = *std::max_element(sizes_.begin(), sizes_.end());
    send_.resize(std::size_t(widest_) * rows);
    all_.resize(send_.size() * g_ranks + 64);
    whole_.resize(std::size_t(rows) * V);
  }
  /// The whole rows from this rank's slices (`size` wide); adds the bytes sent.
  const float* operator()(const std::vector<float>& mine, std::int32_t size, std::int64_t& bytes) {
    for (std::int64_t r = 0; r < rows_; ++r) {
      std::memcpy(&send_[std::size_t(r) * widest_], &mine[std::size_t(r) * size], sizeof(float) * size);
    }
    const int count = static_cast<int>(send_.size());
    MPI_Allgather(send_.data(), count, MPI_FLOAT, all_.data(), count, MPI_FLOAT, MPI_COMM_WORLD);
    bytes += std::int64_t{count} * 4;
    for (int k = 0; k < g_ranks; ++k) {  // [rank][row][slice] -> [row][V]
      for (std::int64_t r = 0; r < rows_; ++r) {
        std::memcpy(&whole_[std::size_t(r) * V_ + starts_[k]], &all_[std::size_t(k) * count + std::size_t(r) * widest_],
                    sizeof(float) * sizes_[k]);
      }
    }
    return whole_.data();
  }

 private:
  std::int32_t V_;
  std::int64_t rows_;
  std::vector<std::int32_t> sizes_, starts_;
  std::int32_t widest_ = 0;
  std::vector<float> send_, all_, whole_;
};

/// The step's batch over rows given as probabilities, or as logits with the step's parameters.
template <bool kLogits>
auto batch_of(const Step& s, const float* p, const float* q) {
  if constexpr (kLogits) {
    sv::LogitsChainBatch<float> batch{s.B, s.V, s.offsets.data(), s.tokens.data(), p, q};
    batch.target_params = s.params.data();
    return batch;
  } else {
    return sv::ChainBatch<float>{s.B, s.V, s.offsets.data(), s.tokens.data(), p, q};
  }
}

template <bool kLogits, class Rule = sv::Standard>
void sharded(benchmark::State& state) {
  const Step s(static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)), 5, kLogits,
               kLogits ? state.range(2) : 0);
  auto batch = batch_of<kLogits>(s, s.p.data(), s.q.data());
  batch.shard = {g_rank, g_ranks, s.start, s.size};
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(s.B * (s.K + 1))), accepted(static_cast<std::size_t>(s.B));
  const CountingCommunicator comm{sv::MpiCommunicator{MPI_COMM_WORLD}};
  std::uint64_t step = 0;
  for (auto _ : state) {
    sv::verify(Rule{}, batch, {7, step++}, {tokens.data(), s.K + 1, accepted.data()}, comm, {1});
    benchmark::DoNotOptimize(tokens.data());
  }
  report(state, s, comm.calls, comm.bytes);
}

template <bool kLogits, class Rule = sv::Standard>
void gather(benchmark::State& state) {
  const Step s(static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)), 5, kLogits,
               kLogits ? state.range(2) : 0);
  RowGather p(s.V, std::int64_t{s.B} * (s.K + 1)), q(s.V, std::int64_t{s.B} * s.K);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(s.B * (s.K + 1))), accepted(static_cast<std::size_t>(s.B));
  std::int64_t bytes = 0;
  std::uint64_t step = 0;
  for (auto _ : state) {
    const float* p_whole = p(s.p, s.size, bytes);
    const float* q_whole = q(s.q, s.size, bytes);
    const auto batch = batch_of<kLogits>(s, p_whole, q_whole);
    sv::verify(Rule{}, batch, {7, step++}, {tokens.data(), s.K + 1, accepted.data()}, sv::CpuOptions{1});
    benchmark::DoNotOptimize(tokens.data());
  }
  report(state, s, 2 * state.iterations(), bytes);
}

template <class Rule>
void sharded_tree(benchmark::State& state) {
  const TreeStep s(static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)));
  sv::TreeBatch<float> batch{s.B, s.V, s.offsets.data(), s.parents.data(), s.tokens.data(), s.p.data(), s.q.data()};
  batch.shard = {g_rank, g_ranks, s.start, s.size};
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(s.B * s.kWidth)), accepted(static_cast<std::size_t>(s.B));
  const CountingCommunicator comm{sv::MpiCommunicator{MPI_COMM_WORLD}};
  std::uint64_t step = 0;
  for (auto _ : state) {
    sv::verify(Rule{}, batch, {7, step++}, {tokens.data(), s.kWidth, accepted.data()}, comm, {1});
    benchmark::DoNotOptimize(tokens.data());
  }
  report(state, s, comm.calls, comm.bytes);
}

template <class Rule>
void gather_tree(benchmark::State& state) {
  const TreeStep s(static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)));
  RowGather p(s.V, s.rows_of_each()), q(s.V, s.rows_of_each());
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(s.B * s.kWidth)), accepted(static_cast<std::size_t>(s.B));
  std::int64_t bytes = 0;
  std::uint64_t step = 0;
  for (auto _ : state) {
    const float* p_whole = p(s.p, s.size, bytes);
    const float* q_whole = q(s.q, s.size, bytes);
    const sv::TreeBatch<float> batch{s.B, s.V, s.offsets.data(), s.parents.data(), s.tokens.data(), p_whole, q_whole};
    sv::verify(Rule{}, batch, {7, step++}, {tokens.data(), s.kWidth, accepted.data()}, sv::CpuOptions{1});
    benchmark::DoNotOptimize(tokens.data());
  }
  report(state, s, 2 * state.iterations(), bytes);
}

void read(benchmark::State& state) {
  const Step s(static_cast<std::int32_t>(state.range(0)), static_cast<std::int32_t>(state.range(1)), 5);
  for (auto _ : state) {
    benchmark::DoNotOptimize(specverify::bench::read_pass(s.p.data(), static_cast<std::int32_t>(s.p.size())));
    benchmark::DoNotOptimize(specverify::bench::read_pass(s.q.data(), static_cast<std::int32_t>(s.q.size())));
  }
  report(state, s, 0, 0);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "V"})->Unit(benchmark::kMicrosecond)->Iterations(40);
  for (const std::int64_t V : {128256, 151936, 262144}) {
    for (const std::int64_t B : {1, 16, 64}) b->Args({B, V});
  }
}

void logit_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "V", "sampling"})->Unit(benchmark::kMicrosecond)->Iterations(20);
  for (const std::int64_t sampling : {0, 1}) {
    for (const std::int64_t B : {1, 16, 64}) b->Args({B, 128256, sampling});
  }
}

void block_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "V"})->Unit(benchmark::kMicrosecond)->Iterations(40);
  for (const std::int64_t B : {1, 16, 64}) b->Args({B, 128256});
}

BENCHMARK_TEMPLATE(sharded, false)->Name("sharded")->Apply(shapes);
BENCHMARK_TEMPLATE(gather, false)->Name("gather")->Apply(shapes);
BENCHMARK(read)->Apply(shapes);
BENCHMARK_TEMPLATE(sharded, true)->Name("sharded_logits")->Apply(logit_shapes);
BENCHMARK_TEMPLATE(gather, true)->Name("gather_logits")->Apply(logit_shapes);
BENCHMARK_TEMPLATE(sharded, false, sv::Block)->Name("sharded_block")->Apply(block_shapes);
BENCHMARK_TEMPLATE(gather, false, sv::Block)->Name("gather_block")->Apply(block_shapes);
BENCHMARK_TEMPLATE(sharded_tree, sv::Standard)->Name("sharded_tree")->Apply(block_shapes);
BENCHMARK_TEMPLATE(gather_tree, sv::Standard)->Name("gather_tree")->Apply(block_shapes);
BENCHMARK_TEMPLATE(sharded_tree, sv::Traversal)->Name("sharded_tree_traversal")->Apply(block_shapes);
BENCHMARK_TEMPLATE(gather_tree, sv::Traversal)->Name("gather_tree_traversal")->Apply(block_shapes);

/// Ranks other than 0 run the same benchmarks silently.
class Silent : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks);
  benchmark::Initialize(&argc, argv);
  if (g_rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    Silent silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
