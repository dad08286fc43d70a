"""specverify.padded: the padded shapes ([B, K] drafts, [B, K+1, V] target rows) against the ragged
API token for token, errors naming the argument, and the FlashInfer-shaped wrapper's law."""
import re

import numpy as np
import pytest
import specverify as sv

from conftest import as_numpy, chi_square, chi_square_bound, needs_gpu, normalised, to
from padded_cases import Padded, counts_for

# (rule factory given a per-draft array laid out like the drafts it is verified with, name)
RULES = [
    (lambda a: sv.Standard(), "standard"),
    (lambda a: sv.Greedy(), "greedy"),
    (lambda a: sv.Block(), "block"),
    (lambda a: sv.Ears(beta=0.3), "ears"),
    (lambda a: sv.Fsd(divergence=sv.Divergence.js, threshold=0.35), "fsd"),
    (lambda a: sv.ReducibleFsd(divergence=sv.Divergence.tv, threshold=0.5), "rfsd"),
    (lambda a: sv.Sprinter(eta=0.6, verifier_scores=a), "sprinter"),
    (lambda a: sv.SpecDecPP(threshold=0.7, accept_probs=a, inner=sv.Standard()), "specdecpp"),
]


@pytest.mark.parametrize("make_rule, name", RULES, ids=[n for _, n in RULES])
@pytest.mark.parametrize("one_hot", [False, True], ids=["q", "one-hot"])
@pytest.mark.parametrize("logits", [False, True], ids=["probs", "logits"])
@pytest.mark.parametrize("per_sequence", [False, True], ids=["seed", "sequence_seeds"])
def test_tokens_match_ragged(rng, module, make_rule, name, one_hot, logits, per_sequence):
    K, V = 5, 40
    for B in (1, 2, 23):
        c = Padded(rng, counts_for(rng, B, K), K, V, one_hot=one_hot, logits=logits)
        seeds = rng.integers(0, 2**63, B, dtype=np.uint64) if per_sequence else None
        before = [a.copy() for a in (c.ids, c.p, c.q, c.counts) if a is not None]
        expected = c.ragged(make_rule, 11, 3, seeds)
        got = c.padded(module, make_rule, 11, 3, seeds)
        assert type(got[0]) is type(to(module, c.ids)) and type(got[1]) is type(got[0])
        assert tuple(got[0].shape) == (B, K + 1) and tuple(got[1].shape) == (B,)
        np.testing.assert_array_equal(as_numpy(got[0]), expected[0])
        np.testing.assert_array_equal(as_numpy(got[1]), expected[1])
        after = [a for a in (c.ids, c.p, c.q, c.counts) if a is not None]
        assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(before, after))


def test_outputs_padded_with_minus_one(rng, module):
    c = Padded(rng, [3, 0, 2, 3], 3, 16)
    tokens, accepted = map(as_numpy, c.padded(module, lambda a: sv.Standard(), 5, 0, None))
    for b in range(c.B):
        n = accepted[b]
        assert 0 <= n <= c.counts[b]
        np.testing.assert_array_equal(tokens[b, :n], c.ids[b, :n])
        assert 0 <= tokens[b, n] < c.V
        assert (tokens[b, n + 1:] == -1).all()


def test_default_counts_are_k(rng, module):
    c = Padded(rng, [4] * 6, 4, 32)
    rule = lambda a: sv.Ears(beta=0.2)  # noqa: E731
    with_counts = c.padded(module, rule, 2, 9, None)
    without = c.padded(module, rule, 2, 9, None, counts=False)
    for x, y in zip(with_counts, without):
        np.testing.assert_array_equal(as_numpy(x), as_numpy(y))


def test_new_outputs_every_call(rng):
    c = Padded(rng, [2, 1], 2, 8)
    first = c.padded(np, lambda a: sv.Standard(), 1, 0, None)
    second = c.padded(np, lambda a: sv.Standard(), 1, 0, None)
    assert not np.shares_memory(first[0], second[0]) and not np.shares_memory(first[1], second[1])


