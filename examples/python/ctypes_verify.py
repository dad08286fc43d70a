"""The C API from Python through ctypes, without the specverify module: one verify of a batch of
draft chains over libspecverify.so (specverify.h). The structs below are the header's, field for
field; `struct_size` tells the library which of them this caller knows.

    python3 ctypes_verify.py [path/to/libspecverify.so]
"""
import ctypes as C
import sys

import numpy as np

SV_STANDARD, SV_F32 = 0, 0
i32p, f32p, u64p, i64p, u32p = (C.POINTER(t) for t in (C.c_int32, C.c_float, C.c_uint64, C.c_int64, C.c_uint32))


class Error(C.Structure):
    _fields_ = [("code", C.c_int), ("message", C.c_char * 512)]


class Rule(C.Structure):
    _fields_ = [("kind", C.c_int), ("divergence", C.c_int), ("beta", C.c_float), ("threshold", C.c_float)]


class Randomness(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("seed", C.c_uint64), ("offset", C.c_uint64),
                ("sequence_seeds", u64p), ("accept_uniforms", f32p), ("sample_uniforms", f32p),
                ("positions", i64p)]


class VocabShard(C.Structure):
    _fields_ = [(name, C.c_int32) for name in ("rank", "ranks", "vocab_start", "local_vocab_size")]


class Stats(C.Structure):
    _fields_ = [(name, C.c_int64) for name in ("drafted", "accepted", "relaxed", "target_checked")]


class ChainBatch(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("batch_size", C.c_int32), ("vocab_size", C.c_int32),
                ("draft_offsets", i32p), ("draft_tokens", i32p), ("row_type", C.c_int),
                ("target_probs", C.c_void_p), ("draft_probs", C.c_void_p),
                ("target_logits", C.c_void_p), ("draft_logits", C.c_void_p),
                ("target_stride", C.c_int64), ("draft_stride", C.c_int64),
                ("target_params", C.c_void_p), ("draft_params", C.c_void_p), ("target_row_max", f32p),
                ("draft_vocab_size", C.c_int32), ("draft_to_target", i32p),
                ("unconditional_logits", C.c_void_p), ("unconditional_stride", C.c_int64),
                ("unconditional_first_row", i64p), ("guidance_scale", f32p), ("allowed_tokens", u32p),
                ("history_offsets", i32p), ("history_tokens", i32p), ("history_counts", i32p),
                ("bias_offsets", i32p), ("bias_tokens", i32p), ("bias_values", f32p),
                ("shard", VocabShard), ("communicator", C.c_void_p)]


class ChainOutput(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("tokens", i32p), ("row_width", C.c_int32),
                ("num_accepted", i32p), ("logprobs", f32p), ("stats", C.POINTER(Stats))]


def load(path="libspecverify.so"):
    lib = C.CDLL(path)
    lib.sv_verify_chains.argtypes = [C.POINTER(Rule), C.POINTER(ChainBatch), C.POINTER(Randomness),
                                     C.POINTER(ChainOutput), C.c_int, C.POINTER(Error)]
    lib.sv_verify_chains.restype = C.c_int
    return lib


def _ptr(array, kind):
    return array.ctypes.data_as(kind)


def verify_chains(lib, offsets, drafts, p, q, seed, offset, rule=SV_STANDARD):
    """Standard (or another rule kind) over float32 probability rows: (tokens, num_accepted, stats).
    Raises ValueError with the library's message on invalid input."""
    offsets = np.ascontiguousarray(offsets, np.int32)
    drafts = np.ascontiguousarray(drafts, np.int32)
    p = np.ascontiguousarray(p, np.float32)
    q = None if q is None else np.ascontiguousarray(q, np.float32)
    B, V = len(offsets) - 1, p.shape[1]
    width = int(np.diff(offsets).max(initial=0)) + 1
    tokens = np.full((B, width), -1, np.int32)
    accepted = np.zeros(B, np.int32)
    stats = Stats()
    batch = ChainBatch(struct_size=C.sizeof(ChainBatch), batch_size=B, vocab_size=V,
                       draft_offsets=_ptr(offsets, i32p), draft_tokens=_ptr(drafts, i32p), row_type=SV_F32,
                       target_probs=p.ctypes.data, draft_probs=None if q is None else q.ctypes.data)
    out = ChainOutput(struct_size=C.sizeof(ChainOutput), tokens=_ptr(tokens, i32p), row_width=width,
                      num_accepted=_ptr(accepted, i32p), stats=C.pointer(stats))
    randomness = Randomness(struct_size=C.sizeof(Randomness), seed=seed, offset=offset)
    err = Error()
    if lib.sv_verify_chains(C.byref(Rule(kind=rule)), C.byref(batch), C.byref(randomness), C.byref(out), 0,
                            C.byref(err)) != 0:
        raise ValueError(err.message.decode())
    return tokens, accepted, stats


def main():
    lib = load(sys.argv[1] if len(sys.argv) > 1 else "libspecverify.so")
    rng = np.random.default_rng(7)
    offsets = np.array([0, 3, 4], np.int32)                # k = 3 and 1
    p = rng.dirichlet(np.ones(8), size=4 + 2).astype(np.float32)  # target rows: k_b + 1 per sequence
    q = rng.dirichlet(np.ones(8), size=4).astype(np.float32)      # draft rows: one per draft
    drafts = np.array([rng.choice(8, p=row / row.sum()) for row in q], np.int32)
    tokens, accepted, stats = verify_chains(lib, offsets, drafts, p, q, seed=1, offset=0)
    for b in range(2):
        print(f"sequence {b}: {accepted[b]} drafts kept, tokens {tokens[b, :accepted[b] + 1].tolist()}")
    print(f"accepted {stats.accepted} of {stats.drafted} drafted")


if __name__ == "__main__":
    main()
