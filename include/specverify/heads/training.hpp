// Training shared by both heads: SpecDec++'s weighted binary cross-entropy on soft labels, Adam,
// shuffled mini-batches. A head supplies only its forward/backward pass (a nested Trainer).
#pragma once

#include "specverify/heads/eigen.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specverify/types.hpp"

namespace specverify {

/// Options for `fit`. The loss is SpecDec++'s weighted BCE on soft labels y = min(1, p(x)/q(x)):
///   loss = mean over the batch of -(w_acc * y * log s + w_rej * (1 - y) * log(1 - s)),
/// s the head's output. Raising w_rej counters the class imbalance (most drafts are accepted).
struct FitOptions {
  std::int32_t epochs = 10;
  std::int32_t batch_size = 32;
  float learning_rate = 1e-3f;  // Adam
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float w_acc = 1.0f;  // weight of the accept term
  float w_rej = 1.0f;  // weight of the reject term
  std::uint64_t seed = 0;  // mini-batch shuffling

  void check() const {
    const auto bad = [](const std::string& what) { throw invalid_input("FitOptions: " + what); };
    if (epochs < 0) bad("epochs = " + std::to_string(epochs) + " is negative");
    if (batch_size < 1) bad("batch_size = " + std::to_string(batch_size) + " must be >= 1");
    if (!(learning_rate > 0) || !std::isfinite(learning_rate))
      bad("learning_rate = " + std::to_string(learning_rate) + " must be positive and finite");
    if (!(beta1 >= 0 && beta1 < 1)) bad("beta1 = " + std::to_string(beta1) + " outside [0, 1)");
    if (!(beta2 >= 0 && beta2 < 1)) bad("beta2 = " + std::to_string(beta2) + " outside [0, 1)");
    if (!(epsilon > 0) || !std::isfinite(epsilon))
      bad("epsilon = " + std::to_string(epsilon) + " must be positive and finite");
    if (!(w_acc >= 0) || !std::isfinite(w_acc) || !(w_rej >= 0) || !std::isfinite(w_rej))
      bad("w_acc = " + std::to_string(w_acc) + ", w_rej = " + std::to_string(w_rej) +
          " must be nonnegative and finite");
  }
};

namespace detail {

/// One parameter tensor and its gradient, both contiguous in the same layout.
struct ParamBlock {
  float* value;
  const float* grad;
  Eigen::Index size;
};

/// Weighted BCE on logits z (s = sigmoid(z)); returns the batch mean and writes dloss/dz into dz.
/// log s = -softplus(-z) and log(1 - s) = -softplus(z) keep it finite for any z.
inline float weighted_bce(const Eigen::VectorXf& z, const Eigen::VectorXf& y, float w_acc,
                          float w_rej, Eigen::VectorXf& dz) {
  const auto softplus = [](const auto& x) { return x.max(0.0f) + (-x.abs()).exp().log1p(); };
  const Eigen::ArrayXf za = z.array(), ya = y.array();
  const Eigen::ArrayXf s = (1.0f + (-za).exp()).inverse();
  const float n = static_cast<float>(z.size());
  dz = ((w_rej * (1.0f - ya) * s - w_acc * ya * (1.0f - s)) / n).matrix();
  return (w_acc * ya * softplus(-za) + w_rej * (1.0f - ya) * softplus(za)).sum() / n;
}

/// Adam (Kingma & Ba) with bias correction, PyTorch's formulation.
class Adam {
 public:
  Adam(const FitOptions& o, const std::vector<ParamBlock>& blocks) : o_(o) {
    for (const ParamBlock& b : blocks) {
      m_.push_back(Eigen::ArrayXf::Zero(b.size));
      v_.push_back(Eigen::ArrayXf::Zero(b.size));
    }
  }
  void step(const std::vector<ParamBlock>& blocks) {
    ++t_;
    const float c1 = 1.0f - std::pow(o_.beta1, static_cast<float>(t_));
    const float c2 = 1.0f - std::pow(o_.beta2, static_cast<float>(t_));
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      Eigen::Map<Eigen::ArrayXf> p(blocks[i].value, blocks[i].size);
      const Eigen::Map<const Eigen::ArrayXf> g(blocks[i].grad, blocks[i].size);
      m_[i] = o_.beta1 * m_[i] + (1.0f - o_.beta1) * g;
      v_[i] = o_.beta2 * v_[i] + (1.0f - o_.beta2) * g.square();
      p -= o_.learning_rate * (m_[i] / c1) / ((v_[i] / c2).sqrt() + o_.epsilon);
    }
  }