def test_rows_read_in_place(rng, module):
    """Rows embedded in wider ones, with evenly spaced rows, are viewed; unevenly spaced ones
    (a slice of the row axis) would need a copy and are refused, naming the argument."""
    c = Padded(rng, [3, 1, 2], 3, 24)
    wide = np.full((c.B, c.K + 1, c.V + 7), np.nan, np.float32)
    wide[:, :, : c.V] = c.p
    expected = c.ragged(lambda a: sv.Standard(), 4, 1, None)
    got = sv.padded.verify(sv.Standard(), to(module, c.ids), to(module, wide)[:, :, : c.V], to(module, c.q),
                           to(module, c.counts), seed=4, offset=1)
    np.testing.assert_array_equal(as_numpy(got[0]), expected[0])
    tall = np.zeros((c.B, c.K + 3, c.V), np.float32)
    tall[:, : c.K + 1] = c.p
    with pytest.raises(sv.InvalidInput, match="target"):
        sv.padded.verify(sv.Standard(), to(module, c.ids), to(module, tall)[:, : c.K + 1], to(module, c.q),
                         to(module, c.counts))


def test_coupled_needs_positions(rng):
    c = Padded(rng, [2, 2], 2, 8)
    with pytest.raises(sv.InvalidInput, match="positions"):
        sv.padded.verify(sv.Coupled(), c.ids, c.p, c.q, c.counts)


def test_errors_name_the_argument(rng, module):
    c = Padded(rng, [2, 1, 2], 2, 8)
    ids, p, q, counts = (to(module, a) for a in (c.ids, c.p, c.q, c.counts))
    std = sv.Standard()
    cases = [
        (TypeError, "draft_token_ids", dict(draft_token_ids=to(module, c.ids.astype(np.int64)))),
        (TypeError, "target", dict(target=to(module, c.p.astype(np.float64)))),
        (TypeError, "draft", dict(draft=to(module, c.q.astype(np.float64)))),
        (TypeError, "num_draft_tokens", dict(num_draft_tokens=to(module, c.counts.astype(np.int64)))),
        (sv.InvalidInput, "draft_token_ids", dict(draft_token_ids=to(module, c.ids.reshape(-1)))),
        (sv.InvalidInput, "target", dict(target=to(module, np.ascontiguousarray(c.p[:, :2])))),
        (sv.InvalidInput, "target", dict(target=to(module, np.ascontiguousarray(c.p[:2])))),
        (sv.InvalidInput, "draft", dict(draft=to(module, np.ascontiguousarray(c.q[:, :, :5])))),
        (sv.InvalidInput, "draft", dict(draft=to(module, c.q[0]))),
        (sv.InvalidInput, "num_draft_tokens", dict(num_draft_tokens=to(module, c.counts[:2].copy()))),
        (sv.InvalidInput, re.escape("sequence 1: num_draft_tokens = 3 must be in [0, 2] (its draft slots)"),
         dict(num_draft_tokens=to(module, np.array([2, 3, 0], np.int32)))),
        (sv.InvalidInput, re.escape("sequence 2: num_draft_tokens = -1 must be in [0, 2] (its draft slots)"),
         dict(num_draft_tokens=to(module, np.array([2, 0, -1], np.int32)))),
    ]
    for error, name, change in cases:
        args = dict(draft_token_ids=ids, target=p, draft=q, num_draft_tokens=counts)
        args.update(change)
        with pytest.raises(error, match=name):
            sv.padded.verify(std, **args)
    bad = c.ids.copy()
    bad[0, 0] = c.V  # a draft within its count is checked like every ragged draft
    with pytest.raises(sv.InvalidInput, match="draft"):
        sv.padded.verify(std, to(module, bad), p, q, counts)
    with pytest.raises(sv.InvalidInput, match="target_params"):
        sv.padded.verify(std, ids, p, q, counts, params=sv.sampling_params(2))
    # Logits' counts are checked with the batch too, in the same words.
    with pytest.raises(sv.InvalidInput, match=re.escape("sequence 1: num_draft_tokens = 3 must be in [0, 2] (its "
                                                        "draft slots)")):
        sv.padded.verify(std, ids, p, q, to(module, np.array([2, 3, 0], np.int32)), params=sv.sampling_params(3))


