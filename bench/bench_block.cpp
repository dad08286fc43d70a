// Block verification against Standard on the same chains (B = 64, K = 5, V = 128256, one
// thread), path by path; the uniforms are chosen per chain to put each on the path named:
//   accepted    u = 0: every draft kept by both (Block needs no mass pass)
//   rejected    u just below 1: both keep nothing; every u_i >= p_i, so Block decides from the
//               values alone and draws from row 0 like Standard
//   rejected_z  Standard keeps nothing; Block is forced through a mass pass at every position it
//               can be (2 .. K-1: u_1 >= p_1 decides position 1) and still keeps nothing: its
//               most expensive walk on Standard's residual path
//   block_keeps Standard keeps nothing, Block keeps K - 1 drafts (u_{K-1} < h_{K-1}) and draws the
//               extra token from the scaled residual max(p_{K-1} P - Q, 0)
//   sampled     drafts sampled from q (draft logits = target logits + N(0, 1)), Philox uniforms:
//               the mix of paths a decode sees (accepted_* count the drafts each kept per step)
// On the four forced paths each draft is its position's most likely token under q with p(x) / q(x)
// in [0.3, 0.7], so every p_i lies strictly in (0, 1) and the h_i are not all 0.
// Counters, per step:
//   block_ms, standard_ms   the fastest step of each; every iteration times Standard, Block and
//                 the two read passes side by side (same load, same cache state); Time is
//                 Block's mean step
//   x_standard    Block's time / Standard's: Block's extra cost
//   x_read        Block's time / a vectorised read of the distinct rows Block must read
//   std_x_read    Standard's time / a read of the rows Standard must read
//   rows_block, rows_standard   the distinct rows each must read per step
// Run: build/release/bench/bench_block
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "read_pass.hpp"
#include "synthetic.hpp"

namespace specverify::bench {
namespace {

constexpr std::int32_t kB = 64, kK = 5, kV = 128256;
constexpr float kJustBelowOne = 0.99999994f;

enum class Path { accepted, rejected, rejected_z, block_keeps, sampled };

/// One batch for every path: tile_batch's rows, drafts chosen as above.
struct Fixture {
  SyntheticBatch s = tile_batch(kB, kK, kV, false, 17);
  std::vector<std::int32_t> sampled_tokens = s.tokens, forced_tokens;
  std::vector<double> weight, h;  // p_i and h_i (i = 1 .. K, chain-major; h_K = p_K)

  Fixture() {
    for (std::int32_t b = 0; b < kB; ++b) {
      for (std::int32_t j = 0; j < kK; ++j) {
        const float *p = p_row(b, j), *q = q_row(b, j);
        std::int32_t best = -1;  // the most likely draft with p(x) / q(x) in [0.3, 0.7]
        for (std::int32_t v = 0; v < kV; ++v) {
          if (p[v] >= 0.3f * q[v] && p[v] <= 0.7f * q[v] && (best < 0 || q[v] > q[best])) best = v;
        }
        s.tokens[std::size_t(b) * kK + j] = best;
      }
      double w = 1;
      for (std::int32_t i = 1; i <= kK; ++i) {
        const std::int32_t x = s.tokens[std::size_t(b) * kK + i - 1];
        w = std::min(w * p_row(b, i - 1)[x] / q_row(b, i - 1)[x], 1.0);
        weight.push_back(w);
      }
      for (std::int32_t i = 1; i <= kK; ++i) {
        const double wi = weight[std::size_t(b) * kK + i - 1];
        if (i == kK) {
          h.push_back(wi);
          break;
        }
        double z = 0;
        for (std::int32_t v = 0; v < kV; ++v) z += std::max(wi * p_row(b, i)[v] - q_row(b, i)[v], 0.0);
        h.push_back(z / (z + 1 - wi));
      }
    }
    forced_tokens = s.tokens;
  }
  const float* p_row(std::int32_t b, std::int32_t j) const { return s.p.data() + (std::size_t(b) * (kK + 1) + j) * kV; }
  const float* q_row(std::int32_t b, std::int32_t j) const { return s.q.data() + (std::size_t(b) * kK + j) * kV; }

  /// The accept uniforms that put every chain on `path`.
  std::vector<float> uniforms(Path path) const {
    std::vector<float> u(std::size_t(kB) * kK, path == Path::accepted ? 0.0f : kJustBelowOne);
    for (std::int32_t b = 0; b < kB; ++b) {
      const std::size_t at = std::size_t(b) * kK;
      if (path == Path::rejected_z) {
        for (std::int32_t i = 2; i < kK; ++i) u[at + i - 1] = float(0.5 * (h[at + i - 1] + weight[at + i - 1]));
      } else if (path == Path::block_keeps) {
        u[at + kK - 2] = float(0.5 * h[at + kK - 2]);
      }
    }
    return u;
  }

