"""Verification in the padded shapes engines already hold: draft_token_ids [B, K], target rows
[B, K+1, V], draft rows [B, K, V] (docs/api.md "Padded functions").

The rows are read in place, never copied: a sequence that drafted fewer than K tokens keeps its
rows where the padded tensor has them. The tokens are those the ragged API (sv.verify on a
ChainBatch or LogitsChainBatch holding the same rows) gives for the same seed and offset.
Probabilities and logits (params=) run where the tensors are, the CPU or a CUDA device (on
PyTorch's current stream, synchronised).

    tokens, num_accepted = sv.padded.verify(sv.Standard(), draft_token_ids, target_probs, draft_probs)
"""
import numpy as np

from specverify import _core


def _torch_module(*arrays):
    """torch where any of `arrays` is a torch tensor (the outputs are then tensors), else None."""
    for a in arrays:
        if type(a).__module__.split(".")[0] == "torch":
            import torch
            return torch
    return None


def _shape(name, a, ndim):
    """`a`'s shape, checked to have `ndim` dimensions (InvalidInput naming `name`)."""
    shape = getattr(a, "shape", None)
    if shape is None:
        raise TypeError(f"specverify: {name} must be a NumPy array or a CPU tensor, got {type(a).__name__}")
    if len(shape) != ndim:
        raise _core.InvalidInput(f"specverify: {name} must have {ndim} dimensions, got shape {tuple(shape)}")
    return tuple(int(n) for n in shape)


def _expect_dtype(name, a, torch, expected):
    """TypeError naming `name` unless `a` holds `expected` (a NumPy dtype name): never converted."""
    got = str(a.dtype)
    if (torch is not None and got == f"torch.{expected}") or got == expected:
        return
    raise TypeError(f"specverify: {name} must hold {expected}, got {got} (arrays are never converted or copied)")


def _on_cuda(a):
    device = getattr(a, "device", None)
    return getattr(device, "type", None) == "cuda"


def _rows(name, a, torch, rows, vocab):
    """The [B, n, V] tensor `a` as a [B n, V] view of the same memory, or InvalidInput where its
    rows are not evenly spaced (a view would then need a copy)."""
    if torch is not None and isinstance(a, torch.Tensor):
        try:
            return a.view(rows, vocab)
        except RuntimeError:
            pass
    else:
        flat = a.view()
        try:
            flat.shape = (rows, vocab)  # raises instead of copying
            return flat
        except AttributeError:
            pass
    raise _core.InvalidInput(f"specverify: {name}: its rows must be evenly spaced (stride(0) == "
                             f"shape[1] * stride(1)) to be read in place")


def verify(rule, draft_token_ids, target, draft=None, num_draft_tokens=None, *, params=None, seed=0, offset=0,
           sequence_seeds=None, positions=None, acceptance_counts=None, max_threads=0):
    """Verifies B padded draft chains with `rule`; returns new int32 arrays (tensors for tensor
    inputs) `tokens` [B, K+1] (accepted drafts, the extra token, then -1) and `num_accepted` [B].

    draft_token_ids int32 [B, K]; target float32 [B, K+1, V]: probabilities p, or logits when
    `params` (an array of SamplingParams.dtype, [B]) is given; draft float32 [B, K, V] likewise
    (q; logits share the target's parameters), or None for one-hot drafts; num_draft_tokens int32
    [B], each in [0, K] (default K): sequence b's drafts past it, and their rows, are not read.
    A rule's per-draft arrays (Sprinter.verifier_scores, SpecDecPP.accept_probs) are indexed like
    draft_token_ids.reshape(-1). Coupled needs positions (int64 [B]: the absolute position of
    each sequence's first draft), as Randomness does. acceptance_counts (int32 or int64 [K], where
    the rows are) gains, at each j, the number of sequences that kept draft j: engines' acceptance
    rates, counted where the rows are. Raises InvalidInput (or TypeError for a wrong dtype) naming the
    argument, like sv.verify.
    """
    from specverify import ops  # it builds on this module
    call = ops.operator_call(rule, draft_token_ids, target, draft, num_draft_tokens, params, seed, offset,
                             sequence_seeds, positions, acceptance_counts, max_threads)
    if call is not None:
        return call()
    return _verify(rule, draft_token_ids, target, draft, num_draft_tokens, params=params, seed=seed, offset=offset,
                   sequence_seeds=sequence_seeds, positions=positions, acceptance_counts=acceptance_counts,
                   max_threads=max_threads)