def test_empty_batch_and_no_drafts(rng, module):
    tokens, accepted = sv.padded.verify(sv.Standard(), to(module, np.zeros((0, 3), np.int32)),
                                        to(module, np.zeros((0, 4, 5), np.float32)))
    assert tuple(tokens.shape) == (0, 4) and tuple(accepted.shape) == (0,)
    c = Padded(rng, [0, 0], 0, 6, one_hot=True)
    tokens, accepted = map(as_numpy, c.padded(module, lambda a: sv.Standard(), 3, 0, None))
    expected = c.ragged(lambda a: sv.Standard(), 3, 0, None)
    np.testing.assert_array_equal(tokens, expected[0])
    assert (accepted == 0).all()


# --- chain_speculative_sampling (FlashInfer's names and outputs) ---

def test_flashinfer_tokens_are_standard(rng, module):
    c = Padded(rng, [4] * 9, 4, 30)
    tokens, passed, emitted = sv.padded.chain_speculative_sampling(to(module, c.q), to(module, c.ids), to(module, c.p),
                                                                   seed=7, offset=2)
    expected = sv.padded.verify(sv.Standard(), c.ids, c.p, c.q, seed=7, offset=2)
    np.testing.assert_array_equal(as_numpy(tokens), expected[0])
    np.testing.assert_array_equal(as_numpy(emitted), expected[1])
    # Each position's own test, the chain's first rejection ignored: at least the emitted ones.
    u = sv._core._accept_uniforms(sv.Randomness(seed=7, offset=2), c.B, c.K)
    p_x = np.take_along_axis(c.p[:, :4], c.ids[:, :, None].astype(np.int64), 2)[:, :, 0]
    q_x = np.take_along_axis(c.q, c.ids[:, :, None].astype(np.int64), 2)[:, :, 0]
    np.testing.assert_array_equal(as_numpy(passed), (u * q_x < p_x).sum(axis=1))
    assert (as_numpy(passed) >= as_numpy(emitted)).all()
    # The uniforms are verify's: position j of a sequence that reached it passed iff it was accepted.
    for b in range(c.B):
        n = expected[1][b]
        assert ((u[b, :n] * q_x[b, :n]) < p_x[b, :n]).all()
        if n < c.K:
            assert not u[b, n] * q_x[b, n] < p_x[b, n]


def test_flashinfer_counts_accumulate_in_place(rng, module):
    c = Padded(rng, [3] * 5, 3, 12)
    acc = to(module, np.zeros(5, np.int32))
    emi = to(module, np.zeros(5, np.int32))
    total_passed = np.zeros(5, np.int32)
    total_emitted = np.zeros(5, np.int32)
    for step in range(3):
        _, passed, emitted = sv.padded.chain_speculative_sampling(to(module, c.q), to(module, c.ids), to(module, c.p),
                                                                  acc, emi, seed=1, offset=step)
        assert passed is acc and emitted is emi
        _, p1, e1 = sv.padded.chain_speculative_sampling(c.q, c.ids, c.p, seed=1, offset=step)
        total_passed += p1
        total_emitted += e1
    np.testing.assert_array_equal(as_numpy(acc), total_passed)
    np.testing.assert_array_equal(as_numpy(emi), total_emitted)


