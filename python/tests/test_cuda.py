"""verify over arrays on a CUDA device (docs/api.md "CUDA" and "Python").

Where a GPU and PyTorch with CUDA are at hand, every rule the CUDA backend takes verifies chains and
trees of CUDA tensors to the CPU's tokens, logprobs and statistics, on the current or a given
stream, synchronised or checked later. Everywhere, arrays on different devices are refused by name,
and so are CUDA arrays where the module has no CUDA backend or the machine no GPU; for that the tests
build DLPack capsules that claim a CUDA device (their memory is never read).
"""
import ctypes

import numpy as np
import pytest

import specverify as sv
from conftest import Chains, gpu_available, needs_gpu
from sharded_cases import CASES, batch_of
from dlpack_structs import DLDataType, DLDevice, DLManagedTensor, DLTensor, capsule

kDLCPU, kDLCUDA = 1, 2


# --- DLPack capsules that claim a CUDA device, for the checks made before any memory is read ---

class ClaimsCuda:
    """`a`'s shape and dtype, exported through DLPack as if it were on CUDA device `device`."""

    def __init__(self, a, device=0):
        self.a, self.device = np.ascontiguousarray(a), device
        self.shape = (ctypes.c_int64 * self.a.ndim)(*self.a.shape)
        self.strides = (ctypes.c_int64 * self.a.ndim)(*(s // self.a.itemsize for s in self.a.strides))
        code = {"i": 0, "u": 1, "f": 2}[self.a.dtype.kind]
        self.managed = DLManagedTensor(DLTensor(self.a.ctypes.data, DLDevice(kDLCUDA, device), self.a.ndim,
                                                DLDataType(code, self.a.itemsize * 8, 1), self.shape, self.strides, 0),
                                       None, None)

    def __dlpack_device__(self):
        return (kDLCUDA, self.device)

    def __dlpack__(self, stream=None):
        return capsule(self.managed)


def small_chains():
    return Chains([2, 0, 3], 16, np.random.default_rng(5))


def test_module_says_whether_it_has_cuda():
    assert isinstance(sv.cuda_built, bool)


def test_capsules_claiming_cuda_are_viewed():
    """The fake capsule passes every check that reads no memory: it is viewed as a CUDA array."""
    c = small_chains()
    batch = sv.ChainBatch(draft_offsets=ClaimsCuda(c.offsets), draft_tokens=ClaimsCuda(c.tokens),
                          target_probs=ClaimsCuda(c.p), draft_probs=ClaimsCuda(c.q))
    assert batch.batch_size == c.B


@pytest.mark.parametrize("cuda_argument", ["draft_tokens", "target_probs", "draft_probs", "tokens", "accept_uniforms"])
def test_mixed_devices_name_the_argument(cuda_argument):
    c = small_chains()
    arrays = dict(draft_offsets=c.offsets, draft_tokens=c.tokens, target_probs=c.p, draft_probs=c.q)
    outputs = dict(tokens=np.full((c.B, c.K + 1), 7, np.int32), num_accepted=np.full(c.B, 7, np.int32))
    uniforms = np.full(c.N, 0.5, np.float32)
    if cuda_argument in arrays:
        arrays[cuda_argument] = ClaimsCuda(arrays[cuda_argument])
    elif cuda_argument in outputs:
        outputs[cuda_argument] = ClaimsCuda(outputs[cuda_argument])
    else:
        uniforms = ClaimsCuda(uniforms)
    out = sv.ChainOutput(**outputs)
    with pytest.raises(sv.InvalidInput, match=f"{cuda_argument} is on CUDA device 0, but draft_offsets is on the CPU"):
        sv.verify(sv.Standard(), sv.ChainBatch(**arrays), sv.Randomness(1, accept_uniforms=uniforms), out)
    if cuda_argument not in outputs:
        assert (outputs["tokens"] == 7).all() and (outputs["num_accepted"] == 7).all()


def test_two_cuda_devices_are_refused():
    c = small_chains()
    batch = sv.ChainBatch(draft_offsets=ClaimsCuda(c.offsets), draft_tokens=ClaimsCuda(c.tokens),
                          target_probs=ClaimsCuda(c.p, device=1))
    out = sv.ChainOutput(tokens=ClaimsCuda(np.zeros((c.B, c.K + 1), np.int32)), num_accepted=ClaimsCuda(np.zeros(c.B, np.int32)))
    with pytest.raises(sv.InvalidInput, match="target_probs is on CUDA device 1, but draft_offsets is on CUDA device 0"):
        sv.verify(sv.Standard(), batch, sv.Randomness(1), out)


@pytest.mark.skipif(gpu_available(), reason="a GPU would read the capsules' host memory")
def expect_no_device_or_backend(batch, out):
    """`batch` reached the CUDA path, which says what it lacks (a GPU, or the backend)."""
    if sv.cuda_built:
        with pytest.raises(RuntimeError, match="no CUDA device is usable"):
            sv.verify(sv.Standard(), batch, sv.Randomness(1), out)
    else:
        with pytest.raises(sv.InvalidInput, match="built without CUDA"):
            sv.verify(sv.Standard(), batch, sv.Randomness(1), out)


def test_cuda_arrays_without_a_gpu_or_backend_say_so():
    c = small_chains()
    batch = sv.ChainBatch(draft_offsets=ClaimsCuda(c.offsets), draft_tokens=ClaimsCuda(c.tokens),
                          target_probs=ClaimsCuda(c.p))
    out = sv.ChainOutput(tokens=ClaimsCuda(np.zeros((c.B, c.K + 1), np.int32)), num_accepted=ClaimsCuda(np.zeros(c.B, np.int32)))
    expect_no_device_or_backend(batch, out)


def test_host_only_calls_refuse_cuda_arrays():
    with pytest.raises(sv.InvalidInput, match=r"logits is on CUDA device 0, but sample\(\) takes CPU arrays"):
        sv.sample(ClaimsCuda(np.zeros(8, np.float32)))
    with pytest.raises(sv.InvalidInput, match=r"history_tokens is on CUDA device 0, but sample\(\) takes CPU arrays"):
        sv.sample(np.zeros(8, np.float32), history_tokens=ClaimsCuda(np.array([1], np.int32)),
                  history_counts=np.array([1], np.int32))
    c = small_chains()
    shard = sv.VocabShard(rank=0, ranks=2, vocab_start=0, local_vocab_size=c.V)
    batch = sv.ChainBatch(draft_offsets=ClaimsCuda(c.offsets), draft_tokens=ClaimsCuda(c.tokens),
                          target_probs=ClaimsCuda(c.p), shard=shard, vocab_size=2 * c.V)
    out = sv.ChainOutput(tokens=ClaimsCuda(np.zeros((c.B, c.K + 1), np.int32)), num_accepted=ClaimsCuda(np.zeros(c.B, np.int32)))
    with pytest.raises(sv.InvalidInput, match=r"verify\(\.\.\., all_gather=fn\) takes CPU arrays"):
        sv.verify(sv.Standard(), batch, sv.Randomness(1), out, all_gather=lambda send: send)


def test_logits_batches_of_cuda_arrays_reach_the_cuda_backend():
    # Every array on the device but the sampling parameters, which the call copies there.
    layout = dict(draft_offsets=ClaimsCuda(np.array([0, 1], np.int32)), draft_tokens=ClaimsCuda(np.array([3], np.int32)),
                  target_logits=ClaimsCuda(np.zeros((2, 8), np.float32)), target_params=sv.sampling_params(1))
    out = sv.ChainOutput(tokens=ClaimsCuda(np.zeros((1, 2), np.int32)), num_accepted=ClaimsCuda(np.zeros(1, np.int32)))
    expect_no_device_or_backend(sv.LogitsChainBatch(**layout), out)
    mixed = sv.LogitsChainBatch(**layout, history_offsets=ClaimsCuda(np.array([0, 1], np.int32)),
                                history_tokens=np.array([2], np.int32), history_counts=ClaimsCuda(np.array([1], np.int32)))
    with pytest.raises(sv.InvalidInput, match="history_tokens is on the CPU, but draft_offsets is on CUDA device 0"):
        sv.verify(sv.Standard(), mixed, sv.Randomness(1), out)


def test_stream_is_for_cuda_arrays():
    c = small_chains()
    with pytest.raises(sv.InvalidInput, match="stream is for arrays on a CUDA device"):
        sv.verify(sv.Standard(), c.batch(sv), sv.Randomness(1), c.output(sv), stream=0)


def test_check_of_a_cpu_output_does_nothing():
    c = small_chains()
    out = c.output(sv)
    stats = sv.verify(sv.Standard(), c.batch(sv), sv.Randomness(1), out, synchronize=False)
    assert stats.drafted == c.N  # the CPU always completes before returning
    sv.check(out)


# --- On a GPU: the CPU's outputs, bit for bit ---

def chain_rules(N, rng):
    scores = rng.random(N, dtype=np.float32)
    accept = rng.random(N, dtype=np.float32)
    inner = [sv.Standard(), sv.Greedy(), sv.Ears(0.3), sv.Fsd(sv.Divergence.js, 0.3), sv.ReducibleFsd(sv.Divergence.tv, 0.1)]
    rules = inner + [sv.Sprinter(0.5, scores), sv.Block(), sv.Traversal()]
    rules += [sv.SpecDecPP(0.5, accept, r) for r in inner + [sv.Sprinter(0.5, scores)]]
    return rules, (scores, accept)


def on_cuda(rule, torch):
    """The rule with its per-draft arrays moved to the GPU."""
    if isinstance(rule, sv.Sprinter):
        return sv.Sprinter(rule.eta, torch.from_numpy(np.asarray(rule.verifier_scores)).cuda())
    if isinstance(rule, sv.SpecDecPP):
        return sv.SpecDecPP(rule.threshold, torch.from_numpy(np.asarray(rule.accept_probs)).cuda(), on_cuda(rule.inner, torch))
    return rule


def chain_outputs(c, module, device=None, logprobs=True):
    def make(a):
        t = module.from_numpy(a) if module is not np else a
        return t.to(device) if device else t
    tokens, accepted = np.full((c.B, c.K + 1), 777, np.int32), np.full(c.B, 777, np.int32)
    lp = np.full((c.B, c.K + 1), 777.0, np.float32) if logprobs else None
    return dict(tokens=make(tokens), num_accepted=make(accepted), logprobs=make(lp) if logprobs else None)


def same(cpu, gpu):
    for name, a in cpu.items():
        if a is not None:
            b = gpu[name].cpu().numpy()
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), name


@needs_gpu
def test_chains_give_the_cpus_outputs_for_every_rule():
    import torch
    rng = np.random.default_rng(11)
    c = Chains(rng.integers(0, 6, size=13), 1000, rng)
    rules, _ = chain_rules(c.N, rng)
    for step, rule in enumerate(rules):
        randomness = sv.Randomness(seed=3, offset=step)
        cpu_out = chain_outputs(c, np)
        cpu_stats = sv.verify(rule, c.batch(sv), randomness, sv.ChainOutput(**cpu_out))
        gpu_out = chain_outputs(c, torch, "cuda")
        gpu_batch = sv.ChainBatch(draft_offsets=torch.from_numpy(c.offsets).cuda(), draft_tokens=torch.from_numpy(c.tokens).cuda(),
                                  target_probs=torch.from_numpy(c.p).cuda(), draft_probs=torch.from_numpy(c.q).cuda())
        gpu_stats = sv.verify(on_cuda(rule, torch), gpu_batch, randomness, sv.ChainOutput(**gpu_out))
        same(cpu_out, gpu_out)
        assert gpu_stats == cpu_stats, rule


def random_trees(rng, B, V, drafted):
    sizes = rng.integers(0, 7, size=B)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32)
    parents = np.concatenate([[rng.integers(-1, i) for i in range(n)] for n in sizes] or [[]]).astype(np.int32)
    tokens = np.concatenate([rng.permutation(V)[:n] for n in sizes] or [[]]).astype(np.int32)
    rows = int(offsets[-1]) + B
    p = rng.gamma(0.3, size=(rows, V)) + 1e-12
    q = rng.gamma(0.3, size=(rows, V)) + 1e-12
    p, q = (p / p.sum(1, keepdims=True)).astype(np.float32), (q / q.sum(1, keepdims=True)).astype(np.float32)
    depth = 7
    return dict(node_offsets=offsets, parents=parents, draft_tokens=tokens, target_probs=p,
                draft_probs=q if drafted != sv.Drafted.deterministic else None, drafted=drafted), depth


