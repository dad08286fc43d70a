"""The batches the sharded tests verify, and one rank's verify of its slice (shared by
test_sharded.py and the rank processes of sharded_rank.py)."""
import numpy as np


def _case(seed, B, V, K, rule, one_hot=False):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, K + 1, size=B)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    N = int(offsets[-1])
    p = rng.gamma(0.3, size=(N + B, V)).astype(np.float32)
    p /= p.sum(axis=1, keepdims=True)
    q = rng.gamma(0.3, size=(N, V)).astype(np.float32)
    q /= q.sum(axis=1, keepdims=True)
    tokens = np.array([rng.choice(V, p=r / r.sum()) for r in q.astype(np.float64)], np.int32)
    return {"B": B, "V": V, "K": K, "offsets": offsets, "tokens": tokens, "p": p, "q": None if one_hot else q,
            "rule": rule}


def _logits_case(seed, B, V, K, rule, dtype=np.float32, one_hot=False):
    """Rows of logits with every kind of kept set (temperature, greedy, min_p, top_k with ties,
    top_p alone, top_k + top_p), a bitmask, guidance, penalties and a logit bias."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, K + 1, size=B)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    N = int(offsets[-1])
    target = np.round(rng.normal(0.0, 3.0, size=(N + B, V)) * 2.0) / 2.0  # ties, at the k-th value too
    draft = target[[offsets[b] + b + d for b in range(B) for d in range(lengths[b])]] + rng.normal(0.0, 0.5, (N, V))
    tokens = np.array([rng.choice(np.argsort(r)[-3:]) if rng.random() < 0.7 else rng.integers(V) for r in draft],
                      np.int32)
    return {"B": B, "V": V, "K": K, "offsets": offsets, "tokens": tokens, "rule": rule,
            "target": target.astype(dtype), "draft": None if one_hot else draft.astype(dtype),
            **_logits_fields(rng, B, V, N + B, offsets, dtype)}


def _logits_fields(rng, B, V, rows, offsets, dtype):
    """What a logits batch adds to its layout: sampling parameters, a bitmask over `rows` target
    rows, guidance on every other sequence, a history and a bias."""
    params = {"temperature": rng.choice([0.0, 0.8, 1.0], B).astype(np.float32),
              "top_k": rng.choice([0, 5, 40], B).astype(np.int32),
              "top_p": rng.choice([1.0, 0.9], B).astype(np.float32),
              "min_p": rng.choice([0.0, 0.05], B).astype(np.float32),
              "repetition_penalty": rng.choice([1.0, 1.3], B).astype(np.float32),
              "presence_penalty": rng.choice([0.0, 0.5], B).astype(np.float32),
              "frequency_penalty": rng.choice([0.0, 0.2], B).astype(np.float32)}
    words = (V + 31) // 32
    allowed = rng.integers(0, 2**32, size=(rows, words), dtype=np.uint64).astype(np.uint32)
    allowed |= rng.integers(0, 2**32, size=(rows, words), dtype=np.uint64).astype(np.uint32)
    history = [np.sort(rng.choice(V, size=min(V, 20), replace=False)).astype(np.int32) for _ in range(B)]
    bias = [rng.choice(V, size=min(V, 4), replace=False).astype(np.int32) for _ in range(B)]
    return {"logits": True, "params": params,
            "allowed": allowed, "unconditional": rng.normal(0.0, 3.0, size=(rows, V)).astype(dtype),
            "first_row": np.array([offsets[b] + b if b % 2 == 0 else -1 for b in range(B)], np.int64),
            "guidance": np.full(B, 1.5, np.float32),
            "history_offsets": np.concatenate([[0], np.cumsum([len(h) for h in history])]).astype(np.int32),
            "history_tokens": np.concatenate(history), "history_counts": np.concatenate(
                [rng.integers(0, 3, len(h)) for h in history]).astype(np.int32),
            "bias_offsets": np.concatenate([[0], np.cumsum([len(x) for x in bias])]).astype(np.int32),
            "bias_tokens": np.concatenate(bias), "bias_values": rng.normal(0.0, 2.0, 4 * B).astype(np.float32)}


def _tree_case(seed, B, V, nodes, rule, drafted, logits=False, dtype=np.float32):
    """Random trees of up to `nodes` nodes per sequence (siblings distinct), rows independent of
    each other so that most children are rejected and residuals after rejected siblings are drawn
    from; rows of probabilities, or of logits with every field of _logits_fields."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, nodes + 1, size=B)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    N, rows = int(offsets[-1]), int(offsets[-1]) + B
    if logits:
        p = np.round(rng.normal(0.0, 3.0, size=(rows, V)) * 2.0) / 2.0
        q = p + rng.normal(0.0, 1.0, size=(rows, V))
        weights = np.exp(q - q.max(axis=1, keepdims=True))
    else:
        p = rng.gamma(0.3, size=(rows, V)).astype(np.float32)
        p /= p.sum(axis=1, keepdims=True)
        q = rng.gamma(0.3, size=(rows, V)).astype(np.float32)
        q /= q.sum(axis=1, keepdims=True)
        weights = q.astype(np.float64)
    parents, tokens, depth = [], [], []
    for b in range(B):
        local_depth, children = [], {}
        for i in range(int(counts[b])):
            parent = int(rng.integers(-1, i))
            row = offsets[b] + b + parent + 1  # the row the node was drafted from: its parent's
            taken = children.setdefault(parent, [])
            w = weights[row].copy()
            w[taken] = 0.0
            token = int(rng.choice(V, p=w / w.sum())) if w.sum() > 0 else int(rng.integers(V))
            while token in taken:
                token = int(rng.integers(V))
            taken.append(token)
            parents.append(parent)
            tokens.append(token)
            local_depth.append(1 if parent < 0 else local_depth[parent] + 1)
        depth += local_depth
    case = {"B": B, "V": V, "K": max(depth, default=0), "tree": True, "drafted": drafted,
            "offsets": offsets, "parents": np.array(parents, np.int32), "tokens": np.array(tokens, np.int32),
            "rule": rule}
    deterministic = drafted == "deterministic"
    if logits:
        case.update(target=p.astype(dtype), draft=None if deterministic else q.astype(dtype),
                    **_logits_fields(rng, B, V, rows, offsets, dtype))
    else:
        case.update(p=p, q=None if deterministic else q)
    return case


