"""torch.ops.specverify.*: the operators give sv.padded's outputs bit for bit, their Meta
implementations the outputs' shapes and dtypes, offset_increment advances the offset, and bad input
raises the padded functions' errors (docs/api.md "Python, inside an engine's step")."""
import hashlib

import numpy as np
import pytest
import specverify as sv

from conftest import needs_gpu
from padded_cases import Padded, counts_for

torch = pytest.importorskip("torch")

RULES = sorted(sv.ops.RULES)


def digest(*tensors):
    """One hash of every output's shape, dtype and bytes."""
    h = hashlib.sha256()
    for t in tensors:
        a = t.cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        h.update(repr((a.shape, str(a.dtype))).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def word(value, shape=(1,), device="cpu"):
    """int64 tensor(s) holding the uint64 `value`'s bits, as the operators take seeds and offsets."""
    values = np.broadcast_to(np.asarray(value, np.uint64), shape)
    return torch.from_numpy(values.view(np.int64).copy()).to(device)


def params_tensors(c):
    """The four [B] sampling-parameter tensors of a logits case, or four None."""
    if c.params is None:
        return (None,) * 4
    return tuple(torch.from_numpy(np.ascontiguousarray(c.params[name])) for name, _ in sv.ops.SAMPLING_FIELDS)


def positions_for(c, rule):
    """Coupled's positions (each sequence's first draft at its own place), or None."""
    return torch.arange(c.B, dtype=torch.int64) * 7 + 100 if rule == "coupled" else None


def operator_call(c, rule, seed, offset, offset_increment=0, counts=True, device="cpu"):
    def arg(a):
        return None if a is None else torch.from_numpy(a).to(device)
    positions = positions_for(c, rule)
    return torch.ops.specverify.verify_padded(rule, arg(c.ids), arg(c.p), arg(c.q), arg(c.counts) if counts else None,
                                              *(None if t is None else t.to(device) for t in params_tensors(c)),
                                              seed, offset, offset_increment,
                                              None if positions is None else positions.to(device))


def padded_call(c, rule, seed, offset, seeds=None, counts=True):
    """sv.padded.verify on NumPy arrays: the padded function itself (tensors would go through the
    operator)."""
    positions = positions_for(c, rule)
    return sv.padded.verify(sv.ops.RULES[rule](), c.ids, c.p, c.q, c.counts if counts else None, params=c.params,
                            seed=seed, offset=offset, sequence_seeds=seeds,
                            positions=None if positions is None else positions.numpy())


def operators_run(call):
    """The names of the specverify operators `call` ran (torch's profiler records each dispatch)."""
    with torch.profiler.profile() as profile:
        call()
    return [e.name for e in profile.events() if e.name.startswith("specverify::")]


def test_the_operators_are_registered_with_their_schemas():
    assert sv.ops.registered()
    for name, schema in sv.ops.SCHEMAS.items():
        op = getattr(torch.ops.specverify, name).default
        assert str(op._schema) == f"specverify::{schema}"
    # offset is the one argument the operators write (torch.compile functionalises the write).
    arguments = {a.name: a for a in torch.ops.specverify.verify_padded.default._schema.arguments}
    assert arguments["offset"].alias_info.is_write and not arguments["seed"].alias_info


def outcome(call):
    """What a call gave: the digest of its outputs, or the type and message of what it raised."""
    try:
        return "returned", digest(*call())
    except (sv.InvalidInput, TypeError) as e:
        return "raised", type(e).__name__, str(e)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("logits", [False, True], ids=["probs", "logits"])
@pytest.mark.parametrize("one_hot", [False, True], ids=["q", "one-hot"])
def test_verify_padded_gives_the_padded_functions_bits(rng, rule, logits, one_hot):
    K, V = 5, 48
    returned = 0
    for B in (1, 3, 17):
        c = Padded(rng, counts_for(rng, B, K), K, V, one_hot=one_hot, logits=logits)
        seed, offset = int(rng.integers(0, 2**64, dtype=np.uint64)), int(rng.integers(0, 2**64, dtype=np.uint64))
        # With and without the counts: without them every sequence drafted K, and the rows past a
        # count hold NaN, so that the counts are seen to reach the verify.
        for counts in (True, False):
            expected = outcome(lambda: padded_call(c, rule, seed, offset, counts=counts))
            got = outcome(lambda: operator_call(c, rule, word(seed), word(offset), counts=counts))
            assert got == expected
            returned += expected[0] == "returned"
    if rule == "traversal" and one_hot:
        assert returned == 0  # Traversal needs draft rows: refused alike
    else:
        assert returned >= 3
    dtypes = [t.dtype for t in operator_call(c, "greedy", word(1), word(2))]
    assert dtypes == [torch.int32, torch.int32]


@pytest.mark.parametrize("rule", ["standard", "coupled", "traversal"])
def test_a_seed_per_sequence_gives_the_sequence_seeds_bits(rng, rule):
    K, V, B = 4, 32, 9
    c = Padded(rng, counts_for(rng, B, K), K, V)
    seeds = rng.integers(0, 2**64, B, dtype=np.uint64)
    expected = padded_call(c, rule, 0, 5, seeds=seeds)
    assert digest(*operator_call(c, rule, word(seeds, (B,)), word(5))) == digest(*expected)
    # Negative control: the batch's seed (seeds[0] for every sequence) gives other tokens.
    assert digest(*operator_call(c, rule, word(seeds[0]), word(5))) != digest(*expected)


def test_offset_increment_advances_the_offset_after_each_call(rng):
    K, V, B = 4, 64, 8
    c = Padded(rng, [K] * B, K, V)
    seed, offset = word(123), word(2**64 - 2)  # the offset wraps as the uint64 it holds
    calls = [digest(*operator_call(c, "standard", seed, offset, offset_increment=1)) for _ in range(3)]
    assert offset.item() == 1 and seed.item() == 123
    expected = [digest(*padded_call(c, "standard", 123, o)) for o in (2**64 - 2, 2**64 - 1, 0)]
    assert calls == expected
    assert len(set(calls)) == 3  # each call drew fresh uniforms
    operator_call(c, "standard", seed, offset)
    assert offset.item() == 1  # offset_increment defaults to 0


def test_coupled_needs_positions(rng):
    c = Padded(rng, [3, 3], 3, 16)
    with pytest.raises(sv.InvalidInput, match="positions is null"):
        torch.ops.specverify.verify_padded("coupled", torch.from_numpy(c.ids), torch.from_numpy(c.p),
                                           torch.from_numpy(c.q), None, None, None, None, None, word(1), word(0))
    first = operator_call(c, "coupled", word(1), word(0))
    # Coupled ignores the offset (its samples are keyed by seed and position): the same tokens.
    assert digest(*operator_call(c, "coupled", word(1), word(1))) == digest(*first)


def test_the_padded_functions_go_through_the_operators_for_tensors(rng):
    c = Padded(rng, [3, 1, 2], 3, 24, logits=True)
    t = {name: torch.from_numpy(getattr(c, name)) for name in ("ids", "p", "q", "counts")}
    seeds = rng.integers(0, 2**64, c.B, dtype=np.uint64)
    for rule in RULES:
        positions = positions_for(c, rule)
        call = lambda: sv.padded.verify(sv.ops.RULES[rule](), t["ids"], t["p"], t["q"], t["counts"],  # noqa: E731
                                        params=c.params, seed=3, offset=4, sequence_seeds=seeds, positions=positions)
        assert operators_run(call) == ["specverify::verify_padded"]
        assert digest(*call()) == digest(*padded_call(c, rule, 3, 4, seeds=seeds))
    # What the operator cannot express runs as it is: a rule with parameters, penalties, max_threads.
    args = (t["ids"], t["p"], t["q"], t["counts"])
    assert operators_run(lambda: sv.padded.verify(sv.Ears(beta=0.2), *args, params=c.params)) == []
    penalised = c.params.copy()
    penalised["repetition_penalty"] = 1.5
    assert operators_run(lambda: sv.padded.verify(sv.Standard(), *args, params=penalised)) == []
    assert operators_run(lambda: sv.padded.verify(sv.Standard(), *args, params=c.params, max_threads=1)) == []
    p = Padded(rng, [2, 2], 2, 16)
    assert operators_run(lambda: sv.padded.chain_speculative_sampling(
        torch.from_numpy(p.q), torch.from_numpy(p.ids), torch.from_numpy(p.p), seed=1)) == \
        ["specverify::chain_speculative_sampling"]


@pytest.mark.parametrize("module", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_acceptance_counts_add_the_sequences_that_kept_each_draft(rng, module, dtype):
    K, B = 4, 40
    c = Padded(rng, counts_for(rng, B, K), K, 32)
    counts = np.full(K, 5, dtype)
    arg = counts if module == "numpy" else torch.from_numpy(counts)
    kept = []
    for offset in range(3):
        if module == "numpy":
            _, accepted = sv.padded.verify(sv.Standard(), c.ids, c.p, c.q, c.counts, offset=offset,
                                           acceptance_counts=arg)
        else:
            _, accepted = operator_call_with_counts(c, offset, arg)
        kept.append(np.asarray(accepted))
    expected = 5 + sum((a[:, None] > np.arange(K)).sum(axis=0) for a in kept)
    np.testing.assert_array_equal(np.asarray(arg), expected)
    assert expected[0] > 5 + 3 and expected[-1] < expected[0]  # some kept, fewer at later positions


def operator_call_with_counts(c, offset, counts):
    return torch.ops.specverify.verify_padded("standard", torch.from_numpy(c.ids), torch.from_numpy(c.p),
                                              torch.from_numpy(c.q), torch.from_numpy(c.counts), None, None, None,
                                              None, word(1), word(offset), 0, None, counts)


def test_acceptance_counts_of_another_shape_dtype_or_place_are_refused_untouched(rng):
    c = Padded(rng, [3, 3], 3, 16)
    for counts, error, message in [(torch.zeros(3, dtype=torch.float32), TypeError, "must hold int32 or int64"),
                                   (torch.zeros(4, dtype=torch.int64), sv.InvalidInput, "needs one count per draft"),
                                   (np.zeros(3, np.int64), sv.InvalidInput, "acceptance_counts is on the host")]:
        before = np.array(counts).copy()
        with pytest.raises(error, match=message):
            sv.padded.verify(sv.Standard(), torch.from_numpy(c.ids), torch.from_numpy(c.p), torch.from_numpy(c.q),
                             acceptance_counts=counts)
        np.testing.assert_array_equal(np.array(counts), before)


def test_a_call_that_raises_leaves_the_offset():
    c = Padded(np.random.default_rng(3), [2, 2], 2, 16)
    c.ids[1, 0] = 16  # outside [0, V)
    offset = word(7)
    with pytest.raises(sv.InvalidInput) as from_operator:
        operator_call(c, "standard", word(1), offset, offset_increment=1)
    with pytest.raises(sv.InvalidInput) as from_padded:
        padded_call(c, "standard", 1, 7)
    assert str(from_operator.value) == str(from_padded.value)
    assert "sequence 1" in str(from_operator.value)
    assert offset.item() == 7


def test_meta_gives_shapes_and_dtypes_without_data():
    B, K, V = 6, 3, 1000

    def meta(shape, dtype=torch.float32):
        return torch.empty(shape, dtype=dtype, device="meta")
    ids, p, q = meta((B, K), torch.int32), meta((B, K + 1, V)), meta((B, K, V))
    seed, offset = meta((1,), torch.int64), meta((1,), torch.int64)
    tokens, accepted = torch.ops.specverify.verify_padded("block", ids, p, q, meta((B,), torch.int32),
                                                          meta((B,)), meta((B,), torch.int32), meta((B,)),
                                                          meta((B,)), seed, offset, 1)
    assert (tokens.device.type, tokens.shape, tokens.dtype) == ("meta", (B, K + 1), torch.int32)
    assert (accepted.device.type, accepted.shape, accepted.dtype) == ("meta", (B,), torch.int32)
    outputs = torch.ops.specverify.chain_speculative_sampling(q, ids, p, seed, offset)
    assert [(t.device.type, tuple(t.shape), t.dtype) for t in outputs] == \
        [("meta", (B, K + 1), torch.int32), ("meta", (B,), torch.int32), ("meta", (B,), torch.int32)]
    with pytest.raises(sv.InvalidInput, match="rule must be one of"):
        torch.ops.specverify.verify_padded("ears", ids, p, q, None, None, None, None, None, seed, offset)


def test_chain_speculative_sampling_gives_the_drop_ins_bits(rng):
    K, V, B = 5, 40, 12
    c = Padded(rng, [K] * B, K, V)
    ids64 = torch.from_numpy(c.ids.astype(np.int64))
    for seed in (0, 2**63 + 5):
        offset = word(3)
        got = torch.ops.specverify.chain_speculative_sampling(torch.from_numpy(c.q), ids64, torch.from_numpy(c.p),
                                                              word(seed), offset, True, 2)
        assert offset.item() == 5
        expected = sv.padded._chain_speculative_sampling(c.q, c.ids, c.p, seed, 3)  # NumPy: no operator
        assert digest(*got) == digest(*expected)
        # The drop-in with tensors goes through the operator, with the same bits as with arrays.
        through = sv.padded.chain_speculative_sampling(torch.from_numpy(c.q), ids64, torch.from_numpy(c.p),
                                                       seed=seed, offset=3)
        assert digest(*through) == digest(*expected)


@pytest.mark.parametrize("field", [name for name, _ in sv.ops.SAMPLING_FIELDS])
def test_sampling_parameters_come_together_in_their_dtypes(rng, field):
    c = Padded(rng, [3, 3], 3, 20, logits=True)
    given = dict(zip([name for name, _ in sv.ops.SAMPLING_FIELDS], params_tensors(c)))
    args = (torch.from_numpy(c.ids), torch.from_numpy(c.p), torch.from_numpy(c.q), None)

    def call(**change):
        values = {**given, **change}
        return torch.ops.specverify.verify_padded("standard", *args, *[values[n] for n, _ in sv.ops.SAMPLING_FIELDS],
                                                  word(1), word(0))
    with pytest.raises(sv.InvalidInput, match=f"{field} missing"):
        call(**{field: None})
    with pytest.raises(TypeError, match=f"{field} must hold"):
        call(**{field: given[field].to(torch.float64)})
    with pytest.raises(sv.InvalidInput, match=f"{field} has shape"):
        call(**{field: given[field][:1]})


def test_seeds_and_offsets_are_int64_tensors_of_their_sizes(rng):
    c = Padded(rng, [2, 2, 2], 2, 16)
    with pytest.raises(TypeError, match="seed must be an int64 tensor"):
        operator_call(c, "standard", word(1).to(torch.int32), word(0))
    with pytest.raises(sv.InvalidInput, match="seed must hold 1 or 3 values"):
        operator_call(c, "standard", word(1, (2,)), word(0))
    with pytest.raises(sv.InvalidInput, match="offset must hold 1 values"):
        operator_call(c, "standard", word(1), word(0, (3,)))


@pytest.mark.skipif(not hasattr(torch.library, "register_fake") and not hasattr(torch.library, "impl_abstract"),
                    reason="torch < 2.2: the Meta kernels are registered instead (tested above)")
def test_fake_tensors_trace_the_operators():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        ids = torch.zeros((2, 3), dtype=torch.int32)
        p, q = torch.zeros((2, 4, 10)), torch.zeros((2, 3, 10))
        tokens, accepted = torch.ops.specverify.verify_padded("standard", ids, p, q, None, None, None, None, None,
                                                              torch.zeros(1, dtype=torch.int64),
                                                              torch.zeros(1, dtype=torch.int64))
        assert tuple(tokens.shape) == (2, 4) and tuple(accepted.shape) == (2,)


@needs_gpu
def test_cuda_gives_the_cpu_bits(rng):
    c = Padded(rng, counts_for(rng, 8, 4), 4, 64, logits=True)
    offset = word(9, device="cuda")
    got = operator_call(c, "standard", word(4, device="cuda"), offset, offset_increment=1, device="cuda")
    assert all(t.device.type == "cuda" for t in got) and offset.item() == 10
    assert digest(*got) == digest(*operator_call(c, "standard", word(4), word(9)))


def test_the_engine_step_example_runs_and_repeats():
    import os
    import pathlib
    import re
    import subprocess
    import sys
    example = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python" / "engine_step.py"
    runs = [subprocess.run([sys.executable, str(example), "--device", "cpu", "--steps", "3"], capture_output=True,
                           text=True, env=os.environ, timeout=300) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr
    assert runs[0].stdout == runs[1].stdout  # the seed and offset tensors fix every step
    summary = re.search(r"(\d+) of (\d+) drafts kept, offset now (\d+)", runs[0].stdout)
    kept, drafted, offset = map(int, summary.groups())
    assert drafted == 3 * 4 * 4 and 0 < kept < drafted and offset == 3
    at_positions = [int(n) for n in re.search(r"kept at each draft position: \[(.*)\]", runs[0].stdout)[1].split(",")]
    assert sum(at_positions) == kept and at_positions == sorted(at_positions, reverse=True)
    sequences = re.findall(r"sequence \d+: \[(.*)\]", runs[0].stdout)
    # Each step commits the kept drafts and one more token: 1 + 3 steps' (kept_b + 1) tokens in all.
    assert sum(len(s.split(",")) for s in sequences) == 4 + kept + 3 * 4
