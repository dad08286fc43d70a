"""Bad input from Python: the C++ library's InvalidInput messages, arrays of the wrong dtype,
device, shape or layout named by argument, and outputs untouched whatever fails."""
import numpy as np
import pytest
import specverify as sv

from conftest import Chains, as_numpy


@pytest.fixture
def chains(rng):
    return Chains([2, 0, 3], 8, rng)


def arrays(c):
    return dict(draft_offsets=c.offsets, draft_tokens=c.tokens, target_probs=c.p, draft_probs=c.q)


def assert_untouched(out):
    assert np.all(as_numpy(out.tokens) == 777) and np.all(as_numpy(out.num_accepted) == 777)


def test_invalid_input_is_a_value_error():
    assert issubclass(sv.InvalidInput, ValueError)


@pytest.mark.parametrize("corrupt, message", [
    (lambda c: c.tokens.__setitem__(3, 8),
     "specverify::verify: sequence 2, position 1: draft token 8 is outside [0, 8)"),
    (lambda c: c.offsets.__setitem__(1, 3), "specverify::verify: sequence 1: draft_offsets decrease (3 then 2)"),
    (lambda c: c.p.__setitem__((2, 4), np.nan),  # sequence 0's bonus row
     "specverify::verify: sequence 0, position 2: target row 2 holds nan at token 4 (probabilities must be finite and >= 0)"),
    (lambda c: c.q.__setitem__((2, 0), -0.5),
     "specverify::verify: sequence 2, position 0: draft row 2 holds -0.5 at token 0 (probabilities must be finite and >= 0)"),
])
def test_cpp_messages(chains, module, corrupt, message):
    c = chains
    c.p[:] = 1 / 8
    c.q[:] = 1 / 8  # q = p: every draft is accepted, so every row is read
    corrupt(c)
    out = c.output(sv, module)
    with pytest.raises(sv.InvalidInput) as error:
        sv.verify(sv.Standard(), c.batch(sv, module), sv.Randomness(1), out)
    assert str(error.value) == message
    assert_untouched(out)


@pytest.mark.parametrize("rule, message", [
    (sv.Ears(beta=-1), "rule parameter beta = -1 is out of range"),
    (sv.Fsd(threshold=float("nan")), "rule parameter threshold = nan is out of range"),
    (sv.Sprinter(eta=0.5), "rule parameter verifier_scores is null"),
    (sv.SpecDecPP(threshold=0.5), "rule parameter accept_probs is null"),
    (sv.Sprinter(eta=0.5, verifier_scores=np.array([0.1, 1.5, 0, 0, 0], np.float32)),
     "sequence 0, position 1: verifier score = 1.5 is out of range"),
])
def test_rule_parameters(chains, rule, message):
    out = chains.output(sv)
    with pytest.raises(sv.InvalidInput, match=message):
        sv.verify(rule, chains.batch(sv), sv.Randomness(1), out)
    assert_untouched(out)


def test_uniforms_out_of_range(chains):
    out = chains.output(sv)
    u = np.array([0.5, 1.0, 0, 0, 0], np.float32)
    with pytest.raises(sv.InvalidInput, match=r"sequence 0, position 1: accept uniform 1 is outside \[0, 1\)"):
        sv.verify(sv.Standard(), chains.batch(sv), sv.Randomness(accept_uniforms=u), out)
    with pytest.raises(sv.InvalidInput, match=r"sequence 2: sample uniform -0.5 is outside \[0, 1\)"):
        sv.verify(sv.Standard(), chains.batch(sv), sv.Randomness(sample_uniforms=np.array([0, 0, -0.5], np.float32)), out)
    assert_untouched(out)


@pytest.mark.parametrize("name, bad", [
    ("draft_offsets", lambda a: a.astype(np.int64)),
    ("draft_tokens", lambda a: a.astype(np.uint32)),
    ("target_probs", lambda a: a.astype(np.float64)),
    ("draft_probs", lambda a: a.astype(np.float16)),
    ("target_probs", lambda a: a.astype(">f4")),  # float32, but big-endian
])
def test_wrong_dtype_names_the_argument(chains, name, bad):
    kwargs = arrays(chains)
    kwargs[name] = bad(kwargs[name])
    with pytest.raises(TypeError, match=f"{name} must hold"):
        sv.ChainBatch(**kwargs)


def test_wrong_dtype_torch(chains):
    torch = pytest.importorskip("torch")
    kwargs = {k: torch.from_numpy(v) for k, v in arrays(chains).items()}
    kwargs["target_probs"] = kwargs["target_probs"].to(torch.bfloat16)
    with pytest.raises(TypeError, match="target_probs must hold float32, got torch.bfloat16"):
        sv.ChainBatch(**kwargs)
    with pytest.raises(TypeError, match="tokens must hold int32, got torch.int64"):
        sv.ChainOutput(tokens=torch.zeros(3, 4, dtype=torch.int64), num_accepted=torch.zeros(3, dtype=torch.int32))