  /// Distinct rows each rule must read per step on `path`.
  std::vector<const float*> rows(Path path, bool block) const {
    std::vector<const float*> r;  // none for sampled: that depends on the outcome
    for (std::int32_t b = 0; path != Path::sampled && b < kB; ++b) {
      if (path == Path::accepted) {
        r.push_back(p_row(b, kK));  // the bonus draw
        continue;
      }
      const std::int32_t extra_row = block && path == Path::block_keeps ? kK - 1 : 0;
      r.push_back(p_row(b, extra_row));
      r.push_back(q_row(b, extra_row));
      if (block && path == Path::rejected_z) {
        for (std::int32_t i = 2; i < kK; ++i) {
          r.push_back(p_row(b, i));
          r.push_back(q_row(b, i));
        }
      }
    }
    return r;
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

template <class Body>
double seconds(const Body& body) {
  const auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double read_time(const std::vector<const float*>& rows) {
  return seconds([&] {
    float sum = 0;
    for (const float* row : rows) sum += read_pass(row, kV);
    benchmark::DoNotOptimize(sum);
  });
}

template <class Rule>
VerifyStats step(Fixture& f, const Randomness& r) {
  return verify(Rule{}, f.s.batch(), r, f.s.output(), CpuOptions{1});
}

void BlockVersusStandard(benchmark::State& state, Path path) {
  Fixture& f = fixture();
  const std::vector<float> u = f.uniforms(path);
  Randomness r{3};
  f.s.tokens = path == Path::sampled ? f.sampled_tokens : f.forced_tokens;
  if (path == Path::sampled) {
    state.counters["accepted_standard"] = double(step<Standard>(f, r).accepted);
    state.counters["accepted_block"] = double(step<Block>(f, r).accepted);
  } else {
    r.accept_uniforms = u.data();
  }
  const std::int64_t standard_expected = path == Path::accepted ? std::int64_t{kB} * kK : 0;
  const std::int64_t block_expected =
      path == Path::accepted ? std::int64_t{kB} * kK : path == Path::block_keeps ? std::int64_t{kB} * (kK - 1) : 0;
  if (path != Path::sampled &&
      (step<Standard>(f, r).accepted != standard_expected || step<Block>(f, r).accepted != block_expected)) {
    state.SkipWithError("the batch did not take the intended path");
    return;
  }
  // Each iteration times the four side by side (same load, same cache state); minima compare.
  const auto block_rows = f.rows(path, true), standard_rows = f.rows(path, false);
  double read_block = 1e300, read_standard = 1e300, standard = 1e300, block = 1e300;
  for (auto _ : state) {
    read_standard = std::min(read_standard, read_time(standard_rows));
    standard = std::min(standard, seconds([&] { benchmark::DoNotOptimize(step<Standard>(f, r)); }));
    read_block = std::min(read_block, read_time(block_rows));
    const double t = seconds([&] { benchmark::DoNotOptimize(step<Block>(f, r)); });
    block = std::min(block, t);
    state.SetIterationTime(t);
  }
  state.counters["block_ms"] = block * 1e3;
  state.counters["standard_ms"] = standard * 1e3;
  state.counters["x_standard"] = block / standard;
  if (path == Path::sampled) return;
  state.counters["x_read"] = block / read_block;
  state.counters["std_x_read"] = standard / read_standard;
  state.counters["rows_block"] = double(block_rows.size());
  state.counters["rows_standard"] = double(standard_rows.size());
}

const bool registered = [] {
  const std::pair<const char*, Path> paths[] = {{"accepted", Path::accepted},
                                                {"rejected", Path::rejected},
                                                {"rejected_z", Path::rejected_z},
                                                {"block_keeps", Path::block_keeps},
                                                {"sampled", Path::sampled}};
  for (const auto& [name, path] : paths) {
    const std::string full = std::string("block_vs_standard/") + name + "/B64/K5/V128256";
    benchmark::RegisterBenchmark(full.c_str(), BlockVersusStandard, path)
        ->Unit(benchmark::kMillisecond)
        ->UseManualTime()
        ->MinTime(0.3);
  }
  return true;
}();

}  // namespace
}  // namespace specverify::bench
