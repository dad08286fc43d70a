// Trees for the CPU suites (test_trees.cpp, test_traversal.cpp, tree_decode.hpp) and the CUDA
// suite (test_cuda_trees.cu) alike, host only: an owned TreeBatch, random trees drafted as each
// Drafted says, and one list of malformed trees that every backend must reject with one message.
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

/// A batch of trees with owned storage and sentinel-filled outputs: sequence b's nodes, its n_b + 1
/// target rows (root first) and n_b + 1 draft rows. Every datum a bad-tree case may break lives
/// here, so a backend copies it as it is (the CUDA suite to device memory); BadTree::edit breaks
/// what only the batch holds.
struct Trees {
  static constexpr std::int32_t kSentinel = 12345;
  static constexpr float kSentinelLogprob = 777.0f;  // not NaN, so output vectors compare with ==
  std::int32_t V = 0;
  Drafted drafted = Drafted::sampled;
  bool with_q = true;                           // the batch passes q (draft_probs)
  std::vector<std::int32_t> offsets{0}, parents, tokens;
  std::vector<float> p, q;                      // [N + B][V] each, laid out like TreeBatch's rows
  std::vector<float> accept_u, sample_u;        // caller uniforms, when not empty
  std::int32_t width = 1;                       // row_width: the deepest path + 1 unless a case shrinks it
  std::vector<std::int32_t> out_tokens, accepted, nodes;
  std::vector<float> logprobs;

  /// Children drafted as `how` says; deterministic children need no q, so the batch passes none.
  explicit Trees(std::int32_t vocab, Drafted how = Drafted::sampled)
      : V(vocab), drafted(how), with_q(how != Drafted::deterministic) {}

  /// Appends a sequence: its parents and tokens, and its N + 1 target and draft rows.
  void add(const std::vector<std::int32_t>& ps, const std::vector<std::int32_t>& xs,
           const std::vector<std::vector<float>>& p_rows, const std::vector<std::vector<float>>& q_rows) {
    std::vector<float> p_flat, q_flat;
    for (const auto& r : p_rows) p_flat.insert(p_flat.end(), r.begin(), r.end());
    for (const auto& r : q_rows) q_flat.insert(q_flat.end(), r.begin(), r.end());
    add_rows(ps, xs, p_flat, q_flat);
  }

  /// Appends a sequence whose N + 1 rows of p and q lie one after another in p_rows and q_rows.
  /// The output width grows to the deepest path + 1 (a parent that is not an earlier node counts as
  /// the root, so a malformed tree still gets outputs).
  void add_rows(const std::vector<std::int32_t>& ps, const std::vector<std::int32_t>& xs,
                const std::vector<float>& p_rows, const std::vector<float>& q_rows) {
    const auto n = std::int32_t(ps.size());
    offsets.push_back(offsets.back() + n);
    parents.insert(parents.end(), ps.begin(), ps.end());
    tokens.insert(tokens.end(), xs.begin(), xs.end());
    p.insert(p.end(), p_rows.begin(), p_rows.end());
    q.insert(q.end(), q_rows.begin(), q_rows.end());
    std::vector<std::int32_t> depth(std::size_t(n), 1);
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int32_t parent = ps[std::size_t(i)];
      if (parent >= 0 && parent < i) depth[std::size_t(i)] = depth[std::size_t(parent)] + 1;
      width = std::max(width, depth[std::size_t(i)] + 1);
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
    b.drafted = drafted;
    return b;
  }

  Randomness randomness(std::uint64_t seed = 1) const {
    Randomness r{seed, 0};
    if (!accept_u.empty()) r.accept_uniforms = accept_u.data();
    if (!sample_u.empty()) r.sample_uniforms = sample_u.data();
    return r;
  }

  /// Outputs filled with kSentinel and kSentinelLogprob, to see what verify wrote; never empty, so
  /// a row_width below 1 is what a case tests, not a null pointer.
  TreeOutput output() {
    const std::size_t cells = std::size_t(size()) * std::size_t(std::max(width, 1));
    out_tokens.assign(cells, kSentinel);
    nodes.assign(cells, kSentinel);
    logprobs.assign(cells, kSentinelLogprob);
    accepted.assign(std::size_t(size()), kSentinel);
    return TreeOutput{out_tokens.data(), width, accepted.data(), nodes.data(), logprobs.data()};
  }