CASES = {
    "standard": _case(1, 6, 300, 4, "standard"),
    "standard_one_hot": _case(2, 5, 97, 3, "standard", one_hot=True),
    "fsd_js": _case(3, 4, 500, 5, "fsd_js"),
    "coupled": _case(4, 5, 64, 4, "coupled"),
    "greedy": _case(5, 3, 40, 4, "greedy"),
    "logits_standard": _logits_case(6, 6, 700, 4, "standard"),
    "logits_float16_fsd_js": _logits_case(7, 5, 333, 3, "fsd_js", dtype=np.float16),
    "logits_coupled_one_hot": _logits_case(8, 4, 257, 3, "coupled", one_hot=True),
    "block": _case(9, 5, 200, 5, "block"),
    "logits_block": _logits_case(10, 4, 300, 4, "block"),
    "traversal": _case(11, 5, 200, 5, "traversal"),
    "logits_traversal": _logits_case(12, 4, 300, 4, "traversal"),
    "tree_standard": _tree_case(13, 5, 200, 7, "standard", "sampled"),
    "tree_coupled_without_replacement": _tree_case(14, 4, 150, 6, "coupled", "sampled_without_replacement"),
    "tree_greedy_deterministic": _tree_case(15, 4, 100, 5, "greedy", "deterministic"),
    "tree_traversal": _tree_case(18, 4, 200, 7, "traversal", "sampled"),
    "logits_tree_traversal": _tree_case(19, 3, 300, 6, "traversal", "sampled", logits=True),
    "logits_tree_standard": _tree_case(16, 4, 300, 6, "standard", "sampled_without_replacement", logits=True),
    "logits_tree_float16_fsd_js": _tree_case(17, 3, 257, 5, "fsd_js", "sampled", logits=True, dtype=np.float16),
}