def test_not_an_array(chains):
    kwargs = arrays(chains)
    kwargs["draft_tokens"] = chains.tokens.tolist()  # a list would need a copy
    with pytest.raises(TypeError, match=r"draft_tokens must be a NumPy array or a tensor \(buffer protocol or DLPack\), got list"):
        sv.ChainBatch(**kwargs)


class FakeRocmTensor:
    """What a ROCm tensor shows a DLPack consumer: its device comes first."""

    def __dlpack_device__(self):
        return (10, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("a device tensor must not be exported")


def test_wrong_device_names_the_argument(chains):
    kwargs = arrays(chains)
    kwargs["draft_probs"] = FakeRocmTensor()
    with pytest.raises(sv.InvalidInput, match=r"draft_probs must be on the CPU or a CUDA device, got DLPack device type 10"):
        sv.ChainBatch(**kwargs)


def test_meta_tensor(chains):
    torch = pytest.importorskip("torch")
    kwargs = arrays(chains)
    kwargs["target_probs"] = torch.empty(chains.p.shape, device="meta")
    with pytest.raises(sv.InvalidInput, match="target_probs: cannot tell its device"):
        sv.ChainBatch(**kwargs)


def test_cuda_tensor(chains):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    kwargs = {k: torch.from_numpy(v) for k, v in arrays(chains).items()}
    kwargs["target_probs"] = kwargs["target_probs"].cuda()
    out = sv.ChainOutput(tokens=np.zeros((chains.B, chains.K + 1), np.int32), num_accepted=np.zeros(chains.B, np.int32))
    with pytest.raises(sv.InvalidInput, match="target_probs is on CUDA device 0, but draft_offsets is on the CPU"):
        sv.verify(sv.Standard(), sv.ChainBatch(**kwargs), sv.Randomness(1), out)


@pytest.mark.parametrize("name, bad, message", [
    ("draft_offsets", lambda a: a.reshape(1, -1), r"draft_offsets must have 1 dimension, got shape \(1, 4\)"),
    ("target_probs", lambda a: a[:-1], r"target_probs has shape \(7, 8\), but it needs N \+ B = 5 \+ 3 rows"),
    ("target_probs", lambda a: a.ravel(), r"target_probs must have 2 dimensions, got shape \(64,\)"),
    ("draft_probs", lambda a: a[:, :7], r"draft_probs has shape \(5, 7\), but its rows must be as long as target_probs'"),
    ("draft_probs", lambda a: a[1:], r"draft_probs has shape \(4, 8\), but it needs N = 5 rows"),
    ("draft_offsets", lambda a: a[:0], "draft_offsets must hold B \\+ 1 >= 1 offsets"),
])
def test_wrong_shape_names_the_argument(chains, name, bad, message):
    kwargs = arrays(chains)
    kwargs[name] = bad(kwargs[name])
    with pytest.raises(sv.InvalidInput, match=message):
        sv.ChainBatch(**kwargs)


@pytest.mark.parametrize("name, bad, message", [
    ("target_probs", lambda a: np.asfortranarray(a), "target_probs: elements within a row must be contiguous"),
    ("draft_probs", lambda a: np.repeat(a, 2, axis=1)[:, ::2], "draft_probs: elements within a row must be contiguous"),
    ("draft_tokens", lambda a: np.repeat(a, 2)[::2], "draft_tokens must be contiguous"),
    ("target_probs", lambda a: a[::-1], "target_probs: negative strides"),
    ("target_probs", lambda a: np.lib.stride_tricks.as_strided(a, shape=a.shape, strides=(16, 4)),
     r"target_probs: rows overlap \(row stride 4 < 8 columns\)"),
    ("target_probs", lambda a: np.frombuffer(b"\0" + a.tobytes(), np.float32, offset=1).reshape(a.shape),
     "target_probs: its data is not aligned"),
])
def test_wrong_layout_names_the_argument(chains, name, bad, message):
    kwargs = arrays(chains)
    kwargs[name] = bad(kwargs[name])
    with pytest.raises(sv.InvalidInput, match=message):
        sv.ChainBatch(**kwargs)


def test_wrong_layout_torch(chains):
    torch = pytest.importorskip("torch")
    kwargs = {k: torch.from_numpy(v) for k, v in arrays(chains).items()}
    kwargs["target_probs"] = torch.from_numpy(np.ascontiguousarray(chains.p.T)).t()
    with pytest.raises(sv.InvalidInput, match="target_probs: elements within a row must be contiguous"):
        sv.ChainBatch(**kwargs)
    grad = torch.zeros(chains.p.shape, requires_grad=True)
    kwargs["target_probs"] = grad
    with pytest.raises(sv.InvalidInput, match="target_probs: cannot be viewed through DLPack"):
        sv.ChainBatch(**kwargs)


def test_bad_outputs(chains):
    with pytest.raises(sv.InvalidInput, match="tokens is read-only"):
        sv.ChainOutput(tokens=np.broadcast_to(np.zeros(4, np.int32), (3, 4)), num_accepted=np.zeros(3, np.int32))
    with pytest.raises(sv.InvalidInput, match=r"tokens: rows must be contiguous and adjacent \(row stride 8 != row width 4\)"):
        sv.ChainOutput(tokens=np.zeros((3, 8), np.int32)[:, :4], num_accepted=np.zeros(3, np.int32))
    with pytest.raises(sv.InvalidInput, match=r"num_accepted has shape \(2,\), but tokens has 3 rows"):
        sv.ChainOutput(tokens=np.zeros((3, 4), np.int32), num_accepted=np.zeros(2, np.int32))
    out = sv.ChainOutput(tokens=np.full((2, 4), 777, np.int32), num_accepted=np.full(2, 777, np.int32))
    with pytest.raises(sv.InvalidInput, match=r"tokens has shape \(2, 4\), but the batch has B = 3 sequences"):
        sv.verify(sv.Standard(), chains.batch(sv), sv.Randomness(1), out)
    assert_untouched(out)
    out = sv.ChainOutput(tokens=np.full((3, 3), 777, np.int32), num_accepted=np.full(3, 777, np.int32))
    with pytest.raises(sv.InvalidInput, match="sequence 2: row_width = 3 must be at least its chain \\+ 1 = 4"):
        sv.verify(sv.Standard(), chains.batch(sv), sv.Randomness(1), out)
    assert_untouched(out)


@pytest.mark.parametrize("make, message", [
    (lambda c: sv.Randomness(1, sequence_seeds=np.zeros(2, np.uint64)),
     r"sequence_seeds has shape \(2,\), but the batch has B = 3 sequences"),
    (lambda c: sv.Randomness(1, accept_uniforms=np.zeros(4, np.float32)),
     r"accept_uniforms has shape \(4,\), but it needs one uniform per draft token \(5\)"),
    (lambda c: sv.Randomness(1, sample_uniforms=np.zeros(4, np.float32)),
     r"sample_uniforms has shape \(4,\), but the batch has B = 3 sequences"),
])
def test_randomness_shapes(chains, make, message):
    out = chains.output(sv)
    with pytest.raises(sv.InvalidInput, match=message):
        sv.verify(sv.Standard(), chains.batch(sv), make(chains), out)
    assert_untouched(out)


def test_randomness_dtypes():
    with pytest.raises(TypeError, match=r"sequence_seeds must hold uint64 \(or int64\), got int32"):
        sv.Randomness(1, sequence_seeds=np.zeros(3, np.int32))
    with pytest.raises(TypeError, match="accept_uniforms must hold float32, got float64"):
        sv.Randomness(1, accept_uniforms=np.zeros(3))
    with pytest.raises(TypeError):
        sv.Randomness(seed=-1)


def test_rule_arrays(chains):
    out = chains.output(sv)
    rule = sv.Sprinter(eta=0.5, verifier_scores=np.zeros(4, np.float32))
    with pytest.raises(sv.InvalidInput, match=r"Sprinter.verifier_scores has shape \(4,\), but it needs one score per draft token \(5\)"):
        sv.verify(rule, chains.batch(sv), sv.Randomness(1), out)
    rule = sv.SpecDecPP(accept_probs=np.zeros(6, np.float32), inner=sv.Greedy())
    with pytest.raises(sv.InvalidInput, match=r"SpecDecPP.accept_probs has shape \(6,\)"):
        sv.verify(rule, chains.batch(sv), sv.Randomness(1), out)
    with pytest.raises(TypeError, match="SpecDecPP.accept_probs must hold float32"):
        sv.SpecDecPP(accept_probs=np.zeros(5))
    with pytest.raises(TypeError, match="SpecDecPP.inner must be one of"):
        sv.SpecDecPP(accept_probs=np.zeros(5, np.float32), inner=sv.SpecDecPP())
    with pytest.raises(TypeError, match="rule must be one of"):
        sv.verify("Standard", chains.batch(sv), sv.Randomness(1), out)
    with pytest.raises(sv.InvalidInput, match="max_threads = -1 must be >= 0"):
        sv.verify(sv.Standard(), chains.batch(sv), sv.Randomness(1), out, max_threads=-1)
    assert_untouched(out)


def test_offsets_rewritten_after_construction(chains):
    """draft_offsets is read at every call: a total that no longer matches draft_tokens is caught."""
    batch = chains.batch(sv)
    chains.offsets[3] = 6
    out = chains.output(sv)
    with pytest.raises(sv.InvalidInput, match="draft_offsets\\[B\\] = 6 but draft_tokens holds 5 tokens"):
        sv.verify(sv.Standard(), batch, sv.Randomness(1), out)
    assert_untouched(out)
