"""A careless or hostile caller (issue 20): arrays resized or rewritten after construction or during
a call, outputs over inputs, parameters that do not fit, torch views whose memory holds other
values, and errors whose messages must say what is wrong in one line."""
import ctypes
import re
import threading

import numpy as np
import pytest
import specverify as sv

from conftest import Chains
from sharded_cases import CASES, bounds, run
from dlpack_structs import DLDataType, DLDevice, DLManagedTensor, DLTensor, capsule


@pytest.fixture
def chains(rng):
    return Chains([2, 0, 3], 8, rng)


def one_hot_rows(n, V, hot):
    rows = np.zeros((n, V), np.float32)
    rows[:, hot] = 1
    return rows


# ---- Arrays resized after the batch was built: viewed again at every call.

def test_numpy_resized_after_construction_is_viewed_again(chains):
    p = chains.p.copy()
    batch = sv.ChainBatch(draft_offsets=chains.offsets, draft_tokens=chains.tokens, target_probs=p)
    p.resize((p.shape[0] * 64, p.shape[1]), refcheck=False)  # moves the data: the old memory is freed
    with pytest.raises(sv.InvalidInput, match=r"target_probs has shape \(512, 8\), but it needs N \+ B = 5 \+ 3 rows"):
        sv.verify(sv.Greedy(), batch, sv.Randomness(1), chains.output(sv))


def test_torch_resized_after_construction_reads_the_new_memory(chains):
    torch = pytest.importorskip("torch")
    p = torch.tensor(chains.p)  # storage torch owns (and may resize)
    batch = sv.ChainBatch(draft_offsets=chains.offsets, draft_tokens=chains.tokens, target_probs=p)
    shape = tuple(p.shape)
    p.resize_(shape[0] * 1024, shape[1])  # new storage; the old one is freed
    with pytest.raises(sv.InvalidInput, match="target_probs has shape"):
        sv.verify(sv.Greedy(), batch, sv.Randomness(1), chains.output(sv))
    p.resize_(*shape)  # the shape it had, in the new storage
    p.copy_(torch.from_numpy(one_hot_rows(shape[0], shape[1], 5)))
    out = chains.output(sv)
    sv.verify(sv.Greedy(), batch, sv.Randomness(1), out)
    for b, k in enumerate(chains.lengths):  # argmax is token 5 everywhere: each draft 5 accepted, else 5 emitted
        n = out.num_accepted[b]
        assert out.tokens[b, n] == 5
        assert np.all(out.tokens[b, :n] == 5)


def test_rule_arrays_are_viewed_again(chains):
    scores = np.zeros(chains.N, np.float32)
    rule = sv.Sprinter(eta=0.5, verifier_scores=scores)
    scores.resize(chains.N + 3, refcheck=False)
    with pytest.raises(sv.InvalidInput, match=r"Sprinter.verifier_scores has shape \(8,\)"):
        sv.verify(rule, chains.batch(sv), sv.Randomness(1), chains.output(sv))


# ---- Inputs rewritten by another thread while verify runs without the GIL.

def test_draft_tokens_rewritten_during_verify_change_the_result_never_crash():
    """The rule is that inputs do not change during a call; breaking it may change the result or
    raise InvalidInput (for a value the call's copy caught), never read out of bounds. A divergence
    at every position keeps each call busy for milliseconds after its checks."""
    B, K, V = 512, 4, 4096
    rng = np.random.default_rng(7)
    p = rng.random((B * (K + 1), V), dtype=np.float32)
    p /= p.sum(axis=1, keepdims=True)
    q = np.ascontiguousarray(p[np.arange(B * (K + 1)).reshape(B, K + 1)[:, :K].ravel()])
    offsets = (np.arange(B + 1) * K).astype(np.int32)
    good_tokens = rng.integers(0, V, B * K).astype(np.int32)
    good_parents = np.tile(np.arange(-1, K - 1, dtype=np.int32), B)
    tokens, parents = good_tokens.copy(), good_parents.copy()
    chain = sv.ChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_probs=p, draft_probs=q)
    tree = sv.TreeBatch(node_offsets=offsets, parents=parents, draft_tokens=tokens, target_probs=p, draft_probs=p)
    rule = sv.Fsd(divergence=sv.Divergence.js, threshold=1.0)  # JS <= ln 2: every draft accepted
    stop = threading.Event()

    def rewrite():
        wild = [np.int32(2**30), np.int32(-(2**31))]
        i = 0
        while not stop.is_set():
            tokens[:] = wild[i % 2]
            parents[:] = 2**30
            offsets[1:] = 2**30
            for _ in range(20):  # stay wrong a while
                tokens[:] = wild[i % 2]
            tokens[:] = good_tokens
            parents[:] = good_parents
            offsets[:] = np.arange(B + 1) * K
            i += 1

    writer = threading.Thread(target=rewrite)
    writer.start()
    calls = 40
    outcomes = {"ok": 0, "refused": 0}
    try:
        for i in range(calls):
            out = (sv.ChainOutput if i % 2 else sv.TreeOutput)(tokens=np.empty((B, K + 1), np.int32),
                                                               num_accepted=np.empty(B, np.int32))
            try:
                sv.verify(rule, chain if i % 2 else tree, sv.Randomness(i), out, max_threads=2)
                outcomes["ok"] += 1
                assert np.all((out.tokens >= -1) & (out.tokens < V))
            except sv.InvalidInput:
                outcomes["refused"] += 1
    finally:
        stop.set()
        writer.join()
    assert outcomes["ok"] + outcomes["refused"] == calls