def _verify(rule, draft_token_ids, target, draft, num_draft_tokens, *, params, seed, offset, sequence_seeds,
            positions, acceptance_counts, max_threads):
    """verify, on the rows as they are (the operators' kernels call it too)."""
    torch = _torch_module(draft_token_ids, target, draft, num_draft_tokens)
    B, K = _shape("draft_token_ids", draft_token_ids, 2)
    _expect_dtype("draft_token_ids", draft_token_ids, torch, "int32")
    Bt, rows, V = _shape("target", target, 3)
    if (Bt, rows) != (B, K + 1):
        raise _core.InvalidInput(f"specverify: target has shape {(Bt, rows, V)}, but draft_token_ids {(B, K)} "
                                 f"needs [{B}, {K + 1}, V]")
    _expect_dtype("target", target, torch, "float32")
    if draft is not None:
        shape = _shape("draft", draft, 3)
        if shape != (B, K, V):
            raise _core.InvalidInput(f"specverify: draft has shape {shape}, but draft_token_ids {(B, K)} and target "
                                     f"need [{B}, {K}, {V}]")
        _expect_dtype("draft", draft, torch, "float32")
    if num_draft_tokens is not None:
        if _shape("num_draft_tokens", num_draft_tokens, 1) != (B,):
            raise _core.InvalidInput(f"specverify: num_draft_tokens has shape {tuple(num_draft_tokens.shape)}, "
                                     f"but it needs one count per sequence ({B})")
        _expect_dtype("num_draft_tokens", num_draft_tokens, torch, "int32")

    if acceptance_counts is not None:
        _expect_position_counts(acceptance_counts, torch, K, target)

    # Everything below is where target is; the library checks that every array is there too, and
    # checks each count against its sequence's K slots. The drafts past each count are not read.
    device = target.device if _on_cuda(target) else None
    tokens_in = draft_token_ids.reshape(-1)
    if device is not None:
        offsets = torch.arange(B + 1, dtype=torch.int32, device=device) * K
        counts = (torch.full((B,), K, dtype=torch.int32, device=device) if num_draft_tokens is None
                  else num_draft_tokens)
    else:
        offsets = np.arange(B + 1, dtype=np.int32) * K
        counts = np.full(B, K, np.int32) if num_draft_tokens is None else num_draft_tokens
    p = _rows("target", target, torch, B * (K + 1), V)
    q = None if draft is None else _rows("draft", draft, torch, B * K, V)
    if params is None:
        batch = _core.ChainBatch(draft_offsets=offsets, draft_tokens=tokens_in, target_probs=p, draft_probs=q)
    else:
        batch = _core.LogitsChainBatch(draft_offsets=offsets, draft_tokens=tokens_in, target_logits=p,
                                       draft_logits=q, target_params=params)
    if torch is not None:
        tokens = torch.empty((B, K + 1), dtype=torch.int32, device=device)
        num_accepted = torch.empty(B, dtype=torch.int32, device=device)
    else:
        tokens = np.empty((B, K + 1), np.int32)
        num_accepted = np.empty(B, np.int32)
    randomness = _core.Randomness(seed=seed, offset=offset, sequence_seeds=sequence_seeds, positions=positions)
    _core._verify_padded(rule, batch, counts, randomness,
                         _core.ChainOutput(tokens=tokens, num_accepted=num_accepted), max_threads=max_threads)
    if acceptance_counts is not None:
        if torch is not None:
            acceptance_counts += (num_accepted[:, None] > torch.arange(K, device=num_accepted.device)).sum(dim=0)
        else:
            acceptance_counts += (num_accepted[:, None] > np.arange(K)).sum(axis=0).astype(acceptance_counts.dtype)
    return tokens, num_accepted


