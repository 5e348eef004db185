"""Runs several of the torch checks in one process group (one torchrun start instead of several).

  torchrun --standalone --nproc_per_node=N suite.py [--tests collectives,groups,p2p,graph,ddp]
           [--no-device-id] [--losses FILE]

--no-device-id  init_process_group without device_id (lazy communicator creation; sub-groups
                made with fresh inits instead of ncclCommSplit)
--losses FILE   where ddp writes its per-step losses (rank 0)
Set TORCH_NCCL_USE_COMM_NONBLOCKING=1 in the environment for the nonblocking-communicator variant,
and BATON_HOST_PER_RANK=1 to give every rank a host of its own (NCCL_HOSTID, set before NCCL loads),
so that ranks connect as if on different machines.
Every run checks first which libnccl is mapped (BATON_EXPECT_LIB, see baton_common.py), last that
destroy_process_group returns. Exit status 0 only when every check on every rank passed.
"""
import argparse
import os
import sys
import time

if os.environ.get("BATON_HOST_PER_RANK") == "1":
    os.environ["NCCL_HOSTID"] = "baton-host-" + os.environ.get("RANK", "0")

import baton_common  # noqa: E402 (after NCCL_HOSTID: torch loads NCCL)
import collectives  # noqa: E402
import cuda_graph  # noqa: E402
import ddp  # noqa: E402
import groups  # noqa: E402
import p2p  # noqa: E402

TESTS = {"collectives": collectives.run, "groups": groups.run, "p2p": p2p.run,
         "graph": cuda_graph.run, "ddp": ddp.run}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tests", default=",".join(TESTS))
    ap.add_argument("--no-device-id", action="store_true")
    ap.add_argument("--losses", default=None)
    args = ap.parse_args()
    names = [t for t in args.tests.split(",") if t]
    unknown = [t for t in names if t not in TESTS]
    if unknown:
        print(f"suite: unknown tests {unknown}; known: {sorted(TESTS)}", file=sys.stderr)
        return 2
    ctx = baton_common.setup(use_device_id=not args.no_device_id)
    ctx.opts = {"losses": args.losses}
    for name in names:
        t0 = time.perf_counter()
        before = len(ctx.failures)
        TESTS[name](ctx)
        ctx.log(f"suite: {name} {'PASS' if len(ctx.failures) == before else 'FAIL'} on rank 0 "
                f"({time.perf_counter() - t0:.1f} s)")
    return baton_common.finish(ctx)


if __name__ == "__main__":
    sys.exit(main())
