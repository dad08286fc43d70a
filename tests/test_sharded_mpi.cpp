// The sharded verify over MPI (run by ctest under `mpirun -np 2` and `-np 4`): each rank verifies its
// slice through MpiCommunicator and must get the unsharded verify's outputs, and every rank the
// same; a bad value in one rank's slice is reported by every rank with the same words. Exits 1,
// naming the case, on any difference.
#include <mpi.h>

#include <cstdio>
#include <functional>
#include <string>

#include "specverify/mpi.hpp"
#include "support/sharded_chains.hpp"
#include "support/sharded_logit_chains.hpp"

namespace sv = specverify;
using namespace specverify::testing::sharded;

namespace {

int g_rank = 0, g_ranks = 1, g_failures = 0;

/// FNV-1a of an outcome, for comparing ranks.
std::uint64_t hash(const Outcome& o) {
  std::uint64_t h = 14695981039346656037ull;
  const auto add = [&](const void* data, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const unsigned char*>(data)[i]) * 1099511628211ull;
  };
  add(o.tokens.data(), o.tokens.size() * sizeof(std::int32_t));
  add(o.accepted.data(), o.accepted.size() * sizeof(std::int32_t));
  add(o.logprobs.data(), o.logprobs.size() * sizeof(float));
  add(&o.stats, sizeof o.stats);
  add(o.error.data(), o.error.size());
  return h;
}

/// Checks this rank's outcome against the unsharded one, and that every rank's is the same.
void expect(const std::string& name, const Outcome& mine, const Outcome& whole) {
  std::uint64_t h = hash(mine);
  std::vector<std::uint64_t> all(static_cast<std::size_t>(g_ranks));
  MPI_Allgather(&h, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  if (!(mine == whole)) {
    ++g_failures;
    std::fprintf(stderr, "rank %d: %s differs from the unsharded verify%s%s\n", g_rank, name.c_str(),
                 mine.error.empty() ? "" : ": ", mine.error.c_str());
  }
  for (std::int32_t r = 1; r < g_ranks; ++r) {
    if (all[r] != all[0] && g_rank == 0) {
      ++g_failures;
      std::fprintf(stderr, "%s: rank %d's outputs differ from rank 0's\n", name.c_str(), r);
    }
  }
}

/// This rank's slice of `c`, verified over MPI.
template <class Rule>
Outcome mpi_verify(const Rule& rule, const Chains& c, const sv::Randomness& r, bool one_hot,
                   const std::vector<std::int32_t>& bounds) {
  const std::int32_t start = bounds[g_rank], size = bounds[g_rank + 1] - bounds[g_rank];
  const std::vector<float> p = slice_rows(c.p, c.V, start, size), q = slice_rows(c.q, c.V, start, size);
  sv::ChainBatch<float> batch{c.B, c.V, c.offsets.data(), c.tokens.data(), size > 0 ? p.data() : nullptr,
                              size > 0 && !one_hot ? (q.empty() ? p.data() : q.data()) : nullptr};
  batch.shard = {g_rank, g_ranks, start, size};
  return capture(c, [&](const sv::ChainOutput& out) {
    return sv::verify(rule, batch, r, out, sv::MpiCommunicator{MPI_COMM_WORLD});
  });
}

/// This rank's slice of a logits batch, verified over MPI.
template <class Rule>
Outcome mpi_verify_logits(const Rule& rule, const LogitChains& c, const sv::Randomness& r, bool one_hot,
                          const std::vector<std::int32_t>& bounds) {
  RankRows rows;
  rank_batch(c, one_hot, bounds, g_rank, Layout::copies, rows);
  return capture(c.shape, [&](const sv::ChainOutput& out) {
    return sv::verify(rule, rows.batch, r, out, sv::MpiCommunicator{MPI_COMM_WORLD});
  });
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_ranks);
  // Every rank draws the same batches and splits from the same seeds.
  std::mt19937_64 rng(11);
  for (const std::int32_t V : {5, 1000, 20000}) {
    const Chains c = make_chains(6, V, 5, Rows::normalised, 31 + V);
    const auto bounds = random_bounds(V, g_ranks, rng);
    every_rule(c, [&](const std::string& name, const auto& rule) {
      for (const bool one_hot : {false, true}) {
        const sv::Randomness r = randomness(c, one_hot);
        expect(name + " V=" + std::to_string(V) + (one_hot ? " one-hot" : ""), mpi_verify(rule, c, r, one_hot, bounds),
               unsharded(rule, c, r, one_hot));
      }
    });
  }
  // Rows of logits with every sampling parameter, guidance, a bitmask, penalties and a bias.
  LogitFeatures everything;
  everything.quantised = everything.guidance = everything.mask = everything.penalties = true;
  everything.draft_params = everything.top_p_alone = true;
  for (const std::int32_t V : {7, 3000}) {
    const LogitChains c = make_logit_chains(5, V, 4, everything, 41 + V, 43 + V);
    const auto bounds = random_bounds(V, g_ranks, rng);
    every_rule(c.shape, [&](const std::string& name, const auto& rule) {
      for (const bool one_hot : {false, true}) {
        const sv::Randomness r = randomness(c.shape, one_hot);
        const sv::LogitsChainBatch<float> whole = c.whole(one_hot);
        const Outcome want = capture(c.shape, [&](const sv::ChainOutput& out) { return sv::verify(rule, whole, r, out); });
        expect("logits " + name + " V=" + std::to_string(V) + (one_hot ? " one-hot" : ""),
               mpi_verify_logits(rule, c, r, one_hot, bounds), want);
      }
    });
  }
  // A NaN in the last rank's slice of every sequence's first row: every rank reports it.
  Chains c = make_chains(3, 64, 3, Rows::normalised, 5);
  for (std::int32_t b = 0; b < c.B; ++b) c.p[static_cast<std::size_t>(c.offsets[b] + b) * c.V + 63] = -2.0f;
  c.tokens.assign(c.tokens.size(), 63);  // read at the draft (sequences without drafts: in the bonus draw)
  const std::vector<std::int32_t> bounds = random_bounds(c.V, g_ranks, rng);
  const Outcome whole = unsharded(sv::Standard{}, c, randomness(c, false), false);
  if (whole.error.empty()) {
    ++g_failures;
    std::fprintf(stderr, "the unsharded verify accepted a negative probability\n");
  }
  expect("bad value", mpi_verify(sv::Standard{}, c, randomness(c, false), false, bounds), whole);

  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0) std::printf("%d ranks: %s\n", g_ranks, failures ? "FAILED" : "every rank matches the unsharded verify");
  MPI_Finalize();
  return failures ? 1 : 0;
}
