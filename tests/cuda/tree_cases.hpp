// Trees for the CPU and CUDA suites alike (host only): an owned TreeBatch, random trees drafted as
// each Drafted says, and the malformed trees both backends must reject with the same message.
// Written to move into tests/bad_trees.hpp, the CPU suite's list, once both exist on one branch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "support.hpp"

namespace specverify::testing {

/// A batch of trees with owned storage: sequence b's nodes, its n_b + 1 target rows (root first)
/// and, unless its children were chosen deterministically, n_b + 1 draft rows.
struct Trees {
  std::int32_t V = 0;
  Drafted drafted = Drafted::sampled;
  std::vector<std::int32_t> offsets{0}, parents, tokens;
  std::vector<float> p, q;
  std::int32_t width = 1;
  std::vector<std::int32_t> out_tokens, accepted, nodes;
  std::vector<float> logprobs;

  Trees(std::int32_t vocab, Drafted how) : V(vocab), drafted(how) {}

  /// Appends a tree: its nodes' parents and tokens, n + 1 target rows and (sampled kinds) n + 1
  /// draft rows. The output width grows to the deepest path + 1.
  void add(const std::vector<std::int32_t>& node_parents, const std::vector<std::int32_t>& xs,
           const std::vector<std::vector<float>>& ps, const std::vector<std::vector<float>>& qs = {}) {
    const auto n = static_cast<std::int32_t>(xs.size());
    offsets.push_back(offsets.back() + n);
    parents.insert(parents.end(), node_parents.begin(), node_parents.end());
    tokens.insert(tokens.end(), xs.begin(), xs.end());
    for (const auto& row : ps) p.insert(p.end(), row.begin(), row.end());
    for (const auto& row : qs) q.insert(q.end(), row.begin(), row.end());
    std::vector<std::int32_t> depth(std::size_t(n), 1);
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int32_t parent = node_parents[std::size_t(i)];
      if (parent >= 0 && parent < i) depth[std::size_t(i)] = depth[std::size_t(parent)] + 1;
      width = std::max(width, depth[std::size_t(i)] + 1);
    }
  }

  std::int32_t size() const { return static_cast<std::int32_t>(offsets.size()) - 1; }

  TreeBatch<float> batch() const {
    TreeBatch<float> b;
    b.batch_size = size();
    b.vocab_size = V;
    b.node_offsets = offsets.data();
    b.parents = parents.data();
    b.draft_tokens = tokens.data();
    b.target_probs = p.data();
    b.draft_probs = q.empty() ? nullptr : q.data();
    b.drafted = drafted;
    return b;
  }

  /// Outputs filled with 12345 (tokens, counts, nodes) and NaN (logprobs), so untouched slots show;
  /// never empty, so a row_width below 1 is what a case tests, not a null pointer.
  TreeOutput output() {
    const std::size_t slots = std::size_t(size()) * std::size_t(std::max(width, 1));
    out_tokens.assign(slots, 12345);
    accepted.assign(std::size_t(size()), 12345);
    nodes.assign(slots, 12345);
    logprobs.assign(slots, std::numeric_limits<float>::quiet_NaN());
    return TreeOutput{out_tokens.data(), width, accepted.data(), nodes.data(), logprobs.data()};
  }
};

/// The children of one node, drafted from q as `how` says: sampled (with replacement), without
/// replacement, or the top of q by decreasing mass (deterministic).
inline std::vector<std::int32_t> draft_children(const std::vector<float>& q, std::int32_t count, Drafted how,
                                                std::mt19937_64& rng) {
  std::vector<float> w = q;
  std::vector<std::int32_t> xs;
  for (std::int32_t c = 0; c < count; ++c) {
    std::int32_t x;
    if (how == Drafted::deterministic) {
      x = std::int32_t(std::max_element(w.begin(), w.end()) - w.begin());
      w[std::size_t(x)] = -1.0f;
    } else {
      const bool empty = std::all_of(w.begin(), w.end(), [](float v) { return v <= 0.0f; });
      x = empty ? 0 : sample(w, rng);
      if (how == Drafted::sampled_without_replacement) w[std::size_t(x)] = 0.0f;
    }
    xs.push_back(x);
  }
  return xs;
}

