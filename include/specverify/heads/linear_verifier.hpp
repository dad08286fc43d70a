// SPRINTER's verifier: Linear(d, 1) + sigmoid on the draft model's hidden state.
#pragma once

#include "specverify/heads/eigen.hpp"
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specverify/heads/common.hpp"
#include "specverify/heads/safetensors.hpp"
#include "specverify/heads/training.hpp"

namespace specverify {

/// score(h) = sigmoid(w . h + b), one score per row of H ([n, d]). Tensors, under an optional
/// prefix: `weight` [1, d] and `bias` [1], as PyTorch's nn.Linear(d, 1) saves them.
///
///   auto verifier = specverify::LinearVerifier::load("verifier.safetensors");
///   Eigen::VectorXf scores = verifier.scores(H);   // feed each to a SprinterGate
///
/// Evaluation is const and allocates nothing beyond its result (the out-parameter overload reuses
/// `out`), so one verifier may be shared by threads. NaN in H gives NaN scores, which verify() and
/// SprinterGate reject.
class LinearVerifier : public detail::Trainable<LinearVerifier> {
 public:
  /// A fresh verifier for hidden size d, nn.Linear's default initialisation.
  explicit LinearVerifier(Eigen::Index d, std::uint64_t seed = 0) : w_(d) {
    if (d < 1) throw invalid_input("LinearVerifier: d = " + std::to_string(d) + " must be >= 1");
    std::mt19937_64 rng(seed);
    detail::init_uniform(w_.data(), d, d, rng);
    detail::init_uniform(&b_, 1, d, rng);
  }

  static LinearVerifier load(const std::string& path, const std::string& prefix = "") {
    const SafetensorsFile file = SafetensorsFile::open(path);
    const Eigen::Index d = detail::weight_dim(file, prefix + "weight", 1);
    LinearVerifier v(d);
    v.w_ = detail::read_weight(file, prefix + "weight", 1, d);
    v.b_ = detail::read_weight(file, prefix + "bias", 1, 0)(0);
    return v;
  }

  /// Writes `{prefix}weight` and `{prefix}bias` (F32), loadable by load() and by PyTorch.
  void save(const std::string& path, const std::string& prefix = "") const {
    save_safetensors(path, {{prefix + "weight", {1, dim()}, w_.data()}, {prefix + "bias", {1}, &b_}});
  }

  Eigen::Index dim() const { return w_.size(); }

  template <class Derived>
  void scores(const Eigen::MatrixBase<Derived>& H, Eigen::VectorXf& out) const {
    detail::check_hidden(H, dim(), "LinearVerifier");
    out.noalias() = H * w_;  // one GEMV for the whole batch
    out = detail::sigmoid(out.array() + b_).matrix();
  }

  template <class Derived>
  Eigen::VectorXf scores(const Eigen::MatrixBase<Derived>& H) const {
    Eigen::VectorXf out;
    scores(H, out);
    return out;
  }

 private:
  friend class detail::Trainable<LinearVerifier>;

  /// Logit z = H w + b; dloss/dw = H^T dz, dloss/db = sum dz.
  class Trainer {
   public:
    explicit Trainer(LinearVerifier& v) : v_(v), gw_(Eigen::VectorXf::Zero(v.dim())) {}
    std::vector<detail::ParamBlock> blocks() {
      return {{v_.w_.data(), gw_.data(), v_.dim()}, {&v_.b_, &gb_, 1}};
    }
    float loss_and_gradient(const Eigen::MatrixXf& H, const Eigen::VectorXf& y, const FitOptions& o) {
      z_.noalias() = H * v_.w_;
      z_.array() += v_.b_;
      const float loss = detail::weighted_bce(z_, y, o.w_acc, o.w_rej, dz_);
      gw_.noalias() = H.transpose() * dz_;
      gb_ = dz_.sum();
      return loss;
    }

   private:
    LinearVerifier& v_;
    Eigen::VectorXf gw_, z_, dz_;
    float gb_ = 0;
  };

  Eigen::VectorXf w_;
  float b_ = 0;
};

}  // namespace specverify
