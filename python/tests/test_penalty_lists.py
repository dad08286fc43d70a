"""The history and bias lists of LogitsChainBatch, LogitsTreeBatch and sample (docs/api.md "Penalties and
logit bias"): neutral settings change no bit, each sequence gets its own lists
and a row's drafts count, Coupled emits what sample() draws with the path's drafts in the history,
the lists are viewed in place and held, and bad lists raise (the C++ library's InvalidInput, or
the argument named) with outputs untouched. Token for token against C++: test_against_cpp_batches."""
import gc
import weakref

import numpy as np
import pytest
import specverify as sv

from processing import assert_same_outputs, one_params, penalties, penalty_lists, ragged

V, B = 64, 6
COUNTS = (3, 0, 2, 4, 1, 2)  # drafts (chains) or nodes (trees) per sequence
PARENTS = [[-1, 0, 0], [], [-1, 0], [-1, -1, 1, 2], [-1], [-1, 0]]
LISTS = ["history_offsets", "history_tokens", "history_counts", "bias_offsets", "bias_tokens", "bias_values"]


def batch_arrays(tree, rng, params=None, tokens=None):
    """A logits chain or tree batch's arguments (COUNTS, PARENTS), rows N(0, 3), q rows near p."""
    N = sum(COUNTS)
    rows = N + B
    target = rng.normal(0, 3, (rows, V)).astype(np.float32)
    a = dict(draft_tokens=rng.integers(0, V, N).astype(np.int32) if tokens is None else tokens,
             target_logits=target, target_params=sv.sampling_params(B) if params is None else params)
    if tree:
        a.update(node_offsets=ragged(COUNTS), parents=np.concatenate(PARENTS).astype(np.int32),
                 drafted=sv.Drafted.sampled, draft_logits=target + rng.normal(0, 1, (rows, V)).astype(np.float32))
    else:
        tested = np.concatenate([np.arange(k) + ragged(COUNTS)[b] + b for b, k in enumerate(COUNTS)])
        a.update(draft_offsets=ragged(COUNTS),
                 draft_logits=target[tested] + rng.normal(0, 1, (N, V)).astype(np.float32))
    return a


def make_batch(tree, arrays):
    return (sv.LogitsTreeBatch if tree else sv.LogitsChainBatch)(**arrays)


def output(tree, width=5, fill=777):
    arrays = dict(tokens=np.full((B, width), fill, np.int32), num_accepted=np.full(B, fill, np.int32),
                  logprobs=np.full((B, width), fill, np.float32))
    if tree:
        return sv.TreeOutput(accepted_nodes=np.full((B, width), fill, np.int32), **arrays)
    return sv.ChainOutput(**arrays)


def run(rule, tree, arrays, seed=3):
    out = output(tree)
    randomness = sv.Randomness(seed, 1, sequence_seeds=np.arange(B, dtype=np.uint64) + 11,
                               positions=np.arange(B, dtype=np.int64) * 100)
    stats = sv.verify(rule, make_batch(tree, arrays), randomness, out)
    return out, [stats.drafted, stats.accepted, stats.relaxed, stats.target_checked]


def assert_untouched(out):
    for name in ("tokens", "num_accepted", "accepted_nodes", "logprobs"):
        a = getattr(out, name, None)
        assert a is None or np.all(np.asarray(a) == 777), name


RULES = dict(standard=sv.Standard, coupled=sv.Coupled, greedy=sv.Greedy, traversal=sv.Traversal,
             ears=lambda: sv.Ears(beta=0.3), fsd=lambda: sv.Fsd(divergence=sv.Divergence.tv, threshold=0.5))
SHAPES = {f"{'tree' if tree else 'chain'}-{name}": (tree, rule) for tree in (False, True) for name, rule in RULES.items()}


# ------------------------------------------------------------------ neutral settings change no bit

