"""Bad input to the logits and tree batches, their outputs, positions, Coupled and sample: the C++
library's InvalidInput messages, arrays of the wrong dtype, shape or layout named by argument,
clear errors for combinations that have no meaning (SpecDecPP on trees, a tree batch with a chain
output), and outputs untouched whatever fails."""
import numpy as np
import pytest
import specverify as sv

from processing import bitmask

V = 40


def logits_arrays(B=3, counts=(2, 0, 3)):
    rng = np.random.default_rng(1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    N = int(offsets[-1])
    return dict(draft_offsets=offsets, draft_tokens=np.arange(N, dtype=np.int32),
                target_logits=rng.normal(size=(N + B, V)).astype(np.float32),
                draft_logits=rng.normal(size=(N, V)).astype(np.float32), target_params=sv.sampling_params(B))


def tree_arrays():
    rng = np.random.default_rng(2)
    offsets = np.array([0, 3, 3, 5], np.int32)
    p = rng.random((8, V)).astype(np.float32)
    p /= p.sum(axis=1, keepdims=True)
    return dict(node_offsets=offsets, parents=np.array([-1, 0, -1, -1, 0], np.int32),
                draft_tokens=np.array([1, 2, 3, 4, 5], np.int32), target_probs=p, draft_probs=p.copy())


def chain_out(B=3, width=4):
    return sv.ChainOutput(tokens=np.full((B, width), 777, np.int32), num_accepted=np.full(B, 777, np.int32),
                          logprobs=np.full((B, width), 777, np.float32))


def tree_out(B=3, width=4):
    return sv.TreeOutput(tokens=np.full((B, width), 777, np.int32), num_accepted=np.full(B, 777, np.int32),
                         accepted_nodes=np.full((B, width), 777, np.int32), logprobs=np.full((B, width), 777, np.float32))


def assert_untouched(out):
    for name in ("tokens", "num_accepted", "accepted_nodes", "logprobs"):
        a = getattr(out, name, None)
        assert a is None or np.all(np.asarray(a) == 777), name


# ------------------------------------------------------------------ C++ messages, outputs untouched

@pytest.mark.parametrize("field, value, message", [
    ("temperature", -1.0, "sequence 1: target_params.temperature = -1 is out of range"),
    ("top_k", -2, "sequence 1: target_params.top_k = -2 is out of range"),
    ("top_p", 0.0, "sequence 1: target_params.top_p = 0 is out of range"),
    ("min_p", 1.5, "sequence 1: target_params.min_p = 1.5 is out of range"),
    ("repetition_penalty", 0.0, "sequence 1: target_params.repetition_penalty = 0 is out of range"),
    ("presence_penalty", np.inf, "sequence 1: target_params.presence_penalty = inf is out of range"),
    ("frequency_penalty", np.nan, "sequence 1: target_params.frequency_penalty = nan is out of range"),
])
def test_sampling_params_out_of_range(field, value, message):
    arrays = logits_arrays()
    arrays["target_params"][field][1] = value
    out = chain_out()
    with pytest.raises(sv.InvalidInput, match=message):
        sv.verify(sv.Standard(), sv.LogitsChainBatch(**arrays), sv.Randomness(1), out)
    assert_untouched(out)


@pytest.mark.parametrize("corrupt, message", [
    (lambda a: a["target_logits"].__setitem__((2, 5), np.nan), "target logits row 2 holds nan"),
    (lambda a: a["target_logits"].__setitem__((2, 5), np.inf), "target logits row 2 holds inf"),
    (lambda a: a["draft_logits"].__setitem__((0, 7), np.nan), "draft logits row 0 holds nan"),
    (lambda a: a.update(draft_to_target=np.array([1, 1, 2], np.int32), draft_logits=a["draft_logits"][:, :3],
                        draft_tokens=np.ones(5, np.int32)), r"draft_to_target\[1\] = 1"),
    (lambda a: a.update(draft_params=sv.sampling_params(3, top_p=2.0)), "sequence 0: draft_params.top_p = 2 is out of range"),
    (lambda a: a.update(unconditional_logits=a["target_logits"], unconditional_first_row=np.array([-3, -1, -1]),
                        guidance_scale=np.ones(3, np.float32)), "sequence 0: unconditional_first_row = -3"),
    (lambda a: a.update(unconditional_logits=a["target_logits"], unconditional_first_row=np.array([0, -1, -1]),
                        guidance_scale=np.array([np.inf, 1, 1], np.float32)), "sequence 0: guidance_scale = inf must be finite"),
    (lambda a: a.update(unconditional_logits=a["target_logits"], guidance_scale=np.ones(3, np.float32)),
     "unconditional_first_row is null"),
    (lambda a: a.update(allowed_tokens=np.zeros((8, 2), np.uint32)),
     r"sequence 0, position 0: target logits row 0 keeps no token \(every logit masked or -inf\)"),
])
def test_logits_cpp_messages(corrupt, message):
    arrays = logits_arrays()
    arrays["draft_logits"][:] = arrays["target_logits"][[0, 1, 3, 4, 5]]  # q = p: drafts accepted, rows read
    corrupt(arrays)
    out = chain_out()
    with pytest.raises(sv.InvalidInput, match=message):
        sv.verify(sv.Standard(), sv.LogitsChainBatch(**arrays), sv.Randomness(1), out)
    assert_untouched(out)


@pytest.mark.parametrize("corrupt, message", [
    (lambda a: a["parents"].__setitem__(1, 1), "sequence 0, node 1: parent 1 must be -1"),
    (lambda a: a["draft_tokens"].__setitem__(4, V), f"sequence 2, node 1: draft token {V} is outside"),
    (lambda a: a["node_offsets"].__setitem__(1, 6), r"sequence 1: node_offsets decrease \(6 then 3\)"),
    (lambda a: a.update(draft_probs=None), "draft_probs is null"),
])
def test_tree_cpp_messages(corrupt, message):
    arrays = tree_arrays()
    corrupt(arrays)
    out = tree_out()
    with pytest.raises(sv.InvalidInput, match=message):
        sv.verify(sv.Standard(), sv.TreeBatch(**arrays), sv.Randomness(1), out)
    assert_untouched(out)


def test_tree_row_width():
    out = tree_out(width=2)
    with pytest.raises(sv.InvalidInput, match="sequence 0, node 1: row_width = 2 must be at least the deepest path"):
        sv.verify(sv.Standard(), sv.TreeBatch(**tree_arrays()), sv.Randomness(1), out)
    assert_untouched(out)


@pytest.mark.parametrize("make_batch", [lambda: sv.TreeBatch(**tree_arrays()),
                                        lambda: sv.LogitsChainBatch(**logits_arrays()),
                                        lambda: sv.ChainBatch(draft_offsets=np.array([0, 1], np.int32),
                                                              draft_tokens=np.zeros(1, np.int32),
                                                              target_probs=np.full((2, V), 1 / V, np.float32))],
                         ids=["tree", "logits", "chain"])
def test_coupled_needs_positions(make_batch):
    batch = make_batch()
    out = tree_out() if isinstance(batch, sv.TreeBatch) else chain_out(batch.batch_size)
    with pytest.raises(sv.InvalidInput, match="randomness.positions is null"):
        sv.verify(sv.Coupled(), batch, sv.Randomness(1), out)
    assert_untouched(out)


def test_specdecpp_has_no_tree_form():
    for batch, out in [(sv.TreeBatch(**tree_arrays()), tree_out()),
                       (sv.LogitsTreeBatch(node_offsets=np.array([0, 1], np.int32), parents=np.array([-1], np.int32),
                                           draft_tokens=np.zeros(1, np.int32), target_logits=np.zeros((2, V), np.float32),
                                           drafted=sv.Drafted.deterministic, target_params=sv.sampling_params(1)),
                        tree_out(B=1))]:
        rule = sv.SpecDecPP(accept_probs=np.ones(batch.node_offsets[-1], np.float32))
        with pytest.raises(TypeError, match="SpecDecPP has no tree form"):
            sv.verify(rule, batch, sv.Randomness(1), out)
        assert_untouched(out)


def test_block_has_no_tree_form():
    out = tree_out()
    with pytest.raises(TypeError, match="Block has no tree form"):
        sv.verify(sv.Block(), sv.TreeBatch(**tree_arrays()), sv.Randomness(1), out)
    with pytest.raises(TypeError, match="SpecDecPP.inner must be one of"):
        sv.SpecDecPP(inner=sv.Block())
    assert_untouched(out)


def test_traversal_needs_iid_children():
    out = tree_out()
    with pytest.raises(sv.InvalidInput, match="Traversal verification needs children drafted i.i.d. from q.*"
                                              "Drafted::sampled_without_replacement"):
        sv.verify(sv.Traversal(), sv.TreeBatch(**tree_arrays(), drafted=sv.Drafted.sampled_without_replacement),
                  sv.Randomness(1), out)
    with pytest.raises(TypeError, match="SpecDecPP.inner must be one of"):
        sv.SpecDecPP(inner=sv.Traversal())
    assert_untouched(out)


def test_batch_and_output_must_match():
    with pytest.raises(TypeError, match="a TreeBatch or LogitsTreeBatch with a TreeOutput.*batch=TreeBatch.*out=ChainOutput"):
        sv.verify(sv.Standard(), sv.TreeBatch(**tree_arrays()), sv.Randomness(1), chain_out())
    with pytest.raises(TypeError, match="batch=LogitsChainBatch.*out=TreeOutput"):
        sv.verify(sv.Standard(), sv.LogitsChainBatch(**logits_arrays()), sv.Randomness(1), tree_out())


# ------------------------------------------------------------------ arrays named by argument

@pytest.mark.parametrize("name, bad, error, message", [
    ("target_logits", lambda a: a.astype(np.float64), TypeError,
     "target_logits must hold float32, float16 or bfloat16, got float64"),
    ("draft_logits", lambda a: a.astype(np.float16), sv.InvalidInput,
     "draft_logits holds float16, but target_logits holds float32 .a batch's rows share one dtype"),
    ("draft_logits", lambda a: a[:, :30], sv.InvalidInput,
     r"draft_logits has shape \(5, 30\), but its rows must be as long as target_logits' \(V = 40; pass draft_to_target"),
    ("draft_logits", lambda a: a[:4], sv.InvalidInput, r"draft_logits has shape \(4, 40\), but it needs N = 5 rows"),
    ("target_logits", lambda a: a[:7], sv.InvalidInput, r"target_logits has shape \(7, 40\), but it needs N \+ B = 5 \+ 3 rows"),
    ("target_logits", lambda a: np.asfortranarray(a), sv.InvalidInput, "target_logits: elements within a row must be contiguous"),
    ("target_params", lambda a: a[:2], sv.InvalidInput, r"target_params has shape \(2,\), but the batch has B = 3"),
    ("target_params", lambda a: [sv.SamplingParams()] * 3, TypeError,
     "target_params must be a NumPy array of sv.SamplingParams.dtype.*got list"),
    ("target_params", lambda a: np.ones((3, 4), np.float32), TypeError, "target_params must be a NumPy array of sv.SamplingParams.dtype"),
    ("target_params", lambda a: a.astype([("temperature", "<f4"), ("top_k", "<i4"), ("top_p", "<f4"), ("min_p", "<f8"),
                                              ("repetition_penalty", "<f4"), ("presence_penalty", "<f4"),
                                              ("frequency_penalty", "<f4")]),
     TypeError, "target_params must be a NumPy array of sv.SamplingParams.dtype"),
    ("target_params", lambda a: np.repeat(a, 2)[::2], sv.InvalidInput, "target_params must be contiguous"),
    ("target_params", lambda a: None, TypeError, "target_params is required"),
    ("draft_params", lambda a: sv.sampling_params(2), sv.InvalidInput, r"draft_params has shape \(2,\)"),
    ("draft_to_target", lambda a: np.zeros(0, np.int32), sv.InvalidInput, "draft_to_target must hold at least one target id"),
    ("draft_to_target", lambda a: np.arange(30, dtype=np.int64), TypeError, "draft_to_target must hold int32"),
    ("draft_to_target", lambda a: np.arange(30, dtype=np.int32), sv.InvalidInput,
     r"draft_logits has shape \(5, 40\), but its rows must be as long as draft_to_target \(30\)"),
    ("unconditional_logits", lambda a: np.zeros((4, 39), np.float32), sv.InvalidInput,
     r"unconditional_logits has shape \(4, 39\), but its rows must be as long as the target's"),
    ("unconditional_first_row", lambda a: np.zeros(3, np.int64), sv.InvalidInput,
     "unconditional_first_row is given, but unconditional_logits is None"),
    ("guidance_scale", lambda a: np.ones(3, np.float32), sv.InvalidInput, "guidance_scale is given, but unconditional_logits is None"),
    ("allowed_tokens", lambda a: np.zeros((8, 1), np.uint32), sv.InvalidInput,
     r"allowed_tokens has shape \(8, 1\), but it needs ceil\(V / 32\) = 2 words per row"),
    ("allowed_tokens", lambda a: np.zeros((7, 2), np.uint32), sv.InvalidInput, r"it needs one bitmask per target row \(8\)"),
    ("allowed_tokens", lambda a: np.zeros((8, 4), np.uint32)[:, :2], sv.InvalidInput,
     r"allowed_tokens: rows must be contiguous and adjacent \(row stride 4 != 2 words\)"),
    ("allowed_tokens", lambda a: np.zeros((8, 2), np.int64), TypeError, r"allowed_tokens must hold uint32 \(or int32\)"),
])
def test_logits_arrays_named(name, bad, error, message):
    arrays = logits_arrays()
    arrays[name] = bad(arrays.get(name))
    with pytest.raises(error, match=message):
        sv.LogitsChainBatch(**arrays)


def test_guidance_rows_must_fit():
    """C++ cannot know how many unconditional rows there are: Python checks each guided sequence."""
    arrays = logits_arrays()
    arrays.update(unconditional_logits=np.zeros((5, V), np.float32), unconditional_first_row=np.array([0, 4, 2]),
                  guidance_scale=np.ones(3, np.float32))
    batch = sv.LogitsChainBatch(**arrays)
    out = chain_out()
    with pytest.raises(sv.InvalidInput, match="sequence 2: unconditional_first_row = 2, but its 4 rows do not fit "
                                              "in unconditional_logits' 5 rows"):
        sv.verify(sv.Standard(), batch, sv.Randomness(1), out)
    assert_untouched(out)
    arrays["unconditional_first_row"][2] = 1  # rows 1..4: fits
    sv.verify(sv.Standard(), batch, sv.Randomness(1), out)


@pytest.mark.parametrize("name, bad, error, message", [
    ("parents", lambda a: a[:4], sv.InvalidInput, r"parents has shape \(4,\), but it needs one parent per node \(draft_tokens holds 5\)"),
    ("parents", lambda a: a.astype(np.int16), TypeError, "parents must hold int32"),
    ("node_offsets", lambda a: a[:0], sv.InvalidInput, r"node_offsets must hold B \+ 1 >= 1 offsets"),
    ("target_probs", lambda a: a[:7], sv.InvalidInput, r"target_probs has shape \(7, 40\), but it needs N \+ B = 5 \+ 3 rows \(one per node plus one root row"),
    ("draft_probs", lambda a: a[:5], sv.InvalidInput, r"draft_probs has shape \(5, 40\), but it needs N \+ B = 5 \+ 3 rows"),
    ("drafted", lambda a: 1, TypeError, "incompatible constructor arguments"),
])
def test_tree_arrays_named(name, bad, error, message):
    arrays = tree_arrays()
    arrays[name] = bad(arrays.get(name))
    with pytest.raises(error, match=message):
        sv.TreeBatch(**arrays)


def test_tree_offsets_rewritten_after_construction():
    arrays = tree_arrays()
    batch = sv.TreeBatch(**arrays)
    arrays["node_offsets"][3] = 4
    out = tree_out()
    with pytest.raises(sv.InvalidInput, match=r"node_offsets\[B\] = 4 but draft_tokens holds 5 tokens"):
        sv.verify(sv.Standard(), batch, sv.Randomness(1), out)
    assert_untouched(out)


@pytest.mark.parametrize("make, error, message", [
    (lambda: sv.TreeOutput(tokens=np.zeros((3, 4), np.int32), num_accepted=np.zeros(3, np.int32),
                           accepted_nodes=np.zeros((3, 5), np.int32)), sv.InvalidInput,
     r"accepted_nodes has shape \(3, 5\), but it must be shaped like tokens \(3, 4\)"),
    (lambda: sv.TreeOutput(tokens=np.zeros((3, 4), np.int32), num_accepted=np.zeros(3, np.int32),
                           accepted_nodes=np.zeros((3, 8), np.int32)[:, :4]), sv.InvalidInput,
     r"accepted_nodes: rows must be contiguous and adjacent"),
    (lambda: sv.TreeOutput(tokens=np.zeros((3, 4), np.int32), num_accepted=np.zeros(3, np.int32),
                           logprobs=np.zeros((3, 4), np.float64)), TypeError, "logprobs must hold float32"),
    (lambda: sv.ChainOutput(tokens=np.zeros((3, 4), np.int32), num_accepted=np.zeros(3, np.int32),
                            logprobs=np.zeros((3, 4), np.float32)[:2]), sv.InvalidInput,
     r"logprobs has shape \(2, 4\), but it must be shaped like tokens"),
    (lambda: sv.ChainOutput(tokens=np.zeros((3, 4), np.int32), num_accepted=np.zeros(3, np.int32),
                            logprobs=np.broadcast_to(np.zeros(4, np.float32), (3, 4))), sv.InvalidInput,
     "logprobs is read-only"),
    (lambda: sv.Randomness(positions=np.zeros(3, np.int32)), TypeError, "positions must hold int64"),
])
def test_output_and_randomness_arrays_named(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_positions_shape():
    out = tree_out()
    with pytest.raises(sv.InvalidInput, match=r"positions has shape \(2,\), but the batch has B = 3 sequences"):
        sv.verify(sv.Coupled(), sv.TreeBatch(**tree_arrays()), sv.Randomness(1, positions=np.zeros(2, np.int64)), out)
    assert_untouched(out)


def test_torch_logits_arrays():
    torch = pytest.importorskip("torch")
    arrays = {k: (torch.from_numpy(v) if k != "target_params" else v) for k, v in logits_arrays().items()}
    arrays["draft_logits"] = arrays["draft_logits"].to(torch.bfloat16)
    with pytest.raises(sv.InvalidInput, match="draft_logits holds bfloat16, but target_logits holds float32"):
        sv.LogitsChainBatch(**arrays)
    arrays["draft_logits"] = arrays["draft_logits"].to(torch.float64)
    with pytest.raises(TypeError, match="draft_logits must hold float32, float16 or bfloat16, got torch.float64"):
        sv.LogitsChainBatch(**arrays)
    arrays["draft_logits"] = None
    arrays["target_params"] = torch.zeros(3, 4)
    with pytest.raises(TypeError, match="target_params must be a NumPy array of sv.SamplingParams.dtype"):
        sv.LogitsChainBatch(**arrays)
    arrays["target_params"] = sv.sampling_params(3)
    arrays["allowed_tokens"] = torch.zeros((8, 2), dtype=torch.int32)  # xgrammar's dtype: accepted
    assert sv.LogitsChainBatch(**arrays).allowed_tokens is arrays["allowed_tokens"]


# ------------------------------------------------------------------ sample and sampling_params

def test_sample_errors():
    row = np.zeros(V, np.float32)
    with pytest.raises(sv.InvalidInput, match="sample: top_p is"):
        sv.sample(row, sv.SamplingParams(top_p=0.0), 1, 0)
    with pytest.raises(sv.InvalidInput, match="sample: position 9: logit of token 3 is nan"):
        bad = row.copy()
        bad[3] = np.nan
        sv.sample(bad, sv.SamplingParams(), 1, 9)
    with pytest.raises(sv.InvalidInput, match="sample: position 0: every logit is -inf"):
        sv.sample(np.full(V, -np.inf, np.float32), sv.SamplingParams(), 1, 0)
    with pytest.raises(TypeError, match="logits must hold float32"):
        sv.sample(row.astype(np.float64), sv.SamplingParams(), 1, 0)
    with pytest.raises(sv.InvalidInput, match=r"logits must have 1 dimension, got shape \(1, 40\)"):
        sv.sample(row[None], sv.SamplingParams(), 1, 0)
    with pytest.raises(sv.InvalidInput, match="logits must be contiguous"):
        sv.sample(np.zeros(2 * V, np.float32)[::2], sv.SamplingParams(), 1, 0)


def test_sampling_params_helper():
    p = sv.sampling_params(4, temperature=[0.5, 1, 1, 0], top_k=3)
    assert p.dtype == sv.SamplingParams.dtype and p.shape == (4,)
    assert list(p["temperature"]) == [0.5, 1, 1, 0] and list(p["top_k"]) == [3] * 4
    assert list(p["top_p"]) == [1] * 4 and list(p["min_p"]) == [0] * 4
    q = sv.sampling_params([sv.SamplingParams(top_p=0.5), sv.SamplingParams(min_p=0.1)])
    assert q[0]["top_p"] == 0.5 and q[1]["min_p"] == np.float32(0.1)
    with pytest.raises(TypeError, match="takes a batch size or SamplingParams objects, got dict"):
        sv.sampling_params([{"temperature": 1.0}])
    assert sv.SamplingParams.dtype.itemsize == 28
    assert [sv.SamplingParams.dtype.fields[f][1] for f in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                                                          "presence_penalty", "frequency_penalty")] == [0, 4, 8, 12, 16, 20, 24]
    r = sv.sampling_params(2, repetition_penalty=1.3, presence_penalty=[0.5, 0], frequency_penalty=0.25)
    assert list(r["repetition_penalty"]) == [np.float32(1.3)] * 2 and list(r["presence_penalty"]) == [0.5, 0]
    assert sv.sampling_params([sv.SamplingParams(frequency_penalty=0.5)])[0]["frequency_penalty"] == 0.5