# ---- Outputs sharing memory with inputs or with each other.

def test_outputs_over_inputs_or_each_other_are_refused(chains):
    c = chains
    shape = (c.B, c.K + 1)
    cells = c.B * (c.K + 1)
    tokens_buffer = np.zeros(cells + c.N, np.int32)
    tokens_buffer[:c.N] = c.tokens
    draft_tokens = tokens_buffer[:c.N]
    batch = sv.ChainBatch(draft_offsets=c.offsets, draft_tokens=draft_tokens, target_probs=c.p, draft_probs=c.q)
    cases = [
        (sv.ChainOutput(tokens=tokens_buffer[:cells].reshape(shape), num_accepted=np.zeros(c.B, np.int32)),
         "tokens overlaps draft_tokens in memory"),
        (sv.ChainOutput(tokens=np.zeros(shape, np.int32), num_accepted=c.offsets[:c.B]),
         "num_accepted overlaps draft_offsets in memory"),
        (sv.ChainOutput(tokens=np.zeros(shape, np.int32), num_accepted=np.zeros(c.B, np.int32),
                        logprobs=c.p.reshape(-1)[:cells].reshape(shape)),
         "logprobs overlaps target_probs in memory"),
    ]
    both = np.zeros(cells + c.B, np.int32)
    cases.append((sv.ChainOutput(tokens=both[:cells].reshape(shape), num_accepted=both[cells - 1:cells - 1 + c.B]),
                  "tokens and num_accepted overlap in memory"))
    offsets_before, tokens_before, p_before = c.offsets.copy(), draft_tokens.copy(), c.p.copy()
    for out, message in cases:
        with pytest.raises(sv.InvalidInput, match=message):
            sv.verify(sv.Standard(), batch, sv.Randomness(1), out)
    assert np.array_equal(c.offsets, offsets_before) and np.array_equal(draft_tokens, tokens_before)
    assert np.array_equal(c.p, p_before)
    tree_tokens = np.zeros(shape, np.int32)
    tree = sv.TreeBatch(node_offsets=c.offsets, parents=np.array([-1, 0, -1, 0, 1], np.int32),
                        draft_tokens=draft_tokens, target_probs=c.p, drafted=sv.Drafted.deterministic)
    out = sv.TreeOutput(tokens=tree_tokens, num_accepted=np.zeros(c.B, np.int32), accepted_nodes=tree_tokens)
    with pytest.raises(sv.InvalidInput, match="tokens and accepted_nodes overlap in memory"):
        sv.verify(sv.Standard(), tree, sv.Randomness(1), out)
    scores = np.zeros(c.N + cells, np.float32)
    rule = sv.Sprinter(eta=0.5, verifier_scores=scores[:c.N])
    out = sv.ChainOutput(tokens=np.zeros(shape, np.int32), num_accepted=np.zeros(c.B, np.int32),
                         logprobs=scores[c.N - 1:c.N - 1 + cells].reshape(shape))
    with pytest.raises(sv.InvalidInput, match="logprobs overlaps Sprinter.verifier_scores in memory"):
        sv.verify(rule, batch, sv.Randomness(1), out)
    # Inputs may share memory with each other (they are only read).
    sv.verify(sv.Standard(), sv.ChainBatch(draft_offsets=c.offsets, draft_tokens=draft_tokens, target_probs=c.p,
                                           draft_probs=c.p[:c.N]), sv.Randomness(1), c.output(sv))


# ---- Sampling parameters that do not fit their fields.

