// The heads against a plain double-precision reference, file layouts (released names, prefix, tied
// and untied blocks, three dtypes), save/load round trips, load errors, allocation-free evaluation.

// Eigen allocates with malloc, not operator new: make it report every heap allocation while a test
// forbids them (and turn its asserts into exceptions, so they also fire in the Release build).
#define EIGEN_RUNTIME_NO_MALLOC
#include <stdexcept>
#define eigen_assert(x)                                          \
  do {                                                           \
    if (!(x)) throw std::logic_error("Eigen: " #x);              \
  } while (0)

#include "specverify/heads.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>

#include "safetensors_test_writer.hpp"

// Counts heap allocations so a test can assert that warm evaluation makes none. Not inlined, so
// g++ does not pair the malloc/free inside with new/delete at call sites (-Wmismatched-new-delete).
static std::atomic<long> g_allocations{0};
__attribute__((noinline)) void* operator new(std::size_t n) {
  ++g_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace specverify {
namespace {

using ::testing::HasSubstr;
using namespace specverify::testing;
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::vector<float> uniform(std::size_t n, float bound, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

/// A head as the reference sees it: row-major PyTorch tensors, as doubles.
struct Tensors {
  std::vector<RawTensor> file;         // what goes into the safetensors file
  std::vector<std::vector<double>> w;  // decoded values, in the same order
};

void add(Tensors& t, const std::string& name, const std::string& dtype,
         std::vector<std::int64_t> shape, float bound, std::mt19937& rng) {
  std::size_t n = 1;
  for (const auto s : shape) n *= static_cast<std::size_t>(s);
  std::vector<double> decoded;
  auto bytes = encode(uniform(n, bound, rng), dtype, decoded);
  t.file.push_back({name, dtype, std::move(shape), std::move(bytes)});
  t.w.push_back(std::move(decoded));
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

/// sigmoid(w.h + b) with loops.
std::vector<double> reference_scores(const Tensors& t, const Eigen::MatrixXf& H) {
  std::vector<double> out;
  for (Eigen::Index r = 0; r < H.rows(); ++r) {
    double z = t.w[1][0];
    for (Eigen::Index j = 0; j < H.cols(); ++j) z += t.w[0][static_cast<std::size_t>(j)] * H(r, j);
    out.push_back(sigmoid(z));
  }
  return out;
}

/// h <- h + SiLU(W h + b) k times (block j uses tensors 2j, 2j+1, or 0, 1 when tied), then
/// softmax(W_out h + b_out)[1], with loops.
std::vector<double> reference_accept(const Tensors& t, int k, bool tied, const Eigen::MatrixXf& H) {
  const std::size_t d = static_cast<std::size_t>(H.cols());
  const std::size_t out = t.w.size() - 2;
  std::vector<double> probs;
  for (Eigen::Index r = 0; r < H.rows(); ++r) {
    std::vector<double> h(d), next(d);
    for (std::size_t j = 0; j < d; ++j) h[j] = H(r, static_cast<Eigen::Index>(j));
    for (int i = 0; i < k; ++i) {
      const auto& W = t.w[tied ? 0 : 2 * static_cast<std::size_t>(i)];
      const auto& b = t.w[tied ? 1 : 2 * static_cast<std::size_t>(i) + 1];
      for (std::size_t o = 0; o < d; ++o) {
        double a = b[o];
        for (std::size_t j = 0; j < d; ++j) a += W[o * d + j] * h[j];
        next[o] = h[o] + a * sigmoid(a);
      }
      h = next;
    }
    double l[2];
    for (std::size_t c = 0; c < 2; ++c) {
      l[c] = t.w[out + 1][c];
      for (std::size_t j = 0; j < d; ++j) l[c] += t.w[out][c * d + j] * h[j];
    }
    const double m = std::max(l[0], l[1]);
    probs.push_back(std::exp(l[1] - m) / (std::exp(l[0] - m) + std::exp(l[1] - m)));
  }
  return probs;
}

/// The released tensors: blocks 0..stored-1, then the output layer at index k.
Tensors acceptance_tensors(const std::string& prefix, const std::string& dtype, std::int64_t d,
                           int k, bool tied, std::mt19937& rng) {
  Tensors t;
  const float bound = 1.0f / std::sqrt(static_cast<float>(d));  // nn.Linear's default scale
  for (int i = 0; i < (tied ? 1 : k); ++i) {
    add(t, prefix + std::to_string(i) + ".linear.weight", dtype, {d, d}, bound, rng);
    add(t, prefix + std::to_string(i) + ".linear.bias", dtype, {d}, bound, rng);
  }
  add(t, prefix + std::to_string(k) + ".weight", dtype, {2, d}, bound, rng);
  add(t, prefix + std::to_string(k) + ".bias", dtype, {2}, bound, rng);
  return t;
}

Eigen::MatrixXf hidden(Eigen::Index n, Eigen::Index d, std::mt19937& rng) {
  const std::vector<float> v = uniform(static_cast<std::size_t>(n * d), 1.0f, rng);
  return Eigen::Map<const Eigen::MatrixXf>(v.data(), n, d);
}

// Float evaluation against the double reference. The difference is float rounding in sums over d
// terms of size O(1/sqrt(d)): about sqrt(d) * 6e-8 per layer, under 1e-5 at d = 4096. A wrong
// index, a transposed weight or a missing bias moves probabilities by 1e-2 or more.
constexpr double kTol = 2e-5;

void expect_near(const Eigen::VectorXf& got, const std::vector<double>& want) {
  ASSERT_EQ(static_cast<std::size_t>(got.size()), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[static_cast<Eigen::Index>(i)], want[i], kTol) << "row " << i;
}

std::string unique_path(const std::string& tag) {
  return temp_path(tag + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

struct Shape {
  Eigen::Index n, d;
};

TEST(LinearVerifier, MatchesReferenceForAllDtypesAndShapes) {
  std::mt19937 rng(1);
  for (const char* dtype : {"F32", "F16", "BF16"}) {
    for (const Shape s : {Shape{1, 1}, Shape{256, 7}, Shape{256, 4096}, Shape{3, 4096}}) {
      for (const std::string prefix : {"", "verifier."}) {
        SCOPED_TRACE(std::string(dtype) + " n=" + std::to_string(s.n) + " d=" +
                     std::to_string(s.d) + " prefix=" + prefix);
        Tensors t;
        const float bound = 4.0f / std::sqrt(static_cast<float>(s.d));  // scores spread over (0, 1)
        add(t, prefix + "weight", dtype, {1, s.d}, bound, rng);
        add(t, prefix + "bias", dtype, {1}, 1.0f, rng);
        const std::string path = unique_path("lv");
        write_file(path, t.file);
        const LinearVerifier v = LinearVerifier::load(path, prefix);
        std::remove(path.c_str());
        EXPECT_EQ(v.dim(), s.d);
        const Eigen::MatrixXf H = hidden(s.n, s.d, rng);
        const std::vector<double> want = reference_scores(t, H);
        expect_near(v.scores(H), want);
        const RowMajor R = H;  // engines hold hidden states row-major
        expect_near(v.scores(R), want);
      }
    }
  }
}

struct HeadCase {
  const char* dtype;
  Eigen::Index n, d;
  int k;
  bool tied;
  const char* prefix;
};

TEST(AcceptanceHead, MatchesReferenceForAllDtypesLayoutsAndShapes) {
  std::mt19937 rng(2);
  const HeadCase cases[] = {
      {"F32", 256, 64, 3, false, ""},         {"F32", 256, 64, 3, true, "model."},
      {"F16", 64, 96, 2, false, "model."},    {"BF16", 64, 96, 4, true, ""},
      {"F32", 17, 33, 1, false, "head."},     {"F16", 5, 8, 0, false, ""},
      {"F32", 2, 4096, 2, false, "model."},   {"BF16", 3, 4096, 3, true, "model."},
      {"F16", 1, 4096, 1, false, ""},
  };
  for (const HeadCase& c : cases) {
    SCOPED_TRACE(std::string(c.dtype) + " n=" + std::to_string(c.n) + " d=" + std::to_string(c.d) +
                 " k=" + std::to_string(c.k) + (c.tied ? " tied" : " untied") + " prefix=" + c.prefix);
    const Tensors t = acceptance_tensors(c.prefix, c.dtype, c.d, c.k, c.tied, rng);
    const std::string path = unique_path("ah");
    write_file(path, t.file);
    // Tied files need the block count; untied ones are discovered (and also load with it given).
    AcceptanceHead head = AcceptanceHead::load(path, c.prefix, c.tied ? c.k : 0);
    if (!c.tied && c.k > 0) {
      const AcceptanceHead given = AcceptanceHead::load(path, c.prefix, c.k);
      EXPECT_EQ(given.num_blocks(), c.k);
    }
    std::remove(path.c_str());
    EXPECT_EQ(head.num_blocks(), c.k);
    EXPECT_EQ(head.tied(), c.tied && c.k > 1);
    EXPECT_EQ(head.dim(), c.d);
    const Eigen::MatrixXf H = hidden(c.n, c.d, rng);
    const std::vector<double> want = reference_accept(t, c.k, c.tied, H);
    expect_near(head.accept_probs(H), want);
    const RowMajor R = H;
    expect_near(head.accept_probs(R), want);
    AcceptanceHead::Scratch scratch;  // the thread-safe overload gives the same
    Eigen::VectorXf out;
    static_cast<const AcceptanceHead&>(head).accept_probs(H, out, scratch);
    expect_near(out, want);
  }
}

TEST(AcceptanceHead, BatchSizeChangesBetweenCalls) {
  std::mt19937 rng(3);
  const Tensors t = acceptance_tensors("", "F32", 32, 2, false, rng);
  const std::string path = unique_path("ah");
  write_file(path, t.file);
  AcceptanceHead head = AcceptanceHead::load(path);
  std::remove(path.c_str());
  for (const Eigen::Index n : {8, 1, 40, 0, 8}) {
    const Eigen::MatrixXf H = hidden(n, 32, rng);
    expect_near(head.accept_probs(H), reference_accept(t, 2, false, H));
  }
}

/// Warm evaluation allocates nothing: the scratch and the output are reused. Checked where Eigen's
/// GEMM keeps its packing buffers on the stack (under EIGEN_STACK_ALLOCATION_LIMIT, 128 KiB); for
/// large d Eigen itself allocates one packing buffer per product, which this does not cover.
TEST(Heads, WarmEvaluationDoesNotAllocate) {
  AcceptanceHead head(64, 3, false, 7);
  const LinearVerifier verifier(64, 7);
  std::mt19937 rng(4);
  const Eigen::MatrixXf H = hidden(32, 64, rng);
  Eigen::VectorXf accept, scores;
  head.accept_probs(H, accept);
  verifier.scores(H, scores);
  const long before = g_allocations.load();
  Eigen::internal::set_is_malloc_allowed(false);
  try {
    for (int i = 0; i < 3; ++i) {
      head.accept_probs(H, accept);
      verifier.scores(H, scores);
    }
  } catch (const std::logic_error& e) {
    ADD_FAILURE() << e.what();
  }
  Eigen::internal::set_is_malloc_allowed(true);
  EXPECT_EQ(g_allocations.load(), before);
  // The check is live: a fresh output vector is an Eigen heap allocation.
  Eigen::internal::set_is_malloc_allowed(false);
  Eigen::VectorXf fresh;
  EXPECT_THROW(head.accept_probs(H, fresh), std::logic_error);
  Eigen::internal::set_is_malloc_allowed(true);
  EXPECT_EQ(accept.size(), 32);
  EXPECT_EQ(scores.size(), 32);
}

TEST(Heads, HiddenWidthMismatchIsInvalidInput) {
  AcceptanceHead head(8, 1);
  const LinearVerifier verifier(8);
  const Eigen::MatrixXf H = Eigen::MatrixXf::Zero(2, 9);
  EXPECT_THROW(head.accept_probs(H), invalid_input);
  EXPECT_THROW(verifier.scores(H), invalid_input);
  EXPECT_THROW(AcceptanceHead(0, 1), invalid_input);
  EXPECT_THROW(AcceptanceHead(4, -1), invalid_input);
  EXPECT_THROW(LinearVerifier(0), invalid_input);
}

// ---- save -> load -------------------------------------------------------------------------------

std::vector<std::string> names_in(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  std::vector<std::string> names;
  for (const auto& entry : file.tensors()) names.push_back(entry.first);
  return names;
}

TEST(Heads, SaveLoadRoundTripIsExact) {
  std::mt19937 rng(5);
  const Eigen::MatrixXf H = hidden(16, 24, rng);
  for (const std::string prefix : {"", "model."}) {
    for (const bool tied : {false, true}) {
      SCOPED_TRACE(prefix + (tied ? " tied" : " untied"));
      AcceptanceHead head(24, 3, tied, 11);
      const std::string path = unique_path("rt");
      head.save(path, prefix);
      const std::vector<std::string> want =
          tied ? std::vector<std::string>{"0.linear.bias", "0.linear.weight", "3.bias", "3.weight"}
               : std::vector<std::string>{"0.linear.bias", "0.linear.weight", "1.linear.bias",
                                          "1.linear.weight", "2.linear.bias", "2.linear.weight",
                                          "3.bias", "3.weight"};
      std::vector<std::string> prefixed;
      for (const auto& n : want) prefixed.push_back(prefix + n);
      EXPECT_EQ(names_in(path), prefixed);
      AcceptanceHead back = AcceptanceHead::load(path, prefix, tied ? 3 : 0);
      std::remove(path.c_str());
      EXPECT_EQ(back.parameters(), head.parameters());
      EXPECT_EQ(back.accept_probs(H), head.accept_probs(H));
    }
    LinearVerifier v(24, 12);
    const std::string path = unique_path("rtv");
    v.save(path, prefix);
    EXPECT_EQ(names_in(path), (std::vector<std::string>{prefix + "bias", prefix + "weight"}));
    EXPECT_EQ(SafetensorsFile::open(path).info(prefix + "weight").shape,
              (std::vector<std::int64_t>{1, 24}));
    const LinearVerifier back = LinearVerifier::load(path, prefix);
    std::remove(path.c_str());
    EXPECT_EQ(back.scores(H), v.scores(H));
  }
}

/// Saved weights are PyTorch's row-major [out, in]: block 0's weight row o, column j is W[o][j].
TEST(Heads, SavedLayoutIsPyTorchRowMajor) {
  std::mt19937 rng(6);
  const Tensors t = acceptance_tensors("", "F32", 5, 1, false, rng);
  const std::string in = unique_path("in"), out = unique_path("out");
  write_file(in, t.file);
  AcceptanceHead::load(in).save(out);
  const SafetensorsFile f = SafetensorsFile::open(out);
  for (std::size_t i = 0; i < t.file.size(); ++i) {
    const std::vector<float> got = f.read(t.file[i].name);
    ASSERT_EQ(got.size(), t.w[i].size());
    for (std::size_t j = 0; j < got.size(); ++j) EXPECT_EQ(got[j], t.w[i][j]) << t.file[i].name;
  }
  std::remove(in.c_str());
  std::remove(out.c_str());
}

// ---- load errors name the file and the tensor ----------------------------------------------------

template <class Load>
void expect_load_error(const std::string& path, const std::string& tensor, const std::string& what,
                       Load load) {
  try {
    load();
    ADD_FAILURE() << "no invalid_input for " << what;
  } catch (const invalid_input& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("'" + tensor + "'"));
    EXPECT_THAT(e.what(), HasSubstr(what));
  }
}

TEST(Heads, WrongShapesAreRefused) {
  std::mt19937 rng(7);
  const std::string path = unique_path("shape");
  {
    Tensors t;
    add(t, "weight", "F32", {1, 8}, 1, rng);
    add(t, "bias", "F32", {2}, 1, rng);
    write_file(path, t.file);
    expect_load_error(path, "bias", "shape [2], expected [1]", [&] { LinearVerifier::load(path); });
  }
  {
    Tensors t;
    add(t, "weight", "F32", {2, 8}, 1, rng);
    add(t, "bias", "F32", {1}, 1, rng);
    write_file(path, t.file);
    expect_load_error(path, "weight", "expected [1, d]", [&] { LinearVerifier::load(path); });
  }
  {
    Tensors t = acceptance_tensors("m.", "F32", 8, 2, false, rng);
    t.file[2] = {"m.1.linear.weight", "F32", {8, 7}, f32_bytes(std::vector<float>(56, 0.0f))};
    write_file(path, t.file);
    expect_load_error(path, "m.1.linear.weight", "shape [8, 7], expected [8, 8]",
                      [&] { AcceptanceHead::load(path, "m."); });
  }
  {
    Tensors t = acceptance_tensors("", "F32", 8, 1, false, rng);
    t.file[2] = {"1.weight", "F32", {3, 8}, f32_bytes(std::vector<float>(24, 0.0f))};
    write_file(path, t.file);
    expect_load_error(path, "1.weight", "expected [2, d]", [&] { AcceptanceHead::load(path); });
  }
  std::remove(path.c_str());
}

TEST(Heads, MissingAndMismatchedTensorsAreRefused) {
  std::mt19937 rng(8);
  const std::string path = unique_path("missing");
  {
    Tensors t;
    add(t, "weight", "F32", {1, 8}, 1, rng);
    write_file(path, t.file);
    expect_load_error(path, "bias", "missing tensor", [&] { LinearVerifier::load(path); });
    expect_load_error(path, "v.weight", "missing tensor", [&] { LinearVerifier::load(path, "v."); });
  }
  {
    // A tied head (only block 0) loaded without its block count: the output layer is not at 1.
    write_file(path, acceptance_tensors("model.", "BF16", 8, 3, true, rng).file);
    expect_load_error(path, "model.1.weight", "tied blocks needs num_blocks",
                      [&] { AcceptanceHead::load(path, "model."); });
    expect_load_error(path, "model.4.weight", "missing tensor",
                      [&] { AcceptanceHead::load(path, "model.", 4); });
  }
  {
    // Two of three blocks present: neither all nor only block 0.
    Tensors t = acceptance_tensors("", "F32", 8, 3, false, rng);
    t.file.erase(t.file.begin() + 4, t.file.begin() + 6);  // drop block 2
    write_file(path, t.file);
    expect_load_error(path, "2.linear.weight", "file has 2 blocks; num_blocks = 3",
                      [&] { AcceptanceHead::load(path, "", 3); });
    expect_load_error(path, "1.linear.weight", "file has 2 blocks; num_blocks = 1",
                      [&] { AcceptanceHead::load(path, "", 1); });
  }
  {
    Tensors t = acceptance_tensors("", "F32", 8, 1, false, rng);
    t.file.pop_back();  // no output bias
    write_file(path, t.file);
    expect_load_error(path, "1.bias", "missing tensor", [&] { AcceptanceHead::load(path); });
  }
  EXPECT_THROW(AcceptanceHead::load(path, "", -1), invalid_input);
  std::remove(path.c_str());
}

TEST(Heads, NonFiniteOrNonFloatWeightsAreRefused) {
  std::mt19937 rng(9);
  const std::string path = unique_path("nan");
  Tensors t = acceptance_tensors("", "F16", 4, 1, false, rng);
  std::vector<std::uint16_t> bias = {0x3c00, 0x7e00, 0, 0};  // 1, NaN, 0, 0
  t.file[1].bytes = u16_bytes(bias);
  write_file(path, t.file);
  expect_load_error(path, "0.linear.bias", "element 1 is nan", [&] { AcceptanceHead::load(path); });
  t.file[1] = {"0.linear.bias", "I32", {4}, f32_bytes({0, 0, 0, 0})};
  write_file(path, t.file);
  expect_load_error(path, "0.linear.bias", "not a float type", [&] { AcceptanceHead::load(path); });
  std::remove(path.c_str());
}

/// A head inside a bigger checkpoint: other tensors (any dtype) are ignored.
TEST(Heads, LoadsFromACheckpointWithOtherTensors) {
  std::mt19937 rng(10);
  Tensors t = acceptance_tensors("spec_head.", "F32", 6, 2, false, rng);
  t.file.insert(t.file.begin(), {"model.embed.ids", "I64", {2}, std::vector<unsigned char>(16, 1)});
  // t.w keeps only the head's tensors, which is what the reference reads.
  const std::string path = unique_path("ckpt");
  write_file(path, t.file);
  AcceptanceHead head = AcceptanceHead::load(path, "spec_head.");
  std::remove(path.c_str());
  const Eigen::MatrixXf H = hidden(4, 6, rng);
  expect_near(head.accept_probs(H), reference_accept(t, 2, false, H));
}

}  // namespace
}  // namespace specverify