@pytest.mark.parametrize("tree, make_rule", SHAPES.values(), ids=SHAPES.keys())
def test_neutral_lists_change_nothing(tree, make_rule):
    """Repetition 1, presence 0, frequency 0 and no bias entries: the outputs with a history (and an
    empty bias list) are those without lists, bit for bit; with penalties on they are not."""
    rng = np.random.default_rng(1)
    params = sv.sampling_params(B, temperature=rng.choice([0.0, 0.8, 1.0], B), top_k=rng.choice([0, 8], B))
    arrays = batch_arrays(tree, rng, params)
    arrays["draft_params"] = sv.sampling_params(B, temperature=0.9)
    lists = penalty_lists(rng, B, V)
    no_bias = dict(bias_offsets=np.zeros(B + 1, np.int32), bias_tokens=np.zeros(0, np.int32),
                   bias_values=np.zeros(0, np.float32))
    plain = run(make_rule(), tree, arrays)
    history_only = {k: lists[k] for k in LISTS[:3]}
    assert_same_outputs(run(make_rule(), tree, {**arrays, **history_only}), plain)
    assert_same_outputs(run(make_rule(), tree, {**arrays, **history_only, **no_bias}), plain)
    penalised = sv.sampling_params(B, temperature=params["temperature"], top_k=params["top_k"],
                                   repetition_penalty=1.5, frequency_penalty=0.5)
    changed = run(make_rule(), tree, {**arrays, **lists, "target_params": penalised})
    assert not np.array_equal(changed[0].logprobs, plain[0].logprobs)  # the lists reach C++


def test_sample_neutral_lists_change_nothing():
    """sample() with a history and neutral penalties draws what it draws without one."""
    rng = np.random.default_rng(2)
    lists = penalty_lists(rng, 40, V)
    rows = rng.normal(0, 3, (40, V)).astype(np.float32)
    differ = 0
    for b in range(40):
        h = slice(lists["history_offsets"][b], lists["history_offsets"][b + 1])
        history = dict(history_tokens=lists["history_tokens"][h], history_counts=lists["history_counts"][h])
        for params in (sv.SamplingParams(), sv.SamplingParams(temperature=0.0), sv.SamplingParams(top_k=5, top_p=0.9)):
            assert sv.sample(rows[b], params, b, 7, **history) == sv.sample(rows[b], params, b, 7)
        params = sv.SamplingParams(repetition_penalty=3.0, presence_penalty=2.0)
        differ += sv.sample(rows[b], params, b, 7, **history) != sv.sample(rows[b], params, b, 7)
    assert differ > 0  # penalties on: the history changes draws


# ------------------------------------------------------------------ each sequence's lists, per position

@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_each_sequence_gets_its_own_lists(tree):
    """Greedy, sequence b's bias lifts token 10 + b far above the row: it is accepted wherever it was
    drafted (a tree's walk follows first children) and is the extra token. Sequences with b even also have it in their history under a
    repetition penalty of 100, which takes it back below the row's top: nothing is accepted."""
    rng = np.random.default_rng(3)
    favoured = np.arange(B, dtype=np.int32) + 10
    tokens = np.concatenate([np.full(k, favoured[b]) for b, k in enumerate(COUNTS)]).astype(np.int32)
    arrays = batch_arrays(tree, rng, sv.sampling_params(B, repetition_penalty=np.where(np.arange(B) % 2, 1, 100)),
                          tokens)
    arrays["target_logits"] = rng.normal(0, 1, arrays["target_logits"].shape).astype(np.float32)
    even = np.arange(0, B, 2)
    arrays.update(bias_offsets=ragged([1] * B), bias_tokens=favoured, bias_values=np.full(B, 50, np.float32),
                  history_offsets=ragged([int(b % 2 == 0) for b in range(B)]),
                  history_tokens=favoured[even], history_counts=np.zeros(even.size, np.int32))
    out, _ = run(sv.Greedy(), tree, arrays)
    for b in range(B):
        if b % 2:
            assert out.num_accepted[b] == (first_child_depth(PARENTS[b]) if tree else COUNTS[b])
            assert np.all(out.tokens[b, : out.num_accepted[b] + 1] == favoured[b])
        else:
            assert out.num_accepted[b] == 0 and out.tokens[b, 0] != favoured[b]


