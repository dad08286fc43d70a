"""Zero-copy for the logits and tree batches: their row arrays (and the sampling parameters) are
read in place, strided rows included; nothing the size of a row is allocated from Python; the
batch holds its arrays."""
import gc
import weakref

import numpy as np
import pytest
import specverify as sv

from test_zero_copy import traced_peak

V = 1 << 20  # 4 MB rows: any copy of one shows


def test_no_row_sized_allocation():
    B, K = 2, 2
    wide = np.zeros((B * (K + 1), V + 64), np.float32)
    logits = wide[:, :V]  # strided rows
    params = sv.sampling_params(B, top_k=50)
    offsets = (np.arange(B + 1) * K).astype(np.int32)
    tokens = np.zeros(B * K, np.int32)
    out_tokens, accepted = np.empty((B, K + 1), np.int32), np.empty(B, np.int32)
    logprobs = np.empty((B, K + 1), np.float32)
    p = np.full((B * (K + 1), V), 1.0 / V, np.float32)

    def run():
        batch = sv.LogitsChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_logits=logits,
                                    draft_logits=logits[: B * K], target_params=params)
        sv.verify(sv.Standard(), batch, sv.Randomness(1), sv.ChainOutput(tokens=out_tokens, num_accepted=accepted,
                                                                          logprobs=logprobs), max_threads=1)
        tree = sv.TreeBatch(node_offsets=offsets, parents=np.array([-1, 0, -1, -1], np.int32), draft_tokens=tokens,
                            target_probs=p, draft_probs=p)
        sv.verify(sv.Standard(), tree, sv.Randomness(1), sv.TreeOutput(tokens=out_tokens, num_accepted=accepted),
                  max_threads=1)

    assert traced_peak(run) < 4 * V // 16


def test_rows_and_params_read_in_place(module):
    """Writes to the caller's logits, parameters and bitmask after construction change the next
    verify's tokens: the batch holds views, not copies."""
    conv = (lambda a: a) if module is np else module.from_numpy
    B, W = 4, 64
    wide = np.random.default_rng(1).normal(size=(2 * B, W + 8)).astype(np.float32)
    logits = conv(wide)[:, :W]
    params = sv.sampling_params(B, temperature=0.0)
    allowed = np.full((2 * B, 2), 0xFFFFFFFF, np.uint32)
    batch = sv.LogitsChainBatch(draft_offsets=conv((np.arange(B + 1)).astype(np.int32)),
                                draft_tokens=conv(np.full(B, 5, np.int32)), target_logits=logits,
                                target_params=params, allowed_tokens=allowed if module is np else conv(allowed.view(np.int32)))
    assert batch.target_logits is logits and batch.target_params is params and batch.target_stride == W + 8

    def emitted():
        out = sv.ChainOutput(tokens=np.empty((B, 2), np.int32), num_accepted=np.empty(B, np.int32))
        sv.verify(sv.Standard(), batch, sv.Randomness(3), out)
        return out.tokens[np.arange(B), out.num_accepted]

    logits[:, 17] = 100.0  # greedy: token 17 everywhere
    assert np.all(emitted() == 17)
    allowed[:, 0] &= ~np.uint32(1 << 17)  # the bitmask now removes it
    assert np.all(emitted() != 17)
    allowed[:, 0] |= np.uint32(1 << 17)
    params["top_k"] = 2
    params["temperature"] = 1e-3  # nearly greedy among the top two: still 17
    assert np.all(emitted() == 17)


def test_tree_batch_keeps_arrays_alive():
    p = np.full((3, 8), 1 / 8, np.float32)
    alive = weakref.ref(p)
    batch = sv.TreeBatch(node_offsets=np.array([0, 2], np.int32), parents=np.array([-1, 0], np.int32),
                         draft_tokens=np.array([1, 2], np.int32), target_probs=p, drafted=sv.Drafted.deterministic)
    del p
    gc.collect()
    assert alive() is not None
    out = sv.TreeOutput(tokens=np.empty((1, 3), np.int32), num_accepted=np.empty(1, np.int32))
    sv.verify(sv.Greedy(), batch, sv.Randomness(1), out)
    assert out.tokens[0, 0] == 0  # argmax of a flat row: the lowest index
    del batch
    gc.collect()
    assert alive() is None
