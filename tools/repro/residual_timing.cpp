// The residual path timed from a plain engine-like program: B sequences, K drafts, V vocabulary,
// softmax rows, every chain rejected at its first draft; best of 5 calls of verify(Standard), in ms.
// Build it twice and compare:  g++ -std=c++17 -O2 -march=native -I include tools/repro/residual_timing.cpp
//                             g++ -std=c++17 -O3 -march=native -I include tools/repro/residual_timing.cpp
// usage: a.out B K V THREADS      (e.g. a.out 64 5 128256 1)
#include <specverify/specverify.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
int main(int argc, char** argv) {
  const int B = std::atoi(argv[1]), K = std::atoi(argv[2]), V = std::atoi(argv[3]), T = std::atoi(argv[4]);
  std::mt19937 rng(1); std::normal_distribution<float> n01;
  std::vector<float> p(size_t(B) * (K + 1) * V), q(size_t(B) * K * V);
  auto softmax_rows = [&](std::vector<float>& a) {
    for (size_t r = 0; r < a.size() / V; ++r) {
      float* row = &a[r * V]; double s = 0;
      for (int v = 0; v < V; ++v) { row[v] = std::exp(n01(rng)); s += row[v]; }
      for (int v = 0; v < V; ++v) row[v] = float(row[v] / s);
    }
  };
  softmax_rows(p); softmax_rows(q);
  std::vector<int> off(B + 1), x(size_t(B) * K), out(size_t(B) * (K + 1)), nacc(B);
  for (int b = 0; b <= B; ++b) off[b] = b * K;
  for (auto& t : x) t = int(rng() % V);
  for (int b = 0; b < B; ++b) { p[size_t(b * (K + 1)) * V + x[b * K]] = 0; q[size_t(b * K) * V + x[b * K]] = 0.5f; }
  specverify::ChainBatch<float> batch{B, V, off.data(), x.data(), p.data(), q.data()};
  specverify::ChainOutput o{out.data(), K + 1, nacc.data()};
  double best = 1e9; long acc = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    acc = specverify::verify(specverify::Standard{}, batch, {1, std::uint64_t(rep)}, o, specverify::CpuOptions{T}).accepted;
    auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  std::printf("specverify B=%d K=%d V=%d threads=%d: %.2f ms (accepted %ld)\n", B, K, V, T, best * 1e3, acc);
}
