"""A NumPy reference of the pre-pass without bias or penalties (docs/api.md "Logits and sampling parameters":
its steps 1 and 4-9, numbered 1-7 below), logits row -> p, in float64; and small builders."""
import numpy as np
import specverify as sv


def processed_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                    unconditional=None, scale=None, allowed=None):
    """p from one row of logits: guidance, bitmask, temperature, top_k, top_p, min_p, renormalise.
    `allowed` is a boolean mask over the row (True = allowed)."""
    l = np.asarray(logits, np.float64).copy()
    if unconditional is not None:                        # 1. guidance
        u = np.asarray(unconditional, np.float64)
        l = u + scale * (l - u)
    if allowed is not None:                              # 2. the bitmask
        l[~np.asarray(allowed, bool)] = -np.inf
    top = l.max()
    if temperature == 0:                                 # 3. T = 0: one-hot on argmax
        p = np.zeros_like(l)
        p[int(np.argmax(l))] = 1.0
        return p
    w = np.exp((l - top) / temperature)
    keep = np.isfinite(l)
    if top_k > 0 and top_k < l.size:                     # 4. top_k: >= the k-th largest, ties kept
        keep &= l >= np.sort(l)[::-1][top_k - 1]
    if top_p < 1.0:                                      # 5. smallest top set reaching top_p, plus ties
        p = np.where(keep, w, 0.0) / np.where(keep, w, 0.0).sum()
        ordered = np.sort(p)[::-1]
        reach = int(np.searchsorted(np.cumsum(ordered), top_p * (1 - 1e-12)))
        keep &= p >= ordered[min(reach, ordered.size - 1)]
    if min_p > 0.0:                                      # 6. min_p against the largest p
        kept = np.where(keep, w, 0.0)
        keep &= kept >= min_p * kept.max()
    p = np.where(keep, w, 0.0)                           # 7. renormalise
    return p / p.sum()


def params_dict(row):
    """The keyword arguments of processed_probs from one entry of a SamplingParams array."""
    return dict(temperature=float(row["temperature"]), top_k=int(row["top_k"]), top_p=float(row["top_p"]),
                min_p=float(row["min_p"]))


def bitmask(allowed):
    """Boolean [rows, V] -> uint32 [rows, ceil(V/32)], bit v % 32 of word v / 32 (the xgrammar layout)."""
    allowed = np.atleast_2d(np.asarray(allowed, bool))
    rows, V = allowed.shape
    words = np.zeros((rows, (V + 31) // 32), np.uint32)
    for v in range(V):
        words[:, v // 32] |= allowed[:, v].astype(np.uint32) << np.uint32(v % 32)
    return words


def log_softmax_rows(logits):
    l = np.asarray(logits, np.float64)
    l = l - l.max(axis=-1, keepdims=True)
    return l - np.log(np.exp(l).sum(axis=-1, keepdims=True))


def ragged(sizes):
    """Offsets [len(sizes) + 1] of a ragged list whose parts have these sizes."""
    return np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)


def penalty_lists(rng, batch_size, vocab, max_history=20, max_bias=8):
    """Random history and bias lists as the logits batches' keyword arguments: per sequence up to
    max_history - 1 history tokens (ascending, unique) with counts 0 to 3, and up to max_bias - 1
    bias tokens (unique, any order) with values N(0, 2)."""
    history = [np.sort(rng.choice(vocab, rng.integers(0, max_history), replace=False)) for _ in range(batch_size)]
    bias = [rng.choice(vocab, rng.integers(0, max_bias), replace=False) for _ in range(batch_size)]
    history_tokens = np.concatenate(history).astype(np.int32)
    bias_tokens = np.concatenate(bias).astype(np.int32)
    return dict(history_offsets=ragged([len(h) for h in history]), history_tokens=history_tokens,
                history_counts=rng.integers(0, 4, history_tokens.size).astype(np.int32),
                bias_offsets=ragged([len(x) for x in bias]), bias_tokens=bias_tokens,
                bias_values=rng.normal(0, 2, bias_tokens.size).astype(np.float32))


def penalties(params, rng):
    """Non-neutral penalties in a SamplingParams array, per entry (the choices include neutral ones)."""
    n = params.size
    params["repetition_penalty"] = rng.choice([1.0, 1.3, 0.7, 2.0], n)
    params["presence_penalty"] = rng.choice([0.0, 0.5, -0.4], n)
    params["frequency_penalty"] = rng.choice([0.0, 0.3, 1.0], n)


def one_params(entry):
    """The SamplingParams object of one entry of a SamplingParams array (as sample() takes it)."""
    return sv.SamplingParams(**{f: entry[f].item() for f in sv.SamplingParams.dtype.names})


def assert_same_outputs(a, b):
    """Two (output, [drafted, accepted, relaxed, target_checked]) runs: the same tokens, counts,
    accepted nodes, logprob bits and statistics."""
    (out_a, stats_a), (out_b, stats_b) = a, b
    for name in ("tokens", "num_accepted", "accepted_nodes"):
        if getattr(out_a, name, None) is not None:
            np.testing.assert_array_equal(getattr(out_a, name), getattr(out_b, name))
    np.testing.assert_array_equal(out_a.logprobs.view(np.int32), out_b.logprobs.view(np.int32))
    assert stats_a == stats_b