/// B random trees of up to max_nodes nodes over LLM-like rows (every other row's tail masked, as
/// top-k does), parents uniform over the earlier nodes and the root, children drafted as `how`
/// says from draft rows that resemble the target's, and about one draft in seven replaced by any
/// token (the target may have masked it).
inline Trees random_trees(std::int32_t B, std::int32_t V, std::int32_t max_nodes, Drafted how,
                          std::mt19937_64& rng) {
  Trees t(V, how);
  std::uniform_int_distribution<std::int32_t> count(0, max_nodes), any(0, V - 1);
  std::normal_distribution<double> noise(0.0, 1.0);
  for (std::int32_t b = 0; b < B; ++b) {
    const std::int32_t n = count(rng);
    std::vector<std::vector<float>> ps, qs;
    for (std::int32_t r = 0; r <= n; ++r) {
      auto logits = random_logits(V, rng);
      auto p = softmax(logits);
      if (V > 8 && r % 2) {  // mask part of the row as top-k does, which keeps the top token
        const auto top = std::max_element(p.begin(), p.end()) - p.begin();
        for (std::int32_t v = 0; v < V; v += 3) p[std::size_t(v)] = v == top ? p[std::size_t(v)] : 0.0f;
      }
      ps.push_back(p);
      for (auto& l : logits) l += noise(rng);
      qs.push_back(softmax(logits));
    }
    std::vector<std::int32_t> parents(static_cast<std::size_t>(n)), xs(static_cast<std::size_t>(n));
    for (std::int32_t i = 0; i < n; ++i) parents[std::size_t(i)] = std::uniform_int_distribution<std::int32_t>(-1, i - 1)(rng);
    // Each node's children are drafted together, in index order, from the node's q.
    for (std::int32_t node = -1; node < n; ++node) {
      std::vector<std::int32_t> children;
      for (std::int32_t i = 0; i < n; ++i) {
        if (parents[std::size_t(i)] == node) children.push_back(i);
      }
      const auto drafts = draft_children(qs[std::size_t(node + 1)], std::int32_t(children.size()), how, rng);
      for (std::size_t c = 0; c < children.size(); ++c) {
        xs[std::size_t(children[c])] = any(rng) % 7 == 0 ? any(rng) : drafts[c];
      }
    }
    if (how == Drafted::deterministic) qs.clear();
    t.add(parents, xs, ps, qs);
  }
  return t;
}

/// Two valid trees over uniform rows, V = 8: sequence 0 has nodes {0, 1} under the root and node 2
/// under node 0 (tokens 1, 2, 3); sequence 1 has one node (token 4).
inline Trees two_trees(Drafted how = Drafted::sampled) {
  constexpr std::int32_t V = 8;
  const std::vector<float> u(V, 1.0f / V);
  Trees t(V, how);
  const bool q = how != Drafted::deterministic;
  t.add({-1, -1, 0}, {1, 2, 3}, {u, u, u, u}, q ? std::vector<std::vector<float>>{u, u, u, u} : std::vector<std::vector<float>>{});
  t.add({-1}, {4}, {u, u}, q ? std::vector<std::vector<float>>{u, u} : std::vector<std::vector<float>>{});
  return t;
}

/// A malformed tree batch: the trees, what to change in the batch (pointers, strides), caller
/// uniforms, and fragments the message must hold (sequence, node and value).
struct BadTree {
  BadTree(std::string case_name, Trees t, std::vector<std::string> says)
      : name(std::move(case_name)), trees(std::move(t)), fragments(std::move(says)) {}

  std::string name;
  Trees trees;
  std::function<void(TreeBatch<float>&)> edit = [](TreeBatch<float>&) {};
  std::vector<float> accept, sample;  // caller uniforms, where the case gives them
  std::vector<std::string> fragments;

  Randomness randomness() const {
    Randomness r{5, 0};
    if (!accept.empty()) r.accept_uniforms = accept.data();
    if (!sample.empty()) r.sample_uniforms = sample.data();
    return r;
  }
};

