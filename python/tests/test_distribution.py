"""Standard is lossless: the tokens it emits from Python follow p at every chain position, with
the adversarial draft q = reversed p. Chi-square at fixed seeds, bound df + 10 sqrt(2 df); a lossy
rule on the same batch must fail the same bound (the test has teeth)."""
import numpy as np
import pytest
import specverify as sv

from conftest import chi_square, chi_square_bound

V, K, SEQUENCES = 32, 2, 120_000


def adversarial_batch(module):
    rng = np.random.default_rng(7)
    p = 0.82 ** np.arange(V)  # smallest p(v) ~ 3e-4: every bin expects >= 30 tokens
    p = (p / p.sum()).astype(np.float32)
    q = p[::-1].copy()        # draft = reversed target
    rows_p = np.tile(p, (SEQUENCES * (K + 1), 1))
    rows_q = np.tile(q, (SEQUENCES * K, 1))
    tokens = rng.choice(V, size=SEQUENCES * K, p=q.astype(np.float64) / q.sum()).astype(np.int32)
    offsets = (np.arange(SEQUENCES + 1) * K).astype(np.int32)
    conv = (lambda a: a) if module is np else module.from_numpy
    batch = sv.ChainBatch(draft_offsets=conv(offsets), draft_tokens=conv(tokens),
                          target_probs=conv(rows_p), draft_probs=conv(rows_q))
    return batch, p


def emitted(rule, batch, seed):
    out = sv.ChainOutput(tokens=np.empty((SEQUENCES, K + 1), np.int32), num_accepted=np.empty(SEQUENCES, np.int32))
    sv.verify(rule, batch, sv.Randomness(seed, 0), out)
    return out


def worst_chi_square(out, p):
    """The largest chi-square over chain positions j, from the tokens emitted at j."""
    worst = 0.0
    for j in range(K + 1):
        reached = out.num_accepted >= j
        counts = np.bincount(out.tokens[reached, j], minlength=V)
        worst = max(worst, chi_square(counts, p))
    return worst


@pytest.mark.parametrize("seed", [1, 2])
def test_standard_follows_p(seed, module):
    batch, p = adversarial_batch(module)
    out = emitted(sv.Standard(), batch, seed)
    assert 0 < out.num_accepted.sum() < SEQUENCES * K
    assert worst_chi_square(out, p) < chi_square_bound(V - 1)


def test_lossy_control_fails():
    # EARS with beta = 0.004 pardons a small fraction of drafts: a small bias, and it is seen
    # (chi-square 231-308 at seeds 1-3 against the bound 110).
    batch, p = adversarial_batch(np)
    out = emitted(sv.Ears(beta=0.004), batch, 1)
    assert worst_chi_square(out, p) > chi_square_bound(V - 1)
