// Malformed tree batches, one list for the CPU suite (test_trees.cpp) and the CUDA suite: each case
// breaks one thing in two valid sequences and names what the invalid_input message must say.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "support.hpp"

namespace specverify::testing {

/// A batch of trees with owned storage and sentinel-filled outputs. Everything a case may break
/// lives here, so a backend copies it as it is (the CUDA suite to device memory).
struct Trees {
  static constexpr std::int32_t kSentinel = 12345;
  std::int32_t V = 0;
  std::vector<std::int32_t> offsets{0}, parents, tokens;
  std::vector<float> p, q;                      // [N + B][V] each, laid out like TreeBatch's rows
  std::vector<float> accept_u, sample_u;        // caller uniforms, when not empty
  Drafted drafted = Drafted::sampled;
  bool with_q = true;
  std::int64_t target_stride = 0;
  std::int32_t width = 1;                       // row_width: the deepest path + 1 unless a case shrinks it
  std::vector<std::int32_t> out_tokens, accepted, nodes;
  std::vector<float> logprobs;

  explicit Trees(std::int32_t vocab) : V(vocab) {}

  /// Appends a sequence: its parents and tokens, and its N + 1 target and draft rows.
  void add(const std::vector<std::int32_t>& ps, const std::vector<std::int32_t>& xs,
           const std::vector<std::vector<float>>& p_rows, const std::vector<std::vector<float>>& q_rows) {
    std::vector<float> p_flat, q_flat;
    for (const auto& r : p_rows) p_flat.insert(p_flat.end(), r.begin(), r.end());
    for (const auto& r : q_rows) q_flat.insert(q_flat.end(), r.begin(), r.end());
    add_rows(ps, xs, p_flat, q_flat);
  }

  /// Appends a sequence whose N + 1 rows of p and q lie one after another in p_rows and q_rows.
  void add_rows(const std::vector<std::int32_t>& ps, const std::vector<std::int32_t>& xs,
                const std::vector<float>& p_rows, const std::vector<float>& q_rows) {
    offsets.push_back(offsets.back() + std::int32_t(ps.size()));
    parents.insert(parents.end(), ps.begin(), ps.end());
    tokens.insert(tokens.end(), xs.begin(), xs.end());
    p.insert(p.end(), p_rows.begin(), p_rows.end());
    q.insert(q.end(), q_rows.begin(), q_rows.end());
    std::vector<std::int32_t> depth(ps.size());
    for (std::size_t i = 0; i < ps.size(); ++i) {
      depth[i] = ps[i] < 0 ? 1 : depth[std::size_t(ps[i])] + 1;
      width = std::max(width, depth[i] + 1);
    }
  }

  std::int32_t size() const { return std::int32_t(offsets.size()) - 1; }

  TreeBatch<float> batch() const {
    TreeBatch<float> b;
    b.batch_size = size();
    b.vocab_size = V;
    b.node_offsets = offsets.data();
    b.parents = parents.data();
    b.draft_tokens = tokens.data();
    b.target_probs = p.data();
    b.draft_probs = with_q ? q.data() : nullptr;
    b.target_stride = target_stride;
    b.drafted = drafted;
    return b;
  }

  Randomness randomness(std::uint64_t seed = 1) const {
    Randomness r{seed, 0};
    if (!accept_u.empty()) r.accept_uniforms = accept_u.data();
    if (!sample_u.empty()) r.sample_uniforms = sample_u.data();
    return r;
  }

  /// Outputs filled with kSentinel (logprobs with NaN-free 777), to see what verify wrote.
  TreeOutput output() {
    const std::size_t cells = std::size_t(size()) * std::size_t(std::max(width, 0));
    out_tokens.assign(cells, kSentinel);
    nodes.assign(cells, kSentinel);
    logprobs.assign(cells, 777.0f);
    accepted.assign(std::size_t(size()), kSentinel);
    return TreeOutput{out_tokens.data(), width, accepted.data(), nodes.data(), logprobs.data()};
  }

  bool untouched() const {
    for (auto t : out_tokens) if (t != kSentinel) return false;
    for (auto t : nodes) if (t != kSentinel) return false;
    for (auto t : accepted) if (t != kSentinel) return false;
    for (auto l : logprobs) if (l != 777.0f) return false;
    return true;
  }

