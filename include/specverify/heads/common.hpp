// Helpers both heads share: reading weights into Eigen, checking inputs, activations, init.
#pragma once

#include "specverify/heads/eigen.hpp"
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "specverify/heads/safetensors.hpp"
#include "specverify/types.hpp"

namespace specverify {
namespace detail {

/// Reads a PyTorch tensor of shape [rows, cols] (row-major) as the column-major Eigen matrix of its
/// transpose, [cols, rows]: the same bytes, so loading and saving never reorder. A rank-1 tensor is
/// asked for with cols == 0 and comes back as a column vector. Non-finite weights are refused: a
/// head with a NaN weight would only ever produce NaN probabilities.
inline Eigen::MatrixXf read_weight(const SafetensorsFile& file, const std::string& name,
                                   Eigen::Index rows, Eigen::Index cols) {
  const std::vector<std::int64_t> shape =
      cols == 0 ? std::vector<std::int64_t>{rows} : std::vector<std::int64_t>{rows, cols};
  const std::vector<float> data = file.read(name, &shape);
  for (std::size_t i = 0; i < data.size(); ++i)
    if (!std::isfinite(data[i]))
      safetensors_error(file.path(), name, "element " + std::to_string(i) + " is " +
                                               std::to_string(data[i]) + " (weights must be finite)");
  const Eigen::Index out_cols = cols == 0 ? 1 : rows;
  const Eigen::Index out_rows = cols == 0 ? rows : cols;
  return Eigen::Map<const Eigen::MatrixXf>(data.data(), out_rows, out_cols);
}

/// The trailing dimension of a [rows, d] tensor, checking its rank and the leading dimension.
inline Eigen::Index weight_dim(const SafetensorsFile& file, const std::string& name,
                               std::int64_t rows) {
  const TensorInfo& t = file.info(name);
  if (t.shape.size() != 2 || t.shape[0] != rows || t.shape[1] < 1)
    safetensors_error(file.path(), name, "shape " + shape_string(t.shape) + ", expected [" +
                                             std::to_string(rows) + ", d] with d >= 1");
  return static_cast<Eigen::Index>(t.shape[1]);
}

template <class Derived>
void check_hidden(const Eigen::MatrixBase<Derived>& H, Eigen::Index d, const char* head) {
  if (H.cols() != d)
    throw invalid_input(std::string(head) + ": hidden states have " + std::to_string(H.cols()) +
                        " columns, the head expects d = " + std::to_string(d));
}

/// Numerically safe logistic: exp(-z) overflows to inf for very negative z and gives 0, never NaN.
template <class ArrayLike>
auto sigmoid(const ArrayLike& z) {
  return (1.0f + (-z).exp()).inverse();
}

/// SiLU(a) = a * sigmoid(a), elementwise.
inline auto silu(const Eigen::MatrixXf& a) { return (a.array() * sigmoid(a.array())).matrix(); }

/// PyTorch's nn.Linear default initialisation, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), from a
/// platform-independent mapping of mt19937_64 output (std distributions differ between libraries).
inline void init_uniform(float* data, Eigen::Index n, Eigen::Index fan_in, std::mt19937_64& rng) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  for (Eigen::Index i = 0; i < n; ++i) {
    const float u = static_cast<float>(rng() >> 40) * 0x1.0p-24f;  // [0, 1)
    data[i] = bound * (2.0f * u - 1.0f);
  }
}

}  // namespace detail
}  // namespace specverify