def _expect_position_counts(counts, torch, K, target):
    """acceptance_counts: int32 or int64 [K] where the rows are (the counts are added in place)."""
    dtype = str(getattr(counts, "dtype", type(counts).__name__)).replace("torch.", "")
    if dtype not in ("int32", "int64"):
        raise TypeError(f"specverify: acceptance_counts must hold int32 or int64, got {dtype} "
                        f"(the counts are added to it in place)")
    if tuple(counts.shape) != (K,):
        raise _core.InvalidInput(f"specverify: acceptance_counts has shape {tuple(counts.shape)}, but it needs one "
                                 f"count per draft position ({K})")
    on_torch = torch is not None and isinstance(counts, torch.Tensor)
    where = counts.device if on_torch else None
    rows = target.device if torch is not None and isinstance(target, torch.Tensor) else None
    if (where is None) != (rows is None) or (where is not None and where != rows):
        host = "the host (NumPy)"
        raise _core.InvalidInput(f"specverify: acceptance_counts is on {where or host}, but the rows are on "
                                 f"{rows or host}")


def _integer(name, value):
    """A seed or offset given as an integer or a one-element integer array or tensor (FlashInfer
    takes both), as the uint64 Randomness holds. Anything else is refused: int() would truncate."""
    if hasattr(value, "dtype") and hasattr(value, "shape"):  # a NumPy array or scalar, or a tensor
        size = value.numel() if hasattr(value, "numel") else value.size
        if size != 1:
            raise _core.InvalidInput(f"specverify: {name} must hold one value, got shape {tuple(value.shape)}")
        dtype, value = value.dtype, value.reshape(-1)[0].item()
        shown = f"{dtype} {value!r}"
    else:
        shown = f"{type(value).__name__} {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"specverify: {name} must be an integer or a one-element integer array, got {shown}")
    if not 0 <= value < 2**64:
        raise _core.InvalidInput(f"specverify: {name} = {value} does not fit in uint64")
    return int(value)


def _int32_ids(name, ids, torch, vocab):
    """`ids` (int32, or int64 as FlashInfer's own tests draw them) as the int32 ids the library
    reads. int64 ids are narrowed only where every one fits; else an id is outside [0, V), and the
    first such one is named where it is, in the words verify uses for an int32 id."""
    dtype = str(ids.dtype).replace("torch.", "")
    if dtype == "int32":
        return ids
    if dtype != "int64":
        raise TypeError(f"specverify: {name} must hold int32 or int64, got {ids.dtype}")
    if not ((ids < -2**31) | (ids >= 2**31)).any():
        return ids.to(torch.int32) if torch is not None else ids.astype(np.int32)
    outside = ((ids < 0) | (ids >= vocab)).reshape(-1)
    first = int(outside.nonzero()[0, 0]) if torch is not None else int(np.flatnonzero(outside)[0])
    b, j = divmod(first, ids.shape[1])
    raise _core.InvalidInput(f"specverify::verify: sequence {b}, position {j}: draft token "
                             f"{int(ids.reshape(-1)[first])} is outside [0, {vocab})")


