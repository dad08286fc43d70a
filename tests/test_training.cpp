// Training: the weighted BCE minimiser is recovered exactly where it is known, the loss falls, and
// the AcceptanceHead's backpropagation matches finite differences.
#include "specverify/heads.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace specverify {
namespace {

Eigen::MatrixXf gaussian(Eigen::Index n, Eigen::Index d, float scale, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, scale);
  Eigen::MatrixXf H(n, d);
  for (Eigen::Index i = 0; i < H.size(); ++i) H.data()[i] = g(rng);
  return H;
}

/// The smallest possible mean loss on soft labels y (w_acc = 1): reached at s* = y / (y + w_rej (1 - y)),
/// with 0 log 0 = 0 for labels that are exactly 0 or 1.
double loss_lower_bound(const Eigen::VectorXf& y, float w_rej) {
  double total = 0;
  for (Eigen::Index i = 0; i < y.size(); ++i) {
    const double yi = y[i], s = yi / (yi + w_rej * (1 - yi));
    if (yi > 0) total -= yi * std::log(s);
    if (yi < 1) total -= w_rej * (1 - yi) * std::log(1 - s);
  }
  return total / static_cast<double>(y.size());
}

/// Soft labels y = sigmoid(w* . h + b*): the weighted BCE with w_acc = w_rej is minimised exactly at
/// s_i = y_i, i.e. at (w*, b*) (strictly convex in (w, b) for full-rank H), so what is left after
/// training is optimisation error, not noise. With w_rej = 3 the minimiser of
/// -(y log s + 3 (1-y) log(1-s)) is s = y / (y + 3 (1 - y)): logit(s) = logit(y) - ln 3, i.e. the
/// same w* and b* - ln 3. This checks the weights enter the loss as specified.
TEST(Training, LinearVerifierRecoversALogisticModel) {
  std::mt19937 rng(1);
  const Eigen::Index d = 8, n = 4096;
  const Eigen::MatrixXf H = gaussian(n, d, 1.0f, rng);
  Eigen::VectorXf w_true(d);
  w_true << 1.0f, -2.0f, 0.5f, 0.0f, 1.5f, -0.75f, 0.25f, -1.0f;
  const float b_true = 0.5f;
  const Eigen::VectorXf y =
      (1.0f + (-((H * w_true).array() + b_true)).exp()).inverse().matrix();

  for (const float w_rej : {1.0f, 3.0f}) {
    SCOPED_TRACE(w_rej);
    LinearVerifier v(d, 3);
    FitOptions o;
    o.epochs = 60;
    o.batch_size = 64;
    o.learning_rate = 0.01f;
    o.w_rej = w_rej;
    const std::vector<float> curve = v.fit(H, y, o);
    ASSERT_EQ(curve.size(), 60u);
    const std::vector<float> p = v.parameters();  // weight [1, d], then bias
    // Adam's constant step keeps the iterate within a few lr of the optimum; 0.05 is 5 lr and still
    // 10x smaller than the smallest nonzero true weight and than ln 3 (the weighting shift).
    for (Eigen::Index j = 0; j < d; ++j) EXPECT_NEAR(p[static_cast<std::size_t>(j)], w_true[j], 0.05f) << j;
    EXPECT_NEAR(p.back(), b_true - std::log(w_rej), 0.05f);

    // Soft labels keep the loss above its minimum. The excess over that bound shrinks at least
    // 20-fold and ends below 2e-3 (nats per example).
    const double bound = loss_lower_bound(y, w_rej);
    EXPECT_LT(curve.back() - bound, 0.05 * (curve.front() - bound));
    EXPECT_LT(curve.back() - bound, 2e-3);
    EXPECT_GT(curve.back() - bound, -1e-4);  // and never below it (the loss is what it claims)
  }
}

TEST(Training, SameSeedSameCurveOtherSeedOtherCurve) {
  std::mt19937 rng(2);
  const Eigen::MatrixXf H = gaussian(300, 6, 1.0f, rng);
  const Eigen::VectorXf y = ((H.col(0).array() > 0).cast<float>() * 0.8f + 0.1f).matrix();
  FitOptions o;
  o.epochs = 3;
  o.batch_size = 7;  // the last batch is partial
  AcceptanceHead a(6, 2, false, 5), b(6, 2, false, 5), c(6, 2, false, 5);
  const auto ca = a.fit(H, y, o), cb = b.fit(H, y, o);
  o.seed = 99;
  const auto cc = c.fit(H, y, o);
  EXPECT_EQ(ca, cb);
  EXPECT_EQ(a.parameters(), b.parameters());
  EXPECT_NE(ca, cc);
}

/// A nonlinear target (an untrained teacher head with larger weights) learned by a fresh student:
/// the loss falls and held-out predictions track the labels.
TEST(Training, AcceptanceHeadLearnsANonlinearTarget) {
  std::mt19937 rng(3);
  const Eigen::Index d = 16;
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    AcceptanceHead teacher(d, 2, tied, 100);
    std::vector<float> theta = teacher.parameters();
    for (float& t : theta) t *= 4.0f;  // sharper than the init scale, so the labels spread out
    teacher.set_parameters(theta);
    const Eigen::MatrixXf H = gaussian(6000, d, 1.0f, rng), Htest = gaussian(1000, d, 1.0f, rng);
    const Eigen::VectorXf y = teacher.accept_probs(H), ytest = teacher.accept_probs(Htest);

    AcceptanceHead student(d, 2, tied, 7);
    FitOptions o;
    o.epochs = 40;
    o.learning_rate = 3e-3f;
    o.w_rej = 2.0f;
    const std::vector<float> curve = student.fit(H, y, o);
    // The student has the teacher's architecture, so the loss can approach its minimum; most of
    // the excess above it must be gone.
    const double bound = loss_lower_bound(y, o.w_rej);
    EXPECT_LT(curve.back() - bound, 0.25 * (curve.front() - bound));

    const Eigen::VectorXf pred = student.accept_probs(Htest);
    const Eigen::ArrayXf a = pred.array() - pred.mean(), b = ytest.array() - ytest.mean();
    const float correlation = (a * b).sum() / std::sqrt(a.square().sum() * b.square().sum());
    EXPECT_GT(correlation, 0.9f);
  }
}

