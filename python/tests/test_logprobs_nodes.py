"""logprobs: log p(token) under the processed target row each token was emitted from, against a
NumPy log-softmax of the processed row (guidance, bitmask, temperature, top_k, top_p, min_p) to
1e-4; kNoToken slots left as they were. accepted_nodes: the accepted path through each tree."""
import numpy as np
import pytest
import specverify as sv

from processing import bitmask, params_dict, processed_probs

V, B = 40, 64
SENTINEL = 123.0


def chain_case(rng):
    counts = rng.integers(0, 5, B)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    rows = int(offsets[-1]) + B
    target = rng.normal(0, 2, (rows, V)).astype(np.float32)
    params = sv.sampling_params(B)
    params["temperature"] = rng.choice([0.0, 0.6, 1.0], B)
    params["top_k"] = rng.choice([0, 8], B)
    params["top_p"] = rng.choice([1.0, 0.85], B)
    params["min_p"] = rng.choice([0.0, 0.1], B)
    uncond = rng.normal(0, 2, (rows, V)).astype(np.float32)
    first_row = np.where(rng.random(B) < 0.5, offsets[:-1] + np.arange(B), -1).astype(np.int64)
    scale = rng.uniform(0.5, 2.0, B).astype(np.float32)
    allowed = rng.random((rows, V)) < 0.8
    # Drafts: the processed argmax of their row most of the time, so chains run long.
    tokens = []
    for b in range(B):
        for j in range(counts[b]):
            tokens.append(int(np.argmax(processed_row(target, uncond, first_row, scale, allowed, params, offsets, b, j)))
                          if rng.random() < 0.8 else int(rng.integers(0, V)))
    batch = sv.LogitsChainBatch(draft_offsets=offsets, draft_tokens=np.array(tokens, np.int32), target_logits=target,
                                target_params=params, unconditional_logits=uncond, unconditional_first_row=first_row,
                                guidance_scale=scale, allowed_tokens=bitmask(allowed))
    return batch, (target, uncond, first_row, scale, allowed, params, offsets), int(counts.max()) + 1


def processed_row(target, uncond, first_row, scale, allowed, params, offsets, b, j):
    """p of sequence b's row j (its j-th target row)."""
    row = offsets[b] + b + j
    guided = first_row[b] >= 0
    return processed_probs(target[row], unconditional=uncond[first_row[b] + j] if guided else None,
                           scale=float(scale[b]), allowed=allowed[row], **params_dict(params[b]))


@pytest.mark.parametrize("rule", [sv.Standard(), sv.Greedy(), sv.Ears(beta=0.2)], ids=repr)
def test_chain_logprobs(rng, rule):
    batch, inputs, width = chain_case(rng)
    out = sv.ChainOutput(tokens=np.empty((B, width), np.int32), num_accepted=np.empty(B, np.int32),
                         logprobs=np.full((B, width), SENTINEL, np.float32))
    stats = sv.verify(rule, batch, sv.Randomness(4, 1), out)
    assert 0 < stats.accepted < stats.drafted
    for b in range(B):
        n = out.num_accepted[b]
        for j in range(n + 1):
            p = processed_row(*inputs, b, j)
            token = out.tokens[b, j]
            assert p[token] > 0
            assert abs(out.logprobs[b, j] - np.log(p[token])) < 1e-4, (b, j)
        assert np.all(out.logprobs[b, n + 1:] == SENTINEL)


def test_greedy_rows_have_logprob_zero(rng):
    batch, inputs, width = chain_case(rng)
    batch.target_params["temperature"] = 0.0  # viewed in place: the next verify reads it
    out = sv.ChainOutput(tokens=np.empty((B, width), np.int32), num_accepted=np.empty(B, np.int32),
                         logprobs=np.full((B, width), SENTINEL, np.float32))
    sv.verify(sv.Standard(), batch, sv.Randomness(4, 1), out)
    emitted = out.tokens != sv.kNoToken
    assert np.all(out.logprobs[emitted] == 0.0) and np.all(out.logprobs[~emitted] == SENTINEL)


def test_tree_accepted_nodes_and_logprobs(rng):
    """Probability rows: logprobs are log p of the row the token came from (the root's for the
    first, then the row after each accepted node), and the accepted nodes form a path whose tokens
    are the emitted ones."""
    counts = rng.integers(0, 7, B)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    parents = np.concatenate([[rng.integers(-1, i) for i in range(n)] for n in counts]).astype(np.int32)
    rows = int(offsets[-1]) + B
    p = rng.gamma(0.3, size=(rows, V)) ** 3
    p = (p / p.sum(axis=1, keepdims=True)).astype(np.float32)
    tokens = np.empty(offsets[-1], np.int32)
    for b in range(B):
        for i in range(counts[b]):  # mostly the argmax of the row the node is tested against
            row = offsets[b] + b + 1 + parents[offsets[b] + i]
            tokens[offsets[b] + i] = np.argmax(p[row]) if rng.random() < 0.6 else rng.integers(0, V)
    batch = sv.TreeBatch(node_offsets=offsets, parents=parents, draft_tokens=tokens, target_probs=p,
                         drafted=sv.Drafted.deterministic)
    width = 8
    out = sv.TreeOutput(tokens=np.empty((B, width), np.int32), num_accepted=np.empty(B, np.int32),
                        accepted_nodes=np.full((B, width), 99, np.int32), logprobs=np.full((B, width), SENTINEL, np.float32))
    stats = sv.verify(sv.Standard(), batch, sv.Randomness(6), out)
    assert stats.accepted > B // 4
    for b in range(B):
        n, first = out.num_accepted[b], offsets[b]
        path = out.accepted_nodes[b, :n]
        assert np.all(out.accepted_nodes[b, n:] == sv.kNoToken)
        assert np.all(out.logprobs[b, n + 1:] == SENTINEL)
        parent = -1
        for j, node in enumerate(path):
            assert 0 <= node < counts[b] and parents[first + node] == parent
            assert tokens[first + node] == out.tokens[b, j]
            parent = node
        # Token j came from the root's row (j = 0) or from the row after accepted node j - 1.
        for j in range(n + 1):
            row = first + b + (0 if j == 0 else 1 + path[j - 1])
            assert abs(out.logprobs[b, j] - np.log(np.float64(p[row, out.tokens[b, j]]))) < 1e-4