def bounds(V, ranks):
    """Uneven slices of [0, V), the second one empty where there are three ranks or more."""
    cuts = [0] + [min(V, (V * r * r) // (ranks * ranks)) for r in range(1, ranks)] + [V]
    if ranks >= 3:
        cuts[2] = cuts[1]
    return cuts


def rule_of(sv, name):
    return {"standard": sv.Standard(), "fsd_js": sv.Fsd(sv.Divergence.js, 0.4), "coupled": sv.Coupled(),
            "greedy": sv.Greedy(), "block": sv.Block(), "traversal": sv.Traversal()}[name]


def batch_of(sv, case, cols=lambda rows: rows, place=lambda a: a, **kwargs):
    """`case`'s batch over the columns `cols` keeps of its rows, every array put where `place`
    puts it (the sampling parameters stay NumPy arrays)."""
    def put(a):
        return None if a is None else place(a)

    B, tree = case["B"], case.get("tree", False)
    if tree:
        layout = {"node_offsets": put(case["offsets"]), "parents": put(case["parents"]),
                  "draft_tokens": put(case["tokens"]), "drafted": getattr(sv.Drafted, case["drafted"])}
    else:
        layout = {"draft_offsets": put(case["offsets"]), "draft_tokens": put(case["tokens"])}
    if case.get("logits"):
        make = sv.LogitsTreeBatch if tree else sv.LogitsChainBatch
        return make(
            target_logits=put(cols(case["target"])), draft_logits=put(cols(case["draft"])),
            target_params=sv.sampling_params(B, **case["params"]),
            allowed_tokens=put(case["allowed"]), unconditional_logits=put(cols(case["unconditional"])),
            unconditional_first_row=put(case["first_row"]), guidance_scale=put(case["guidance"]),
            history_offsets=put(case["history_offsets"]), history_tokens=put(case["history_tokens"]),
            history_counts=put(case["history_counts"]), bias_offsets=put(case["bias_offsets"]),
            bias_tokens=put(case["bias_tokens"]), bias_values=put(case["bias_values"]), **layout, **kwargs)
    make = sv.TreeBatch if tree else sv.ChainBatch
    return make(target_probs=put(cols(case["p"])), draft_probs=put(cols(case["q"])), **layout, **kwargs)


def run(sv, case, lo, hi, rank, ranks, all_gather):
    """Verifies columns [lo, hi) of `case`'s rows (all of them with all_gather None, unsharded)."""
    B, K, tree = case["B"], case["K"], case.get("tree", False)
    tokens = np.full((B, K + 1), 777, np.int32)
    accepted = np.full(B, 777, np.int32)
    logprobs = np.full((B, K + 1), 0.5, np.float32)
    nodes = np.full((B, K + 1), 777, np.int32)
    if tree:
        out = sv.TreeOutput(tokens=tokens, num_accepted=accepted, accepted_nodes=nodes, logprobs=logprobs)
    else:
        out = sv.ChainOutput(tokens=tokens, num_accepted=accepted, logprobs=logprobs)
    randomness = sv.Randomness(seed=99, offset=3, positions=np.arange(B, dtype=np.int64) * 7)
    kwargs = {}
    if all_gather is not None:
        kwargs = {"shard": sv.VocabShard(rank=rank, ranks=ranks, vocab_start=lo, local_vocab_size=hi - lo),
                  "vocab_size": case["V"]}

    def cols(rows):
        return None if rows is None else np.ascontiguousarray(rows[:, lo:hi])

    batch = batch_of(sv, case, cols, **kwargs)
    rule = rule_of(sv, case["rule"])
    if all_gather is None:
        stats = sv.verify(rule, batch, randomness, out)
    else:
        stats = sv.verify(rule, batch, randomness, out, all_gather=all_gather)
    return {"tokens": tokens, "accepted": accepted, "logprobs": logprobs, "nodes": nodes,
            "stats": np.array([stats.drafted, stats.accepted, stats.relaxed, stats.target_checked])}
