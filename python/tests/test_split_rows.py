"""A small batch's rows split over the row team (README "A small batch on every core"): at B = 1
and 2 with V = 65536, max_threads 2 and 0 split each row over threads, and every token, count and
logprob bit is one thread's."""
import numpy as np
import pytest
import specverify as sv

V, K = 65536, 3


@pytest.mark.parametrize("params", [dict(temperature=0.8), dict(temperature=1.0, min_p=0.05),
                                    dict(temperature=0.8, top_k=50, top_p=0.9)],
                         ids=["temperature", "min_p", "top_k_top_p"])
@pytest.mark.parametrize("B", [1, 2])
def test_split_rows_give_one_threads_bits(params, B):
    rng = np.random.default_rng(5 + B)
    target = rng.normal(scale=2.5, size=(B, K + 1, V)).astype(np.float32)
    draft = (0.7 * target[:, :K] + rng.normal(size=(B, K, V))).astype(np.float32)
    batch = sv.LogitsChainBatch(draft_offsets=(np.arange(B + 1) * K).astype(np.int32),
                                draft_tokens=draft.argmax(axis=2).reshape(-1).astype(np.int32),
                                target_logits=target.reshape(-1, V), draft_logits=draft.reshape(-1, V),
                                target_params=sv.sampling_params(B, **params))

    def run(threads, step):
        out = sv.ChainOutput(tokens=np.empty((B, K + 1), np.int32), num_accepted=np.empty(B, np.int32),
                             logprobs=np.zeros((B, K + 1), np.float32))  # padding slots stay as given
        stats = sv.verify(sv.Standard(), batch, sv.Randomness(4, step), out, max_threads=threads)
        return out, stats

    accepted = set()
    for step in range(8):
        one, one_stats = run(1, step)
        accepted.update(one.num_accepted.tolist())
        for threads in (2, 0):
            other, stats = run(threads, step)
            np.testing.assert_array_equal(other.tokens, one.tokens)
            np.testing.assert_array_equal(other.num_accepted, one.num_accepted)
            assert other.logprobs.tobytes() == one.logprobs.tobytes()
            assert stats.accepted == one_stats.accepted
    assert len(accepted) > 1  # both rejections (a residual draw) and acceptances are compared
