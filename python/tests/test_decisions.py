"""Decisions from Python against each rule's formula, on caller-supplied uniforms.

Rows, uniforms and beta are small dyadic fractions, so every sum and product is exact in float32
and the NumPy reference below makes exactly the decisions the C++ library must make.
"""
import numpy as np
import pytest
import specverify as sv

from conftest import Chains, as_numpy


def dyadic_rows(rng, n, vocab, zeros=0.3):
    rows = rng.integers(0, 64, size=(n, vocab)).astype(np.float32) / 256
    rows[rng.random((n, vocab)) < zeros] = 0
    rows[:, 0] += 1 / 256  # no row without mass
    return rows


def draw(weights, u):
    """docs/api.md "Randomness": the smallest i with w_0 + ... + w_i > u * sum(w) (exact here)."""
    w = weights.astype(np.float64)
    return int(np.argmax(np.cumsum(w) > u * w.sum()))


def standard_reference(c, accept_u, sample_u):
    """Leviathan et al.'s test and residual, written out in NumPy."""
    tokens = np.full((c.B, c.K + 1), sv.kNoToken, np.int32)
    accepted = np.zeros(c.B, np.int32)
    for b in range(c.B):
        first_row = c.offsets[b] + b
        n = 0
        for j in range(c.lengths[b]):
            g, x = c.offsets[b] + j, c.tokens[c.offsets[b] + j]
            p = c.p[first_row + j]
            q = c.q[g] if c.q is not None else np.eye(c.V, dtype=np.float32)[x]
            if np.float32(accept_u[g]) * q[x] < p[x]:
                tokens[b, j] = x
                n += 1
                continue
            residual = np.maximum(p - q, 0)
            tokens[b, j] = draw(residual if residual.sum() > 0 else p, sample_u[b])
            break
        else:
            tokens[b, n] = draw(c.p[first_row + n], sample_u[b])
        accepted[b] = n
    return tokens, accepted


@pytest.mark.parametrize("one_hot", [False, True])
def test_standard_matches_numpy_reference(rng, module, one_hot):
    lengths = rng.integers(0, 6, size=40)
    c = Chains(lengths, 24, rng, one_hot=one_hot, p=dyadic_rows(rng, lengths.sum() + 40, 24),
               q=None if one_hot else dyadic_rows(rng, lengths.sum(), 24))
    accept_u = (rng.integers(0, 256, size=c.N) / 256).astype(np.float32)
    sample_u = (rng.integers(0, 256, size=c.B) / 256).astype(np.float32)
    # Ties u q(x) == p(x) at every fourth draft: they must be rejected (the test is strict).
    p_x = c.p[c.draft_target_rows(), c.tokens]
    for g in range(0, c.N, 4):
        if c.q is None:
            accept_u[g] = p_x[g]
        else:
            c.q[g, c.tokens[g]] = 2 * p_x[g]
            accept_u[g] = 0.5
    expected_tokens, expected_accepted = standard_reference(c, accept_u, sample_u)
    assert 0 < expected_accepted.sum() < c.N  # both paths are exercised

    out = c.output(sv, module)
    conv = (lambda a: module.from_numpy(a)) if module is not np else (lambda a: a)
    randomness = sv.Randomness(seed=5, accept_uniforms=conv(accept_u), sample_uniforms=conv(sample_u))
    stats = sv.verify(sv.Standard(), c.batch(sv, module, pad=3), randomness, out)
    np.testing.assert_array_equal(as_numpy(out.tokens), expected_tokens)
    np.testing.assert_array_equal(as_numpy(out.num_accepted), expected_accepted)
    assert stats.drafted == c.N and stats.accepted == expected_accepted.sum() and stats.relaxed == 0


def test_caller_uniforms_replace_seed(rng):
    c = Chains(rng.integers(1, 5, size=16), 32, rng)
    u = rng.random(c.N).astype(np.float32)
    s = rng.random(c.B).astype(np.float32)
    results = []
    for seed in (1, 2):
        out = c.output(sv)
        sv.verify(sv.Standard(), c.batch(sv), sv.Randomness(seed, 9, accept_uniforms=u, sample_uniforms=s), out)
        results.append(out.tokens.copy())
    np.testing.assert_array_equal(results[0], results[1])


def test_greedy_is_argmax(rng):
    c = Chains(rng.integers(0, 6, size=30), 50, rng, one_hot=True)
    c.p[:, 7] = c.p.max(axis=1)  # ties: the lowest index wins
    argmax = c.p.argmax(axis=1)
    c.tokens[::2] = argmax[c.draft_target_rows()][::2]  # some drafts are the argmax
    out = c.output(sv)
    sv.verify(sv.Greedy(), c.batch(sv), sv.Randomness(3), out)
    for b in range(c.B):
        n = out.num_accepted[b]
        rows = c.offsets[b] + b + np.arange(n + 1)
        np.testing.assert_array_equal(out.tokens[b, : n + 1], argmax[rows])
        assert np.all(c.tokens[c.offsets[b]: c.offsets[b] + n] == argmax[rows[:-1]])
        if n < c.lengths[b]:
            assert c.tokens[c.offsets[b] + n] != argmax[rows[-1]]