@needs_gpu
@pytest.mark.parametrize("drafted", [sv.Drafted.sampled, sv.Drafted.sampled_without_replacement, sv.Drafted.deterministic])
def test_trees_give_the_cpus_outputs_for_every_rule(drafted):
    import torch
    rng = np.random.default_rng(12)
    arrays, depth = random_trees(rng, 9, 500, drafted)
    rules = [sv.Standard(), sv.Greedy(), sv.Ears(0.3), sv.Fsd(sv.Divergence.kl_target_draft, 0.5),
             sv.ReducibleFsd(sv.Divergence.tv, 0.1)]
    if drafted == sv.Drafted.sampled:
        rules.append(sv.Traversal())
    B = len(arrays["node_offsets"]) - 1
    for step, rule in enumerate(rules):
        def outputs(module, device=None):
            make = (lambda a: a) if module is np else (lambda a: torch.from_numpy(a).to(device))
            return dict(tokens=make(np.full((B, depth + 1), 777, np.int32)), num_accepted=make(np.full(B, 777, np.int32)),
                        accepted_nodes=make(np.full((B, depth + 1), 777, np.int32)),
                        logprobs=make(np.full((B, depth + 1), 777.0, np.float32)))
        randomness = sv.Randomness(seed=4, offset=step)
        cpu_out = outputs(np)
        cpu_stats = sv.verify(rule, sv.TreeBatch(**arrays), randomness, sv.TreeOutput(**cpu_out))
        gpu_arrays = {k: (torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v) for k, v in arrays.items()}
        gpu_out = outputs(torch, "cuda")
        gpu_stats = sv.verify(rule, sv.TreeBatch(**gpu_arrays), randomness, sv.TreeOutput(**gpu_out))
        same(cpu_out, gpu_out)
        assert gpu_stats == cpu_stats, rule


