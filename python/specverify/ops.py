"""Torch operators (docs/api.md "Python, inside an engine's step"): registered in the namespace
`specverify` through torch.library when `import specverify` finds torch, each with CPU, CUDA and
Meta implementations, so that torch.compile traces a call as one node instead of breaking its graph.

    tokens, accepted, emitted = torch.ops.specverify.chain_speculative_sampling(
        draft_probs, draft_token_ids, target_probs, seed, offset, offset_increment=1)
    tokens, num_accepted = torch.ops.specverify.verify_padded(
        "standard", draft_token_ids, target, draft, num_draft_tokens, None, None, None, None, seed, offset)

The CPU and CUDA implementations run sv.padded's functions on the same rows, so the outputs are
theirs bit for bit, and bad input raises their InvalidInput or TypeError. The Meta one gives the
outputs' shapes and dtypes from the shapes alone. `seed` and `offset` are int64 tensors of one
element (a [B] `seed` in verify_padded: per-sequence seeds; at B = 1 both readings give the same
bits) on the rows' device, read as the uint64 bits Randomness holds. `offset` is written:
`offset_increment` is added to it after a call that returned, so consecutive calls draw fresh
uniforms; a call that raised leaves it as it was. After offset_increment, verify_padded
takes `positions` (int64 [B]: what "coupled" keys its samples by, as in Randomness) and
`acceptance_counts` (int32 or int64 [K], written: each j gains the number of sequences that kept
draft j). sv.padded's functions call these operators when given tensors (operator_call).

On CUDA this version reads `seed`, `offset` and the sampling parameters on the host: each call
synchronises once, so it runs under torch.compile but cannot be captured in a CUDA graph.
"""
import numpy as np

from specverify import _core, padded

# verify_padded's `rule`: the rules that need no parameters.
RULES = {
    "standard": _core.Standard,
    "greedy": _core.Greedy,
    "block": _core.Block,
    "traversal": _core.Traversal,
    "coupled": _core.Coupled,
}

_RULE_NAMES = {cls: name for name, cls in RULES.items()}

SCHEMAS = {
    "chain_speculative_sampling":
        "chain_speculative_sampling(Tensor? draft_probs, Tensor draft_token_ids, Tensor target_probs, Tensor seed, "
        "Tensor(a!) offset, bool deterministic=True, int offset_increment=0) -> (Tensor, Tensor, Tensor)",
    "verify_padded":
        "verify_padded(str rule, Tensor draft_token_ids, Tensor target, Tensor? draft, Tensor? num_draft_tokens, "
        "Tensor? temperature, Tensor? top_k, Tensor? top_p, Tensor? min_p, Tensor seed, Tensor(a!) offset, "
        "int offset_increment=0, Tensor? positions=None, Tensor(b!)? acceptance_counts=None) -> (Tensor, Tensor)",
}

# The four sampling parameters of verify_padded, with the dtype each tensor must hold.
SAMPLING_FIELDS = (("temperature", "float32"), ("top_k", "int32"), ("top_p", "float32"), ("min_p", "float32"))

_library = None  # the torch.library.Library that holds the registrations (they last as long as it)


def _rule(name):
    if not isinstance(name, str) or name not in RULES:
        raise _core.InvalidInput(f"specverify: verify_padded: rule must be one of {', '.join(map(repr, RULES))}, "
                                 f"got {name!r} (rules with parameters: sv.padded.verify)")
    return RULES[name]()