  std::int32_t token(std::int32_t b, std::int32_t i) const { return out_tokens[std::size_t(b) * width + i]; }
  std::int32_t node(std::int32_t b, std::int32_t i) const { return nodes[std::size_t(b) * width + i]; }
};

/// Two valid sequences over uniform rows, V = 8: sequence 0 has nodes {-1, -1, 0} (tokens 1 2 3),
/// sequence 1 a path of three and a second root child {-1, 0, 1, -1} (tokens 3 4 5 6).
inline Trees two_trees(Drafted drafted = Drafted::sampled) {
  constexpr std::int32_t V = 8;
  const std::vector<float> u(V, 1.0f / V);
  Trees t(V);
  t.drafted = drafted;
  t.add({-1, -1, 0}, {1, 2, 3}, {u, u, u, u}, {u, u, u, u});
  t.add({-1, 0, 1, -1}, {3, 4, 5, 6}, {u, u, u, u, u}, {u, u, u, u, u});
  return t;
}

/// One malformed batch: `apply` breaks two_trees(); the message must contain every `expected`.
struct BadTree {
  std::string name;
  std::function<void(Trees&)> apply;
  std::vector<std::string> expected;
};

inline std::vector<BadTree> bad_trees() {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  const auto parent = [](std::int32_t node, std::int32_t value) {
    return [=](Trees& t) { t.parents[std::size_t(t.offsets[1] + node)] = value; };
  };
  const auto token = [](std::int32_t node, std::int32_t value) {
    return [=](Trees& t) { t.tokens[std::size_t(t.offsets[1] + node)] = value; };
  };
  return {
      {"parent is the node itself", parent(1, 1), {"sequence 1", "node 1", "parent 1"}},
      {"parent after its child", parent(2, 3), {"sequence 1", "node 2", "parent 3"}},
      {"parent below -1", parent(0, -2), {"sequence 1", "node 0", "parent -2"}},
      {"parent past the sequence", parent(3, 100), {"sequence 1", "node 3", "parent 100"}},
      {"drafted outside the enum", [](Trees& t) { t.drafted = static_cast<Drafted>(7); },
       {"drafted = 7", "not a Drafted value"}},
      {"node_offsets[0] not 0", [](Trees& t) { t.offsets[0] = 1; }, {"node_offsets[0] = 1"}},
      {"node_offsets decrease", [](Trees& t) { t.offsets[1] = 8; }, {"sequence 1", "decrease", "8 then 7"}},
      {"sampled without q", [](Trees& t) { t.with_q = false; }, {"draft_probs is null"}},
      {"without replacement without q",
       [](Trees& t) { t.with_q = false, t.drafted = Drafted::sampled_without_replacement; },
       {"draft_probs is null"}},
      {"row_width below the deepest path + 1", [](Trees& t) { t.width = 3; }, {"sequence 1", "row_width = 3", "4"}},
      {"token = V", token(2, 8), {"sequence 1", "node 2", "draft token 8"}},
      {"negative token", token(3, -1), {"sequence 1", "node 3", "draft token -1"}},
      {"accept uniform 1",
       [](Trees& t) { t.accept_u.assign(t.tokens.size(), 0.5f), t.accept_u[5] = 1.0f; },
       {"sequence 1", "node 2", "accept uniform 1"}},
      {"accept uniform NaN",
       [=](Trees& t) { t.accept_u.assign(t.tokens.size(), 0.5f), t.accept_u[6] = kNaN; },
       {"sequence 1", "node 3", "accept uniform nan"}},
      {"sample uniform negative",
       [](Trees& t) { t.sample_u.assign(2, 0.5f), t.sample_u[1] = -0.5f; },
       {"sequence 1", "sample uniform -0.5"}},
      {"target stride below V", [](Trees& t) { t.target_stride = 7; }, {"target_stride = 7"}},
      {"NaN in the root's target row",
       [=](Trees& t) { t.p[std::size_t(t.offsets[1] + 1) * t.V + 3] = kNaN; },
       {"sequence 1", "target row 4", "token 3"}},
      {"negative value in a draft row",
       [](Trees& t) { t.p[std::size_t(t.offsets[1] + 1) * t.V + 3] = 0.0f,
                      t.q[std::size_t(t.offsets[1] + 1) * t.V + 5] = -1.0f; },
       {"sequence 1", "draft row 4", "-1", "token 5"}},
  };
}

}  // namespace specverify::testing