@needs_gpu
def test_stream_and_check_later():
    import torch
    rng = np.random.default_rng(13)
    c = Chains([4, 1, 5, 0], 300, rng)
    cpu_out = chain_outputs(c, np)
    sv.verify(sv.Standard(), c.batch(sv), sv.Randomness(9, 2), sv.ChainOutput(**cpu_out))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        batch = sv.ChainBatch(draft_offsets=torch.from_numpy(c.offsets).cuda(), draft_tokens=torch.from_numpy(c.tokens).cuda(),
                              target_probs=torch.from_numpy(c.p).cuda(), draft_probs=torch.from_numpy(c.q).cuda())
        gpu_out = chain_outputs(c, torch, "cuda")
        out = sv.ChainOutput(**gpu_out)
        assert sv.verify(sv.Standard(), batch, sv.Randomness(9, 2), out, synchronize=False) is None  # current stream
        sv.check(out)
    same(cpu_out, gpu_out)
    gpu_out = chain_outputs(c, torch, "cuda")
    out = sv.ChainOutput(**gpu_out)
    torch.cuda.synchronize()
    sv.verify(sv.Standard(), batch, sv.Randomness(9, 2), out, stream=stream, synchronize=False)
    sv.check(out)
    same(cpu_out, gpu_out)


@needs_gpu
@pytest.mark.parametrize("fault", ["total", "token", "nan"])
def test_bad_input_on_the_device_raises_as_the_cpu_and_writes_nothing(fault):
    import torch
    rng = np.random.default_rng(14)
    c = Chains([2, 3, 1], 64, rng)
    offsets, tokens, p = c.offsets.copy(), c.tokens.copy(), c.p.copy()
    if fault == "total":
        offsets[-1] += 1
        offsets[-2] += 1
    elif fault == "token":
        tokens[3] = 64
    else:
        p[0, 5] = np.nan  # the first row of sequence 0: always read
    cpu_out = chain_outputs(c, np)
    with pytest.raises(sv.InvalidInput) as cpu_error:
        sv.verify(sv.Standard(), sv.ChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_probs=p, draft_probs=c.q),
                  sv.Randomness(1), sv.ChainOutput(**cpu_out))
    batch = sv.ChainBatch(draft_offsets=torch.from_numpy(offsets).cuda(), draft_tokens=torch.from_numpy(tokens).cuda(),
                          target_probs=torch.from_numpy(p).cuda(), draft_probs=torch.from_numpy(c.q).cuda())
    for synchronize in (True, False):
        gpu_out = chain_outputs(c, torch, "cuda")
        out = sv.ChainOutput(**gpu_out)
        with pytest.raises(sv.InvalidInput) as gpu_error:
            sv.verify(sv.Standard(), batch, sv.Randomness(1), out, synchronize=synchronize)
            sv.check(out)
        assert str(gpu_error.value) == str(cpu_error.value)
        for a in gpu_out.values():
            assert (a.cpu().numpy() == 777).all()


