"""The sharded verify from Python (docs/api.md "Sharded vocabulary"): verify(..., all_gather=fn) on each
rank's slice of chains and trees gives every rank the unsharded verify's outputs, bit for bit, with
ranks as threads (a gather over a barrier), as processes over torch.distributed (gloo), and over
mpi4py."""
import os
import shutil
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

import specverify as sv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sharded_cases import CASES, bounds, run  # noqa: E402

RANK_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sharded_rank.py")


def unsharded(case):
    return run(sv, case, 0, case["V"], 0, 1, None)


def expect_same(got, want, where):
    for key in ("tokens", "accepted", "logprobs", "nodes", "stats"):
        assert got[key].tobytes() == want[key].tobytes(), f"{where}: {key} {got[key]} != {want[key]}"


class ThreadGather:
    """all_gather among `ranks` Python threads: each stages its message, then all read them."""

    def __init__(self, ranks):
        self.ranks, self.staged, self.barrier = ranks, [None] * ranks, threading.Barrier(ranks, timeout=60)

    def for_rank(self, rank):
        def all_gather(send):
            self.staged[rank] = send.copy()
            self.barrier.wait()
            out = np.concatenate(self.staged)
            self.barrier.wait()
            return out
        return all_gather


@pytest.mark.parametrize("ranks", [1, 2, 3, 5])
@pytest.mark.parametrize("name", sorted(CASES))
def test_ranks_as_threads_match_the_unsharded_verify(name, ranks):
    case = CASES[name]
    want = unsharded(case)
    cuts, gather = bounds(case["V"], ranks), ThreadGather(ranks)
    got = [None] * ranks

    def rank_main(r):
        got[r] = run(sv, case, cuts[r], cuts[r + 1], r, ranks, gather.for_rank(r))

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for r in range(ranks):
        expect_same(got[r], want, f"{name}, rank {r} of {ranks}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_saved(out_dir, ranks):
    for r in range(ranks):
        saved = np.load(os.path.join(out_dir, f"rank{r}.npz"))
        for name, case in CASES.items():
            got = {k: saved[f"{name}/{k}"] for k in ("tokens", "accepted", "logprobs", "nodes", "stats")}
            expect_same(got, unsharded(case), f"{name}, rank {r} of {ranks}")


@pytest.mark.parametrize("ranks", [2, 3])
def test_torch_distributed_gloo_processes(ranks, tmp_path):
    pytest.importorskip("torch.distributed")
    port = free_port()
    procs = [subprocess.Popen([sys.executable, RANK_SCRIPT, "torch", str(r), str(ranks), str(port), str(tmp_path)])
             for r in range(ranks)]
    for p in procs:
        assert p.wait(timeout=300) == 0
    check_saved(tmp_path, ranks)


def test_mpi4py_processes(tmp_path):
    pytest.importorskip("mpi4py")
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("no mpirun (Debian: openmpi-bin)")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    subprocess.run([mpirun, "-np", "2", sys.executable, RANK_SCRIPT, "mpi", "-", "-", "-", str(tmp_path)],
                   env=env, check=True, timeout=300)
    check_saved(tmp_path, 2)


def test_bad_input_in_one_slice_is_reported_by_every_rank():
    case = dict(CASES["standard"])
    case["p"] = case["p"].copy()
    case["tokens"] = np.full_like(case["tokens"], case["V"] - 1)
    case["p"][:, case["V"] - 1] = np.nan  # in the last rank's slice, read at every draft
    with pytest.raises(sv.InvalidInput) as whole:
        unsharded(case)
    ranks, cuts, gather = 3, bounds(case["V"], 3), ThreadGather(3)
    errors = [None] * ranks

    def rank_main(r):
        try:
            run(sv, case, cuts[r], cuts[r + 1], r, ranks, gather.for_rank(r))
        except sv.InvalidInput as e:
            errors[r] = str(e)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(ranks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == [str(whole.value)] * ranks


def test_a_gather_of_the_wrong_size_is_an_error():
    case = CASES["standard"]
    with pytest.raises(ValueError, match="all_gather returned"):
        run(sv, case, 0, case["V"], 0, 2, lambda send: send)  # one rank's bytes where two ranks' are due


def test_rows_must_hold_the_slice():
    case = CASES["standard"]
    with pytest.raises(sv.InvalidInput, match="local_vocab_size"):
        sv.ChainBatch(draft_offsets=case["offsets"], draft_tokens=case["tokens"], target_probs=case["p"][:, :10],
                      shard=sv.VocabShard(rank=0, ranks=2, vocab_start=0, local_vocab_size=11),
                      vocab_size=case["V"])


def test_the_unsharded_verify_refuses_a_slice():
    case = CASES["standard"]
    batch = sv.ChainBatch(draft_offsets=case["offsets"], draft_tokens=case["tokens"],
                          target_probs=np.ascontiguousarray(case["p"][:, :10]),
                          shard=sv.VocabShard(rank=0, ranks=2, vocab_start=0, local_vocab_size=10),
                          vocab_size=case["V"])
    out = sv.ChainOutput(tokens=np.zeros((case["B"], case["K"] + 1), np.int32),
                         num_accepted=np.zeros(case["B"], np.int32))
    with pytest.raises(sv.InvalidInput, match="needs verify"):
        sv.verify(sv.Standard(), batch, sv.Randomness(seed=1), out)