def test_flashinfer_seed_forms(rng):
    torch = pytest.importorskip("torch")
    c = Padded(rng, [2] * 4, 2, 10)
    a = sv.padded.chain_speculative_sampling(torch.from_numpy(c.q), torch.from_numpy(c.ids), torch.from_numpy(c.p),
                                             seed=torch.tensor([5]), offset=torch.tensor(1))
    b = sv.padded.chain_speculative_sampling(c.q, c.ids, c.p, seed=5, offset=1)
    assert all(np.array_equal(as_numpy(x), y) for x, y in zip(a, b))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    x = sv.padded.chain_speculative_sampling(torch.from_numpy(c.q), torch.from_numpy(c.ids), torch.from_numpy(c.p),
                                             generator=g1)
    y = sv.padded.chain_speculative_sampling(torch.from_numpy(c.q), torch.from_numpy(c.ids), torch.from_numpy(c.p),
                                             generator=g2)
    assert all(torch.equal(i, j) for i, j in zip(x, y))


def test_flashinfer_first_token_follows_p(rng):
    """The first emitted token of each sequence follows p at the root, whatever q (lossless)."""
    B, K, V = 20000, 3, 10
    p0 = normalised(rng.gamma(0.5, size=(1, V)))[0]
    q = normalised(rng.gamma(0.5, size=(K, V)))
    target = np.broadcast_to(normalised(rng.gamma(0.5, size=(K + 1, V))), (B, K + 1, V)).copy()
    target[:, 0] = p0
    draft = np.broadcast_to(q, (B, K, V)).copy()
    ids = np.stack([rng.choice(V, size=B, p=q[j].astype(np.float64) / q[j].sum()) for j in range(K)], 1).astype(np.int32)
    tokens, _, _ = sv.padded.chain_speculative_sampling(draft, ids, target, seed=12, offset=0)
    counts = np.bincount(tokens[:, 0], minlength=V)
    assert chi_square(counts, p0 / p0.sum()) < chi_square_bound(V - 1)


def test_flashinfer_takes_int64_ids(rng, module):
    """FlashInfer's own tests draw draft_token_ids with torch.randint: int64 ids are read exactly."""
    c = Padded(rng, [3] * 6, 3, 20)
    want = sv.padded.chain_speculative_sampling(c.q, c.ids, c.p, seed=3, offset=1)
    ids = to(module, c.ids.astype(np.int64))
    got = sv.padded.chain_speculative_sampling(to(module, c.q), ids, to(module, c.p), seed=3, offset=1)
    for x, y in zip(got, want):
        np.testing.assert_array_equal(as_numpy(x), y)
    np.testing.assert_array_equal(as_numpy(ids), c.ids)


@pytest.mark.parametrize("value", [2**40, -(2**40), 2**31, -(2**31) - 1, 2**31 - 1, -(2**31), 20, -1])
def test_flashinfer_int64_ids_out_of_range_name_the_position(rng, module, value):
    """Never narrowed into range: an id outside [0, V) is named where it is, as an int32 id is."""
    c = Padded(rng, [3] * 3, 3, 20)
    ids = c.ids.astype(np.int64)
    ids[1, 2] = value
    accepted = to(module, np.full(3, 7, np.int32))
    with pytest.raises(sv.InvalidInput) as error:
        sv.padded.chain_speculative_sampling(to(module, c.q), to(module, ids), to(module, c.p), accepted, seed=3)
    assert str(error.value) == f"specverify::verify: sequence 1, position 2: draft token {value} is outside [0, 20)"
    assert (as_numpy(accepted) == 7).all()


def test_flashinfer_int64_ids_name_the_first_out_of_range(rng, module):
    c = Padded(rng, [3] * 3, 3, 20)
    ids = c.ids.astype(np.int64)
    ids[2, 0] = 2**40
    ids[1, 1] = 25
    with pytest.raises(sv.InvalidInput, match=re.escape("sequence 1, position 1: draft token 25 is outside [0, 20)")):
        sv.padded.chain_speculative_sampling(to(module, c.q), to(module, ids), to(module, c.p), seed=3)


