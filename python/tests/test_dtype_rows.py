"""Logits rows in the model's dtype (docs/api.md "Rows in the model's dtype"): LogitsChainBatch
and LogitsTreeBatch take float16 (NumPy, torch) and bfloat16 (torch) rows in place, and every rule
emits exactly what float32 rows holding the same values give (token for token, logprobs bit for bit):
the C++ library widens them exactly. One batch's rows share one dtype; nothing is converted."""
import numpy as np
import pytest
import specverify as sv

from processing import assert_same_outputs, penalties, penalty_lists, ragged
from test_zero_copy import traced_peak

V, B, PAD = 48, 5, 8
COUNTS = (3, 0, 2, 4, 1)  # drafts (chains) or nodes (trees) per sequence
PARENTS = [[-1, 0, 0], [], [-1, 0], [-1, -1, 1, 2], [-1]]
KINDS = ["numpy-float16", "torch-float16", "torch-bfloat16"]

RULES = dict(standard=sv.Standard, coupled=sv.Coupled, greedy=sv.Greedy, traversal=sv.Traversal,
             ears=lambda: sv.Ears(beta=0.3), fsd=lambda: sv.Fsd(divergence=sv.Divergence.js, threshold=0.2),
             reducible_fsd=lambda: sv.ReducibleFsd(divergence=sv.Divergence.tv, threshold=0.3),
             sprinter=lambda: sv.Sprinter(eta=0.5, verifier_scores=np.linspace(0, 1, sum(COUNTS), dtype=np.float32)))
CHAIN_ONLY = dict(block=sv.Block,
                  specdecpp=lambda: sv.SpecDecPP(threshold=0.5, inner=sv.Standard(),
                                                 accept_probs=np.linspace(1, 0, sum(COUNTS), dtype=np.float32)))
CASES = {f"{'tree' if tree else 'chain'}-{name}": (tree, rule)
         for tree in (False, True) for name, rule in {**RULES, **({} if tree else CHAIN_ONLY)}.items()}


def kind_module(kind):
    return np if kind.startswith("numpy") else pytest.importorskip("torch")


def in_dtype(kind, a, pad=0):
    """`a` (float32) rounded to the kind's dtype, as (16-bit rows, float32 rows holding the same
    values); pad > 0 embeds the 16-bit rows in wider ones (row stride V + pad)."""
    if kind == "numpy-float16":
        rows = a.astype(np.float16)
        same = rows.astype(np.float32)
        wide = np.full((a.shape[0], a.shape[1] + pad), np.nan, np.float16)
    else:
        torch = kind_module(kind)
        dtype = torch.float16 if kind == "torch-float16" else torch.bfloat16
        rows = torch.from_numpy(a).to(dtype)
        same = rows.float().numpy()
        wide = torch.full((a.shape[0], a.shape[1] + pad), float("nan"), dtype=dtype)
    wide[:, : a.shape[1]] = rows
    return wide[:, : a.shape[1]], same


