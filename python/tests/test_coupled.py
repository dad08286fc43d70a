"""Coupled verification emits exactly the text of plain sv.sample decoding, token for token, for
a fixed seed: chains (ragged, any draft length) and trees, numpy and torch, whatever the drafter
proposed. A toy bigram model: the logits after token x are row x of a table. Control: another
seed decodes another text (the comparison can fail)."""
import numpy as np
import pytest
import specverify as sv

V, LENGTH, B = 64, 150, 6
PARAMS = sv.SamplingParams(temperature=0.9, top_k=40, top_p=0.95, min_p=0.01)


def tables():
    rng = np.random.default_rng(5)
    target = rng.normal(0.0, 4.0, (V, V)).astype(np.float32)  # peaked, as a language model is
    draft = (target + rng.normal(0.0, 0.5, (V, V))).astype(np.float32)  # a drafter that is often right
    return target, draft


def plain_decode(target, seed, start):
    """tokens[n] = sample(logits after tokens[n-1], PARAMS, seed, position n)."""
    tokens = [start]
    while len(tokens) < LENGTH:
        tokens.append(sv.sample(target[tokens[-1]], PARAMS, seed, len(tokens)))
    return tokens


def draft_chain(draft, last, k, rng):
    chain = []
    for _ in range(k):
        row = np.exp(draft[chain[-1] if chain else last].astype(np.float64))
        chain.append(int(rng.choice(V, p=row / row.sum())))
    return chain


def speculative_decode_chains(target, draft, seeds, module):
    conv = (lambda a: a) if module is np else module.from_numpy
    rng = np.random.default_rng(9)
    texts = [[int(s % V)] for s in seeds]
    params = sv.sampling_params([PARAMS] * B)
    accepted = drafted = 0
    while min(len(t) for t in texts) < LENGTH:
        chains = [draft_chain(draft, t[-1], int(rng.integers(0, 5)), rng) for t in texts]
        offsets = np.concatenate([[0], np.cumsum([len(c) for c in chains])]).astype(np.int32)
        # Target rows: after the last committed token, then after each draft.
        rows = np.concatenate([target[[t[-1]] + c] for t, c in zip(texts, chains)])
        tokens = np.array([x for c in chains for x in c], np.int32)
        batch = sv.LogitsChainBatch(draft_offsets=conv(offsets), draft_tokens=conv(tokens), target_logits=conv(rows),
                                    target_params=params)
        out = sv.ChainOutput(tokens=conv(np.empty((B, 5), np.int32)), num_accepted=conv(np.empty(B, np.int32)))
        positions = np.array([len(t) for t in texts], np.int64)
        seed_bits = np.array(seeds, np.uint64).view(np.int64)  # torch has no uint64: the same bits
        randomness = sv.Randomness(0, 0, sequence_seeds=conv(seed_bits), positions=conv(positions))
        stats = sv.verify(sv.Coupled(), batch, randomness, out)
        accepted, drafted = accepted + stats.accepted, drafted + stats.drafted
        emitted, counts = np.asarray(out.tokens), np.asarray(out.num_accepted)
        for b, t in enumerate(texts):
            t.extend(int(x) for x in emitted[b, : counts[b] + 1])
    return [t[:LENGTH] for t in texts], accepted / drafted


@pytest.mark.parametrize("seeds", [[1, 2, 3, 4, 5, 6], [2**63 + 11, 7, 7, 99, 123456789, 42]], ids=["small", "wide"])
def test_chains_decode_as_plain_sampling(seeds, module):
    target, draft = tables()
    texts, rate = speculative_decode_chains(target, draft, seeds, module)
    assert 0.2 < rate < 0.95  # speculation both helps and fails
    for b, seed in enumerate(seeds):
        assert texts[b] == plain_decode(target, seed, seed % V), f"sequence {b}"


def test_control_other_seed_differs():
    target, _ = tables()
    assert plain_decode(target, 1, 1) != plain_decode(target, 2, 1)


def test_trees_decode_as_plain_sampling():
    """Each step drafts a tree: two root children (the drafter's top two), each with a chain of
    two more drafts; accepted_nodes says which branch was taken."""
    target, draft = tables()
    rng = np.random.default_rng(4)
    seeds = list(range(10, 10 + B))
    texts = [[s % V] for s in seeds]
    parents = np.array([-1, -1, 0, 2, 1, 4], np.int32)
    params = sv.sampling_params([PARAMS] * B)
    accepted = 0
    while min(len(t) for t in texts) < LENGTH:
        nodes = []
        for t in texts:
            top = np.argsort(-draft[t[-1]])[:2]
            a, b = [int(x) for x in top]
            nodes.append([a, b] + [0] * 4)
            nodes[-1][2:4] = draft_chain(draft, a, 2, rng)
            nodes[-1][4:6] = draft_chain(draft, b, 2, rng)
        rows = []
        for t, n in zip(texts, nodes):
            rows.append(target[[t[-1]] + n])  # row 0: the root; row 1 + i: after node i
        batch = sv.LogitsTreeBatch(node_offsets=(np.arange(B + 1) * 6).astype(np.int32),
                                   parents=np.tile(parents, B), draft_tokens=np.array(nodes, np.int32).ravel(),
                                   target_logits=np.concatenate(rows), drafted=sv.Drafted.deterministic,
                                   target_params=params)
        out = sv.TreeOutput(tokens=np.empty((B, 4), np.int32), num_accepted=np.empty(B, np.int32),
                            accepted_nodes=np.empty((B, 4), np.int32))
        randomness = sv.Randomness(sequence_seeds=np.array(seeds, np.uint64),
                                   positions=np.array([len(t) for t in texts], np.int64))
        accepted += sv.verify(sv.Coupled(), batch, randomness, out).accepted
        for b, t in enumerate(texts):
            n = out.num_accepted[b]
            path = out.accepted_nodes[b, :n]
            assert all(nodes[b][i] == out.tokens[b, j] for j, i in enumerate(path))
            t.extend(int(x) for x in out.tokens[b, : n + 1])
    assert accepted > LENGTH  # the trees helped
    for b, seed in enumerate(seeds):
        assert texts[b][:LENGTH] == plain_decode(target, seed, seed % V), f"sequence {b}"
