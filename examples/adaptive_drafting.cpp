// Adaptive drafting with the two learned heads on a toy draft model.
//
// The "draft LM" is a random linear model over a small vocabulary: hidden state h_t = tanh(A h_{t-1}
// + E[x_{t-1}]), logits = U h_t, greedy next token. Each new draft token's hidden state goes to
//  - SPRINTER: a LinearVerifier scores it and a SprinterGate says whether the target must check it
//    (the engine would stop drafting there and call the target);
//  - SpecDec++: an AcceptanceHead predicts its acceptance probability and SpecDecPPStop says when
//    the predicted chance of a rejection in the chain exceeds the threshold.
// The heads are trained here on synthetic soft labels; in practice they are loaded from the papers'
// safetensors files with LinearVerifier::load / AcceptanceHead::load.
#include <cstdio>
#include <random>

#include "specverify/controllers.hpp"
#include "specverify/heads.hpp"

namespace {

constexpr int kVocab = 12;
constexpr int kDim = 16;

struct ToyDraftModel {
  Eigen::MatrixXf A, E, U;  // recurrence [d, d], embeddings [d, V], unembedding [V, d]
  explicit ToyDraftModel(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    const auto random = [&](int r, int c, float scale) {
      Eigen::MatrixXf m(r, c);
      for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = scale * g(rng);
      return m;
    };
    A = random(kDim, kDim, 0.3f);
    E = random(kDim, kVocab, 1.0f);
    U = random(kVocab, kDim, 1.0f);
  }
  /// One step: the next hidden state and the greedy token it predicts.
  int step(Eigen::VectorXf& h, int last_token) const {
    h = (A * h + E.col(last_token)).array().tanh().matrix();
    Eigen::Index best;
    (U * h).maxCoeff(&best);
    return static_cast<int>(best);
  }
};

/// Synthetic soft labels min(1, p/q) for hidden states: a fixed smooth function standing in for the
/// target/draft agreement the heads would learn from real data.
Eigen::VectorXf synthetic_labels(const Eigen::MatrixXf& H) {
  const Eigen::ArrayXf z = 2.0f * H.col(0).array() - 1.5f * H.col(1).array() + 1.0f;
  return (1.0f + (-z).exp()).inverse().matrix();
}

}  // namespace

int main() {
  const ToyDraftModel draft(7);

  // Training data: hidden states visited by the draft model from random prompts.
  std::mt19937 rng(3);
  Eigen::MatrixXf H(4000, kDim);
  Eigen::VectorXf h = Eigen::VectorXf::Zero(kDim);
  int token = 0;
  for (Eigen::Index i = 0; i < H.rows(); ++i) {
    if (i % 50 == 0) token = static_cast<int>(rng() % kVocab);  // a fresh prompt now and then
    token = draft.step(h, token);
    H.row(i) = h.transpose();
  }
  const Eigen::VectorXf labels = synthetic_labels(H);

  specverify::FitOptions options;
  options.epochs = 20;
  options.learning_rate = 3e-3f;
  specverify::LinearVerifier verifier(kDim);
  specverify::AcceptanceHead head(kDim, /*num_blocks=*/2, /*tied=*/true);
  const std::vector<float> verifier_curve = verifier.fit(H, labels, options);
  options.w_rej = 3.0f;  // SpecDec++ weights rejections up against the class imbalance
  const std::vector<float> head_curve = head.fit(H, labels, options);
  std::printf("training loss  verifier %.4f -> %.4f   acceptance head %.4f -> %.4f\n",
              verifier_curve.front(), verifier_curve.back(), head_curve.front(), head_curve.back());

  // Drafting: both controllers watch the same chain of draft tokens.
  const specverify::SprinterGate gate{0.5f};
  specverify::SpecDecPPStop stop{0.7f, 2, 20};
  h.setZero();
  token = 5;
  Eigen::MatrixXf state(1, kDim);
  Eigen::VectorXf score, accept;
  int sprinter_stop = 0;
  std::printf("pos token  verifier  accept  1-prod  decision\n");
  for (int pos = 1;; ++pos) {
    token = draft.step(h, token);
    state.row(0) = h.transpose();
    verifier.scores(state, score);
    head.accept_probs(state, accept);
    const bool check = gate.must_check(score[0]);
    const bool done = stop.feed(accept[0]);
    if (check && sprinter_stop == 0) sprinter_stop = pos;
    std::printf("%3d %5d  %8.3f  %6.3f  %6.3f  %s%s\n", pos, token, score[0], accept[0],
                stop.rejection_prob(), check ? "SPRINTER: target checks this token" : "",
                done ? (check ? "; SpecDec++: stop" : "SpecDec++: stop, verify the chain") : "");
    if (done) break;
  }
  std::printf("SpecDec++ drafted %d tokens; ", stop.length());
  if (sprinter_stop > 0) {
    std::printf("SPRINTER first called the target at token %d\n", sprinter_stop);
  } else {
    std::printf("SPRINTER's verifier passed all of them without the target\n");
  }
  return 0;
}
