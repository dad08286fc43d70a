"""Shared helpers: ragged chain batches, with rows that can be embedded in wider buffers."""
import numpy as np
import pytest


class Chains:
    """A ragged batch of draft chains: offsets, tokens, target rows p [N+B, V], draft rows q [N, V]."""

    def __init__(self, lengths, vocab, rng, one_hot=False, p=None, q=None, tokens=None):
        self.lengths = list(lengths)
        self.B = len(self.lengths)
        self.V = vocab
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int32)
        self.N = int(self.offsets[-1])
        self.K = max(self.lengths, default=0)
        self.p = p if p is not None else normalised(rng.gamma(0.3, size=(self.N + self.B, vocab)))
        if one_hot:
            self.q = None
        else:
            self.q = q if q is not None else normalised(rng.gamma(0.3, size=(self.N, vocab)))
        if tokens is None:
            rows = self.q if self.q is not None else self.p[self.draft_target_rows()]
            tokens = np.array([rng.choice(vocab, p=r / r.sum()) for r in rows.astype(np.float64)])
        self.tokens = np.asarray(tokens, dtype=np.int32)

    def draft_target_rows(self):
        """Target row of each draft position: offsets[b] + b + j."""
        return np.concatenate([np.arange(self.lengths[b]) + self.offsets[b] + b for b in range(self.B)]
                              ).astype(np.int64) if self.N else np.zeros(0, np.int64)

    def batch(self, sv, module=np, pad=0, **extra):
        """A ChainBatch over `module` arrays (numpy or torch); pad > 0 embeds the rows in wider ones."""
        def rows(a):
            if a is None:
                return None
            wide = np.full((a.shape[0], a.shape[1] + pad), np.nan, np.float32)
            wide[:, : a.shape[1]] = a
            view = wide[:, : a.shape[1]]
            return to(module, view)
        return sv.ChainBatch(draft_offsets=to(module, self.offsets), draft_tokens=to(module, self.tokens),
                             target_probs=rows(self.p), draft_probs=rows(self.q), **extra)

    def output(self, sv, module=np, fill=777):
        tokens = np.full((self.B, self.K + 1), fill, np.int32)
        accepted = np.full(self.B, fill, np.int32)
        return sv.ChainOutput(tokens=to(module, tokens), num_accepted=to(module, accepted))


def to(module, a):
    if module is np:
        return a
    return module.from_numpy(a)


def gpu_available():
    """Whether the module has its CUDA backend and PyTorch sees a GPU."""
    try:
        import torch
    except ImportError:
        return False
    import specverify as sv
    return sv.cuda_built and torch.cuda.is_available()


needs_gpu = pytest.mark.skipif(not gpu_available(), reason="no CUDA device with PyTorch (or module built without CUDA)")


def normalised(w):
    w = np.asarray(w, np.float64) + 1e-12
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def as_numpy(a):
    return a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else np.asarray(a)


def chi_square(counts, probs):
    counts = np.asarray(counts, np.float64)
    expected = counts.sum() * np.asarray(probs, np.float64)
    return float(((counts - expected) ** 2 / expected).sum())


def chi_square_bound(df):
    return df + 10.0 * np.sqrt(2.0 * df)


@pytest.fixture
def rng():
    return np.random.default_rng(20240601)


@pytest.fixture(params=["numpy", "torch"])
def module(request):
    if request.param == "numpy":
        return np
    return pytest.importorskip("torch")