/// Every way a tree batch can be wrong that verify() must name (issue 11 "Bad trees"), for
/// Standard. A case's fragments are what the message says; the CUDA suite expects its message to
/// be the CPU's word for word.
inline std::vector<BadTree> bad_trees() {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::vector<BadTree> cases;
  const auto add = [&](std::string name, Trees t, std::vector<std::string> fragments) -> BadTree& {
    cases.emplace_back(std::move(name), std::move(t), std::move(fragments));
    return cases.back();
  };
  Trees t = two_trees();
  t.parents[2] = 2;
  add("parent not before its child", t,
      {"sequence 0, node 2: parent 2 must be -1 (the root) or a node before it, in [0, 2)"});
  t = two_trees();
  t.parents[1] = -2;
  add("parent below -1", t, {"sequence 0, node 1: parent -2"});
  t = two_trees();
  t.parents[3] = 5;
  add("parent past the sequence", t, {"sequence 1, node 0: parent 5", "in [0, 0)"});
  t = two_trees();
  t.offsets = {0, 3, 2};
  add("decreasing offsets", t, {"sequence 1: node_offsets decrease (3 then 2)"});
  t = two_trees();
  t.offsets = {1, 3, 4};
  add("offsets not starting at 0", t, {"node_offsets[0] = 1 must be 0"});
  for (const std::int32_t x : {8, -1, 1 << 30}) {
    t = two_trees();
    t.tokens[3] = x;
    add("token " + std::to_string(x), t,
        {"sequence 1, node 0: draft token " + std::to_string(x) + " is outside [0, 8)"});
  }
  t = two_trees();
  add("q missing for sampled children", t, {"draft_probs is null, but children drafted by sampling need q"})
      .edit = [](TreeBatch<float>& b) { b.draft_probs = nullptr; };
  t = two_trees(Drafted::sampled_without_replacement);
  add("q missing for children without replacement", t, {"draft_probs is null"}).edit =
      [](TreeBatch<float>& b) { b.draft_probs = nullptr; };
  t = two_trees();
  t.width = 2;
  add("row_width below the deepest path", t,
      {"sequence 0, node 2: row_width = 2 must be at least the deepest path + 1"});
  t = two_trees();
  t.width = 0;
  add("row_width 0", t, {"sequence 0: row_width = 0 must be at least the deepest path + 1 = 1"});
  t = two_trees();
  add("accept uniform 1", t, {"sequence 0, node 1: accept uniform 1 is outside [0, 1)"}).accept = {0.5f, 1.0f, 0.5f, 0.5f};
  t = two_trees();
  add("accept uniform NaN", t, {"sequence 1, node 0: accept uniform nan"}).accept = {0.5f, 0.5f, 0.5f, kNaN};
  t = two_trees();
  add("sample uniform", t, {"sequence 1: sample uniform -0.5 is outside [0, 1)"}).sample = {0.5f, -0.5f};
  t = two_trees();
  add("null parents", t, {"parents is null"}).edit = [](TreeBatch<float>& b) { b.parents = nullptr; };
  t = two_trees();
  add("null draft tokens", t, {"draft_tokens is null"}).edit = [](TreeBatch<float>& b) { b.draft_tokens = nullptr; };
  t = two_trees();
  add("null node offsets", t, {"node_offsets is null"}).edit = [](TreeBatch<float>& b) { b.node_offsets = nullptr; };
  t = two_trees();
  add("stride below the vocabulary", t, {"draft_stride = 5 must be 0 or at least vocab_size = 8"}).edit =
      [](TreeBatch<float>& b) { b.draft_stride = 5; };
  t = two_trees();
  add("stride whose rows overflow", t, {"target_stride", "times 6 rows overflows"}).edit =
      [](TreeBatch<float>& b) { b.target_stride = std::int64_t{1} << 61; };
  t = two_trees();
  t.p[1] = kNaN;  // the root row of sequence 0, at its first child's token
  add("NaN at a child's token", t, {"sequence 0, node 0: target row 0 holds nan at token 1"});
  t = two_trees();
  t.q[std::size_t(t.V) * 4 + 4] = -1.0f;  // sequence 1's root draft row (row 4), at its child's token
  add("negative q at a child's token", t, {"sequence 1, node 0: draft row 4 holds -1 at token 4"});
  t = two_trees();
  std::fill(t.p.begin() + t.V * 4, t.p.begin() + t.V * 6, 0.0f);  // sequence 1: nothing to draw
  add("no mass left to draw from", t, {"sequence 1", "no mass to draw from"});
  t = two_trees();
  t.drafted = static_cast<Drafted>(7);
  add("drafted outside the enum", t, {"drafted = 7 is not a Drafted value"});
  return cases;
}

/// One tree whose root has 66 children that p gives nothing: every one is rejected. The CPU walks
/// it; a CUDA block, whose residual holds 64 rejected siblings, refuses the 65th.
inline Trees wide_root() {
  constexpr std::int32_t V = 4;
  const std::vector<float> p{1.0f, 0.0f, 0.0f, 0.0f}, q{0.0f, 1.0f, 0.0f, 0.0f};
  Trees wide(V, Drafted::sampled);
  std::vector<std::vector<float>> ps(67, p), qs(67, q);
  wide.add(std::vector<std::int32_t>(66, -1), std::vector<std::int32_t>(66, 1), ps, qs);
  return wide;
}

}  // namespace specverify::testing
