"""Token for token against the C++ library: the same batch through the Python module (strided
NumPy or torch views) and through reference_verify (contiguous C++ arrays), built-in Philox
uniforms, every rule. ctest sets SPECVERIFY_REFERENCE_VERIFY to the reference binary."""
import os
import subprocess

import numpy as np
import pytest
import specverify as sv

from conftest import Chains, as_numpy

REFERENCE = os.environ.get("SPECVERIFY_REFERENCE_VERIFY")
pytestmark = pytest.mark.skipif(not REFERENCE, reason="SPECVERIFY_REFERENCE_VERIFY not set (run through ctest)")

# (python rule factory given scores/accept arrays, reference words)
RULES = [
    (lambda s, a: sv.Standard(), "standard"),
    (lambda s, a: sv.Greedy(), "greedy"),
    (lambda s, a: sv.Block(), "block"),
    (lambda s, a: sv.Ears(beta=0.3), "ears 0.3"),
    (lambda s, a: sv.Fsd(divergence=sv.Divergence.js, threshold=0.35), "fsd js 0.35"),
    (lambda s, a: sv.Fsd(divergence=sv.Divergence.tv, threshold=0.6), "fsd tv 0.6"),
    (lambda s, a: sv.ReducibleFsd(divergence=sv.Divergence.kl_draft_target, threshold=0.8), "rfsd kl_draft_target 0.8"),
    (lambda s, a: sv.Sprinter(eta=0.7, verifier_scores=s), "sprinter 0.7"),
    (lambda s, a: sv.SpecDecPP(threshold=0.8, accept_probs=a, inner=sv.Ears(beta=0.2)), "specdecpp 0.8 ears 0.2"),
    (lambda s, a: sv.SpecDecPP(threshold=0.5, accept_probs=a, inner=sv.Sprinter(eta=0.6, verifier_scores=s)),
     "specdecpp 0.5 sprinter 0.6"),
]


def run_reference(tmp_path, c, words, seed, offset, seeds, scores, accept):
    d = tmp_path
    (d / "spec.txt").write_text(
        f"{c.B} {c.V} {c.K + 1} {seed} {offset} {int(c.q is not None)} {int(seeds is not None)}\n{words}\n")
    c.offsets.tofile(d / "offsets.i32")
    c.tokens.tofile(d / "tokens.i32")
    np.ascontiguousarray(c.p).tofile(d / "p.f32")
    if c.q is not None:
        np.ascontiguousarray(c.q).tofile(d / "q.f32")
    if seeds is not None:
        seeds.astype(np.uint64).tofile(d / "seeds.u64")
    scores.tofile(d / "scores.f32")
    accept.tofile(d / "accept.f32")
    subprocess.run([REFERENCE, str(d)], check=True)
    tokens = np.fromfile(d / "out_tokens.i32", np.int32).reshape(c.B, c.K + 1)
    accepted = np.fromfile(d / "out_accepted.i32", np.int32)
    stats = [int(x) for x in (d / "out_stats.txt").read_text().split()]
    return tokens, accepted, stats


@pytest.mark.parametrize("make_rule, words", RULES, ids=[w for _, w in RULES])
@pytest.mark.parametrize("one_hot", [False, True], ids=["q", "one-hot"])
@pytest.mark.parametrize("per_sequence", [False, True], ids=["seed", "sequence_seeds"])
def test_tokens_match_cpp(tmp_path, rng, module, make_rule, words, one_hot, per_sequence):
    c = Chains(rng.integers(0, 7, size=48), 96, rng, one_hot=one_hot)
    # Peaked p and most drafts at its argmax, so that every rule accepts some drafts.
    c.p = (c.p ** 4 / (c.p ** 4).sum(axis=1, keepdims=True)).astype(np.float32)
    rows = c.draft_target_rows()
    if c.q is not None:  # q near p, by varying amounts, so divergences straddle the thresholds
        mix = rng.random((c.N, 1))
        c.q = (mix * c.p[rows] + (1 - mix) * c.q).astype(np.float32)
    argmax = c.p[rows].argmax(axis=1)
    c.tokens = np.where(rng.random(c.N) < 0.7, argmax, c.tokens).astype(np.int32)
    seed, offset = 2**64 - 5, 2**40 + 3  # the full uint64 range reaches C++ intact
    seeds = rng.integers(0, 2**63, size=c.B, dtype=np.int64).astype(np.uint64) * 2 + 1 if per_sequence else None
    scores = rng.random(c.N).astype(np.float32)
    accept = (0.5 + 0.5 * rng.random(c.N)).astype(np.float32)
    expected_tokens, expected_accepted, expected_stats = run_reference(
        tmp_path, c, words, seed, offset, seeds, scores, accept)

    conv = (lambda a: a) if module is np else module.from_numpy
    if seeds is not None and module is not np:
        seeds_arg = conv(seeds.view(np.int64))  # torch has no uint64: the same bits as int64
    else:
        seeds_arg = seeds
    out = c.output(sv, module)
    rule = make_rule(conv(scores), conv(accept))
    stats = sv.verify(rule, c.batch(sv, module, pad=5), sv.Randomness(seed, offset, sequence_seeds=seeds_arg), out)
    np.testing.assert_array_equal(as_numpy(out.tokens), expected_tokens)
    np.testing.assert_array_equal(as_numpy(out.num_accepted), expected_accepted)
    assert [stats.drafted, stats.accepted, stats.relaxed, stats.target_checked] == expected_stats
    assert 0 < stats.accepted < stats.drafted  # both paths are exercised


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_count_does_not_change_tokens(tmp_path, rng, threads):
    c = Chains(rng.integers(0, 7, size=200), 4096, rng)
    expected_tokens, _, _ = run_reference(tmp_path, c, "standard", 8, 1, None,
                                          np.zeros(c.N, np.float32), np.zeros(c.N, np.float32))
    out = c.output(sv)
    sv.verify(sv.Standard(), c.batch(sv), sv.Randomness(8, 1), out, max_threads=threads)
    np.testing.assert_array_equal(out.tokens, expected_tokens)
