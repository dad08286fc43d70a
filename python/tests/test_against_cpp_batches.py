"""Token for token against the C++ library for chains with Coupled and logprobs, trees and logits
batches: the same batch through the Python module (strided NumPy or torch views) and through
reference_batches (contiguous C++ arrays): tokens, accepted counts, accepted nodes, logprobs (bit
for bit) and statistics, every rule, every optional logits field, the history and bias lists with
penalties; and sample() with its lists. ctest sets SPECVERIFY_REFERENCE_BATCHES to the reference
binary."""
import os
import subprocess

import numpy as np
import pytest
import specverify as sv

from conftest import as_numpy, normalised
from processing import bitmask, one_params, penalties, penalty_lists

REFERENCE = os.environ.get("SPECVERIFY_REFERENCE_BATCHES")
pytestmark = pytest.mark.skipif(not REFERENCE, reason="SPECVERIFY_REFERENCE_BATCHES not set (run through ctest)")

V, B = 96, 24
# (python rule factory given scores/accept arrays, reference words)
RULES = [
    (lambda s, a: sv.Standard(), "standard"),
    (lambda s, a: sv.Greedy(), "greedy"),
    (lambda s, a: sv.Coupled(), "coupled"),
    (lambda s, a: sv.Block(), "block"),
    (lambda s, a: sv.Traversal(), "traversal"),
    (lambda s, a: sv.Ears(beta=0.3), "ears 0.3"),
    (lambda s, a: sv.Fsd(divergence=sv.Divergence.js, threshold=0.5), "fsd js 0.5"),
    (lambda s, a: sv.ReducibleFsd(divergence=sv.Divergence.tv, threshold=0.6), "rfsd tv 0.6"),
    (lambda s, a: sv.Sprinter(eta=0.7, verifier_scores=s), "sprinter 0.7"),
    (lambda s, a: sv.SpecDecPP(threshold=0.6, accept_probs=a, inner=sv.Ears(beta=0.2)), "specdecpp 0.6 ears 0.2"),
]
# _full: every optional logits field; _lists: history and bias lists, penalties in both parameter sets.
KINDS = ["chain", "tree", "logits_chain", "logits_tree", "logits_chain_full", "logits_tree_full",
         "logits_chain_lists", "logits_tree_lists", "logits_chain_full_lists", "logits_tree_full_lists"]
# The reference's file for each array a Case may hold.
FILES = dict(offsets="offsets.i32", tokens="tokens.i32", target="target.f32", draft="draft.f32", seeds="seeds.u64",
             positions="positions.i64", scores="scores.f32", accept="accept.f32", parents="parents.i32",
             tparams="tparams.sp", dparams="dparams.sp", d2t="d2t.i32", uncond="uncond.f32", first_row="first_row.i64",
             gscale="gscale.f32", allowed="allowed.u32", history_offsets="hoffsets.i32", history_tokens="htokens.i32",
             history_counts="hcounts.i32", bias_offsets="boffsets.i32", bias_tokens="btokens.i32",
             bias_values="bvalues.f32")
LISTS = ["history_offsets", "history_tokens", "history_counts", "bias_offsets", "bias_tokens", "bias_values"]