/// Backpropagation against central differences on a tiny head (d = 4, k = 2), tied and untied,
/// with unequal loss weights and weights large enough that SiLU is far from linear.
TEST(Training, AcceptanceHeadGradientMatchesFiniteDifferences) {
  std::mt19937 rng(4);
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    AcceptanceHead head(4, 2, tied, 21);
    std::vector<float> theta = head.parameters();
    for (float& t : theta) t *= 3.0f;
    head.set_parameters(theta);
    const Eigen::MatrixXf H = gaussian(5, 4, 1.5f, rng);
    Eigen::VectorXf y(5);
    y << 0.0f, 1.0f, 0.3f, 0.9f, 0.55f;
    FitOptions o;
    o.w_acc = 0.7f;
    o.w_rej = 2.5f;
    std::vector<float> grad;
    head.loss_and_gradient(H, y, o, grad);
    ASSERT_EQ(grad.size(), theta.size());
    ASSERT_EQ(theta.size(), tied ? 4u * 4 + 4 + 8 + 2 : 2 * (4u * 4 + 4) + 8 + 2);

    // Central differences in float: truncation O(h^2) and rounding O(1e-7 / h) are both about
    // 1e-4 at h = 1e-2 for a loss of size 1; wrong SiLU' or a missed tied sum errs by > 1e-2.
    const float h = 1e-2f;
    float largest = 0;
    std::vector<float> g_unused;
    for (std::size_t i = 0; i < theta.size(); ++i) {
      std::vector<float> plus = theta, minus = theta;
      plus[i] += h;
      minus[i] -= h;
      head.set_parameters(plus);
      const float lp = head.loss_and_gradient(H, y, o, g_unused);
      head.set_parameters(minus);
      const float lm = head.loss_and_gradient(H, y, o, g_unused);
      const float numeric = (lp - lm) / (2 * h);
      EXPECT_NEAR(grad[i], numeric, 1e-3f + 1e-2f * std::abs(numeric)) << "parameter " << i;
      largest = std::max(largest, std::abs(grad[i]));
    }
    head.set_parameters(theta);
    EXPECT_GT(largest, 0.05f);  // the gradient is not trivially zero
  }
}

TEST(Training, LinearVerifierGradientMatchesFiniteDifferences) {
  std::mt19937 rng(5);
  LinearVerifier v(3, 8);
  const Eigen::MatrixXf H = gaussian(4, 3, 1.0f, rng);
  Eigen::VectorXf y(4);
  y << 0.2f, 0.9f, 1.0f, 0.0f;
  FitOptions o;
  o.w_rej = 3;
  std::vector<float> grad, unused;
  v.loss_and_gradient(H, y, o, grad);
  const std::vector<float> theta = v.parameters();
  for (std::size_t i = 0; i < theta.size(); ++i) {
    std::vector<float> plus = theta, minus = theta;
    plus[i] += 1e-2f;
    minus[i] -= 1e-2f;
    v.set_parameters(plus);
    const float lp = v.loss_and_gradient(H, y, o, unused);
    v.set_parameters(minus);
    const float lm = v.loss_and_gradient(H, y, o, unused);
    EXPECT_NEAR(grad[i], (lp - lm) / 2e-2f, 1e-3f) << i;
  }
}

TEST(Training, InvalidOptionsAndDataAreRefused) {
  LinearVerifier v(2);
  const Eigen::MatrixXf H = Eigen::MatrixXf::Zero(3, 2);
  const Eigen::VectorXf y = Eigen::VectorXf::Constant(3, 0.5f);
  const auto bad = [&](auto change) {
    FitOptions o;
    change(o);
    return o;
  };
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.learning_rate = NAN; })), invalid_input);
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.learning_rate = 0; })), invalid_input);
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.batch_size = 0; })), invalid_input);
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.epochs = -1; })), invalid_input);
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.beta1 = 1; })), invalid_input);
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.beta2 = -0.1f; })), invalid_input);
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.epsilon = 0; })), invalid_input);
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.w_rej = -1; })), invalid_input);
  EXPECT_THROW(v.fit(H, y, bad([](FitOptions& o) { o.w_acc = INFINITY; })), invalid_input);
  Eigen::VectorXf y_bad = y;
  y_bad[1] = 1.5f;
  EXPECT_THROW(v.fit(H, y_bad), invalid_input);
  y_bad[1] = NAN;
  EXPECT_THROW(v.fit(H, y_bad), invalid_input);
  EXPECT_THROW(v.fit(H, Eigen::VectorXf::Constant(2, 0.5f)), invalid_input);
  EXPECT_THROW(v.fit(Eigen::MatrixXf::Zero(3, 3), y), invalid_input);
  Eigen::MatrixXf H_nan = H;
  H_nan(1, 1) = NAN;
  EXPECT_THROW(v.fit(H_nan, y), invalid_input);
  EXPECT_THROW(v.set_parameters({1.0f}), invalid_input);
  // Nothing was trained by the refused calls.
  const std::vector<float> before = v.parameters();
  EXPECT_THROW(v.fit(H, y_bad), invalid_input);
  EXPECT_EQ(v.parameters(), before);
}

}  // namespace
}  // namespace specverify
