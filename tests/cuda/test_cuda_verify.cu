// The CUDA backend against the CPU one: identical tokens, counts and statistics on random ragged
// batches for every rule (float, and __half / __nv_bfloat16 against the CPU on the converted
// rows), exactness of Standard on the GPU, every bad input of the CPU suite reported by check()
// with no output written, and CUDA-graph replay with seed and offset read from device memory.
// Every test skips where there is no CUDA device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "specverify/cuda.cuh"
#include "bad_inputs.hpp"
#include "support.hpp"
#include "typical_acceptance.hpp"

namespace specverify {
namespace {

using ::testing::HasSubstr;
using testing::Chains;

bool has_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

#define REQUIRE_DEVICE() \
  if (!has_device()) GTEST_SKIP() << "no CUDA device"

void cuda_ok(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error(cudaGetErrorString(status));
}

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host) { assign(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data_); }

  void assign(const std::vector<T>& host) {
    if (host.size() != size_) {
      cudaFree(data_);
      data_ = nullptr;
      size_ = host.size();
      if (size_) cuda_ok(cudaMalloc(&data_, size_ * sizeof(T)));
    }
    if (size_) cuda_ok(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> read() const {
    std::vector<T> host(size_);
    if (size_) cuda_ok(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

template <class Prob>
std::vector<Prob> convert(const std::vector<float>& v) {
  std::vector<Prob> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<Prob, __half>) {
      out[i] = __float2half_rn(v[i]);
    } else if constexpr (std::is_same_v<Prob, __nv_bfloat16>) {
      out[i] = __float2bfloat16_rn(v[i]);
    } else {
      out[i] = v[i];
    }
  }
  return out;
}

/// Rows rounded to Prob and back: what the CPU sees to reproduce a __half or bf16 run.
template <class Prob>
std::vector<float> rounded(const std::vector<float>& v) {
  const std::vector<Prob> low = convert<Prob>(v);
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<Prob, float>) {
      out[i] = low[i];
    } else if constexpr (std::is_same_v<Prob, __half>) {
      out[i] = __half2float(low[i]);
    } else {
      out[i] = __bfloat162float(low[i]);
    }
  }
  return out;
}

/// A Chains batch on the device, its randomness arrays, outputs (filled with 12345) and workspace.
template <class Prob = float>
struct DeviceChains {
  DeviceArray<std::int32_t> offsets, tokens, out_tokens, accepted;
  DeviceArray<Prob> p, q;
  DeviceArray<std::uint64_t> seeds;
  DeviceArray<float> accept_u, sample_u;
  DeviceArray<unsigned char> workspace_data;
  ChainBatch<Prob> batch;
  ChainOutput out;
  cuda::Workspace workspace;

  explicit DeviceChains(const Chains& c) { upload(c); }

  void upload(const Chains& c) {
    offsets.assign(c.offsets);
    tokens.assign(c.tokens);
    p.assign(convert<Prob>(c.p));
    q.assign(convert<Prob>(c.q));
    const ChainBatch<float> host = c.batch();
    batch = ChainBatch<Prob>{host.batch_size, host.vocab_size, offsets.get(), tokens.get(), p.get(),
                             c.one_hot ? nullptr : q.get()};
    out_tokens.assign(std::vector<std::int32_t>(std::size_t(c.size()) * c.width, 12345));
    accepted.assign(std::vector<std::int32_t>(std::size_t(c.size()), 12345));
    out = ChainOutput{out_tokens.get(), c.width, accepted.get()};
    const std::size_t bytes = cuda::workspace_bytes(Standard{}, batch);
    workspace_data.assign(std::vector<unsigned char>(bytes));
    workspace = cuda::Workspace{workspace_data.get(), bytes};
  }