 private:
  FitOptions o_;
  std::vector<Eigen::ArrayXf> m_, v_;
  std::int64_t t_ = 0;
};

template <class Derived>
void check_training_data(const Eigen::MatrixBase<Derived>& H, const Eigen::VectorXf& y,
                         Eigen::Index d) {
  if (H.cols() != d)
    throw invalid_input("fit: hidden states have " + std::to_string(H.cols()) +
                        " columns, the head expects d = " + std::to_string(d));
  if (H.rows() != y.size())
    throw invalid_input("fit: " + std::to_string(H.rows()) + " hidden states but " +
                        std::to_string(y.size()) + " labels");
  for (Eigen::Index i = 0; i < y.size(); ++i)
    if (!(y[i] >= 0.0f && y[i] <= 1.0f))
      throw invalid_input("fit: label " + std::to_string(i) + " is " + std::to_string(y[i]) +
                          ", outside [0, 1]");
  if (!H.allFinite()) throw invalid_input("fit: hidden states contain a NaN or infinity");
}

/// The training loop over a head's Trainer, which provides
///   std::vector<ParamBlock> blocks();                                    // values and gradients
///   float loss_and_gradient(const MatrixXf& H, const VectorXf& y, const FitOptions&);
/// Returns the mean loss of each epoch (averaged over its mini-batches as they were trained).
template <class Trainer, class Derived>
std::vector<float> fit(Trainer& trainer, const Eigen::MatrixBase<Derived>& H,
                       const Eigen::VectorXf& y, const FitOptions& o) {
  o.check();
  const Eigen::Index n = H.rows();
  std::vector<Eigen::Index> order(static_cast<std::size_t>(n));
  for (Eigen::Index i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  std::mt19937_64 rng(o.seed);
  Adam adam(o, trainer.blocks());
  Eigen::MatrixXf Hb;
  Eigen::VectorXf yb;
  std::vector<float> curve;
  for (std::int32_t epoch = 0; epoch < o.epochs; ++epoch) {
    // Fisher-Yates with plain modulo: the same order on every platform (std::shuffle is not).
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    double total = 0;
    for (Eigen::Index start = 0; start < n; start += o.batch_size) {
      const Eigen::Index len = std::min<Eigen::Index>(o.batch_size, n - start);
      const auto rows = Eigen::Map<const Eigen::Matrix<Eigen::Index, Eigen::Dynamic, 1>>(
          order.data() + start, len);
      Hb = H(rows, Eigen::all);
      yb = y(rows);
      total += static_cast<double>(trainer.loss_and_gradient(Hb, yb, o)) * static_cast<double>(len);
      adam.step(trainer.blocks());
    }
    curve.push_back(n > 0 ? static_cast<float>(total / static_cast<double>(n)) : 0.0f);
  }
  return curve;
}

/// What both heads expose for training, written once: `fit`, and flat access to the parameters and
/// the gradient (the tensors in file order, each in its PyTorch row-major layout) for custom
/// optimisers and gradient checks.
template <class Head>
class Trainable {
 public:
  /// Trains in place; returns the mean loss per epoch.
  ///
  ///   specverify::FitOptions o;  o.epochs = 5;  o.w_rej = 3;
  ///   std::vector<float> curve = head.fit(H, labels, o);   // labels: min(1, p(x)/q(x))
  template <class Derived>
  std::vector<float> fit(const Eigen::MatrixBase<Derived>& H, const Eigen::VectorXf& labels,
                         const FitOptions& options = {}) {
    check_training_data(H, labels, head().dim());
    typename Head::Trainer trainer(head());
    return detail::fit(trainer, H, labels, options);
  }

  /// All parameters, concatenated.
  std::vector<float> parameters() {
    typename Head::Trainer trainer(head());
    std::vector<float> out;
    for (const ParamBlock& b : trainer.blocks()) out.insert(out.end(), b.value, b.value + b.size);
    return out;
  }

  void set_parameters(const std::vector<float>& values) {
    typename Head::Trainer trainer(head());
    const auto blocks = trainer.blocks();
    Eigen::Index total = 0;
    for (const ParamBlock& b : blocks) total += b.size;
    if (static_cast<Eigen::Index>(values.size()) != total)
      throw invalid_input("set_parameters: " + std::to_string(values.size()) +
                          " values, the head has " + std::to_string(total));
    const float* src = values.data();
    for (const ParamBlock& b : blocks) {
      std::copy(src, src + b.size, b.value);
      src += b.size;
    }
  }

  /// The training loss on (H, labels) and its gradient, laid out like parameters().
  template <class Derived>
  float loss_and_gradient(const Eigen::MatrixBase<Derived>& H, const Eigen::VectorXf& labels,
                          const FitOptions& options, std::vector<float>& gradient) {
    options.check();
    check_training_data(H, labels, head().dim());
    typename Head::Trainer trainer(head());
    const float loss = trainer.loss_and_gradient(H.eval(), labels, options);
    gradient.clear();
    for (const ParamBlock& b : trainer.blocks()) gradient.insert(gradient.end(), b.grad, b.grad + b.size);
    return loss;
  }

 private:
  Head& head() { return static_cast<Head&>(*this); }
};

}  // namespace detail
}  // namespace specverify
