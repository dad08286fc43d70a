// Verifies one chain through specverify::mpi as one rank holding the whole vocabulary (MPI's
// singleton start); exits non-zero unless the result is the only possible one (p puts all mass on
// the drafted token, then on token 2).
#include <mpi.h>
#include <specverify/mpi.hpp>

#include <cstdio>

#if defined(CONSUMER_LAYER_ALONE) && __has_include(<Eigen/Dense>)
#error "specverify::mpi put Eigen, the heads' dependency, on the include path"
#endif

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::int32_t offsets[2] = {0, 1}, drafts[1] = {1};
  const float p[2][3] = {{0.0f, 1.0f, 0.0f}, {0.0f, 0.0f, 1.0f}};
  specverify::ChainBatch<float> batch{1, 3, offsets, drafts, &p[0][0], nullptr};
  batch.shard = {0, 1, 0, 3};
  std::int32_t tokens[2], accepted;
  specverify::verify(specverify::Standard{}, batch, {1, 0}, {tokens, 2, &accepted},
                     specverify::MpiCommunicator{MPI_COMM_WORLD});
  std::printf("accepted %d, tokens %d %d\n", accepted, tokens[0], tokens[1]);
  MPI_Finalize();
  return accepted == 1 && tokens[0] == 1 && tokens[1] == 2 ? 0 : 1;
}