  /// The host randomness with its arrays copied to the device.
  Randomness on_device(const Randomness& r, const Chains& c) {
    Randomness d = r;
    const auto B = std::size_t(c.size());
    if (r.sequence_seeds) {
      seeds.assign(std::vector<std::uint64_t>(r.sequence_seeds, r.sequence_seeds + B));
      d.sequence_seeds = seeds.get();
    }
    if (r.accept_uniforms) {
      accept_u.assign(std::vector<float>(r.accept_uniforms, r.accept_uniforms + c.tokens.size()));
      d.accept_uniforms = accept_u.get();
    }
    if (r.sample_uniforms) {
      sample_u.assign(std::vector<float>(r.sample_uniforms, r.sample_uniforms + B));
      d.sample_uniforms = sample_u.get();
    }
    return d;
  }
};

/// Runs `rule` on the CPU (on `cpu_chains`) and on the GPU (on `gpu_chains` as Prob) and expects
/// the same tokens, counts and statistics. Returns the GPU's tokens.
template <class Prob = float, class Rule>
std::vector<std::int32_t> expect_same(const Rule& cpu_rule, const Rule& gpu_rule, Chains& cpu_chains,
                                      const Chains& gpu_chains, const Randomness& r) {
  const VerifyStats cpu_stats = verify(cpu_rule, cpu_chains.batch(), r, cpu_chains.output());
  DeviceChains<Prob> d(gpu_chains);
  cuda_ok(cuda::verify(gpu_rule, d.batch, d.on_device(r, gpu_chains), d.out, d.workspace, nullptr));
  cuda::check(d.workspace, nullptr);
  const VerifyStats gpu_stats = cuda::read_stats(d.workspace, nullptr);
  const auto tokens = d.out_tokens.read();
  EXPECT_EQ(tokens, cpu_chains.out_tokens);
  EXPECT_EQ(d.accepted.read(), cpu_chains.accepted);
  EXPECT_EQ(gpu_stats.drafted, cpu_stats.drafted);
  EXPECT_EQ(gpu_stats.accepted, cpu_stats.accepted);
  EXPECT_EQ(gpu_stats.relaxed, cpu_stats.relaxed);
  EXPECT_EQ(gpu_stats.target_checked, cpu_stats.target_checked);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_GE(tokens[i], kNoToken);
    EXPECT_LT(tokens[i], cpu_chains.V);
  }
  return tokens;
}

template <class Rule>
std::vector<std::int32_t> expect_same(const Rule& rule, Chains& c, const Randomness& r) {
  return expect_same<float>(rule, rule, c, c, r);
}

/// Reads every row statistic, so a CPU/GPU difference in any of them changes tokens.
struct Probe {
  static constexpr Draw on_reject = Draw::target;
  Divergence kind = Divergence::tv;
  float threshold = 0.3f;
  SPECVERIFY_HD RowStats stats() const {
    RowStats s;
    s.max = s.argmax = s.entropy = s.divergence = true;
    s.kind = kind;
    return s;
  }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    const bool close = at.divergence <= threshold;
    const bool confident = at.p_x >= 0.5f * at.p_max && at.entropy < 2.5f;
    const bool accepted = at.p_x > 0 && (close || confident || at.token == at.p_argmax);
    return {accepted, accepted && !Decision::standard_test(at), true};
  }
};

/// A user's rule with per-draft inputs checked on the device (a SPRINTER-like verifier path).
struct Scored {
  static constexpr Draw on_reject = Draw::residual;
  const float* scores{};
  float eta = 0.5f;
  SPECVERIFY_HD Problem check_draft(std::int32_t g) const {
    return scores[g] >= 0.0f && scores[g] <= 1.0f ? Problem{} : Problem{"verifier_scores", scores[g]};
  }
  SPECVERIFY_HD Decision decide(const Position& at) const {
    if (at.p_x > 0 && scores[at.draft] >= eta) return {true, !Decision::standard_test(at), false};
    return Decision::exact(Decision::standard_test(at));
  }
};