def first_child_depth(parents):
    """How deep a walk goes that follows each node's first child (every child accepted)."""
    node, depth = -1, 0
    while node in parents:
        node, depth = parents.index(node), depth + 1
    return depth


def test_drafts_on_the_path_count():
    """A chain repeating one token with a bias of 50 and a frequency penalty of 20: row j counts the
    j drafts before it, so rows 0-2 keep the token on top (50, 30, 10) and row 3 (-10) does not."""
    rng = np.random.default_rng(4)
    arrays = batch_arrays(False, rng, sv.sampling_params(B, frequency_penalty=20.0),
                          np.full(sum(COUNTS), 7, np.int32))
    arrays["target_logits"] = rng.normal(0, 1, arrays["target_logits"].shape).astype(np.float32)
    arrays.update(bias_offsets=ragged([1] * B), bias_tokens=np.full(B, 7, np.int32),
                  bias_values=np.full(B, 50, np.float32))
    out, _ = run(sv.Greedy(), False, arrays)
    np.testing.assert_array_equal(out.num_accepted, np.minimum(COUNTS, 3))


def merged_history(tokens, counts, drafts):
    """A history with drafts added: each draft's count + 1, new tokens in order (ascending, unique)."""
    merged = dict(zip(tokens.tolist(), counts.tolist()))
    for x in drafts:
        merged[int(x)] = merged.get(int(x), 0) + 1
    keys = sorted(merged)
    return np.array(keys, np.int32), np.array([merged[k] for k in keys], np.int32)


def test_coupled_emits_sample_with_the_path_in_the_history():
    """Coupled's tokens are sample() of each row with that row's history: the sequence's history
    plus the drafts before it (docs/api.md: sample's history includes the row's own drafts)."""
    rng = np.random.default_rng(5)
    params = sv.sampling_params(B, temperature=0.8, top_k=20)
    penalties(params, rng)
    lists = penalty_lists(rng, B, V)
    arrays = {**batch_arrays(False, rng, params), **lists}
    seeds, positions = np.arange(B, dtype=np.uint64) + 11, np.arange(B, dtype=np.int64) * 100
    offsets, logits = arrays["draft_offsets"], arrays["target_logits"]

    def expected(b, j, drafts):
        h = slice(lists["history_offsets"][b], lists["history_offsets"][b + 1])
        o = slice(lists["bias_offsets"][b], lists["bias_offsets"][b + 1])
        history, counts = merged_history(lists["history_tokens"][h], lists["history_counts"][h], drafts[:j])
        return sv.sample(logits[offsets[b] + b + j], one_params(params[b]), int(seeds[b]), int(positions[b]) + j,
                         history_tokens=history, history_counts=counts, bias_tokens=lists["bias_tokens"][o],
                         bias_values=lists["bias_values"][o])

    # Drafts that are mostly what Coupled will accept: sample's own token, now and then another.
    tokens = arrays["draft_tokens"]
    for b, k in enumerate(COUNTS):
        for j in range(k):
            drafts = tokens[offsets[b]: offsets[b + 1]]
            tokens[offsets[b] + j] = expected(b, j, drafts) if rng.random() < 0.8 else rng.integers(0, V)
    out = output(False)
    sv.verify(sv.Coupled(), make_batch(False, arrays), sv.Randomness(sequence_seeds=seeds, positions=positions), out)
    assert 0 < out.num_accepted.sum() < sum(COUNTS)
    for b in range(B):
        drafts = tokens[offsets[b]: offsets[b + 1]]
        for j in range(out.num_accepted[b] + 1):
            assert out.tokens[b, j] == expected(b, j, drafts), (b, j)


# ------------------------------------------------------------------ viewed in place, held, refused over outputs

