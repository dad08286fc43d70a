"""specverify: speculative-decoding verification rules over NumPy arrays and PyTorch CPU tensors.

p is the target distribution, q the draft distribution. Arrays are viewed in place, never copied:
an array of the wrong dtype, device, shape or layout raises (TypeError for a wrong dtype or a
non-array, InvalidInput for the rest). See API.md "Python" and the README.

    batch = sv.ChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_probs=p, draft_probs=q)
    out = sv.ChainOutput(tokens=np.empty((B, K + 1), np.int32), num_accepted=np.empty(B, np.int32))
    stats = sv.verify(sv.Standard(), batch, sv.Randomness(seed=1, offset=step), out)
"""
from specverify._core import (
    ChainBatch,
    ChainOutput,
    Divergence,
    Ears,
    Fsd,
    Greedy,
    InvalidInput,
    Randomness,
    ReducibleFsd,
    SpecDecPP,
    Sprinter,
    Standard,
    VerifyStats,
    kNoToken,
    verify,
)

__version__ = "0.1.0"

__all__ = [
    "ChainBatch",
    "ChainOutput",
    "Divergence",
    "Ears",
    "Fsd",
    "Greedy",
    "InvalidInput",
    "Randomness",
    "ReducibleFsd",
    "SpecDecPP",
    "Sprinter",
    "Standard",
    "VerifyStats",
    "kNoToken",
    "verify",
]
