"""Standard (and Block) over logits are lossless for the processed target: the tokens it emits from Python
follow the NumPy reference of the seven steps (temperature, top_k, top_p, min_p), per sequence's
own parameters, with the adversarial draft q = reversed p. Chi-square at fixed seeds, bound
df + 10 sqrt(2 df); tokens the processing removes are never emitted. A lossy rule and a reference
that skips a step fail the same bound (the test has teeth)."""
import numpy as np
import pytest
import specverify as sv

from conftest import chi_square, chi_square_bound
from processing import params_dict, processed_probs

V, K, SEQUENCES = 48, 2, 120_000
# Two groups of sequences (alternating) with their own parameters; the drafter sampled untruncated.
GROUPS = [sv.SamplingParams(temperature=0.8, top_k=20, top_p=0.91, min_p=0.17),
          sv.SamplingParams(temperature=1.3, top_k=0, top_p=0.75, min_p=0.0)]
DRAFT = sv.SamplingParams(temperature=1.0)


def logits_row():
    return np.random.default_rng(11).normal(0.0, 1.5, V).astype(np.float32)


def adversarial_batch(module):
    rng = np.random.default_rng(7)
    target = logits_row()
    draft = target[::-1].copy()  # draft = reversed target
    q = processed_probs(draft, **params_dict(sv.sampling_params([DRAFT])[0]))
    offsets = (np.arange(SEQUENCES + 1) * K).astype(np.int32)
    tokens = rng.choice(V, size=SEQUENCES * K, p=q).astype(np.int32)
    params = sv.sampling_params([GROUPS[b % 2] for b in range(SEQUENCES)])
    conv = (lambda a: a) if module is np else module.from_numpy
    batch = sv.LogitsChainBatch(draft_offsets=conv(offsets), draft_tokens=conv(tokens),
                                target_logits=conv(np.tile(target, (SEQUENCES * (K + 1), 1))),
                                draft_logits=conv(np.tile(draft, (SEQUENCES * K, 1))),
                                target_params=params, draft_params=sv.sampling_params([DRAFT] * SEQUENCES))
    return batch, target, params


def emitted(rule, batch, seed):
    out = sv.ChainOutput(tokens=np.empty((SEQUENCES, K + 1), np.int32), num_accepted=np.empty(SEQUENCES, np.int32))
    sv.verify(rule, batch, sv.Randomness(seed, 0), out)
    return out


def worst_chi_square(out, expected, checked=True):
    """The largest chi-square over groups and chain positions j, over the tokens p keeps, in units
    of the bound (< 1 passes). checked: every removed token has no count at all."""
    worst = 0.0
    for g, p in enumerate(expected):
        for j in range(K + 1):
            reached = (out.num_accepted >= j) & (np.arange(SEQUENCES) % 2 == g)
            counts = np.bincount(out.tokens[reached, j], minlength=V)
            kept = p > 0
            assert reached.sum() * p[kept].min() >= 20  # every kept bin expects 20 tokens or more
            if checked:
                assert counts[~kept].sum() == 0, f"group {g}, position {j}: a removed token was emitted"
            worst = max(worst, chi_square(counts[kept], p[kept]) / chi_square_bound(kept.sum() - 1))
    return worst


def expected_rows(target):
    return [processed_probs(target, **params_dict(sv.sampling_params([g])[0])) for g in GROUPS]


def test_reference_truncates():
    """The parameters bite: top_p and min_p cut group 0 below top_k, top_p drops a tail of group 1."""
    p0, p1 = expected_rows(logits_row())
    assert (p0 > 0).sum() == 11 and (processed_probs(logits_row(), temperature=0.8, top_k=20, top_p=0.91) > 0).sum() == 15
    assert (p1 > 0).sum() == 19


@pytest.mark.parametrize("rule, seed", [(sv.Standard(), 1), (sv.Standard(), 2), (sv.Block(), 3)], ids=repr)
def test_lossless_rules_follow_processed_p(rule, seed, module):
    batch, target, _ = adversarial_batch(module)
    out = emitted(rule, batch, seed)
    assert 0.05 * SEQUENCES * K < out.num_accepted.sum() < 0.95 * SEQUENCES * K
    assert worst_chi_square(out, expected_rows(target)) < 1.0


def test_controls_fail():
    batch, target, _ = adversarial_batch(np)
    # A lossy rule on the same batch: EARS pardons some drafts, and the bias shows (2.4 times the bound).
    assert worst_chi_square(emitted(sv.Ears(beta=0.1), batch, 1), expected_rows(target)) > 1.0
    # A reference that skips min_p: group 0's counts no longer fit it.
    skipped = [processed_probs(target, temperature=0.8, top_k=20, top_p=0.91), expected_rows(target)[1]]
    assert worst_chi_square(emitted(sv.Standard(), batch, 1), skipped, checked=False) > 1.0