@needs_gpu
def test_a_late_check_after_another_verify_says_so():
    import torch
    c = Chains([2, 2], 32, np.random.default_rng(15))
    batch = sv.ChainBatch(draft_offsets=torch.from_numpy(c.offsets).cuda(), draft_tokens=torch.from_numpy(c.tokens).cuda(),
                          target_probs=torch.from_numpy(c.p).cuda(), draft_probs=torch.from_numpy(c.q).cuda())
    cpu_out = chain_outputs(c, np)
    sv.verify(sv.Standard(), c.batch(sv), sv.Randomness(1), sv.ChainOutput(**cpu_out))
    first_out, second_out = chain_outputs(c, torch, "cuda"), chain_outputs(c, torch, "cuda")
    first, second = sv.ChainOutput(**first_out), sv.ChainOutput(**second_out)
    sv.verify(sv.Standard(), batch, sv.Randomness(1), first, synchronize=False)
    # Refused on the host before the workspace is touched: the first verify's check still holds.
    with pytest.raises(sv.InvalidInput, match="rule parameter beta = -1 is out of range"):
        sv.verify(sv.Ears(-1.0), batch, sv.Randomness(1), second, synchronize=False)
    sv.check(first)
    same(cpu_out, first_out)
    sv.verify(sv.Standard(), batch, sv.Randomness(1), first, synchronize=False)
    sv.verify(sv.Standard(), batch, sv.Randomness(1), second, synchronize=False)
    with pytest.raises(RuntimeError, match="another verify has run"):
        sv.check(first)
    sv.check(second)
    same(cpu_out, second_out)