@pytest.mark.parametrize("dtype", [np.int16, np.uint8, np.float32])
def test_flashinfer_ids_of_another_dtype_are_refused(rng, module, dtype):
    c = Padded(rng, [2] * 3, 2, 10)
    ids = to(module, c.ids.astype(dtype))
    with pytest.raises(TypeError, match=f"specverify: draft_token_ids must hold int32 or int64, got {ids.dtype}"):
        sv.padded.chain_speculative_sampling(to(module, c.q), ids, to(module, c.p), seed=3)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(seed=1.5), TypeError, "seed must be an integer or a one-element integer array, got float 1.5"),
    (dict(seed=np.float64(2.0)), TypeError, "seed must be an integer or a one-element integer array, got float64 2.0"),
    (dict(offset=2.5), TypeError, "offset must be an integer or a one-element integer array, got float 2.5"),
    (dict(seed=np.array([1.5], np.float32)), TypeError,
     "seed must be an integer or a one-element integer array, got float32 1.5"),
    (dict(seed="3"), TypeError, "seed must be an integer or a one-element integer array, got str '3'"),
    (dict(seed=None, offset=True), TypeError, "offset must be an integer or a one-element integer array, got bool True"),
    (dict(seed=-1), sv.InvalidInput, "seed = -1 does not fit in uint64"),
    (dict(offset=2**64), sv.InvalidInput, "offset = 18446744073709551616 does not fit in uint64"),
    (dict(seed=np.array([1, 2])), sv.InvalidInput, "seed must hold one value, got shape (2,)"),
])
def test_flashinfer_seed_and_offset_are_integers(rng, kwargs, error, message):
    """Never truncated: seed=1.5 would run seed 1."""
    c = Padded(rng, [2] * 3, 2, 10)
    arguments = dict(seed=5, offset=0)
    arguments.update(kwargs)
    with pytest.raises(error) as raised:
        sv.padded.chain_speculative_sampling(c.q, c.ids, c.p, **arguments)
    assert str(raised.value) == f"specverify: {message}"


def test_flashinfer_seed_tensors_are_integers(rng):
    torch = pytest.importorskip("torch")
    c = Padded(rng, [2] * 3, 2, 10)
    q, ids, p = (torch.from_numpy(a) for a in (c.q, c.ids, c.p))
    for seed, shown in [(torch.tensor([1.5]), "torch.float32 1.5"), (torch.tensor(2.0, dtype=torch.float64),
                                                                     "torch.float64 2.0"),
                        (torch.tensor([True]), "torch.bool True")]:
        with pytest.raises(TypeError) as raised:
            sv.padded.chain_speculative_sampling(q, ids, p, seed=seed, offset=torch.tensor([0]))
        assert str(raised.value) == f"specverify: seed must be an integer or a one-element integer array, got {shown}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.uint8])
@pytest.mark.parametrize("which", ["maybe_output_accepted_token_num", "maybe_output_emitted_draft_token_num"])
def test_flashinfer_counts_of_another_dtype_are_refused(rng, module, dtype, which):
    """Counts are added in place: a float or narrower array would take them converted."""
    c = Padded(rng, [2] * 3, 2, 10)
    given = to(module, np.full(3, 7, dtype))
    with pytest.raises(TypeError) as raised:
        sv.padded.chain_speculative_sampling(to(module, c.q), to(module, c.ids), to(module, c.p), **{which: given},
                                             seed=1)
    assert str(raised.value) == (f"specverify: {which} must hold int32 or int64, got {given.dtype} "
                                 f"(the counts are added to it in place)")
    assert (as_numpy(given) == 7).all()