  bool untouched() const {
    for (auto t : out_tokens) if (t != kSentinel) return false;
    for (auto t : nodes) if (t != kSentinel) return false;
    for (auto t : accepted) if (t != kSentinel) return false;
    for (auto l : logprobs) if (l != kSentinelLogprob) return false;
    return true;
  }

  std::int32_t token(std::int32_t b, std::int32_t i) const { return out_tokens[std::size_t(b) * width + i]; }
  std::int32_t node(std::int32_t b, std::int32_t i) const { return nodes[std::size_t(b) * width + i]; }
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
    t.add(parents, xs, ps, qs);
  }
  return t;
}

/// Two valid sequences over uniform rows, V = 8: sequence 0 has nodes {-1, -1, 0} (tokens 1 2 3),
/// sequence 1 a path of three and a second root child {-1, 0, 1, -1} (tokens 3 4 5 6).
inline Trees two_trees(Drafted how = Drafted::sampled) {
  constexpr std::int32_t V = 8;
  const std::vector<float> u(V, 1.0f / V);
  Trees t(V, how);
  t.add({-1, -1, 0}, {1, 2, 3}, {u, u, u, u}, {u, u, u, u});
  t.add({-1, 0, 1, -1}, {3, 4, 5, 6}, {u, u, u, u, u}, {u, u, u, u, u});
  return t;
}

/// One malformed batch: two_trees(how) broken, `edit` for what the batch holds and Trees does not
/// (null pointers, strides), and fragments the message must contain.
struct BadTree {
  std::string name;
  Trees trees;
  std::vector<std::string> fragments;
  std::function<void(TreeBatch<float>&)> edit = [](TreeBatch<float>&) {};

  TreeBatch<float> batch() const {
    TreeBatch<float> b = trees.batch();
    edit(b);
    return b;
  }
};

