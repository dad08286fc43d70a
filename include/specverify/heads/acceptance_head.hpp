// SpecDec++'s acceptance prediction head: k residual SiLU blocks, then Linear(d, 2) + softmax.
#pragma once

#include "specverify/heads/eigen.hpp"
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specverify/heads/common.hpp"
#include "specverify/heads/safetensors.hpp"
#include "specverify/heads/training.hpp"

namespace specverify {

/// accept(h): h <- h + SiLU(W_i h + b_i) for i = 0..k-1, then softmax(W_out h + b_out)[1]; one
/// probability per row of H ([n, d]). Tensors, under an optional prefix, as the paper's PyTorch
/// nn.Sequential saves them: `{i}.linear.weight` [d, d], `{i}.linear.bias` [d] for each block,
/// then `{k}.weight` [2, d], `{k}.bias` [2]. The released head ties its blocks (one module
/// repeated) and its file holds only block 0: load it with the block count.
///
///   auto head = specverify::AcceptanceHead::load("head.safetensors", "model.", 3);
///   Eigen::VectorXf accept = head.accept_probs(H);   // feed each to a SpecDecPPStop
///
/// Each layer is one matrix product over the whole batch. The overloads without a Scratch use one
/// inside the head, so after the first call with a given n they allocate nothing of their own, and
/// a head must not be evaluated from two threads at once that way; give each thread its own
/// Scratch and use the const overload instead.
class AcceptanceHead : public detail::Trainable<AcceptanceHead> {
 public:
  /// Activations reused between calls; sized by the first call with a given batch size.
  struct Scratch {
    Eigen::MatrixXf h, a, logits;
  };

  /// A fresh head for hidden size d with k blocks (tied: one set of block weights used k times),
  /// nn.Linear's default initialisation.
  AcceptanceHead(Eigen::Index d, std::int32_t num_blocks, bool tied = false, std::uint64_t seed = 0) {
    if (d < 1) throw invalid_input("AcceptanceHead: d = " + std::to_string(d) + " must be >= 1");
    if (num_blocks < 0)
      throw invalid_input("AcceptanceHead: num_blocks = " + std::to_string(num_blocks) + " is negative");
    k_ = num_blocks;
    tied_ = tied && num_blocks > 1;
    std::mt19937_64 rng(seed);
    for (std::int32_t j = 0; j < stored_blocks(); ++j) {
      wt_.emplace_back(d, d);
      b_.emplace_back(d);
      detail::init_uniform(wt_.back().data(), d * d, d, rng);
      detail::init_uniform(b_.back().data(), d, d, rng);
    }
    wout_t_.resize(d, 2);
    detail::init_uniform(wout_t_.data(), 2 * d, d, rng);
    detail::init_uniform(bout_.data(), 2, d, rng);
  }

  /// num_blocks = 0: the block count is the number of blocks in the file (untied). Otherwise the
  /// file holds either all num_blocks blocks or only block 0 (tied).
  static AcceptanceHead load(const std::string& path, const std::string& prefix = "",
                             std::int32_t num_blocks = 0) {
    if (num_blocks < 0)
      throw invalid_input("AcceptanceHead::load('" + path + "'): num_blocks = " +
                          std::to_string(num_blocks) + " is negative");
    const SafetensorsFile file = SafetensorsFile::open(path);
    std::int32_t present = 0;
    while (file.contains(block_name(prefix, present, "weight"))) ++present;
    AcceptanceHead head;
    head.k_ = num_blocks == 0 ? present : num_blocks;
    head.tied_ = head.k_ > 1 && present == 1;
    if (num_blocks > 0 && present != num_blocks && !head.tied_)
      detail::safetensors_error(path, block_name(prefix, std::min(present, num_blocks), "weight"),
                                "file has " + std::to_string(present) + " blocks; num_blocks = " +
                                    std::to_string(num_blocks) +
                                    " needs all of them or only block 0 (tied)");
    const std::string out = prefix + std::to_string(head.k_);
    if (!file.contains(out + ".weight"))
      detail::safetensors_error(path, out + ".weight",
                                "missing tensor (the output layer after " +
                                    std::to_string(head.k_) +
                                    " blocks; a head with tied blocks needs num_blocks)");
    const Eigen::Index d = detail::weight_dim(file, out + ".weight", 2);
    for (std::int32_t j = 0; j < head.stored_blocks(); ++j) {
      head.wt_.push_back(detail::read_weight(file, block_name(prefix, j, "weight"), d, d));
      head.b_.push_back(detail::read_weight(file, block_name(prefix, j, "bias"), d, 0));
    }
    head.wout_t_ = detail::read_weight(file, out + ".weight", 2, d);
    head.bout_ = detail::read_weight(file, out + ".bias", 2, 0);
    return head;
  }