@pytest.mark.parametrize("field, value, error, message", [
    ("top_k", 2**32 + 5, sv.InvalidInput, "top_k = 4294967301 does not fit in int32"),
    ("top_k", 2**31, sv.InvalidInput, "top_k = 2147483648 does not fit in int32"),
    ("top_k", -(2**31) - 1, sv.InvalidInput, "does not fit in int32"),
    ("top_k", np.array([3, 2**40, 1]), sv.InvalidInput, "top_k = 1099511627776 does not fit in int32"),
    ("top_k", 2.7, TypeError, "top_k must be an integer"),
    ("top_k", np.array([1.0, 2.0, 3.0]), TypeError, "top_k must be an integer"),
    ("top_k", "5", TypeError, "top_k must be an integer"),
    ("temperature", 1e39, sv.InvalidInput, "temperature = 1e\\+39 does not fit in float32"),
    ("top_p", np.array([0.5, -1e300, 1.0]), sv.InvalidInput, "top_p = -1e\\+300 does not fit in float32"),
    ("min_p", "0.1", TypeError, "min_p must be a real number"),
    ("temperature", 1e40, sv.InvalidInput, r"temperature = 1e\+40 does not fit in float32 \(it would round to inf\)"),
    ("repetition_penalty", 1e-50, sv.InvalidInput,
     r"repetition_penalty = 1e-50 does not fit in float32 \(it would round to 0\)"),
    ("presence_penalty", np.array([1.0, -1e-46, 0.0]), sv.InvalidInput,
     r"presence_penalty = -1e-46 does not fit in float32 \(it would round to 0\)"),
])
def test_sampling_params_refuse_values_that_do_not_fit(field, value, error, message):
    with pytest.raises(error, match=message):
        sv.sampling_params(3, **{field: value})


def test_sampling_params_keep_values_that_fit():
    params = sv.sampling_params(3, temperature=np.float64(0.7), top_k=np.array([1, 2**31 - 1, 0], np.int64),
                                top_p=float("inf"), min_p=0)
    assert list(params["top_k"]) == [1, 2**31 - 1, 0]
    assert params["temperature"][0] == np.float32(0.7)
    assert np.isinf(params["top_p"]).all()  # out of range, but representable: verify names it
    assert (params["min_p"] == 0).all()
    tiny = sv.sampling_params(1, repetition_penalty=1e-40)  # a float32 subnormal: rounded, not lost
    assert tiny["repetition_penalty"][0] == np.float32(1e-40) != 0


def set_field(obj, field, value):
    setattr(obj, field, value)
    return obj


# Every float32 parameter taken from a Python float, by constructor or by attribute: a finite value
# that float32 would make infinite or zero is refused, as sampling_params refuses it.
@pytest.mark.parametrize("make, message", [
    (lambda: sv.SamplingParams(temperature=1e40), "SamplingParams temperature = 1e+40"),
    (lambda: sv.SamplingParams(top_p=-1e39), "SamplingParams top_p = -1e+39"),
    (lambda: sv.SamplingParams(min_p=1e-300), "SamplingParams min_p = 1e-300"),
    (lambda: sv.SamplingParams(repetition_penalty=1e-50), "SamplingParams repetition_penalty = 1e-50"),
    (lambda: sv.SamplingParams(presence_penalty=3.5e38), "SamplingParams presence_penalty = 3.5e+38"),
    (lambda: sv.SamplingParams(frequency_penalty=-1e-46), "SamplingParams frequency_penalty = -1e-46"),
    (lambda: set_field(sv.SamplingParams(), "temperature", 1e40), "SamplingParams temperature = 1e+40"),
    (lambda: set_field(sv.SamplingParams(), "repetition_penalty", 1e-50), "SamplingParams repetition_penalty = 1e-50"),
    (lambda: sv.Ears(beta=1e39), "Ears beta = 1e+39"),
    (lambda: set_field(sv.Ears(), "beta", 1e-50), "Ears beta = 1e-50"),
    (lambda: sv.Fsd(threshold=1e-60), "Fsd threshold = 1e-60"),
    (lambda: set_field(sv.ReducibleFsd(), "threshold", 1e40), "ReducibleFsd threshold = 1e+40"),
    (lambda: sv.Sprinter(eta=1e300), "Sprinter eta = 1e+300"),
    (lambda: set_field(sv.Sprinter(), "eta", 1e-300), "Sprinter eta = 1e-300"),
    (lambda: sv.SpecDecPP(threshold=-1e-300), "SpecDecPP threshold = -1e-300"),
    (lambda: set_field(sv.SpecDecPP(), "threshold", 1e39), "SpecDecPP threshold = 1e+39"),
])
def test_float32_parameters_refuse_values_that_do_not_fit(make, message):
    rounds_to = "0" if "e-" in message else "inf"
    with pytest.raises(sv.InvalidInput) as error:
        make()
    assert str(error.value) == f"specverify: {message} does not fit in float32 (it would round to {rounds_to})"


