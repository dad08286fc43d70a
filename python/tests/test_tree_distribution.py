"""Standard over trees is lossless for every Drafted: the tokens it emits from Python at the first
two positions follow p, with the adversarial draft q = reversed p, for children sampled with
replacement, without replacement and chosen deterministically (top-3 of p, as a greedy drafter
would), and over logits with sampling parameters. Chi-square at fixed seeds, bound
df + 10 sqrt(2 df). Control: the top-3 children declared sampled fail the bound (a wrong Drafted
biases the output)."""
import numpy as np
import pytest
import specverify as sv

from conftest import chi_square, chi_square_bound
from processing import params_dict, processed_probs

V, SEQUENCES, WIDTH = 24, 100_000, 3
# Each sequence: WIDTH children of the root (nodes 0..2), each with one child (nodes 3..5).
PARENTS = np.array([-1] * WIDTH + list(range(WIDTH)), np.int32)
NODES = PARENTS.size


def target_and_draft():
    p = 0.8 ** np.arange(V)
    p = p / p.sum()
    return p, p[::-1].copy()  # draft = reversed target


def children(p, q, rng, drafted):
    """[SEQUENCES, WIDTH] children of the root."""
    if drafted == sv.Drafted.deterministic:
        return np.tile(np.argsort(-p, kind="stable")[:WIDTH], (SEQUENCES, 1))
    if drafted == sv.Drafted.sampled:
        return rng.choice(V, size=(SEQUENCES, WIDTH), p=q)
    # Without replacement: Gumbel top-WIDTH of log q draws WIDTH distinct tokens one after another.
    keys = np.log(q) + rng.gumbel(size=(SEQUENCES, V))
    return np.argsort(-keys, axis=1)[:, :WIDTH]


def tree_tokens(p, q, rng, drafted):
    first = children(p, q, rng, drafted)
    second = rng.choice(V, size=(SEQUENCES, WIDTH), p=q)  # each child's single child, sampled
    return np.concatenate([first, second], axis=1).astype(np.int32).ravel()


def layout():
    offsets = (np.arange(SEQUENCES + 1) * NODES).astype(np.int32)
    return offsets, np.tile(PARENTS, SEQUENCES)


def emitted(batch, seed, rule=None):
    out = sv.TreeOutput(tokens=np.empty((SEQUENCES, 3), np.int32), num_accepted=np.empty(SEQUENCES, np.int32),
                        accepted_nodes=np.empty((SEQUENCES, 3), np.int32))
    sv.verify(rule or sv.Standard(), batch, sv.Randomness(seed, 0), out)
    return out


def worst_chi_square(out, p):
    """The largest chi-square over the first two positions, in units of the bound (< 1 passes)."""
    kept = p > 0
    worst = 0.0
    for j in range(2):
        reached = out.num_accepted >= j
        counts = np.bincount(out.tokens[reached, j], minlength=V)
        assert reached.sum() * p[kept].min() >= 20
        assert counts[~kept].sum() == 0
        worst = max(worst, chi_square(counts[kept], p[kept]) / chi_square_bound(kept.sum() - 1))
    return worst


def prob_batch(drafted, declared, module=np):
    rng = np.random.default_rng(int(drafted) + 5)
    p, q = target_and_draft()
    offsets, parents = layout()
    rows = SEQUENCES * (NODES + 1)
    conv = (lambda a: a) if module is np else module.from_numpy
    draft = None if declared == sv.Drafted.deterministic else conv(np.tile(q.astype(np.float32), (rows, 1)))
    batch = sv.TreeBatch(node_offsets=conv(offsets), parents=conv(parents), draft_tokens=conv(tree_tokens(p, q, rng, drafted)),
                         target_probs=conv(np.tile(p.astype(np.float32), (rows, 1))), draft_probs=draft,
                         drafted=declared)
    return batch, p


@pytest.mark.parametrize("drafted", [sv.Drafted.sampled, sv.Drafted.sampled_without_replacement,
                                     sv.Drafted.deterministic], ids=lambda d: d.name)
def test_standard_follows_p(drafted, module):
    batch, p = prob_batch(drafted, drafted, module)
    out = emitted(batch, 1)
    assert 0.05 * SEQUENCES < out.num_accepted.sum() < 1.9 * SEQUENCES
    assert worst_chi_square(out, p) < 1.0


def test_wrong_drafted_fails():
    """Top-3 children of p declared sampled: tested as if drawn from q, they bias the output."""
    batch, p = prob_batch(sv.Drafted.deterministic, sv.Drafted.sampled)
    assert worst_chi_square(emitted(batch, 1), p) > 1.0


def test_logits_tree_follows_processed_p():
    """LogitsTreeBatch: target parameters truncate p, the drafter sampled its children from its
    own processed q (reversed logits, its own temperature)."""
    rng = np.random.default_rng(3)
    target = rng.normal(0.0, 1.2, V).astype(np.float32)
    draft = target[::-1].copy()
    tparams = sv.sampling_params(SEQUENCES, temperature=0.9, top_k=12, top_p=0.97)
    dparams = sv.sampling_params(SEQUENCES, temperature=1.2)
    p = processed_probs(target, **params_dict(tparams[0]))
    q = processed_probs(draft, **params_dict(dparams[0]))
    offsets, parents = layout()
    rows = SEQUENCES * (NODES + 1)
    batch = sv.LogitsTreeBatch(node_offsets=offsets, parents=parents, draft_tokens=tree_tokens(p, q, rng, sv.Drafted.sampled),
                               target_logits=np.tile(target, (rows, 1)), draft_logits=np.tile(draft, (rows, 1)),
                               drafted=sv.Drafted.sampled, target_params=tparams, draft_params=dparams)
    assert 6 < (p > 0).sum() < 12
    out = emitted(batch, 2)
    assert 0.05 * SEQUENCES < out.num_accepted.sum()
    assert worst_chi_square(out, p) < 1.0