  /// Writes the head in the layout load() reads (F32). A tied head writes only block 0, as the
  /// released one does: load it back with num_blocks.
  void save(const std::string& path, const std::string& prefix = "") const {
    const std::int64_t d = dim();
    std::vector<TensorView> tensors;
    for (std::int32_t j = 0; j < stored_blocks(); ++j) {
      tensors.push_back({block_name(prefix, j, "weight"), {d, d}, wt_[static_cast<std::size_t>(j)].data()});
      tensors.push_back({block_name(prefix, j, "bias"), {d}, b_[static_cast<std::size_t>(j)].data()});
    }
    const std::string out = prefix + std::to_string(k_);
    tensors.push_back({out + ".weight", {2, d}, wout_t_.data()});
    tensors.push_back({out + ".bias", {2}, bout_.data()});
    save_safetensors(path, tensors);
  }

  Eigen::Index dim() const { return wout_t_.rows(); }
  std::int32_t num_blocks() const { return k_; }
  bool tied() const { return tied_; }

  /// Thread-safe evaluation with caller-owned scratch; `out` gets one probability per row of H.
  template <class Derived>
  void accept_probs(const Eigen::MatrixBase<Derived>& H, Eigen::VectorXf& out, Scratch& s) const {
    detail::check_hidden(H, dim(), "AcceptanceHead");
    if (k_ == 0) {
      s.logits.noalias() = H * wout_t_;
    } else {
      // The first block reads H directly, so no copy of the input is made.
      s.a.noalias() = H * wt(0);
      s.a.rowwise() += b(0).transpose();
      s.h = H + detail::silu(s.a);
      for (std::int32_t i = 1; i < k_; ++i) {
        s.a.noalias() = s.h * wt(i);
        s.a.rowwise() += b(i).transpose();
        s.h += detail::silu(s.a);
      }
      s.logits.noalias() = s.h * wout_t_;
    }
    // softmax(l)[1] = sigmoid(l1 - l0): the two-way softmax without overflow.
    out = detail::sigmoid((s.logits.col(1) - s.logits.col(0)).array() + (bout_(1) - bout_(0))).matrix();
  }

  /// Evaluation with the head's own scratch (not thread-safe, see the class comment).
  template <class Derived>
  void accept_probs(const Eigen::MatrixBase<Derived>& H, Eigen::VectorXf& out) {
    accept_probs(H, out, scratch_);
  }

  template <class Derived>
  Eigen::VectorXf accept_probs(const Eigen::MatrixBase<Derived>& H) {
    Eigen::VectorXf out;
    accept_probs(H, out, scratch_);
    return out;
  }

 private:
  friend class detail::Trainable<AcceptanceHead>;
  AcceptanceHead() = default;

  static std::string block_name(const std::string& prefix, std::int32_t i, const char* what) {
    return prefix + std::to_string(i) + ".linear." + what;
  }
  std::int32_t stored_blocks() const { return tied_ ? 1 : k_; }
  std::size_t slot(std::int32_t i) const { return tied_ ? 0 : static_cast<std::size_t>(i); }
  const Eigen::MatrixXf& wt(std::int32_t i) const { return wt_[slot(i)]; }
  const Eigen::VectorXf& b(std::int32_t i) const { return b_[slot(i)]; }