def test_flashinfer_counts_accumulate_in_int64(rng, module):
    c = Padded(rng, [3] * 4, 3, 12)
    accepted, emitted = to(module, np.full(4, 2**40, np.int64)), to(module, np.zeros(4, np.int64))
    _, passed, emitted_now = sv.padded.chain_speculative_sampling(to(module, c.q), to(module, c.ids), to(module, c.p),
                                                                  accepted, emitted, seed=1)
    _, p1, e1 = sv.padded.chain_speculative_sampling(c.q, c.ids, c.p, seed=1)
    assert passed is accepted and emitted_now is emitted
    np.testing.assert_array_equal(as_numpy(accepted), p1 + 2**40)
    np.testing.assert_array_equal(as_numpy(emitted), e1)


# --- On a GPU: CUDA tensors give the CPU's outputs, on their device ---

def cuda_rule(rule_of, a, torch):
    """rule_of with its per-draft array on the GPU."""
    return rule_of(torch.from_numpy(np.ascontiguousarray(a)).cuda())


@needs_gpu
@pytest.mark.parametrize("make_rule, name", RULES, ids=[n for _, n in RULES])
@pytest.mark.parametrize("one_hot", [False, True], ids=["q", "one-hot"])
@pytest.mark.parametrize("logits", [False, True], ids=["probs", "logits"])
def test_cuda_tensors_give_the_cpus_outputs(rng, make_rule, name, one_hot, logits):
    import torch
    K, V = 5, 1000
    for B in (1, 23):
        c = Padded(rng, counts_for(rng, B, K), K, V, one_hot=one_hot, logits=logits)
        seeds = rng.integers(0, 2**63, B, dtype=np.uint64)
        expected = sv.padded.verify(make_rule(c.scores.reshape(-1)), c.ids, c.p, c.q, c.counts, params=c.params,
                                    seed=4, offset=1, sequence_seeds=seeds)

        def gpu(a):
            return None if a is None else torch.from_numpy(a).cuda()
        got = sv.padded.verify(cuda_rule(make_rule, c.scores.reshape(-1), torch), gpu(c.ids), gpu(c.p), gpu(c.q),
                               gpu(c.counts), params=c.params, seed=4, offset=1, sequence_seeds=gpu(seeds))
        assert all(t.is_cuda for t in got)
        np.testing.assert_array_equal(got[0].cpu().numpy(), expected[0])
        np.testing.assert_array_equal(got[1].cpu().numpy(), expected[1])


@needs_gpu
def test_cuda_errors_are_the_cpus(rng):
    import torch
    c = Padded(rng, [2, 1, 2], 2, 8)
    ids, p, q = (torch.from_numpy(a).cuda() for a in (c.ids, c.p, c.q))
    message = re.escape("sequence 1: num_draft_tokens = 3 must be in [0, 2] (its draft slots)")
    with pytest.raises(sv.InvalidInput, match=message):
        sv.padded.verify(sv.Standard(), ids, p, q, torch.tensor([2, 3, 0], dtype=torch.int32, device="cuda"))
    with pytest.raises(sv.InvalidInput, match="num_draft_tokens is on the CPU, but draft_offsets is on CUDA device 0"):
        sv.padded.verify(sv.Standard(), ids, p, q, torch.from_numpy(c.counts))
    with pytest.raises(sv.InvalidInput, match=message):  # logits: the same check on the device
        sv.padded.verify(sv.Standard(), ids, p, q, torch.tensor([2, 3, 0], dtype=torch.int32, device="cuda"),
                         params=sv.sampling_params(3))


@needs_gpu
def test_cuda_flashinfer_outputs_are_the_cpus(rng):
    import torch
    c = Padded(rng, [4] * 9, 4, 300)
    expected = sv.padded.chain_speculative_sampling(c.q, c.ids, c.p, seed=7, offset=2)
    got = sv.padded.chain_speculative_sampling(*(torch.from_numpy(a).cuda() for a in (c.q, c.ids, c.p)), seed=7, offset=2)
    for x, y in zip(got, expected):
        assert x.is_cuda
        np.testing.assert_array_equal(x.cpu().numpy(), y)
