"""specverify: speculative-decoding verification rules over NumPy arrays and PyTorch tensors.

p is the target distribution, q the draft distribution. Arrays are viewed in place, never copied:
an array of the wrong dtype, device, shape or layout raises (TypeError for a wrong dtype or a
non-array, InvalidInput for the rest). See docs/api.md "Python", docs/python.md and the README.

Every batch may hold CUDA tensors instead (every array of a call on one device, but a logits
batch's sampling parameters, which stay on the host; the module built where nvcc was found,
`cuda_built`): verify runs the CUDA backend on `stream=` (default: PyTorch's current stream), and
with synchronize=False returns None at once and leaves the findings to check(out).

    batch = sv.ChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_probs=p, draft_probs=q)
    out = sv.ChainOutput(tokens=np.empty((B, K + 1), np.int32), num_accepted=np.empty(B, np.int32))
    stats = sv.verify(sv.Standard(), batch, sv.Randomness(seed=1, offset=step), out)

Logits batches take rows of float32, float16 (NumPy or torch) or bfloat16 (torch), one dtype per
batch, read in place in that dtype (verify emits what float32 rows of the same values give), and
each sequence's sampling parameters as a NumPy array of SamplingParams.dtype,
viewed in place like every other array; sampling_params() builds one. Their penalties and logit bias
read optional per-sequence lists, ragged like the drafts: history_offsets int32 [B+1] with
history_tokens and history_counts, bias_offsets int32 [B+1] with bias_tokens and bias_values
(float32); sample() takes one float32 row (its C++ counterpart reads floats) and that row's
history_tokens, history_counts, bias_tokens and bias_values.
"""
import numpy as np

from specverify._core import (
    Block,
    ChainBatch,
    ChainOutput,
    Coupled,
    Divergence,
    Drafted,
    Ears,
    Fsd,
    Greedy,
    InvalidInput,
    LogitsChainBatch,
    LogitsTreeBatch,
    Randomness,
    ReducibleFsd,
    SamplingParams,
    SpecDecPP,
    Sprinter,
    Standard,
    Traversal,
    TreeBatch,
    TreeOutput,
    VerifyStats,
    VocabShard,
    check,
    cuda_built,
    kNoToken,
    sample,
    verify,
)
from specverify import ops, padded

__version__ = "0.1.0"


def _register_operators():
    """torch.ops.specverify.* (specverify/ops.py) where torch is installed."""
    import importlib.util
    if importlib.util.find_spec("torch") is not None:
        import torch
        ops.register(torch)


_register_operators()


def _fitting(name, value, dtype):
    """`value` (a scalar or one per sequence) as `dtype`, refused where that would change it: an
    integer field takes integers within its range, a float field real numbers within float32's
    (rounding to the nearest float32 is the only change allowed; a finite value it would make
    infinite, or a nonzero one it would make 0, is refused)."""
    given = np.asarray(value)
    integer = np.issubdtype(dtype, np.integer)
    if given.dtype.kind not in ("iu" if integer else "iuf"):
        raise TypeError(f"specverify: sampling_params {name} must be {'an integer' if integer else 'a real number'}"
                        f" (or one per sequence), got {given.dtype} {value!r}")
    if integer:
        info = np.iinfo(dtype)
        bad = (given < info.min) | (given > info.max)
        rounded = None
    else:
        with np.errstate(over="ignore", under="ignore"):
            rounded = given.astype(dtype)
        bad = np.isfinite(given) & (~np.isfinite(rounded) | ((rounded == 0) & (given != 0)))
    if np.any(bad):
        first = np.flatnonzero(bad)[0]
        why = "" if integer else f" (it would round to {'0' if rounded.ravel()[first] == 0 else 'inf'})"
        raise InvalidInput(f"specverify: sampling_params {name} = {given.ravel()[first]} does not fit in "
                           f"{np.dtype(dtype).name}{why}")
    return given.astype(dtype)


def sampling_params(batch_size_or_params, *, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                    repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0):
    """Per-sequence sampling parameters as a NumPy array of SamplingParams.dtype, the layout the
    logits batches view in place (their target_params and draft_params).

    sampling_params(B, temperature=0.7, top_k=50): B sequences; each field a scalar or B values.
    sampling_params([SamplingParams(...), ...]): one entry per SamplingParams object.
    The array is the caller's: writing a field later changes what the next verify reads.
    """
    if isinstance(batch_size_or_params, (int, np.integer)):
        params = np.empty(int(batch_size_or_params), SamplingParams.dtype)
        params["temperature"] = _fitting("temperature", temperature, np.float32)
        params["top_k"] = _fitting("top_k", top_k, np.int32)
        params["top_p"] = _fitting("top_p", top_p, np.float32)
        params["min_p"] = _fitting("min_p", min_p, np.float32)
        params["repetition_penalty"] = _fitting("repetition_penalty", repetition_penalty, np.float32)
        params["presence_penalty"] = _fitting("presence_penalty", presence_penalty, np.float32)
        params["frequency_penalty"] = _fitting("frequency_penalty", frequency_penalty, np.float32)
        return params
    given = list(batch_size_or_params)
    for p in given:
        if not isinstance(p, SamplingParams):
            raise TypeError(f"specverify: sampling_params takes a batch size or SamplingParams objects, got {type(p).__name__}")
    return np.array([(p.temperature, p.top_k, p.top_p, p.min_p, p.repetition_penalty, p.presence_penalty,
                      p.frequency_penalty) for p in given], SamplingParams.dtype)


__all__ = [
    "Block",
    "ChainBatch",
    "ChainOutput",
    "Coupled",
    "Divergence",
    "Drafted",
    "Ears",
    "Fsd",
    "Greedy",
    "InvalidInput",
    "LogitsChainBatch",
    "LogitsTreeBatch",
    "Randomness",
    "ReducibleFsd",
    "SamplingParams",
    "SpecDecPP",
    "Sprinter",
    "Standard",
    "Traversal",
    "TreeBatch",
    "TreeOutput",
    "VerifyStats",
    "VocabShard",
    "kNoToken",
    "ops",
    "padded",
    "sample",
    "sampling_params",
    "verify",
]