/// Ragged chains (k_b in [0, max_k]) over top-k-masked LLM-like rows; drafts drawn from q, or for
/// one-hot drafts from p, with a few drafts the target masked out.
Chains random_chains(std::int32_t B, std::int32_t V, std::int32_t max_k, bool one_hot,
                     std::mt19937_64& rng) {
  Chains c(V, one_hot);
  std::uniform_int_distribution<std::int32_t> length(0, max_k), any(0, V - 1);
  std::normal_distribution<double> noise(0.0, 1.0);
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t k = length(rng);
    std::vector<std::vector<float>> ps, qs;
    std::vector<std::int32_t> xs;
    for (std::int32_t j = 0; j <= k; ++j) {
      auto logits = testing::random_logits(V, rng);
      auto p = testing::softmax(logits);
      if (V > 8 && j % 2) {  // mask the tail, as top-k does
        for (std::int32_t v = 0; v < V; v += 3) p[v] = 0.0f;
      }
      ps.push_back(p);
      if (j == k) break;
      for (auto& l : logits) l += noise(rng);
      qs.push_back(testing::softmax(logits));
      const bool masked_draft = any(rng) % 7 == 0;
      xs.push_back(masked_draft ? any(rng) : testing::sample(one_hot ? p : qs.back(), rng));
    }
    c.add(xs, ps, qs);
  }
  return c;
}

struct Shape {
  std::int32_t B, V, max_k;
  bool one_hot;
};

class CpuMatch : public ::testing::TestWithParam<Shape> {};