def float_arrays(tree, setting, rng):
    """A logits batch's arguments with float32 rows: plain, with sampling parameters (top-k, top-p,
    min-p, penalties, logit bias, a bitmask), or with guidance."""
    N = sum(COUNTS)
    rows = N + B
    target = rng.normal(0, 3, (rows, V)).astype(np.float32)
    params = sv.sampling_params(B, temperature=rng.choice([0.0, 0.7, 1.0, 1.3], B))
    a = dict(draft_tokens=rng.integers(0, V, N).astype(np.int32), target_logits=target, target_params=params)
    if tree:
        a.update(node_offsets=ragged(COUNTS), parents=np.concatenate(PARENTS).astype(np.int32),
                 drafted=sv.Drafted.sampled, draft_logits=target + rng.normal(0, 1, (rows, V)).astype(np.float32))
    else:
        tested = np.concatenate([np.arange(k) + ragged(COUNTS)[b] + b for b, k in enumerate(COUNTS)])
        a.update(draft_offsets=ragged(COUNTS), draft_logits=target[tested] + rng.normal(0, 1, (N, V)).astype(np.float32))
    if setting == "sampling":
        params["top_k"] = rng.choice([0, 5, 20], B)
        params["top_p"] = rng.choice([1.0, 0.9, 0.6], B)
        params["min_p"] = rng.choice([0.0, 0.05], B)
        penalties(params, rng)
        a["draft_params"] = sv.sampling_params(B, temperature=1.0, top_k=30)
        a.update(penalty_lists(rng, B, V))
        allowed = np.zeros((rows, (V + 31) // 32 * 32), bool)
        allowed[:, :V] = rng.random((rows, V)) < 0.8
        allowed[:, 0] = True
        a["allowed_tokens"] = np.packbits(allowed, axis=1, bitorder="little").view(np.uint32)
    elif setting == "guidance":
        a["unconditional_logits"] = rng.normal(0, 3, (rows + 2, V)).astype(np.float32)
        a["unconditional_first_row"] = np.array([b + int(ragged(COUNTS)[b]) + (b % 2) * 2 if b != 3 else -1
                                                 for b in range(B)], np.int64)
        a["guidance_scale"] = rng.choice([0.5, 1.0, 1.8], B).astype(np.float32)
    return a


def run(rule, tree, arrays):
    width = max(COUNTS) + 1
    out = dict(tokens=np.full((B, width), 777, np.int32), num_accepted=np.full(B, 777, np.int32),
               logprobs=np.full((B, width), 777, np.float32))
    out = sv.TreeOutput(accepted_nodes=np.full((B, width), 777, np.int32), **out) if tree else sv.ChainOutput(**out)
    randomness = sv.Randomness(5, 2, sequence_seeds=np.arange(B, dtype=np.uint64) + 7,
                               positions=np.arange(B, dtype=np.int64) * 50)
    batch = (sv.LogitsTreeBatch if tree else sv.LogitsChainBatch)(**arrays)
    stats = sv.verify(rule, batch, randomness, out)
    return out, [stats.drafted, stats.accepted, stats.relaxed, stats.target_checked]


ROWS = ("target_logits", "draft_logits", "unconditional_logits")


SETTINGS = ["plain", "sampling", "guidance"]


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tree, make_rule", CASES.values(), ids=CASES.keys())
def test_same_outputs_as_float_rows(tree, make_rule, kind, setting):
    """16-bit rows (target and unconditional strided, draft contiguous) against float32 rows of
    the same values."""
    rng = np.random.default_rng([int(tree), KINDS.index(kind), SETTINGS.index(setting)])
    arrays = float_arrays(tree, setting, rng)
    narrow, wide = dict(arrays), dict(arrays)
    for name in ROWS:
        if name in arrays:
            narrow[name], wide[name] = in_dtype(kind, arrays[name], pad=0 if name == "draft_logits" else PAD)
    got = run(make_rule(), tree, narrow)
    assert_same_outputs(got, run(make_rule(), tree, wide))
    assert np.all(got[0].num_accepted != 777)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_strided_rows(kind, tree):
    arrays = float_arrays(tree, "plain", np.random.default_rng(4))
    narrow, wide = dict(arrays), dict(arrays)
    for name in ("target_logits", "draft_logits"):
        narrow[name], wide[name] = in_dtype(kind, arrays[name], pad=PAD)
    batch = (sv.LogitsTreeBatch if tree else sv.LogitsChainBatch)(**narrow)
    assert batch.target_stride == batch.draft_stride == V + PAD and batch.target_logits is narrow["target_logits"]
    assert_same_outputs(run(sv.Standard(), tree, narrow), run(sv.Standard(), tree, wide))


@pytest.mark.parametrize("kind", KINDS)
def test_rows_read_in_place(kind):
    """Writes to the caller's 16-bit rows after construction change the next verify's tokens."""
    rows, _ = in_dtype(kind, np.random.default_rng(1).normal(size=(2 * B, V)).astype(np.float32), pad=PAD)
    batch = sv.LogitsChainBatch(draft_offsets=np.arange(B + 1, dtype=np.int32), draft_tokens=np.full(B, 5, np.int32),
                                target_logits=rows, target_params=sv.sampling_params(B, temperature=0.0))

    def emitted():
        out = sv.ChainOutput(tokens=np.empty((B, 2), np.int32), num_accepted=np.empty(B, np.int32))
        sv.verify(sv.Standard(), batch, sv.Randomness(3), out)
        return out.tokens[np.arange(B), out.num_accepted]

    rows[:, 17] = 100.0  # greedy: token 17 everywhere
    assert np.all(emitted() == 17)
    rows[:, 23] = 200.0
    assert np.all(emitted() == 23)


def test_no_row_sized_allocation():
    big = 1 << 20  # 2 MB float16 rows: any copy (or float32 widening) of one shows
    rows = np.zeros((2 * 3, big + 64), np.float16)[:, :big]
    offsets, tokens = (np.arange(3) * 2).astype(np.int32), np.zeros(4, np.int32)
    params = sv.sampling_params(2, top_k=50)
    out = sv.ChainOutput(tokens=np.empty((2, 3), np.int32), num_accepted=np.empty(2, np.int32),
                         logprobs=np.empty((2, 3), np.float32))

    def run_once():
        batch = sv.LogitsChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_logits=rows,
                                    draft_logits=rows[:4], target_params=params, unconditional_logits=rows,
                                    unconditional_first_row=np.array([0, 3], np.int64),
                                    guidance_scale=np.ones(2, np.float32))
        sv.verify(sv.Standard(), batch, sv.Randomness(1), out, max_threads=1)

    assert traced_peak(run_once) < big // 8


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_one_dtype_per_batch(tree):
    torch = pytest.importorskip("torch")
    arrays = float_arrays(tree, "guidance", np.random.default_rng(2))
    make = sv.LogitsTreeBatch if tree else sv.LogitsChainBatch
    half = {name: arrays[name].astype(np.float16) for name in ROWS}
    bf16 = {name: torch.from_numpy(arrays[name]).to(torch.bfloat16) for name in ROWS}
    with pytest.raises(sv.InvalidInput, match="draft_logits holds float32, but target_logits holds float16"):
        make(**{**arrays, "target_logits": half["target_logits"]})
    with pytest.raises(sv.InvalidInput, match="draft_logits holds float16, but target_logits holds bfloat16"):
        make(**{**arrays, "target_logits": bf16["target_logits"], "draft_logits": half["draft_logits"]})
    with pytest.raises(sv.InvalidInput, match="unconditional_logits holds float32, but target_logits holds bfloat16"):
        make(**{**arrays, "target_logits": bf16["target_logits"], "draft_logits": bf16["draft_logits"]})
    with pytest.raises(sv.InvalidInput, match="unconditional_logits holds bfloat16, but target_logits holds float32"):
        make(**{**arrays, "unconditional_logits": bf16["unconditional_logits"]})
    make(**{**arrays, **half})  # all float16: fine
    make(**{**arrays, **bf16, "draft_logits": None})  # one-hot drafts: no draft rows to match


@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_other_dtypes_raise(tree):
    torch = pytest.importorskip("torch")
    arrays = float_arrays(tree, "plain", np.random.default_rng(3))
    make = sv.LogitsTreeBatch if tree else sv.LogitsChainBatch
    for bad, got in [(arrays["target_logits"].astype(np.float64), "float64"),
                     (torch.from_numpy(arrays["target_logits"]).double(), "torch.float64"),
                     (arrays["target_logits"].astype(np.int16), "int16")]:
        with pytest.raises(TypeError, match=f"target_logits must hold float32, float16 or bfloat16, got {got} "
                                            r"\(arrays are never converted or copied\)"):
            make(**{**arrays, "target_logits": bad})


def test_sample_takes_float32_only():
    """sv.sample's C++ counterpart reads float rows only."""
    with pytest.raises(TypeError, match="logits must hold float32, got float16"):
        sv.sample(np.zeros(V, np.float16))