class Case:
    """A random batch of one kind; arrays kept contiguous here, handed to Python as strided views."""

    def __init__(self, kind, rng, iid=False):
        self.kind = kind.replace("_full", "").replace("_lists", "")
        self.tree = "tree" in kind
        self.logits = kind.startswith("logits")
        counts = rng.integers(0, 6, size=B)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        self.N = int(self.offsets[-1])
        rows = self.N + B
        if self.tree:  # random parents: each node hangs below the root or an earlier node
            self.parents = np.concatenate([[rng.integers(-1, i) for i in range(n)] for n in counts]).astype(np.int32)
            depth = [self.depth(b) for b in range(B)]
            self.width = max(depth) + 1
            self.drafted = [sv.Drafted.sampled, sv.Drafted.sampled_without_replacement, sv.Drafted.deterministic][
                int(rng.integers(0, 3))]
            if iid:  # Traversal: children drafted i.i.d. from q
                self.drafted = sv.Drafted.sampled
        else:
            self.width = int(counts.max()) + 1
            self.drafted = sv.Drafted.sampled
        self.draft_rows = rows if self.tree else self.N
        # The target row each draft is tested against: chain draft j of b at offsets[b] + b + j;
        # tree node i at its parent's row (root: row 0).
        tested = []
        for b in range(B):
            first = self.offsets[b] + b
            for i in range(counts[b]):
                tested.append(first + (1 + self.parents[self.offsets[b] + i] if self.tree else i))
        tested = np.array(tested, np.int64)
        self.files = {}
        if self.logits:
            target = rng.normal(0, 3, (rows, V)).astype(np.float32)
            self.dvocab = V
            if "_full" in kind:
                self.d2t = rng.permutation(V)[:64].astype(np.int32)
                self.dvocab = 64
                self.uncond = rng.normal(0, 3, (rows + 7, V)).astype(np.float32)
                first = np.concatenate([[self.offsets[b] + b + 3] for b in range(B)]).astype(np.int64)
                self.first_row = np.where(rng.random(B) < 0.6, first, -1).astype(np.int64)
                self.gscale = rng.uniform(0.5, 2.0, B).astype(np.float32)
                self.allowed = bitmask(rng.random((rows, V)) < 0.85)
                self.dparams = self.params(rng)
            draft = rng.normal(0, 3, (self.draft_rows, self.dvocab)).astype(np.float32)
            self.tparams = self.params(rng)
            if kind.endswith("_lists"):
                self.__dict__.update(penalty_lists(rng, B, V))
                penalties(self.tparams, rng)
                if "_full" in kind:  # a drafter near the target (FSD accepts at times), with its own penalties
                    self.dparams = self.tparams.copy()
                    penalties(self.dparams, rng)
                    near = target if self.tree else target[tested]
                    draft = (near[:, self.d2t] + rng.normal(0, 1, draft.shape)).astype(np.float32)
            argmax = target[tested].argmax(axis=1)
            self.target, self.draft = target, draft
        else:
            p = normalised(rng.gamma(0.3, size=(rows, V)))
            p = (p ** 4 / (p ** 4).sum(axis=1, keepdims=True)).astype(np.float32)
            q = normalised(rng.gamma(0.3, size=(self.draft_rows, V)))
            self.target, self.draft = p, q
            argmax = p[tested].argmax(axis=1)
        random_tokens = rng.integers(0, V, self.N)
        self.tokens = np.where(rng.random(self.N) < 0.7, argmax, random_tokens).astype(np.int32)
        if self.tree and self.drafted == sv.Drafted.deterministic and rng.random() < 0.5:
            self.draft = None
        self.seeds = rng.integers(0, 2**63, B, dtype=np.int64).astype(np.uint64) * 2 + 1
        self.positions = rng.integers(0, 2**40, B, dtype=np.int64)
        self.scores = rng.random(self.N).astype(np.float32)
        self.accept = (0.5 + 0.5 * rng.random(self.N)).astype(np.float32)

    def depth(self, b):
        first, n = self.offsets[b], self.offsets[b + 1] - self.offsets[b]
        d = [0] * n
        for i in range(n):
            parent = self.parents[first + i]
            d[i] = 1 if parent < 0 else d[parent] + 1
        return max(d, default=0)

    @staticmethod
    def params(rng, n=B):
        p = sv.sampling_params(n)
        p["temperature"] = rng.choice([0.0, 0.7, 1.0, 1.5], n)
        p["top_k"] = rng.choice([0, 5, 20], n)
        p["top_p"] = rng.choice([1.0, 0.9], n)
        p["min_p"] = rng.choice([0.0, 0.05], n)
        return p

    def run_reference(self, tmp_path, words):
        d = tmp_path
        (d / "spec.txt").write_text(f"{self.kind} {B} {V} {self.width} 77 5 {int(self.drafted)}\n{words}\n")
        for name, file in FILES.items():
            value = getattr(self, name, None)
            if value is not None:
                np.ascontiguousarray(value).tofile(d / file)
        subprocess.run([REFERENCE, str(d)], check=True)
        read = lambda f, t: np.fromfile(d / f, t).reshape(B, -1)
        return dict(tokens=read("out_tokens.i32", np.int32), accepted=np.fromfile(d / "out_accepted.i32", np.int32),
                    nodes=read("out_nodes.i32", np.int32) if self.tree else None,
                    logprobs=read("out_logprobs.f32", np.float32),
                    stats=[int(x) for x in (d / "out_stats.txt").read_text().split()])

    def python_batch(self, module):
        conv = (lambda a: a) if module is np else module.from_numpy

        def rows(a):  # a strided view inside a wider buffer
            if a is None:
                return None
            wide = np.full((a.shape[0], a.shape[1] + 3), np.nan, np.float32)
            wide[:, : a.shape[1]] = a
            return conv(wide[:, : a.shape[1]])

        common = dict(draft_tokens=conv(self.tokens))
        if self.tree:
            common.update(node_offsets=conv(self.offsets), parents=conv(self.parents), drafted=self.drafted)
        else:
            common.update(draft_offsets=conv(self.offsets))
        if not self.logits:
            cls = sv.TreeBatch if self.tree else sv.ChainBatch
            return cls(target_probs=rows(self.target), draft_probs=rows(self.draft), **common)
        optional = lambda name: conv(getattr(self, name)) if getattr(self, name, None) is not None else None
        cls = sv.LogitsTreeBatch if self.tree else sv.LogitsChainBatch
        return cls(target_logits=rows(self.target), draft_logits=rows(self.draft), target_params=self.tparams,
                   draft_params=getattr(self, "dparams", None), draft_to_target=optional("d2t"),
                   unconditional_logits=rows(getattr(self, "uncond", None)), unconditional_first_row=optional("first_row"),
                   guidance_scale=optional("gscale"), **common,
                   allowed_tokens=self.bitmask(module), **{name: optional(name) for name in LISTS})

    def bitmask(self, module):
        if getattr(self, "allowed", None) is None:
            return None
        # torch has no uint32: int32, the same bits (as xgrammar's bitmasks are)
        return self.allowed if module is np else module.from_numpy(self.allowed.view(np.int32))


