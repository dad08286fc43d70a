"""One rank of the sharded verify as a process, for test_sharded.py: verifies its slice of the
batches `sharded_cases` builds, gathering through torch.distributed (gloo) or mpi4py, and saves its
outputs for the test to compare with the unsharded verify.

    python3 sharded_rank.py torch <rank> <ranks> <port> <out_dir>
    mpirun -np <ranks> python3 sharded_rank.py mpi - - - <out_dir>
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specverify as sv  # noqa: E402
from sharded_cases import CASES, bounds, run  # noqa: E402


def torch_gather(rank, ranks, port):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)

    def all_gather(send):
        mine = torch.from_numpy(send)
        parts = [torch.empty_like(mine) for _ in range(ranks)]
        dist.all_gather(parts, mine)
        return torch.cat(parts).numpy()

    return all_gather, dist.destroy_process_group


def mpi_gather():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD

    def all_gather(send):
        out = np.empty(send.size * comm.Get_size(), np.uint8)
        comm.Allgather(send, out)
        return out

    return comm.Get_rank(), comm.Get_size(), all_gather, lambda: None


def main():
    mode, out_dir = sys.argv[1], sys.argv[5]
    if mode == "torch":
        rank, ranks, port = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        all_gather, done = torch_gather(rank, ranks, port)
    else:
        rank, ranks, all_gather, done = mpi_gather()
    saved = {}
    for name, case in CASES.items():
        lo, hi = bounds(case["V"], ranks)[rank:rank + 2]
        saved.update({f"{name}/{k}": v for k, v in run(sv, case, lo, hi, rank, ranks, all_gather).items()})
    np.savez(os.path.join(out_dir, f"rank{rank}.npz"), **saved)
    done()


if __name__ == "__main__":
    main()
