// The sharded verify's collective over MPI (docs/api.md "Sharded vocabulary"), CMake target
// specverify::mpi: every rank of `comm` passes its slice of the rows.
//
//   specverify::ChainBatch<float> batch{B, V, offsets, drafts, p_slice, q_slice};
//   batch.shard = {rank, ranks, vocab_start, local_vocab_size};
//   specverify::verify(specverify::Standard{}, batch, {seed, step}, out,
//                      specverify::MpiCommunicator{MPI_COMM_WORLD});
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "specverify/specverify.hpp"

namespace specverify {

/// all_gather as MPI_Allgather of bytes over `comm` (the ranks of the communicator are the shards'
/// ranks, in order).
struct MpiCommunicator {
  MPI_Comm comm = MPI_COMM_WORLD;

  void all_gather(const void* send, std::size_t bytes, void* recv) const {
    // Messages are a few hundred bytes per row; MPI counts are int.
    if (bytes > static_cast<std::size_t>(INT_MAX)) {
      throw std::length_error("MpiCommunicator: a message of " + std::to_string(bytes) + " bytes exceeds MPI's int count");
    }
    const int count = static_cast<int>(bytes);
    const int rc = MPI_Allgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, comm);
    if (rc != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int length = 0;
      MPI_Error_string(rc, text, &length);
      throw std::runtime_error("MpiCommunicator: MPI_Allgather failed: " + std::string(text, static_cast<std::size_t>(length)));
    }
  }
};

}  // namespace specverify