def test_lists_read_in_place_and_held():
    """The batch shows the arrays it was given and holds them; bias values written after construction
    change the next verify (read in place), and so do bias tokens (copied afresh at every call)."""
    rng = np.random.default_rng(6)
    arrays = batch_arrays(False, rng, sv.sampling_params(B, temperature=0.0))
    lists = dict(bias_offsets=ragged([1] * B), bias_tokens=np.full(B, 9, np.int32), bias_values=np.zeros(B, np.float32),
                 history_offsets=np.zeros(B + 1, np.int32), history_tokens=np.zeros(0, np.int32),
                 history_counts=np.zeros(0, np.int32))
    batch = sv.LogitsChainBatch(**arrays, **lists)
    for name in LISTS:
        assert getattr(batch, name) is lists[name]
    alive = weakref.ref(lists["bias_values"])

    def extra_tokens():
        out = output(False)
        sv.verify(sv.Greedy(), batch, sv.Randomness(1), out)
        return out.tokens[np.arange(B), out.num_accepted]

    assert not np.all(extra_tokens() == 9)
    lists["bias_values"][:] = 100
    assert np.all(extra_tokens() == 9)
    lists["bias_tokens"][:] = 4
    assert np.all(extra_tokens() == 4)
    del lists
    gc.collect()
    assert alive() is not None
    del batch
    gc.collect()
    assert alive() is None
    assert sv.LogitsChainBatch(**arrays).history_tokens is None


def test_torch_lists():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    params = sv.sampling_params(B, repetition_penalty=1.4, frequency_penalty=0.3)
    arrays, lists = batch_arrays(True, rng, params), penalty_lists(rng, B, V)
    with_numpy = run(sv.Standard(), True, {**arrays, **lists})
    assert_same_outputs(run(sv.Standard(), True, {**arrays, **{k: torch.from_numpy(v) for k, v in lists.items()}}), with_numpy)
    with pytest.raises(TypeError, match="bias_values must hold float32, got torch.bfloat16"):
        sv.LogitsTreeBatch(**arrays, **{**lists, "bias_values": torch.from_numpy(lists["bias_values"]).to(torch.bfloat16)})


def test_outputs_over_lists_are_refused():
    arrays = batch_arrays(False, np.random.default_rng(8))
    offsets = np.zeros(B + 1, np.int32)
    out = sv.ChainOutput(tokens=np.full((B, 5), 777, np.int32), num_accepted=offsets[1:])
    with pytest.raises(sv.InvalidInput, match="num_accepted overlaps history_offsets in memory"):
        sv.verify(sv.Standard(), sv.LogitsChainBatch(**arrays, history_offsets=offsets), sv.Randomness(1), out)
    logprobs = np.full((B, 5), 777, np.float32)
    bias = dict(bias_offsets=np.array([0, 2, 2, 2, 2, 2, 2], np.int32), bias_tokens=np.array([1, 2], np.int32),
                bias_values=logprobs[2, :2])
    out = sv.ChainOutput(tokens=np.full((B, 5), 777, np.int32), num_accepted=np.full(B, 777, np.int32),
                         logprobs=logprobs)
    with pytest.raises(sv.InvalidInput, match="logprobs overlaps bias_values in memory"):
        sv.verify(sv.Standard(), sv.LogitsChainBatch(**arrays, **bias), sv.Randomness(1), out)
    assert np.all(offsets == 0)
    assert_untouched(out)


# ------------------------------------------------------------------ bad lists: C++ messages, outputs untouched

def good_lists():
    """Sequence 0: history [2, 5, 9] counts [1, 0, 2], bias {3: 1.5, 8: -2}; sequence 3: history [1],
    bias {4: 0.5}; the others empty."""
    return dict(history_offsets=np.array([0, 3, 3, 3, 4, 4, 4], np.int32),
                history_tokens=np.array([2, 5, 9, 1], np.int32), history_counts=np.array([1, 0, 2, 0], np.int32),
                bias_offsets=np.array([0, 2, 2, 2, 3, 3, 3], np.int32), bias_tokens=np.array([8, 3, 4], np.int32),
                bias_values=np.array([-2, 1.5, 0.5], np.float32))