def _words(name, t, counts, torch):
    """The int64 tensor `t` of one of `counts` elements, as the uint64 values its bits hold."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.int64:
        raise TypeError(f"specverify: {name} must be an int64 tensor, got "
                        f"{t.dtype if isinstance(t, torch.Tensor) else type(t).__name__}")
    if t.numel() not in counts:
        raise _core.InvalidInput(f"specverify: {name} must hold {' or '.join(map(str, counts))} values, "
                                 f"got shape {tuple(t.shape)}")
    return [v & (2**64 - 1) for v in t.reshape(-1).tolist()]


def _same_device(name, t, where):
    if t.device != where:
        raise _core.InvalidInput(f"specverify: {name} is on {t.device}, but the rows are on {where}")


def _sampling_params(batch_size, given, where):
    """The SamplingParams array of the four [B] tensors in `given`, or None where none is given."""
    present = [name for name, _ in SAMPLING_FIELDS if given[name] is not None]
    if not present:
        return None
    if len(present) != len(SAMPLING_FIELDS):
        missing = [name for name, _ in SAMPLING_FIELDS if given[name] is None]
        raise _core.InvalidInput(f"specverify: verify_padded: temperature, top_k, top_p and min_p are all given "
                                 f"(logits rows) or all None (probabilities); {', '.join(missing)} missing")
    values = {}
    for name, dtype in SAMPLING_FIELDS:
        t = given[name]
        if str(t.dtype) != f"torch.{dtype}":
            raise TypeError(f"specverify: {name} must hold {dtype}, got {t.dtype} (tensors are never converted)")
        if tuple(t.shape) != (batch_size,):
            raise _core.InvalidInput(f"specverify: {name} has shape {tuple(t.shape)}, but it needs one value per "
                                     f"sequence ({batch_size})")
        _same_device(name, t, where)
        values[name] = t.cpu().numpy()
    from specverify import sampling_params
    return sampling_params(batch_size, **values)


def chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, seed, offset, deterministic=True,
                               offset_increment=0):
    import torch
    where = target_probs.device
    for name, t in (("seed", seed), ("offset", offset)):
        if isinstance(t, torch.Tensor):
            _same_device(name, t, where)
    seed_word, = _words("seed", seed, (1,), torch)
    offset_word, = _words("offset", offset, (1,), torch)
    outputs = padded._chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, seed_word, offset_word)
    offset.add_(offset_increment)
    return outputs


def verify_padded(rule, draft_token_ids, target, draft, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                  offset, offset_increment=0, positions=None, acceptance_counts=None):
    import torch
    rule = _rule(rule)
    B, _ = padded._shape("draft_token_ids", draft_token_ids, 2)
    where = target.device
    for name, t in (("seed", seed), ("offset", offset)):
        if isinstance(t, torch.Tensor):
            _same_device(name, t, where)
    seeds = _words("seed", seed, (1, B) if B > 1 else (1,), torch)
    offset_word, = _words("offset", offset, (1,), torch)
    params = _sampling_params(B, dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p), where)
    # At B = 1 the batch's seed and one sequence seed key the same streams (walk_steps.hpp).
    per_sequence = len(seeds) > 1
    outputs = padded._verify(rule, draft_token_ids, target, draft, num_draft_tokens, params=params,
                             seed=0 if per_sequence else seeds[0], offset=offset_word,
                             sequence_seeds=np.array(seeds, np.uint64) if per_sequence else None,
                             positions=positions, acceptance_counts=acceptance_counts, max_threads=0)
    offset.add_(offset_increment)
    return outputs


def _chain_shapes(draft_probs, draft_token_ids, target_probs, seed, offset, deterministic=True, offset_increment=0):
    import torch
    B, K = padded._shape("draft_token_ids", draft_token_ids, 2)
    where = target_probs.device
    return (torch.empty((B, K + 1), dtype=torch.int32, device=where),
            torch.empty((B,), dtype=torch.int32, device=where), torch.empty((B,), dtype=torch.int32, device=where))


def _verify_shapes(rule, draft_token_ids, target, draft, num_draft_tokens, temperature, top_k, top_p, min_p, seed,
                   offset, offset_increment=0, positions=None, acceptance_counts=None):
    import torch
    _rule(rule)
    B, K = padded._shape("draft_token_ids", draft_token_ids, 2)
    where = target.device
    return (torch.empty((B, K + 1), dtype=torch.int32, device=where),
            torch.empty((B,), dtype=torch.int32, device=where))


def operator_call(rule, draft_token_ids, target, draft, num_draft_tokens, params, seed, offset, sequence_seeds,
                  positions, acceptance_counts, max_threads):
    """sv.padded.verify's call as a call of torch.ops.specverify.verify_padded (a function of no
    arguments), where it is one: tensors, a rule without parameters, sampling parameters without
    penalties, the default max_threads, and seeds of their plain types. Else None: the call runs
    as it is (and raises what it raises)."""
    if _library is None or type(rule) not in _RULE_NAMES or max_threads != 0:
        return None
    import torch
    arrays = (draft_token_ids, target, draft, num_draft_tokens, positions, acceptance_counts)
    if not isinstance(target, torch.Tensor) or \
            not all(a is None or isinstance(a, torch.Tensor) for a in arrays):
        return None
    shape = tuple(getattr(draft_token_ids, "shape", ()))
    if len(shape) != 2:
        return None
    B, where = shape[0], target.device
    words = [seed, offset] + ([] if sequence_seeds is None else list(np.asarray(
        sequence_seeds.cpu() if isinstance(sequence_seeds, torch.Tensor) else sequence_seeds).reshape(-1)))
    if not all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) and 0 <= int(w) < 2**64 for w in words):
        return None  # sv.verify's Randomness names what does not fit
    if sequence_seeds is not None and len(words) - 2 != B:
        return None
    fields = (None,) * len(SAMPLING_FIELDS)
    if params is not None:
        if not isinstance(params, np.ndarray) or params.dtype != _core.SamplingParams.dtype or params.shape != (B,) \
                or (params["repetition_penalty"] != 1).any() or (params["presence_penalty"] != 0).any() \
                or (params["frequency_penalty"] != 0).any():
            return None
        fields = tuple(torch.from_numpy(np.ascontiguousarray(params[name])).to(where) for name, _ in SAMPLING_FIELDS)

    def word_tensor(values):
        return torch.tensor([int(v) - 2**64 if int(v) >= 2**63 else int(v) for v in values], dtype=torch.int64,
                            device=where)
    seed_tensor = word_tensor(words[2:] if sequence_seeds is not None else [seed])
    return lambda: torch.ops.specverify.verify_padded(_RULE_NAMES[type(rule)], draft_token_ids, target, draft,
                                                      num_draft_tokens, *fields, seed_tensor, word_tensor([offset]),
                                                      0, positions, acceptance_counts)


def registered():
    """Whether this process has the operators (torch was found when specverify was imported)."""
    return _library is not None


def register(torch):
    """Defines the operators once per process (a second call does nothing)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("specverify", "DEF")
    implementations = {"chain_speculative_sampling": (chain_speculative_sampling, _chain_shapes),
                       "verify_padded": (verify_padded, _verify_shapes)}
    for name, (run, shapes) in implementations.items():
        library.define(SCHEMAS[name])
        library.impl(name, run, "CPU")
        library.impl(name, run, "CUDA")
        register_fake = getattr(torch.library, "register_fake", None) or getattr(torch.library, "impl_abstract", None)
        if register_fake is not None:  # torch >= 2.2: the fake (meta) implementation torch.compile asks for
            register_fake(f"specverify::{name}", shapes, lib=library)
        else:  # torch 1.13: a Meta kernel, and the same below autograd (1.13 has no fallthrough for Meta)
            library.impl(name, shapes, "Meta")
            library.impl(name, shapes, "AutogradMeta")
    _library = library