def test_float32_parameters_keep_values_that_fit():
    p = sv.SamplingParams(temperature=0.7, top_k=3, top_p=float("inf"), min_p=float("nan"), repetition_penalty=1e-40,
                          presence_penalty=-0.0, frequency_penalty=3.4e38)
    assert p.temperature == np.float32(0.7) and p.top_k == 3
    assert np.isinf(p.top_p) and np.isnan(p.min_p)  # out of range, but representable: verify names them
    assert p.repetition_penalty == np.float32(1e-40) != 0  # a float32 subnormal: rounded, not lost
    assert p.presence_penalty == 0 and p.frequency_penalty == np.float32(3.4e38)
    p.temperature = 2
    assert p.temperature == 2.0
    assert sv.Ears(beta=0.1).beta == np.float32(0.1) and sv.Fsd(threshold=0).threshold == 0
    assert sv.SpecDecPP(threshold=float("inf")).threshold == float("inf")


# ---- torch views whose memory holds other values.

def test_negated_or_conjugated_torch_views_are_refused(chains):
    torch = pytest.importorskip("torch")
    kwargs = dict(draft_offsets=chains.offsets, draft_tokens=chains.tokens, target_probs=chains.p)
    kwargs["draft_probs"] = torch._neg_view(torch.from_numpy(-chains.q))
    with pytest.raises(sv.InvalidInput, match="draft_probs is a negated or conjugated view"):
        sv.ChainBatch(**kwargs)
    kwargs["draft_probs"] = kwargs["draft_probs"].resolve_neg()  # the values it shows, in memory
    sv.ChainBatch(**kwargs)
    kwargs["draft_probs"] = torch.ones(chains.q.shape, dtype=torch.complex64).conj()
    with pytest.raises(sv.InvalidInput, match="draft_probs is a negated or conjugated view"):
        sv.ChainBatch(**kwargs)


# ---- Messages: max_threads, grad, meta.

def test_max_threads_out_of_int32_is_named(chains):
    out = chains.output(sv)
    for n in (2**40, -(2**40), 2**100):
        with pytest.raises(sv.InvalidInput, match=f"max_threads = {n} does not fit in int32"):
            sv.verify(sv.Standard(), chains.batch(sv), sv.Randomness(1), out, max_threads=n)
    with pytest.raises(sv.InvalidInput, match="max_threads = -1 must be >= 0"):
        sv.verify(sv.Standard(), chains.batch(sv), sv.Randomness(1), out, max_threads=-1)
    assert np.all(out.tokens == 777)


def test_torch_errors_are_one_line(chains):
    torch = pytest.importorskip("torch")
    kwargs = dict(draft_offsets=chains.offsets, draft_tokens=chains.tokens)
    for target, message in [(torch.zeros(chains.p.shape, requires_grad=True), "requires grad"),
                            (torch.empty(chains.p.shape, device="meta"), "cannot tell its device")]:
        with pytest.raises(sv.InvalidInput, match=message) as error:
            sv.ChainBatch(target_probs=target, **kwargs)
        assert "\n" not in str(error.value), str(error.value)


# ---- A negative shape (a DLPack exporter may claim one) is named as such.

class ClaimsShape:
    """`a`'s memory and dtype on the CPU, exported through DLPack with another shape (and the given
    strides in elements, or none: compact row-major)."""

    def __init__(self, a, shape, strides=None):
        self.a = np.ascontiguousarray(a)
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = None if strides is None else (ctypes.c_int64 * len(strides))(*strides)
        code = {"i": 0, "u": 1, "f": 2}[self.a.dtype.kind]
        self.managed = DLManagedTensor(DLTensor(self.a.ctypes.data, DLDevice(1, 0), len(shape),
                                                DLDataType(code, self.a.itemsize * 8, 1), self.shape,
                                                self.strides, 0), None, None)

    def __dlpack__(self, stream=None):
        return capsule(self.managed)


@pytest.mark.parametrize("name, shape, strides, shown", [
    ("draft_tokens", (-5,), None, "(-5,)"),
    ("draft_tokens", (-5,), (1,), "(-5,)"),
    ("target_probs", (8, -8), None, "(8, -8)"),
    ("target_probs", (-8, 8), (8, 1), "(-8, 8)"),
])
def test_a_negative_shape_is_named(chains, name, shape, strides, shown):
    kwargs = dict(draft_offsets=chains.offsets, draft_tokens=chains.tokens, target_probs=chains.p)
    kwargs[name] = ClaimsShape(kwargs[name], shape, strides)
    with pytest.raises(sv.InvalidInput) as error:
        sv.ChainBatch(**kwargs)
    assert str(error.value) == f"specverify: {name} has a negative shape {shown} (every extent must be >= 0)"