def rules_for(kind):
    return [(r, w) for r, w in RULES if not ("tree" in kind and w.split()[0] in ("specdecpp", "block"))]


CASES = [(k, r, w) for k in KINDS for r, w in rules_for(k)]


@pytest.mark.parametrize("kind, make_rule, words", CASES, ids=[f"{k}-{w}" for k, _, w in CASES])
def test_tokens_match_cpp(tmp_path, module, kind, make_rule, words):
    totals = np.zeros(2, np.int64)
    for seed in range(3):  # three random batches of the kind
        c = Case(kind, np.random.default_rng([seed, KINDS.index(kind)]), iid=words == "traversal")
        expected = c.run_reference(tmp_path, words)
        conv = (lambda a: a) if module is np else module.from_numpy
        out_arrays = dict(tokens=conv(np.zeros((B, c.width), np.int32)), num_accepted=conv(np.zeros(B, np.int32)),
                          logprobs=conv(np.zeros((B, c.width), np.float32)))
        if c.tree:
            out = sv.TreeOutput(accepted_nodes=conv(np.zeros((B, c.width), np.int32)), **out_arrays)
        else:
            out = sv.ChainOutput(**out_arrays)
        randomness = sv.Randomness(77, 5, sequence_seeds=conv(c.seeds.view(np.int64)), positions=conv(c.positions))
        stats = sv.verify(make_rule(conv(c.scores), conv(c.accept)), c.python_batch(module), randomness, out)
        np.testing.assert_array_equal(as_numpy(out.tokens), expected["tokens"])
        np.testing.assert_array_equal(as_numpy(out.num_accepted), expected["accepted"])
        if c.tree:
            np.testing.assert_array_equal(as_numpy(out.accepted_nodes), expected["nodes"])
        np.testing.assert_array_equal(as_numpy(out.logprobs).view(np.int32), expected["logprobs"].view(np.int32))
        assert [stats.drafted, stats.accepted, stats.relaxed, stats.target_checked] == expected["stats"]
        totals += [stats.accepted, stats.drafted]
    assert 0 < totals[0] < totals[1]  # both paths are exercised


@pytest.mark.parametrize("vocab", [V, 5000])
def test_sample_matches_cpp(tmp_path, module, vocab):
    """sample() with history and bias lists (some empty) against the C++ sample(), row by row. The
    lists name tokens below V = 96, where the wide rows hold most of their mass."""
    conv = (lambda a: a) if module is np else module.from_numpy
    rng = np.random.default_rng(vocab)
    n = 64
    target = rng.normal(0, 3, (n, vocab)).astype(np.float32)
    target[:, V:] -= 5
    a = dict(target=target, tparams=Case.params(rng, n),
             seeds=rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64),
             positions=rng.integers(0, 2**40, n, dtype=np.int64))
    penalties(a["tparams"], rng)
    a.update(penalty_lists(rng, n, V))
    (tmp_path / "spec.txt").write_text(f"sample {n} {vocab} 1 0 0 0\n")
    for name, array in a.items():
        array.tofile(tmp_path / FILES[name])
    subprocess.run([REFERENCE, str(tmp_path)], check=True)
    expected = np.fromfile(tmp_path / "out_tokens.i32", np.int32)
    got, plain = [], []
    for b in range(n):
        h = slice(a["history_offsets"][b], a["history_offsets"][b + 1])
        o = slice(a["bias_offsets"][b], a["bias_offsets"][b + 1])
        params = one_params(a["tparams"][b])
        row, seed, position = conv(a["target"][b]), int(a["seeds"][b]), int(a["positions"][b])
        got.append(sv.sample(row, params, seed, position, history_tokens=conv(a["history_tokens"][h]),
                             history_counts=conv(a["history_counts"][h]), bias_tokens=conv(a["bias_tokens"][o]),
                             bias_values=conv(a["bias_values"][o])))
        plain.append(sv.sample(row, params, seed, position))
    np.testing.assert_array_equal(got, expected)
    assert np.sum(np.array(plain) != expected) >= n // 16  # the lists change draws: the comparison can fail