def corrupt(name, index, value):
    return lambda lists: lists[name].__setitem__(index, value)


BAD_LISTS = {
    "descending": (corrupt("history_tokens", 1, 1),
                   r"sequence 0: history_tokens\[1\] = 1 follows 2 \(a sequence's history must be ascending and unique\)"),
    "repeated": (corrupt("history_tokens", 1, 2), r"sequence 0: history_tokens\[1\] = 2 follows 2"),
    "negative count": (corrupt("history_counts", 3, -1), r"sequence 3: history_counts\[3\] = -1 must be >= 0"),
    "history token": (corrupt("history_tokens", 3, V), rf"sequence 3: history_tokens\[3\] = {V} is outside \[0, {V}\)"),
    "bias token": (corrupt("bias_tokens", 2, -1), rf"sequence 3: bias_tokens\[2\] = -1 is outside \[0, {V}\)"),
    "bias twice": (corrupt("bias_tokens", 1, 8),
                   r"sequence 0: bias_tokens\[1\] = 8 is biased twice \(also bias_tokens\[0\]\)"),
    "bias nan": (corrupt("bias_values", 0, np.nan), r"sequence 0: bias_values\[0\] = nan must be finite"),
    "bias -inf": (corrupt("bias_values", 2, -np.inf), r"sequence 3: bias_values\[2\] = -inf must be finite"),
    "offsets start": (corrupt("history_offsets", 0, 1), r"history_offsets\[0\] = 1 must be 0"),
    "offsets decrease": (corrupt("bias_offsets", 1, 3), r"sequence 1: bias_offsets decrease \(3 then 2\)"),
    # Offsets whose total says more entries than the arrays hold: Python names it (C++ cannot know).
    "history short": (corrupt("history_offsets", slice(4, None), 5),
                      r"history_offsets\[B\] = 5 but history_tokens holds 4 entries"),
    "bias short": (corrupt("bias_offsets", slice(4, None), 9), r"bias_offsets\[B\] = 9 but bias_tokens holds 3 entries"),
}


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
@pytest.mark.parametrize("bad, message", BAD_LISTS.values(), ids=BAD_LISTS.keys())
def test_bad_lists(tree, bad, message):
    rng = np.random.default_rng(9)
    arrays, lists = batch_arrays(tree, rng), good_lists()
    out = output(tree)
    sv.verify(sv.Standard(), make_batch(tree, {**arrays, **lists}), sv.Randomness(1), out)  # the good lists pass
    batch = make_batch(tree, {**arrays, **lists})
    bad(lists)  # after construction: every verify reads the lists as they are then
    out = output(tree)
    with pytest.raises(sv.InvalidInput, match=message):
        sv.verify(sv.Standard(), batch, sv.Randomness(1), out)
    assert_untouched(out)


def test_overflowing_bias_is_refused():
    rng = np.random.default_rng(10)
    arrays, lists = batch_arrays(False, rng), good_lists()
    arrays["target_logits"][0, 3] = 3e38
    lists["bias_values"][1] = 3e38
    out = output(False)
    with pytest.raises(sv.InvalidInput, match="sequence 0, position 0: bias and penalties give inf at index 3 of target "
                                              "logits row 0"):
        sv.verify(sv.Standard(), make_batch(False, {**arrays, **lists}), sv.Randomness(1), out)
    assert_untouched(out)