def _expect_counts(name, given, batch_size):
    """A maybe_output_* array the counts are added to in place: int32 or int64 [B] (a float or
    narrower array would take them converted)."""
    dtype = getattr(given, "dtype", type(given).__name__)
    if str(dtype).replace("torch.", "") not in ("int32", "int64"):
        raise TypeError(f"specverify: {name} must hold int32 or int64, got {dtype} "
                        f"(the counts are added to it in place)")
    if tuple(given.shape) != (batch_size,):
        raise _core.InvalidInput(f"specverify: {name} has shape {tuple(given.shape)}, but it needs [{batch_size}]")


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, maybe_output_accepted_token_num=None,
                               maybe_output_emitted_draft_token_num=None, deterministic=True, generator=None,
                               seed=None, offset=None):
    """A drop-in for flashinfer.sampling.chain_speculative_sampling (Standard speculative sampling,
    Leviathan et al.): the same arguments and outputs, on CPU arrays or CUDA tensors.

    draft_probs float32 [B, K, V] (q), draft_token_ids int32 or int64 [B, K] (int64 ids are read
    exactly: one outside [0, V) is named by position, never narrowed), target_probs float32
    [B, K+1, V] (p). Returns (output_token_ids int32 [B, K+1]: the accepted drafts, the extra
    token, then -1; output_accepted_token_num int32 [B]: the drafts that pass their test
    u q(x) < p(x) each on its own, the chain's first rejection ignored; output_emitted_draft_token_num
    int32 [B]: the drafts emitted). The two counts are added to the maybe_output_* tensors (int32
    or int64 [B]) in place where given (so they can count over steps), as FlashInfer does, else
    start from zero.

    Identical to FlashInfer: names, shapes, dtypes, outputs, and the law of the tokens (each
    emitted sequence follows p exactly). Different: the uniforms come from specverify's Philox
    streams keyed by (seed, offset, sequence, position), so the tokens themselves differ from
    FlashInfer's for the same seed; the results never depend on `deterministic` (accepted for
    compatibility). seed and offset (integers in [0, 2^64), or one-element integer tensors) fix the
    stream; where seed is None it is drawn from `generator` (or torch's or NumPy's default
    generator), and offset defaults to 0.
    """
    torch = _torch_module(draft_probs, draft_token_ids, target_probs)
    B, _ = _shape("draft_token_ids", draft_token_ids, 2)
    counts = {"maybe_output_accepted_token_num": maybe_output_accepted_token_num,
              "maybe_output_emitted_draft_token_num": maybe_output_emitted_draft_token_num}
    for name, given in counts.items():
        if given is not None:
            _expect_counts(name, given, B)
    if seed is None:
        if torch is not None:
            where = generator.device if generator is not None else "cpu"
            seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=where).item())
        else:
            seed = int(np.random.randint(0, 2**62, dtype=np.int64))
    seed = _integer("seed", seed)
    offset = 0 if offset is None else _integer("offset", offset)
    from specverify import ops  # it builds on this module
    rows = [a for a in (draft_probs, draft_token_ids, target_probs) if a is not None]
    if torch is not None and ops.registered() and all(isinstance(a, torch.Tensor) for a in rows):
        # Tensors go through the operator (specverify/ops.py), as torch.compile sees the call;
        # its seed and offset are int64 tensors on the rows' device holding the uint64 bits.
        def word(value):
            return torch.tensor([value - 2**64 if value >= 2**63 else value], dtype=torch.int64,
                                device=target_probs.device)
        tokens, passed, emitted = torch.ops.specverify.chain_speculative_sampling(
            draft_probs, draft_token_ids, target_probs, word(seed), word(offset), deterministic)
    else:
        tokens, passed, emitted = _chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, seed, offset)

    def counted(given, values):
        if given is None:
            return values
        given += values
        return given

    return (tokens, counted(maybe_output_accepted_token_num, passed),
            counted(maybe_output_emitted_draft_token_num, emitted))


def _chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, seed, offset):
    """chain_speculative_sampling's three outputs, new arrays, for integer `seed` and `offset`."""
    torch = _torch_module(draft_probs, draft_token_ids, target_probs)
    B, K = _shape("draft_token_ids", draft_token_ids, 2)
    ids32 = _int32_ids("draft_token_ids", draft_token_ids, torch, _shape("target_probs", target_probs, 3)[2])
    tokens, emitted = _verify(_core.Standard(), ids32, target_probs, draft_probs, None, params=None, seed=seed,
                              offset=offset, sequence_seeds=None, positions=None, acceptance_counts=None, max_threads=0)

    # Every position's own test, on the uniforms verify used (the same float arithmetic), where
    # the rows are (verify has checked every draft token against the vocabulary).
    u = _core._accept_uniforms(_core.Randomness(seed=seed, offset=offset), B, K)
    if torch is not None:
        p, ids = torch.as_tensor(target_probs), torch.as_tensor(draft_token_ids).long()[:, :, None]
        u = torch.from_numpy(u).to(p.device)
        p_x = torch.gather(p[:, :K], 2, ids)[:, :, 0]
        q_x = torch.gather(torch.as_tensor(draft_probs), 2, ids)[:, :, 0] if draft_probs is not None else 1.0
        passed = (u * q_x < p_x).sum(dim=1, dtype=torch.int32)
    else:
        ids = np.asarray(draft_token_ids).astype(np.int64)[:, :, None]
        p_x = np.take_along_axis(np.asarray(target_probs)[:, :K], ids, axis=2)[:, :, 0]
        q_x = np.take_along_axis(np.asarray(draft_probs), ids, axis=2)[:, :, 0] if draft_probs is not None else 1.0
        passed = (u * q_x < p_x).sum(axis=1).astype(np.int32)
    return tokens, passed, emitted