/// Every way a tree batch can be wrong that verify() must name (issue 11 "Bad trees"), each case
/// breaking two_trees(how) in one thing. A case's fragments are what the message says; the CUDA
/// suite expects its message to be the CPU's word for word.
inline std::vector<BadTree> bad_trees(Drafted how = Drafted::sampled) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::vector<BadTree> cases;
  const auto add = [&](std::string name, const std::function<void(Trees&)>& apply,
                       std::vector<std::string> fragments) -> BadTree& {
    Trees t = two_trees(how);
    apply(t);
    cases.push_back(BadTree{std::move(name), std::move(t), std::move(fragments)});
    return cases.back();
  };
  const auto unbroken = [](Trees&) {};
  const auto parent = [](std::int32_t node, std::int32_t value) {
    return [=](Trees& t) { t.parents[std::size_t(t.offsets[1] + node)] = value; };
  };
  const auto token = [](std::int32_t node, std::int32_t value) {
    return [=](Trees& t) { t.tokens[std::size_t(t.offsets[1] + node)] = value; };
  };
  const auto root_row = [](const Trees& t) { return std::size_t(t.offsets[1] + 1) * std::size_t(t.V); };
  const std::string parent_range = " must be -1 (the root) or a node before it, in [0, ";
  add("parent is the node itself", parent(1, 1), {"sequence 1, node 1: parent 1" + parent_range + "1)"});
  add("parent after its child", parent(2, 3), {"sequence 1, node 2: parent 3" + parent_range + "2)"});
  add("parent below -1", parent(0, -2), {"sequence 1, node 0: parent -2" + parent_range + "0)"});
  add("parent past the sequence", parent(3, 100), {"sequence 1, node 3: parent 100" + parent_range + "3)"});
  add("drafted outside the enum", [](Trees& t) { t.drafted = static_cast<Drafted>(7); },
      {"drafted = 7 is not a Drafted value"});
  add("node_offsets[0] not 0", [](Trees& t) { t.offsets[0] = 1; }, {"node_offsets[0] = 1 must be 0"});
  add("node_offsets decrease", [](Trees& t) { t.offsets[1] = 8; }, {"sequence 1: node_offsets decrease (8 then 7)"});
  add("sampled without q", [](Trees& t) { t.with_q = false; },
      {"draft_probs is null, but children drafted by sampling need q"});
  add("without replacement without q",
      [](Trees& t) { t.with_q = false, t.drafted = Drafted::sampled_without_replacement; },
      {"draft_probs is null"});
  add("row_width below the deepest path + 1", [](Trees& t) { t.width = 3; },
      {"sequence 1, node 2: row_width = 3 must be at least the deepest path + 1", "needs 4"});
  add("row_width 0", [](Trees& t) { t.width = 0; },
      {"sequence 0: row_width = 0 must be at least the deepest path + 1 = 1"});
  add("token = V", token(2, 8), {"sequence 1, node 2: draft token 8 is outside [0, 8)"});
  add("negative token", token(3, -1), {"sequence 1, node 3: draft token -1 is outside [0, 8)"});
  add("token 2^30", token(0, 1 << 30), {"sequence 1, node 0: draft token 1073741824 is outside [0, 8)"});
  add("accept uniform 1", [](Trees& t) { t.accept_u.assign(t.tokens.size(), 0.5f), t.accept_u[5] = 1.0f; },
      {"sequence 1, node 2: accept uniform 1 is outside [0, 1)"});
  add("accept uniform NaN", [=](Trees& t) { t.accept_u.assign(t.tokens.size(), 0.5f), t.accept_u[6] = kNaN; },
      {"sequence 1, node 3: accept uniform nan"});
  add("sample uniform negative", [](Trees& t) { t.sample_u.assign(2, 0.5f), t.sample_u[1] = -0.5f; },
      {"sequence 1: sample uniform -0.5 is outside [0, 1)"});
  add("null parents", unbroken, {"parents is null"}).edit = [](TreeBatch<float>& b) { b.parents = nullptr; };
  add("null draft tokens", unbroken, {"draft_tokens is null"}).edit = [](TreeBatch<float>& b) {
    b.draft_tokens = nullptr;
  };
  add("null node offsets", unbroken, {"node_offsets is null"}).edit = [](TreeBatch<float>& b) {
    b.node_offsets = nullptr;
  };
  add("target stride below V", unbroken, {"target_stride = 7 must be 0 or at least vocab_size = 8"}).edit =
      [](TreeBatch<float>& b) { b.target_stride = 7; };
  add("draft stride below V", unbroken, {"draft_stride = 5 must be 0 or at least vocab_size = 8"}).edit =
      [](TreeBatch<float>& b) { b.draft_stride = 5; };
  add("stride whose rows overflow", unbroken, {"target_stride", "times 9 rows overflows"}).edit =
      [](TreeBatch<float>& b) { b.target_stride = std::int64_t{1} << 61; };
  add("NaN in the root's target row at a child's token", [=](Trees& t) { t.p[root_row(t) + 3] = kNaN; },
      {"sequence 1, node 0: target row 4 holds nan at token 3"});
  add("negative q read by the residual",
      [=](Trees& t) { t.p[root_row(t) + 3] = 0.0f, t.q[root_row(t) + 5] = -1.0f; },
      {"sequence 1, node 0: draft row 4 holds -1 at token 5"});
  add("negative q at a child's token", [=](Trees& t) { t.q[root_row(t) + 3] = -1.0f; },
      {"sequence 1, node 0: draft row 4 holds -1 at token 3"});
  // Standard names the last rejected child (node 3), Traversal the root.
  add("no mass left to draw from",
      [=](Trees& t) { std::fill(t.p.begin() + std::ptrdiff_t(root_row(t)), t.p.end(), 0.0f); },
      {"sequence 1", "target row 4 has no mass to draw from (all zero)"});
  return cases;
}

/// One tree whose root has 66 children that p gives nothing: every one is rejected. The CPU walks
/// it; a CUDA block, whose residual holds 64 rejected siblings, refuses the 65th.
inline Trees wide_root() {
  constexpr std::int32_t V = 4;
  const std::vector<float> p{1.0f, 0.0f, 0.0f, 0.0f}, q{0.0f, 1.0f, 0.0f, 0.0f};
  Trees wide(V);
  std::vector<std::vector<float>> ps(67, p), qs(67, q);
  wide.add(std::vector<std::int32_t>(66, -1), std::vector<std::int32_t>(66, 1), ps, qs);
  return wide;
}

}  // namespace specverify::testing
