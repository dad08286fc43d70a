// Verifying tensor-parallel logits without gathering them: each MPI rank holds a slice of the
// vocabulary of every row (as a model's split LM head produces it) and passes only that slice.
// The ranks exchange summaries of their slices (a few hundred bytes per row), never the rows, and
// every rank gets the outputs the unsharded verify gives on the whole rows.
//
//   mpirun -np 4 build/release/examples/tensor_parallel
#include <mpi.h>
#include <specverify/mpi.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  // One sequence drafted 3 tokens; V = 1000 split into near-equal slices, one per rank.
  const std::int32_t V = 1000, K = 3;
  const std::int32_t offsets[2] = {0, K}, drafts[K] = {7, 42, 7};
  const std::int32_t start = static_cast<std::int32_t>(std::int64_t{V} * rank / ranks);
  const std::int32_t end = static_cast<std::int32_t>(std::int64_t{V} * (rank + 1) / ranks);

  // This rank's columns [start, end) of the K + 1 target rows p and the K draft rows q. A model
  // would hand over its LM head's slice; here p and q are smooth made-up distributions.
  const auto value = [&](std::int32_t row, std::int32_t v, double sharpness) {
    double z = 0;
    for (std::int32_t u = 0; u < V; ++u) z += std::exp(-sharpness * std::abs(u - 7 - 5 * row));
    return static_cast<float>(std::exp(-sharpness * std::abs(v - 7 - 5 * row)) / z);
  };
  std::vector<float> p, q;
  for (std::int32_t row = 0; row <= K; ++row) {
    for (std::int32_t v = start; v < end; ++v) p.push_back(value(row, v, 0.10));
  }
  for (std::int32_t row = 0; row < K; ++row) {
    for (std::int32_t v = start; v < end; ++v) q.push_back(value(row, v, 0.12));
  }

  specverify::ChainBatch<float> batch{1, V, offsets, drafts, p.data(), q.data()};
  batch.shard = {rank, ranks, start, end - start};  // rows are this slice, stride 0 = its length
  std::int32_t tokens[K + 1], accepted = 0;
  specverify::verify(specverify::Standard{}, batch, {/*seed=*/2024, /*step=*/0}, {tokens, K + 1, &accepted},
                     specverify::MpiCommunicator{MPI_COMM_WORLD});

  if (rank == 0) {
    std::printf("%d ranks: kept %d of %d drafts; tokens", ranks, accepted, K);
    for (std::int32_t i = 0; i <= accepted; ++i) std::printf(" %d", tokens[i]);
    std::printf("\n");
  }
  MPI_Finalize();
  return 0;
}