  /// Backpropagation through the blocks. With a_i = h_i W_i^T + b_i and h_{i+1} = h_i + SiLU(a_i):
  /// da_i = g_{i+1} * SiLU'(a_i), dW_i^T += h_i^T da_i, g_i = g_{i+1} + da_i W_i; tied blocks
  /// accumulate into one gradient.
  class Trainer {
   public:
    explicit Trainer(AcceptanceHead& head) : m_(head) {
      const Eigen::Index d = head.dim();
      for (std::int32_t j = 0; j < head.stored_blocks(); ++j) {
        gwt_.push_back(Eigen::MatrixXf::Zero(d, d));
        gb_.push_back(Eigen::VectorXf::Zero(d));
      }
      gwout_t_ = Eigen::MatrixXf::Zero(d, 2);
      gbout_.setZero();
    }

    std::vector<detail::ParamBlock> blocks() {
      std::vector<detail::ParamBlock> out;
      const Eigen::Index d = m_.dim();
      for (std::size_t j = 0; j < gwt_.size(); ++j) {
        out.push_back({m_.wt_[j].data(), gwt_[j].data(), d * d});
        out.push_back({m_.b_[j].data(), gb_[j].data(), d});
      }
      out.push_back({m_.wout_t_.data(), gwout_t_.data(), 2 * d});
      out.push_back({m_.bout_.data(), gbout_.data(), 2});
      return out;
    }

    float loss_and_gradient(const Eigen::MatrixXf& H, const Eigen::VectorXf& y, const FitOptions& o) {
      const std::int32_t k = m_.k_;
      hs_.resize(static_cast<std::size_t>(k) + 1);
      as_.resize(static_cast<std::size_t>(k));
      hs_[0] = H;
      for (std::int32_t i = 0; i < k; ++i) {
        const auto u = static_cast<std::size_t>(i);
        as_[u].noalias() = hs_[u] * m_.wt(i);
        as_[u].rowwise() += m_.b(i).transpose();
        hs_[u + 1] = hs_[u] + detail::silu(as_[u]);
      }
      const Eigen::MatrixXf& hk = hs_.back();
      const Eigen::VectorXf wdiff = m_.wout_t_.col(1) - m_.wout_t_.col(0);
      z_.noalias() = hk * wdiff;
      z_.array() += m_.bout_(1) - m_.bout_(0);
      const float loss = detail::weighted_bce(z_, y, o.w_acc, o.w_rej, dz_);

      gwout_t_.col(1).noalias() = hk.transpose() * dz_;
      gwout_t_.col(0) = -gwout_t_.col(1);
      gbout_ << -dz_.sum(), dz_.sum();
      g_.noalias() = dz_ * wdiff.transpose();
      for (auto& gw : gwt_) gw.setZero();
      for (auto& gb : gb_) gb.setZero();
      for (std::int32_t i = k - 1; i >= 0; --i) {
        const auto u = static_cast<std::size_t>(i);
        const Eigen::ArrayXXf sig = detail::sigmoid(as_[u].array());
        da_ = (g_.array() * sig * (1.0f + as_[u].array() * (1.0f - sig))).matrix();
        gwt_[m_.slot(i)].noalias() += hs_[u].transpose() * da_;
        gb_[m_.slot(i)] += da_.colwise().sum().transpose();
        g_.noalias() += da_ * m_.wt(i).transpose();
      }
      return loss;
    }

   private:
    AcceptanceHead& m_;
    std::vector<Eigen::MatrixXf> gwt_;
    std::vector<Eigen::VectorXf> gb_;
    Eigen::MatrixXf gwout_t_;
    Eigen::Vector2f gbout_;
    std::vector<Eigen::MatrixXf> hs_, as_;
    Eigen::MatrixXf g_, da_;
    Eigen::VectorXf z_, dz_;
  };

  std::int32_t k_ = 0;
  bool tied_ = false;
  std::vector<Eigen::MatrixXf> wt_;  // W_i^T per stored block: the bytes of PyTorch's row-major W_i
  std::vector<Eigen::VectorXf> b_;
  Eigen::MatrixXf wout_t_;           // W_out^T, [d, 2]
  Eigen::Vector2f bout_ = Eigen::Vector2f::Zero();
  Scratch scratch_;
};

}  // namespace specverify