@needs_gpu
@pytest.mark.parametrize("tree", [False, True])
def test_coupled_over_probability_rows_gives_the_cpus_outputs(tree):
    # The Gumbel race over p as given: log p + Gumbel with the shared log, the host's bits.
    import torch
    rng = np.random.default_rng(16)
    if tree:
        arrays, depth = random_trees(rng, 9, 500, sv.Drafted.sampled)
        B = len(arrays["node_offsets"]) - 1

        def run(place, positions):
            out = dict(tokens=place(np.full((B, depth + 1), 777, np.int32)),
                       num_accepted=place(np.full(B, 777, np.int32)),
                       accepted_nodes=place(np.full((B, depth + 1), 777, np.int32)),
                       logprobs=place(np.full((B, depth + 1), 777.0, np.float32)))
            batch = sv.TreeBatch(**{k: (place(v) if isinstance(v, np.ndarray) else v) for k, v in arrays.items()})
            return out, sv.verify(sv.Coupled(), batch, sv.Randomness(5, positions=positions), sv.TreeOutput(**out))
    else:
        c = Chains(rng.integers(0, 6, size=13), 1000, rng)
        B = c.B

        def run(place, positions):
            out = {k: place(v) for k, v in chain_outputs(c, np).items()}
            batch = sv.ChainBatch(draft_offsets=place(c.offsets), draft_tokens=place(c.tokens),
                                  target_probs=place(c.p), draft_probs=place(c.q))
            return out, sv.verify(sv.Coupled(), batch, sv.Randomness(5, positions=positions), sv.ChainOutput(**out))
    positions = rng.integers(0, 100000, size=B).astype(np.int64)
    cpu_out, cpu_stats = run(lambda a: a, positions)
    gpu_out, gpu_stats = run(lambda a: torch.from_numpy(a).cuda(), torch.from_numpy(positions).cuda())
    same(cpu_out, gpu_out)
    assert gpu_stats == cpu_stats


# --- On a GPU: batches of logits, every field, the CPU's outputs ---

LOGITS_CASES = [name for name, case in CASES.items() if case.get("logits")]


def case_outputs(case, place):
    B, K = case["B"], case["K"]
    out = dict(tokens=place(np.full((B, K + 1), 777, np.int32)), num_accepted=place(np.full(B, 777, np.int32)),
               logprobs=place(np.full((B, K + 1), 777.0, np.float32)))
    if case.get("tree"):
        out["accepted_nodes"] = place(np.full((B, K + 1), 777, np.int32))
    return out