def test_ears_tolerance(rng):
    # p(x) = 1/8, max p = 1/2, q(x) = 1/2: Standard accepts iff u < 1/4; EARS with beta = 1/4
    # adds 1/8 (u < 3/8); p(x) = 0 is never accepted, whatever beta.
    p = np.array([[1 / 8, 1 / 2, 3 / 8, 0], [0.25] * 4], np.float32)
    q = np.array([[1 / 2, 1 / 4, 1 / 4, 0]], np.float32)
    for x, u, beta, accepted in [(0, 0.2, 0.0, 1), (0, 0.3, 0.0, 0), (0, 0.3, 0.25, 1), (0, 0.4, 0.25, 0),
                                 (3, 0.0, 3.0, 0)]:
        qq = q.copy()
        qq[0, 3] = 0.5 if x == 3 else 0
        p_row = p.copy()
        batch = sv.ChainBatch(draft_offsets=np.array([0, 1], np.int32), draft_tokens=np.array([x], np.int32),
                              target_probs=p_row, draft_probs=qq)
        out = sv.ChainOutput(tokens=np.zeros((1, 2), np.int32), num_accepted=np.zeros(1, np.int32))
        stats = sv.verify(sv.Ears(beta=beta), batch,
                          sv.Randomness(accept_uniforms=np.array([u], np.float32)), out)
        assert out.num_accepted[0] == accepted, (x, u, beta)
        assert stats.relaxed == (1 if accepted and u >= 0.25 else 0)


# The worked divergences of docs/api.md "Divergence": p = (0.9, 0.1), q = (0.1, 0.9) and
# p = (0.7, 0.2, 0.1), q = (0.5, 0.3, 0.2).
DIVERGENCES = [
    ([0.9, 0.1], [0.1, 0.9], {"js": 0.368064, "js_fsd": 0.510826, "tv": 0.8,
                              "kl_target_draft": 1.757780, "kl_draft_target": 1.757780}),
    ([0.7, 0.2, 0.1], [0.5, 0.3, 0.2], {"js": 0.021901, "js_fsd": 0.022388, "tv": 0.2,
                                        "kl_draft_target": 0.092033, "kl_target_draft": 0.085123}),
]


@pytest.mark.parametrize("p, q, values", DIVERGENCES)
@pytest.mark.parametrize("name", ["kl_target_draft", "kl_draft_target", "js", "js_fsd", "tv"])
def test_fsd_divergence_thresholds(p, q, values, name):
    """Fsd accepts iff D(p, q) <= threshold: the enum reaches the right divergence."""
    d = values[name]
    for threshold, accepted in [(d * 1.001, 1), (d * 0.999, 0)]:
        V = len(p)
        batch = sv.ChainBatch(draft_offsets=np.array([0, 1], np.int32), draft_tokens=np.array([0], np.int32),
                              target_probs=np.array([p, p], np.float32), draft_probs=np.array([q], np.float32))
        out = sv.ChainOutput(tokens=np.zeros((1, 2), np.int32), num_accepted=np.zeros(1, np.int32))
        rule = sv.Fsd(divergence=getattr(sv.Divergence, name), threshold=threshold)
        sv.verify(rule, batch, sv.Randomness(1), out)
        assert out.num_accepted[0] == accepted, (name, threshold)
        assert 0 <= out.tokens[0, accepted] < V


def test_reducible_fsd_threshold_zero_is_standard(rng):
    c = Chains(rng.integers(0, 6, size=64), 40, rng)
    runs = []
    for rule in (sv.Standard(), sv.ReducibleFsd(divergence=sv.Divergence.tv, threshold=0.0)):
        out = c.output(sv)
        stats = sv.verify(rule, c.batch(sv), sv.Randomness(11, 2), out)
        runs.append((out.tokens.copy(), out.num_accepted.copy(), stats))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]


def test_sprinter_passes_scored_drafts_without_target_test():
    # p(x) = 1/64 against a one-hot draft and u = 0.9: the Standard test rejects; a score at or
    # above eta passes it unchecked, but never a token with p(x) = 0.
    p = np.full((4, 64), 1 / 64, np.float32)
    p[1, 5] = 0
    batch = sv.ChainBatch(draft_offsets=np.array([0, 3], np.int32), draft_tokens=np.array([3, 5, 9], np.int32),
                          target_probs=p)
    out = sv.ChainOutput(tokens=np.zeros((1, 4), np.int32), num_accepted=np.zeros(1, np.int32))
    u = sv.Randomness(accept_uniforms=np.full(3, 0.9, np.float32))
    stats = sv.verify(sv.Sprinter(eta=0.5, verifier_scores=np.array([0.5, 1.0, 1.0], np.float32)), batch, u, out)
    assert out.num_accepted[0] == 1 and out.tokens[0, 0] == 3 and out.tokens[0, 1] != 5
    assert (stats.accepted, stats.relaxed, stats.target_checked) == (1, 1, 1)
    stats = sv.verify(sv.Sprinter(eta=0.6, verifier_scores=np.array([0.5, 1.0, 1.0], np.float32)), batch, u, out)
    assert out.num_accepted[0] == 0 and stats.target_checked == 1


@pytest.mark.parametrize("inner", [sv.Standard(), sv.Greedy(), sv.Ears(beta=0.1), sv.Fsd(threshold=1.0),
                                   sv.ReducibleFsd(threshold=0.1)])
def test_specdecpp_cuts_chains(rng, inner):
    # q = p and drafts at the argmax: every inner rule accepts every draft it is shown. With
    # accept_probs 0.5 and threshold 0.6, 1 - prod first exceeds it at the second draft.
    c = Chains([4] * 8, 16, rng)
    rows = c.draft_target_rows()
    c.q = c.p[rows].copy()
    c.tokens = c.p[rows].argmax(axis=1).astype(np.int32)
    out = c.output(sv)
    rule = sv.SpecDecPP(threshold=0.6, accept_probs=np.full(c.N, 0.5, np.float32), inner=inner)
    sv.verify(rule, c.batch(sv), sv.Randomness(4), out)
    np.testing.assert_array_equal(out.num_accepted, 2)
    assert np.all(out.tokens[:, 3:] == sv.kNoToken) and np.all(out.tokens[:, 2] >= 0)