@pytest.mark.parametrize("name, bad, error, message", [
    ("history_tokens", lambda a: a.astype(np.int64), TypeError, "history_tokens must hold int32, got int64"),
    ("history_counts", lambda a: a.astype(np.float32), TypeError, "history_counts must hold int32, got float32"),
    ("bias_values", lambda a: a.astype(np.float64), TypeError, "bias_values must hold float32, got float64"),
    ("bias_offsets", lambda a: a.astype(np.uint32), TypeError, "bias_offsets must hold int32"),
    ("history_offsets", lambda a: a[:-1], sv.InvalidInput, r"history_offsets has shape \(6,\), but it needs B \+ 1 = 7 offsets"),
    ("bias_tokens", lambda a: a[None], sv.InvalidInput, r"bias_tokens must have 1 dimension, got shape \(1, 3\)"),
    ("history_tokens", lambda a: np.repeat(a, 2)[::2], sv.InvalidInput, "history_tokens must be contiguous"),
    ("history_counts", lambda a: a[:3], sv.InvalidInput,
     r"history_counts holds 3 entries, but history_tokens holds 4 entries \(one value per token\)"),
    ("bias_values", lambda a: None, sv.InvalidInput, "bias_values is None, but bias_tokens holds 3 entries"),
    ("history_offsets", lambda a: None, sv.InvalidInput,
     r"history_tokens is given, but history_offsets is None \(a list needs its offsets\)"),
    ("bias_tokens", lambda a: [8, 3, 4], TypeError, r"bias_tokens must be a NumPy array or a tensor \(buffer protocol or DLPack\)"),
])
@pytest.mark.parametrize("tree", [False, True])
def test_list_arrays_named(tree, name, bad, error, message):
    arrays, lists = batch_arrays(tree, np.random.default_rng(11)), good_lists()
    lists[name] = bad(lists[name])
    with pytest.raises(error, match=message):
        make_batch(tree, {**arrays, **lists})


# ------------------------------------------------------------------ sample's lists

@pytest.mark.parametrize("lists, error, message", [
    (dict(history_tokens=np.array([4, 1], np.int32), history_counts=np.ones(2, np.int32)), sv.InvalidInput,
     r"sample: history_tokens\[1\] = 1 follows 4"),
    (dict(history_tokens=np.array([1], np.int32), history_counts=np.array([-2], np.int32)), sv.InvalidInput,
     r"sample: history_counts\[0\] = -2 must be >= 0"),
    (dict(history_tokens=np.array([V], np.int32), history_counts=np.zeros(1, np.int32)), sv.InvalidInput,
     rf"sample: history_tokens\[0\] = {V} is outside \[0, {V}\)"),
    (dict(bias_tokens=np.array([3, 3], np.int32), bias_values=np.ones(2, np.float32)), sv.InvalidInput,
     r"sample: bias_tokens\[1\] = 3 is biased twice \(also bias_tokens\[0\]\)"),
    (dict(bias_tokens=np.array([1], np.int32), bias_values=np.array([np.inf], np.float32)), sv.InvalidInput,
     r"sample: bias_values\[0\] = inf must be finite"),
    (dict(bias_tokens=np.array([1], np.int32)), sv.InvalidInput,
     r"bias_values is None, but bias_tokens holds 1 entry \(one value per token\)"),
    (dict(history_tokens=np.array([1, 2], np.int32), history_counts=np.zeros(1, np.int32)), sv.InvalidInput,
     "history_counts holds 1 entry, but history_tokens holds 2 entries"),
    (dict(history_tokens=np.array([1], np.int64), history_counts=np.zeros(1, np.int32)), TypeError,
     "history_tokens must hold int32, got int64"),
    (dict(bias_tokens=np.array([1], np.int32), bias_values=np.ones(1, np.float64)), TypeError,
     "bias_values must hold float32, got float64"),
])
def test_sample_bad_lists(lists, error, message):
    with pytest.raises(error, match=message):
        sv.sample(np.zeros(V, np.float32), sv.SamplingParams(), 1, 0, **lists)


def test_sample_overflowing_bias_is_refused():
    row = np.zeros(V, np.float32)
    row[5] = 3e38
    with pytest.raises(sv.InvalidInput, match="sample: position 2: bias and penalties give inf at token 5"):
        sv.sample(row, sv.SamplingParams(), 1, 2, bias_tokens=np.array([5], np.int32),
                  bias_values=np.array([3e38], np.float32))