def verify_case(case, rule, place):
    """`case` (sharded_cases.py) verified unsharded with its arrays put by `place`; its outputs
    (where `place` put them) and the statistics."""
    out = case_outputs(case, place)
    randomness = sv.Randomness(seed=99, offset=3, positions=place(np.arange(case["B"], dtype=np.int64) * 7))
    make = sv.TreeOutput if case.get("tree") else sv.ChainOutput
    stats = sv.verify(rule, batch_of(sv, case, place=place), randomness, make(**out))
    return out, stats


def to_gpu(a):
    import torch
    a = np.ascontiguousarray(a)
    if a.dtype == np.uint32:
        a = a.view(np.int32)  # torch has no uint32; a bitmask may be int32, the same bits
    return torch.from_numpy(a).cuda()


def rules_for(case, torch):
    """Every rule a case's shape takes over logits on CUDA (the per-draft arrays on `place`)."""
    N = len(case["tokens"])
    rng = np.random.default_rng(20)
    scores = rng.random(N, dtype=np.float32)
    inner = [sv.Standard(), sv.Greedy(), sv.Ears(0.3), sv.Fsd(sv.Divergence.js, 0.3),
             sv.ReducibleFsd(sv.Divergence.tv, 0.1), sv.Coupled()]
    rules = inner + [sv.Sprinter(0.5, scores)]
    if case.get("drafted", "sampled") == "sampled" and case.get("draft") is not None:
        rules.append(sv.Traversal())
    if not case.get("tree"):
        rules.append(sv.Block())
        rules += [sv.SpecDecPP(0.5, rng.random(N, dtype=np.float32), r) for r in inner + [sv.Sprinter(0.5, scores)]]
    return rules


@needs_gpu
@pytest.mark.parametrize("name", LOGITS_CASES)
def test_logits_batches_give_the_cpus_outputs_for_every_rule(name):
    import torch
    case = CASES[name]
    for rule in rules_for(case, torch):
        cpu_out, cpu_stats = verify_case(case, rule, lambda a: a)
        gpu_out, gpu_stats = verify_case(case, on_cuda(rule, torch), to_gpu)
        same(cpu_out, gpu_out)
        assert gpu_stats == cpu_stats, (name, rule)


@needs_gpu
def test_bfloat16_logits_give_the_cpus_outputs():
    import torch
    case = dict(CASES["logits_standard"])
    for key in ("target", "draft", "unconditional"):
        case[key] = torch.from_numpy(case[key]).to(torch.bfloat16)
    cpu_out, cpu_stats = verify_case(case, sv.Standard(), lambda a: a if isinstance(a, torch.Tensor) else a)
    gpu_out, gpu_stats = verify_case(case, sv.Standard(), lambda a: a.cuda() if isinstance(a, torch.Tensor) else to_gpu(a))
    same(cpu_out, gpu_out)
    assert gpu_stats == cpu_stats


def broken(case, fault):
    """`case` with one bound the CPU checks on its copies broken."""
    case = dict(case)
    if fault == "history_total":
        case["history_offsets"] = case["history_offsets"].copy()
        case["history_offsets"][-1] -= 1
    elif fault == "bias_total":
        case["bias_offsets"] = case["bias_offsets"].copy()
        case["bias_offsets"][-1] += 2
    elif fault == "guided_rows":
        case["first_row"] = case["first_row"].copy()
        case["first_row"][2] = len(case["unconditional"]) - 1
    else:
        case["offsets"] = case["offsets"].copy()
        case["offsets"][-1] += 1
    return case


@needs_gpu
@pytest.mark.parametrize("fault", ["offsets_total", "guided_rows", "history_total", "bias_total"])
def test_logits_bounds_are_checked_on_the_device_in_the_cpus_words(fault):
    import torch
    case = broken(CASES["logits_standard"], fault)
    with pytest.raises(sv.InvalidInput) as cpu_error:
        verify_case(case, sv.Standard(), lambda a: a)
    out = case_outputs(case, to_gpu)
    batch = batch_of(sv, case, place=to_gpu)
    with pytest.raises(sv.InvalidInput) as gpu_error:
        sv.verify(sv.Standard(), batch, sv.Randomness(99, 3), sv.ChainOutput(**out))
    assert str(gpu_error.value) == str(cpu_error.value)
    assert all((v.cpu().numpy() == 777).all() for v in out.values())