# ---- all_gather's result: a 1-D uint8 array of ranks * len(send) bytes, read as it is.

def gather_message(result):
    """The error rank 0 of two gets when its all_gather returns result(both ranks' messages), and the
    length of the message it sent."""
    case = CASES["standard"]
    sent = []

    def all_gather(send):
        sent.append(send.size)
        return result(np.concatenate([send, send]))

    with pytest.raises((TypeError, ValueError)) as error:
        run(sv, case, 0, case["V"], 0, 2, all_gather)
    return error, sent[0]


@pytest.mark.parametrize("result, error, shown", [
    (lambda both: [int(b) + 256 for b in both], TypeError, "list"),  # wrapped to bytes, they would pass
    (lambda both: [float(b) for b in both], TypeError, "list"),
    (lambda both: both.astype(np.int64), TypeError, "numpy.ndarray of int64, shape ({2n},)"),
    (lambda both: both.astype(np.float32), TypeError, "numpy.ndarray of float32, shape ({2n},)"),
    (lambda both: both.astype(np.int8), TypeError, "numpy.ndarray of int8, shape ({2n},)"),
    (lambda both: both.tobytes().decode("latin-1"), TypeError, "str"),
    (lambda both: both.reshape(2, -1), sv.InvalidInput, "numpy.ndarray of uint8, shape (2, {n})"),
    (lambda both: np.zeros((2, 5000), np.uint8), sv.InvalidInput, "numpy.ndarray of uint8, shape (2, 5000)"),
    (lambda both: both[: both.size // 2], sv.InvalidInput, "numpy.ndarray of uint8, shape ({n},)"),
])
def test_a_gather_that_is_not_ranks_times_the_bytes_in_uint8_is_named_in_one_line(result, error, shown):
    raised, n = gather_message(result)
    assert raised.type is error, str(raised.value)
    shown = shown.format(n=n, **{"2n": 2 * n})
    assert str(raised.value).startswith(
        f"specverify: all_gather returned {shown}; it must return a 1-D uint8 array of batch.shard.ranks * "
        f"len(send) = 2 * {n} = {2 * n} bytes, every rank's message in rank order"), str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("wrap", ["bytes", "torch"])
def test_a_gather_of_uint8_bytes_in_another_container_is_read(wrap):
    """What the buffer protocol or DLPack shows as 1-D uint8 is read in place, as an array is."""
    if wrap == "torch":
        torch = pytest.importorskip("torch")
        convert = torch.from_numpy
    else:
        convert = np.ndarray.tobytes
    case = CASES["standard"]
    want = run(sv, case, 0, case["V"], 0, 1, None)
    ranks, cuts = 2, bounds(case["V"], 2)
    staged, barrier, got = [None] * ranks, threading.Barrier(ranks, timeout=60), [None] * ranks

    def rank_main(r):
        def all_gather(send):
            staged[r] = send.copy()
            barrier.wait()
            out = convert(np.concatenate(staged))
            barrier.wait()
            return out
        got[r] = run(sv, case, cuts[r], cuts[r + 1], r, ranks, all_gather)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for r in range(ranks):
        assert all(got[r][k].tobytes() == want[k].tobytes() for k in want), f"rank {r}"


def test_ranks_that_disagree_on_their_number_raise_the_same_type():
    """Rank 1 says there are three ranks where two gather: it gets two ranks' bytes for three, rank 0
    a header from a rank of three. Both are the caller's InvalidInput, not one of them another error."""
    case = CASES["standard"]
    cuts = bounds(case["V"], 2)
    staged, barrier, errors = [None, None], threading.Barrier(2, timeout=60), [None, None]

    def rank_main(r, ranks):
        def all_gather(send):
            staged[r] = send.copy()
            barrier.wait()
            out = np.concatenate(staged)
            barrier.wait()
            return out
        try:
            run(sv, case, cuts[r], cuts[r + 1], r, ranks, all_gather)
        except Exception as e:  # noqa: BLE001 - the type is what is checked
            errors[r] = e

    threads = [threading.Thread(target=rank_main, args=(0, 2)), threading.Thread(target=rank_main, args=(1, 3))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [type(e) for e in errors] == [sv.InvalidInput, sv.InvalidInput], [repr(e) for e in errors]
    assert "rank 1" in str(errors[0])  # the sharded verify's finding, in its words
    assert "batch.shard.ranks * len(send) = 3 *" in str(errors[1])
