"""Padded chain batches for the tests of sv.padded and the torch operators: the same rows in the
padded shapes and in the ragged API's packed layout."""
import numpy as np
import specverify as sv

from conftest import normalised, to


class Padded:
    """B padded chains of K slots over V tokens: p [B, K+1, V] and q [B, K, V] (probabilities, or
    logits with params), drafts [B, K] with -1 past each count, and NaN in every row past it (rows
    that must not be read)."""

    def __init__(self, rng, counts, K, V, one_hot=False, logits=False):
        self.counts = np.asarray(counts, np.int32)
        self.B, self.K, self.V = len(self.counts), K, V
        B = self.B
        if logits:
            self.p = (rng.standard_normal((B, K + 1, V)) * 3).astype(np.float32)
            self.q = None if one_hot else (self.p[:, :K] + rng.standard_normal((B, K, V))).astype(np.float32)
            self.params = sv.sampling_params(B, temperature=rng.choice([0.0, 0.8, 1.0], B),
                                             top_k=rng.choice([0, 5], B), top_p=rng.choice([1.0, 0.9], B))
            weights = np.exp(self.p[:, :K] - self.p[:, :K].max(axis=2, keepdims=True))
        else:
            # Peaked p and q near p, so that every rule accepts some drafts and rejects others.
            p = normalised(rng.gamma(0.3, size=(B * (K + 1), V)) ** 3)
            self.p = p.reshape(B, K + 1, V)
            self.q = None if one_hot else normalised(self.p[:, :K].reshape(-1, V) + rng.gamma(0.3, size=(B * K, V)) * 0.2
                                                     ).reshape(B, K, V)
            self.params = None
            weights = self.p[:, :K] if self.q is None else self.q
        w = np.asarray(weights, np.float64).reshape(-1, V) + 1e-12
        self.ids = np.array([rng.choice(V, p=r / r.sum()) for r in w], np.int32).reshape(B, K)
        self.scores = rng.random((B, K), dtype=np.float32)
        self.ids[np.arange(K) >= self.counts[:, None]] = -1
        for b, k in enumerate(self.counts):
            self.p[b, k + 1:] = np.nan
            if self.q is not None:
                self.q[b, k:] = np.nan

    def ragged(self, rule_of, seed, offset, seeds):
        """The ragged API on the same rows (copied into its packed layout)."""
        keep = [slice(0, int(k)) for k in self.counts]
        offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int32)
        tokens = np.concatenate([self.ids[b, s] for b, s in enumerate(keep)] + [np.zeros(0, np.int32)])
        p = np.concatenate([self.p[b, : s.stop + 1] for b, s in enumerate(keep)])
        q = None if self.q is None else np.concatenate([self.q[b, s] for b, s in enumerate(keep)] +
                                                       [np.zeros((0, self.V), np.float32)])
        scores = np.concatenate([self.scores[b, s] for b, s in enumerate(keep)] + [np.zeros(0, np.float32)])
        if self.params is None:
            batch = sv.ChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_probs=p, draft_probs=q)
        else:
            batch = sv.LogitsChainBatch(draft_offsets=offsets, draft_tokens=tokens, target_logits=p, draft_logits=q,
                                        target_params=self.params)
        out = sv.ChainOutput(tokens=np.full((self.B, self.K + 1), 777, np.int32),
                             num_accepted=np.full(self.B, 777, np.int32))
        sv.verify(rule_of(scores), batch, sv.Randomness(seed=seed, offset=offset, sequence_seeds=seeds), out)
        return out.tokens, out.num_accepted

    def padded(self, module, rule_of, seed, offset, seeds, counts=True):
        def arg(a):
            return None if a is None else to(module, a)
        return sv.padded.verify(rule_of(self.scores.reshape(-1)), arg(self.ids), arg(self.p), arg(self.q),
                                arg(self.counts) if counts else None, params=self.params, seed=seed, offset=offset,
                                sequence_seeds=seeds)


def counts_for(rng, B, K):
    """Random counts in [0, K], with 0 and K among them where B allows."""
    counts = rng.integers(0, K + 1, B)
    counts[: min(B, 2)] = [K, 0][: min(B, 2)]
    return rng.permutation(counts)
