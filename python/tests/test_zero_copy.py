"""Zero-copy: verify reads the caller's memory in place (strided rows included), allocates
nothing the size of a row, and keeps the arrays alive exactly as long as the objects holding them."""
import gc
import tracemalloc
import weakref

import numpy as np
import pytest
import specverify as sv

from conftest import Chains

V = 1 << 20  # 4 MB rows: any copy of one shows


def big_batch_arrays():
    B, K = 4, 2
    offsets = (np.arange(B + 1) * K).astype(np.int32)
    wide = np.zeros((B * (K + 1), V + 64), np.float32)  # rows strided within a wider buffer
    p = wide[:, :V]
    p[:, :] = 1.0 / V
    q = np.full((B * K, V), 1.0 / V, np.float32)
    tokens = np.arange(B * K, dtype=np.int32)
    return offsets, tokens, p, q


def traced_peak(fn):
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_no_row_sized_allocation():
    offsets, tokens, p, q = big_batch_arrays()
    assert not p.flags.c_contiguous
    tokens_out = np.empty((4, 3), np.int32)
    accepted = np.empty(4, np.int32)

    def run():
        batch = sv.ChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_probs=p, draft_probs=q)
        out = sv.ChainOutput(tokens=tokens_out, num_accepted=accepted)
        sv.verify(sv.Ears(beta=0.1), batch, sv.Randomness(1), out, max_threads=1)

    assert traced_peak(run) < 4 * V // 16
    # Control: the measurement sees NumPy copying two strided rows.
    assert traced_peak(lambda: np.ascontiguousarray(p[:2])) >= 2 * 4 * V


def test_strided_rows_read_in_place(rng, module):
    """Same tokens from a strided view and from a contiguous copy, and writes to the caller's
    array after construction are seen by verify (it holds a view, not a copy)."""
    c = Chains(rng.integers(0, 5, size=32), 64, rng)
    results = []
    for pad in (0, 9):
        out = c.output(sv, module)
        sv.verify(sv.Standard(), c.batch(sv, module, pad=pad), sv.Randomness(2, 3), out)
        results.append(np.asarray(out.tokens).copy())
    np.testing.assert_array_equal(results[0], results[1])

    conv = (lambda a: a) if module is np else module.from_numpy
    wide = np.zeros((c.N + c.B, 100), np.float32)
    p = conv(wide)[:, : c.V]
    batch = sv.ChainBatch(draft_offsets=conv(c.offsets), draft_tokens=conv(c.tokens), target_probs=p)
    assert batch.target_probs is p and batch.target_stride == 100
    p[:, 17] = 1.0  # written after the batch was made: Greedy must see token 17 as argmax
    out = c.output(sv, module)
    sv.verify(sv.Greedy(), batch, sv.Randomness(1), out)
    tokens = np.asarray(out.tokens)
    for b in range(c.B):
        assert tokens[b, np.asarray(out.num_accepted)[b]] == 17


def test_outputs_written_in_place(rng, module):
    c = Chains([3, 1], 16, rng)
    out = c.output(sv, module)
    tokens = out.tokens
    sv.verify(sv.Standard(), c.batch(sv, module), sv.Randomness(1), out)
    assert out.tokens is tokens and np.all(np.asarray(tokens) != 777)


def test_batch_keeps_arrays_alive(rng):
    c = Chains([2, 2], 16, rng)
    p = c.p.copy()
    alive = weakref.ref(p)
    batch = sv.ChainBatch(draft_offsets=c.offsets.copy(), draft_tokens=c.tokens.copy(), target_probs=p)
    del p
    gc.collect()
    assert alive() is not None  # the batch holds it
    out = c.output(sv)
    sv.verify(sv.Greedy(), batch, sv.Randomness(1), out)
    np.testing.assert_array_equal(out.tokens[:, -1][out.num_accepted == 2], c.p[[2, 5]].argmax(axis=1)[out.num_accepted == 2])
    del batch
    gc.collect()
    assert alive() is None  # and lets it go


def test_torch_tensor_kept_alive(rng):
    torch = pytest.importorskip("torch")
    c = Chains([2, 2], 16, rng)
    batch = sv.ChainBatch(draft_offsets=torch.from_numpy(c.offsets.copy()), draft_tokens=torch.from_numpy(c.tokens),
                          target_probs=torch.tensor(c.p))  # temporaries: only the batch holds them
    gc.collect()
    torch.zeros(10**6)  # reuse freed memory, if the tensors had been freed
    out = c.output(sv)
    sv.verify(sv.Greedy(), batch, sv.Randomness(1), out)
    argmax = c.p.argmax(axis=1)
    for b in range(2):
        n = out.num_accepted[b]
        assert out.tokens[b, n] == argmax[3 * b + n]