TEST_P(CpuMatch, EveryRuleGivesTheCpuTokens) {
  REQUIRE_DEVICE();
  const Shape s = GetParam();
  std::mt19937_64 rng(s.V * 31 + s.B);
  Chains c = random_chains(s.B, s.V, s.max_k, s.one_hot, rng);
  std::vector<std::uint64_t> seeds(std::size_t(c.size()));
  for (auto& seed : seeds) seed = rng();
  for (std::uint64_t step = 0; step < 3; ++step) {
    Randomness r{1234, step};
    if (step == 2) r.sequence_seeds = seeds.data();
    expect_same(Standard{}, c, r);
    expect_same(Greedy{}, c, r);
    for (const Divergence d : {Divergence::kl_target_draft, Divergence::kl_draft_target,
                               Divergence::js, Divergence::js_fsd, Divergence::tv}) {
      expect_same(Probe{d, 0.3f}, c, r);
    }
    std::vector<float> scores(c.tokens.size());
    for (auto& v : scores) v = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
    DeviceArray<float> d_scores(scores);
    expect_same<float>(Scored{scores.data(), 0.6f}, Scored{d_scores.get(), 0.6f}, c, c, r);

    // The library's relaxed rules and the user rule of examples/, unchanged on the device.
    expect_same(Ears{0.3f}, c, r);
    expect_same(TypicalAcceptance{}, c, r);
    for (const Divergence d : {Divergence::kl_draft_target, Divergence::js, Divergence::tv}) {
      expect_same(Fsd{d, 0.3f}, c, r);
      expect_same(ReducibleFsd{d, 0.1f}, c, r);
    }
    expect_same<float>(Sprinter{0.6f, scores.data()}, Sprinter{0.6f, d_scores.get()}, c, c, r);
    expect_same<float>(SpecDecPP<Ears>{0.5f, scores.data(), Ears{0.2f}},
                       SpecDecPP<Ears>{0.5f, d_scores.get(), Ears{0.2f}}, c, c, r);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuMatch,
                         ::testing::Values(Shape{5, 1, 3, false}, Shape{37, 7, 6, false},
                                           Shape{37, 7, 6, true}, Shape{40, 1000, 5, false},
                                           Shape{24, 4099, 5, true}, Shape{16, 70000, 4, false},
                                           Shape{3, 300000, 2, false}),
                         [](const auto& info) {
                           return "B" + std::to_string(info.param.B) + "_V" +
                                  std::to_string(info.param.V) +
                                  (info.param.one_hot ? "_onehot" : "_dense");
                         });

template <class Prob>
void expect_low_precision_matches_cpu() {
  std::mt19937_64 rng(77);
  for (const bool one_hot : {false, true}) {
    Chains c = random_chains(32, 5000, 5, one_hot, rng);
    Chains cpu = c;
    cpu.p = rounded<Prob>(c.p);
    cpu.q = rounded<Prob>(c.q);
    for (std::uint64_t step = 0; step < 3; ++step) {
      expect_same<Prob>(Standard{}, Standard{}, cpu, c, Randomness{99, step});
      expect_same<Prob>(Greedy{}, Greedy{}, cpu, c, Randomness{99, step});
      expect_same<Prob>(Probe{Divergence::js}, Probe{Divergence::js}, cpu, c, Randomness{99, step});
    }
  }
}

TEST(LowPrecision, HalfRowsGiveTheCpuTokensOnTheConvertedRows) {
  REQUIRE_DEVICE();
  expect_low_precision_matches_cpu<__half>();
}

TEST(LowPrecision, Bfloat16RowsGiveTheCpuTokensOnTheConvertedRows) {
  REQUIRE_DEVICE();
  expect_low_precision_matches_cpu<__nv_bfloat16>();
}

/// Draft = softmax(-target logits), V = 16, 200k chains: a biased residual or a shared stream
/// shows up as a large chi-square (LESSONS.md "Correctness").
TEST(Exactness, StandardWithAdversarialReversedDraftFollowsTarget) {
  REQUIRE_DEVICE();
  constexpr std::int32_t V = 16, K = 3, kBatch = 8192;
  constexpr std::int64_t kTrials = 200000;
  std::mt19937_64 rng(5);
  std::vector<std::vector<float>> p, q;
  for (std::int32_t j = 0; j <= K; ++j) {
    const auto logits = testing::random_logits(V, rng, 1.5);
    p.push_back(testing::softmax(logits));
    if (j < K) {
      std::vector<double> negated(logits);
      for (auto& l : negated) l = -l;
      q.push_back(testing::softmax(negated));
      ASSERT_LT(testing::overlap(p[j], q[j]), 0.5) << "not adversarial enough at " << j;
    }
  }
  Chains c(V);
  for (std::int32_t b = 0; b < kBatch; ++b) c.add(std::vector<std::int32_t>(K), p, q);
  DeviceChains<float> d(c);
  std::vector<std::vector<std::int64_t>> emitted(K + 1, std::vector<std::int64_t>(V));
  std::vector<std::int64_t> reached(K + 1);
  for (std::int64_t done = 0, call = 0; done < kTrials; done += kBatch, ++call) {
    for (std::int32_t b = 0; b < kBatch; ++b) {
      for (std::int32_t j = 0; j < K; ++j) c.tokens[std::size_t(b) * K + j] = testing::sample(q[j], rng);
    }
    d.tokens.assign(c.tokens);
    cuda_ok(cuda::verify(Standard{}, d.batch, Randomness{7, std::uint64_t(call)}, d.out, d.workspace, nullptr));
    cuda::check(d.workspace, nullptr);
    const auto tokens = d.out_tokens.read();
    const auto accepted = d.accepted.read();
    for (std::int32_t b = 0; b < kBatch; ++b) {
      for (std::int32_t i = 0; i <= accepted[b]; ++i) {
        const std::int32_t t = tokens[std::size_t(b) * c.width + i];
        ASSERT_GE(t, 0);
        ASSERT_LT(t, V);
        ++emitted[i][t];
        ++reached[i];
      }
    }
  }
  for (std::int32_t i = 0; i <= K; ++i) {
    if (reached[i] < 10 * V) continue;
    const auto chi = testing::chi_square(emitted[i], p[i]);
    EXPECT_TRUE(chi.fits()) << "position " << i << ": chi2 " << chi.statistic << " with df " << chi.df;
  }
}

// ---- Bad input: check() names it, and no output is written ----

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <class Rule = Standard>
void expect_reported(const Chains& c, const Randomness& r,
                     std::initializer_list<const char*> fragments, Rule rule = {}) {
  DeviceChains<float> d(c);
  cuda_ok(cuda::verify(rule, d.batch, d.on_device(r, c), d.out, d.workspace, nullptr));
  try {
    cuda::check(d.workspace, nullptr);
    ADD_FAILURE() << "no invalid_input";
  } catch (const invalid_input& e) {
    for (const char* f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
  for (auto t : d.out_tokens.read()) ASSERT_EQ(t, 12345) << "output written despite the fault";
  for (auto n : d.accepted.read()) ASSERT_EQ(n, 12345) << "output written despite the fault";
  const VerifyStats s = cuda::read_stats(d.workspace, nullptr);
  EXPECT_EQ(s.drafted, 0);
}

using testing::nan_in_residual_row;
using testing::two_sequences;
using testing::uniform_row;

TEST(BadInput, NaNInAResidualRowIsNamed) {
  REQUIRE_DEVICE();
  for (const bool all_nan : {false, true}) {
    Chains c = nan_in_residual_row(all_nan);
    expect_reported(c, Randomness{}, {"sequence 1", "position 0", "nan", all_nan ? "token 2" : "token 60"});
  }
}

TEST(BadInput, NaNInfOrNegativeProbabilityOfTheDraftIsNamed) {
  REQUIRE_DEVICE();
  for (const float v : {kNaN, kInf, -0.5f}) {
    Chains c = two_sequences();
    c.p[c.V * 3 + 3] = v;
    expect_reported(c, Randomness{}, {"sequence 1", "position 0", "token 3"});
  }
}

TEST(BadInput, AllZeroTargetRowToDrawFromIsNamed) {
  REQUIRE_DEVICE();
  Chains c = two_sequences();
  std::fill(c.p.begin() + c.V * 4, c.p.begin() + c.V * 5, 0.0f);
  c.tokens[2] = 0;
  expect_reported(c, Randomness{}, {"sequence 1", "position 1", "no mass"}, Greedy{});
}

TEST(BadInput, TokensOutsideTheVocabularyAreNamed) {
  REQUIRE_DEVICE();
  for (const std::int32_t x : {-1, 8, 1 << 30}) {
    Chains c = two_sequences();
    c.tokens[1] = x;
    expect_reported(c, Randomness{}, {"sequence 0", "position 1", std::to_string(x).c_str()});
  }
}

TEST(BadInput, OffsetsMustStartAtZeroAndNotDecrease) {
  REQUIRE_DEVICE();
  Chains c = two_sequences();
  c.offsets = {1, 2, 3};
  expect_reported(c, Randomness{}, {"draft_offsets[0] = 1"});
  c.offsets = {0, 2, 1};
  expect_reported(c, Randomness{}, {"sequence 1", "decrease"});
  c.offsets = {0, 5, 3};  // sequence 0 would read past the drafts: the decrease is named
  expect_reported(c, Randomness{}, {"sequence 1", "decrease"});
  c.offsets = {-4, 1, 3};
  expect_reported(c, Randomness{}, {"draft_offsets[0] = -4"});
}

TEST(BadInput, RowWidthMustHoldEveryChainPlusOne) {
  REQUIRE_DEVICE();
  Chains c = two_sequences();
  c.width = 2;
  expect_reported(c, Randomness{}, {"row_width = 2", "3"});
}

TEST(BadInput, CallerUniformsMustLieInHalfOpenUnitInterval) {
  REQUIRE_DEVICE();
  for (const float u : {1.0f, -0.25f, kNaN}) {
    Chains c = two_sequences();
    float accept[3] = {0.5f, 0.5f, 0.5f};
    accept[2] = u;
    Randomness r;
    r.accept_uniforms = accept;
    expect_reported(c, r, {"sequence 1", "position 0", "accept uniform"});
    const float sample[2] = {0.5f, u};
    Randomness s;
    s.sample_uniforms = sample;
    expect_reported(c, s, {"sequence 1", "sample uniform"});
  }
}

TEST(BadInput, RulePerDraftInputsAreCheckedOnTheDevice) {
  REQUIRE_DEVICE();
  Chains c = two_sequences();
  DeviceArray<float> scores(std::vector<float>{0.5f, 0.5f, 1.5f});
  expect_reported(c, Randomness{}, {"sequence 1", "position 0", "verifier_scores = 1.5"},
                  Scored{scores.get(), 0.5f});
}

TEST(BadInput, ShapesPointersAndWorkspaceThrowFromVerify) {
  REQUIRE_DEVICE();
  const Chains c = two_sequences();
  DeviceChains<float> d(c);
  const auto expect_thrown = [&](ChainBatch<float> b, const char* fragment,
                                 cuda::Workspace w) {
    try {
      (void)cuda::verify(Standard{}, b, Randomness{}, d.out, w, nullptr);
      ADD_FAILURE() << "no invalid_input for " << fragment;
    } catch (const invalid_input& e) {
      EXPECT_THAT(e.what(), HasSubstr(fragment));
    }
  };
  ChainBatch<float> b = d.batch;
  b.batch_size = -1;
  expect_thrown(b, "batch_size = -1", d.workspace);
  b = d.batch;
  b.vocab_size = 0;
  expect_thrown(b, "vocab_size = 0", d.workspace);
  b = d.batch;
  b.target_probs = nullptr;
  expect_thrown(b, "target_probs is null", d.workspace);
  b = d.batch;
  b.target_stride = 4;
  expect_thrown(b, "target_stride = 4", d.workspace);
  expect_thrown(d.batch, "workspace", cuda::Workspace{d.workspace.data, 16});
  for (auto t : d.out_tokens.read()) ASSERT_EQ(t, 12345);
}

TEST(BadInput, NullDraftTokensAndHugeStridesAreReportedFromTheDevice) {
  REQUIRE_DEVICE();
  const Chains c = two_sequences();
  DeviceChains<float> d(c);
  ChainBatch<float> b = d.batch;
  b.draft_tokens = nullptr;
  cuda_ok(cuda::verify(Standard{}, b, Randomness{}, d.out, d.workspace, nullptr));
  EXPECT_THROW(cuda::check(d.workspace, nullptr), invalid_input);
  b = d.batch;
  b.draft_stride = std::int64_t{1} << 62;
  cuda_ok(cuda::verify(Standard{}, b, Randomness{}, d.out, d.workspace, nullptr));
  try {
    cuda::check(d.workspace, nullptr);
    ADD_FAILURE() << "no invalid_input";
  } catch (const invalid_input& e) {
    EXPECT_THAT(e.what(), HasSubstr("draft_stride"));
    EXPECT_THAT(e.what(), HasSubstr("overflows"));
  }
  for (auto t : d.out_tokens.read()) ASSERT_EQ(t, 12345);
}

TEST(BadInput, AFaultIsClearedByTheNextGoodVerify) {
  REQUIRE_DEVICE();
  Chains c = two_sequences();
  c.tokens[1] = 99;
  DeviceChains<float> d(c);
  cuda_ok(cuda::verify(Standard{}, d.batch, Randomness{}, d.out, d.workspace, nullptr));
  EXPECT_THROW(cuda::check(d.workspace, nullptr), invalid_input);
  c.tokens[1] = 2;
  d.tokens.assign(c.tokens);
  cuda_ok(cuda::verify(Standard{}, d.batch, Randomness{}, d.out, d.workspace, nullptr));
  EXPECT_NO_THROW(cuda::check(d.workspace, nullptr));
}

TEST(BadInput, EmptyBatchIsValidAndWritesNothing) {
  REQUIRE_DEVICE();
  DeviceArray<unsigned char> data(std::vector<unsigned char>(cuda::workspace_bytes(Standard{}, ChainBatch<float>{})));
  ChainBatch<float> b;
  b.vocab_size = 5;
  const cuda::Workspace w{data.get(), cuda::workspace_bytes(Standard{}, b)};
  cuda_ok(cuda::verify(Standard{}, b, Randomness{}, ChainOutput{}, w, nullptr));
  cuda::check(w, nullptr);
  EXPECT_EQ(cuda::read_stats(w, nullptr).drafted, 0);
}

// ---- The documented edge cases give the CPU's tokens ----

TEST(EdgeCases, ZeroUniformNeverAcceptsATokenTheTargetExcludes) {
  REQUIRE_DEVICE();
  constexpr std::int32_t V = 4;
  const std::vector<float> p{0.5f, 0.0f, 0.5f, 0.0f}, q{0.25f, 0.25f, 0.25f, 0.25f};
  for (const bool one_hot : {false, true}) {
    Chains c(V, one_hot);
    c.add({1}, {p, p}, {q});
    c.add({3}, {p, p}, {std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}});
    const float zeros[2] = {0.0f, 0.0f};
    Randomness r;
    r.accept_uniforms = zeros;
    expect_same(Standard{}, c, r);
    for (std::int32_t b = 0; b < 2; ++b) EXPECT_EQ(c.accepted[b], 0);
  }
}

TEST(EdgeCases, ZeroMassResidualAndOneHotTargetOnTheRejectedToken) {
  REQUIRE_DEVICE();
  Chains c(1000);
  std::vector<float> p(1000, 0.0f), q(1000, 0.0f);
  p[777] = 1.0f;
  q[777] = 2.0f;
  for (int b = 0; b < 64; ++b) c.add({777}, {p, p}, {q});
  std::vector<float> u(64, 0.9f);
  Randomness r;
  r.accept_uniforms = u.data();
  const auto tokens = expect_same(Standard{}, c, r);
  for (int b = 0; b < 64; ++b) EXPECT_EQ(tokens[std::size_t(b) * c.width], 777);
}

TEST(EdgeCases, ExtraTokenIsInVocabularyForTailHeavyRows) {
  REQUIRE_DEVICE();
  for (const std::int32_t V : {37, 5000}) {
    std::vector<float> p(std::size_t(V), 0.0f), q(std::size_t(V), 0.0f);
    p[V - 1] = 1.0f;
    q[0] = 1.0f;
    Chains c(V);
    for (int b = 0; b < 100; ++b) c.add({0, 0, 0}, {p, p, p, p}, {q, q, q});
    const auto tokens = expect_same(Standard{}, c, Randomness{3});
    for (int b = 0; b < c.size(); ++b) EXPECT_EQ(tokens[std::size_t(b) * c.width], V - 1);
  }
}

// ---- CUDA graphs: seed and offset read from device memory at replay ----

TEST(Graph, CapturedVerifyReplaysWithDeviceSeedAndOffsetLikeEagerRuns) {
  REQUIRE_DEVICE();
  std::mt19937_64 rng(3);
  const Chains c = random_chains(48, 3000, 5, false, rng);
  DeviceChains<float> d(c);
  DeviceArray<std::uint64_t> seed(std::vector<std::uint64_t>{0}), offset(std::vector<std::uint64_t>{0});
  cudaStream_t stream;
  cuda_ok(cudaStreamCreate(&stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cuda_ok(cuda::verify(Standard{}, d.batch, cuda::DeviceRandomness{seed.get(), offset.get()}, d.out,
                       d.workspace, stream));
  cuda_ok(cudaStreamEndCapture(stream, &graph));
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0));
  for (const std::uint64_t step : {11u, 12u, 40u}) {
    seed.assign({2024});
    offset.assign({step});
    cuda_ok(cudaGraphLaunch(exec, stream));
    cuda::check(d.workspace, stream);
    const auto replayed = d.out_tokens.read();
    const VerifyStats replay_stats = cuda::read_stats(d.workspace, stream);
    cuda_ok(cuda::verify(Standard{}, d.batch, Randomness{2024, step}, d.out, d.workspace, stream));
    cuda::check(d.workspace, stream);
    EXPECT_EQ(replayed, d.out_tokens.read()) << "step " << step;
    EXPECT_EQ(replay_stats.accepted, cuda::read_stats(d.workspace, stream).accepted);
    Chains cpu = c;
    verify(Standard{}, cpu.batch(), Randomness{2024, step}, cpu.output());
    EXPECT_EQ(replayed, cpu.out_tokens) << "step " << step;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace specverify
