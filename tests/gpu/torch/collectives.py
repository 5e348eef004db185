"""torch.distributed collectives on the NCCL backend, every result checked against float64
references: all_reduce (every op x float32/float16/bfloat16/int64), reduce, broadcast from every
root, all_gather (list and into one tensor), reduce_scatter_tensor, all_to_all_single (even and
uneven splits, zero-sized ones included), scatter and gather from every root, and barrier.

Run by suite.py, or alone: torchrun --standalone --nproc_per_node=N collectives.py"""
import time

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from baton_common import main_single, tol

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64]
COUNTS = [1, 7, 1027, (1 << 20) + 5]


def reduce_ref(xs, op, world, dtype, factor=None):
    s = torch.stack(xs)
    if op == "SUM":
        return s.sum(0)
    if op == "PRODUCT":
        return s.prod(0)
    if op == "MIN":
        return s.amin(0)
    if op == "MAX":
        return s.amax(0)
    if op == "AVG":
        total = s.sum(0)
        # Integer AVG divides the (non-negative) sum; floats divide exactly.
        return torch.div(total, world, rounding_mode="floor") if not dtype.is_floating_point else total / world
    if op == "PREMUL_SUM":
        return s.sum(0) * factor
    raise ValueError(op)


def input_range(op, dtype):
    """[low, high) of the integers each rank contributes, chosen so that results are exact."""
    if op == "PRODUCT":
        return 1, 3  # 1 or 2, sign added separately
    if op == "AVG" and not dtype.is_floating_point:
        return 0, 10
    return -8, 9


def make_op(name, factor):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(factor)
    return getattr(ReduceOp, name)


def all_reduce_matrix(ctx):
    ops = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM"]
    for dtype in DTYPES:
        for op in ops:
            if op == "PREMUL_SUM" and not dtype.is_floating_point:
                continue  # torch accepts PREMUL_SUM for floating types only
            if ctx.cpu and op in ("AVG", "PREMUL_SUM"):
                continue  # NCCL-only operators
            for n in COUNTS:
                factor = 3.0 if n % 2 else 0.5
                seed = ctx.next_seed()
                low, high = input_range(op, dtype)
                xs = ctx.all_inputs(seed, n, low, high)
                if op == "PRODUCT":
                    signs = ctx.all_inputs(seed + 100000, n, 0, 2)
                    xs = [x * (2 * sg - 1) for x, sg in zip(xs, signs)]
                t = xs[ctx.rank].to(dtype)
                dist.all_reduce(t, op=make_op(op, factor))
                if op == "PREMUL_SUM" and dtype == torch.bfloat16:
                    # torch hands NCCL a float32 factor for bfloat16 data, and what NCCL makes of
                    # it is stock's behaviour to match, not arithmetic to check: run.sh compares
                    # these lines between the stock and the Baton run.
                    ctx.probe(f"all_reduce_premul_sum_bf16_n{n}", t)
                    continue
                want = reduce_ref(xs, op, ctx.world, dtype, factor)
                ctx.close(t, want, f"all_reduce {op} {dtype} n={n}", rtol=tol(dtype), atol=tol(dtype))
    # A tensor-valued PREMUL_SUM factor: torch passes NCCL a device pointer (ncclScalarDevice).
    # The factor's dtype must be the data's.
    if not ctx.cpu:
        op = dist._make_nccl_premul_sum(torch.tensor([0.25], device=ctx.device, dtype=torch.float32))
        xs = ctx.all_inputs(ctx.next_seed(), 1000, -8, 9)
        t = xs[ctx.rank].to(torch.float32)
        dist.all_reduce(t, op=op)
        ctx.close(t, torch.stack(xs).sum(0) * 0.25, "all_reduce PREMUL_SUM tensor factor", rtol=1e-6)
    # async_op, then wait.
    xs = ctx.all_inputs(ctx.next_seed(), 4099, -8, 9)
    t = xs[ctx.rank].to(torch.float32)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    ctx.close(t, torch.stack(xs).sum(0), "all_reduce async_op")
    ctx.log(f"all_reduce matrix: {len(DTYPES)} dtypes x {len(ops)} ops x {len(COUNTS)} counts done")


def reduce_and_broadcast(ctx):
    for root in range(ctx.world):
        for n in (1, 1027, (1 << 20) + 5):
            xs = ctx.all_inputs(ctx.next_seed(), n, -8, 9)
            t = xs[ctx.rank].to(torch.float32)
            dist.broadcast(t, src=root)
            ctx.close(t, xs[root], f"broadcast root={root} n={n}")
            t = xs[ctx.rank].to(torch.bfloat16)
            dist.reduce(t, dst=root, op=ReduceOp.SUM)
            if ctx.rank == root:  # other ranks' buffers are unspecified after a reduce
                ctx.close(t, torch.stack(xs).sum(0), f"reduce root={root} n={n}", rtol=1e-2)


def gathers(ctx):
    w = ctx.world
    for n in (1, 1027, (1 << 19) + 3):
        for dtype in (torch.float32, torch.float16):
            xs = ctx.all_inputs(ctx.next_seed(), n, -8, 9)
            mine = xs[ctx.rank].to(dtype)
            outs = [torch.full((n,), -99.0, device=ctx.device, dtype=dtype) for _ in range(w)]
            dist.all_gather(outs, mine)
            for r in range(w):
                ctx.close(outs[r], xs[r], f"all_gather list {dtype} n={n} from {r}")
            out = torch.full((w * n,), -99.0, device=ctx.device, dtype=dtype)
            dist.all_gather_into_tensor(out, mine)
            ctx.close(out, torch.cat(xs), f"all_gather_into_tensor {dtype} n={n}")
        # reduce_scatter_tensor: rank r gets the sum of everyone's chunk r.
        for op in ("SUM", "MAX") if ctx.cpu else ("SUM", "AVG", "MAX"):
            big = ctx.all_inputs(ctx.next_seed(), w * n, -8, 9)
            inp = big[ctx.rank].to(torch.float32)
            out = torch.full((n,), -99.0, device=ctx.device)
            dist.reduce_scatter_tensor(out, inp, op=getattr(ReduceOp, op))
            chunks = [b[ctx.rank * n:(ctx.rank + 1) * n] for b in big]
            ctx.close(out, reduce_ref(chunks, op, w, torch.float32), f"reduce_scatter_tensor {op} n={n}",
                      rtol=1e-6)


def all_to_all(ctx):
    w, me = ctx.world, ctx.rank
    # Even splits.
    for n in (1, 257, 1 << 18):
        xs = ctx.all_inputs(ctx.next_seed(), w * n, -100, 100)
        out = torch.full((w * n,), -999.0, device=ctx.device)
        dist.all_to_all_single(out, xs[me].to(torch.float32))
        want = torch.cat([xs[src][me * n:(me + 1) * n] for src in range(w)])
        ctx.close(out, want, f"all_to_all_single even n={n}")
    # Uneven splits (some zero): rank s sends rows(s, d) rows of width 5 to rank d.
    def rows(s, d):
        return (3 * s + d) % 4 * 37

    width = 5
    seed = ctx.next_seed()
    send_rows = [rows(me, d) for d in range(w)]
    recv_rows = [rows(s, me) for s in range(w)]
    sent = [ctx.ints(seed, s, sum(rows(s, d) for d in range(w)) * width, -100, 100) for s in range(w)]
    inp = sent[me].to(torch.float32).reshape(-1, width)
    out = torch.full((sum(recv_rows), width), -999.0, device=ctx.device)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_rows, input_split_sizes=send_rows)
    want = []
    for s in range(w):
        start = sum(rows(s, d) for d in range(me)) * width
        want.append(sent[s][start:start + rows(s, me) * width])
    ctx.close(out, torch.cat(want), "all_to_all_single uneven")


def scatter_gather(ctx):
    w, me = ctx.world, ctx.rank
    for root in range(w):
        n = 1031 + root
        xs = ctx.all_inputs(ctx.next_seed(), n, -8, 9)
        out = torch.full((n,), -99.0, device=ctx.device)
        parts = [x.to(torch.float32) for x in xs] if me == root else None
        dist.scatter(out, scatter_list=parts, src=root)
        ctx.close(out, xs[me], f"scatter root={root}")
        mine = xs[me].to(torch.float32)
        bucket = [torch.full((n,), -99.0, device=ctx.device) for _ in range(w)] if me == root else None
        dist.gather(mine, gather_list=bucket, dst=root)
        if me == root:
            for r in range(w):
                ctx.close(bucket[r], xs[r], f"gather root={root} from {r}")


def barrier(ctx):
    """Each rank arrives 0.15 s x rank late; nobody may leave before the last one arrived."""
    ctx.sync()
    dist.barrier()
    start = time.time()
    time.sleep(0.15 * ctx.rank)
    dist.barrier()
    ctx.sync()
    waited = time.time() - start
    ctx.check(waited >= 0.15 * (ctx.world - 1) - 0.02, f"barrier: left after {waited:.3f} s, "
              f"the last rank arrives at {0.15 * (ctx.world - 1):.2f} s")


def run(ctx):
    all_reduce_matrix(ctx)
    reduce_and_broadcast(ctx)
    gathers(ctx)
    all_to_all(ctx)
    scatter_gather(ctx)
    barrier(ctx)
    ctx.sync()
    ctx.log("collectives: done")


if __name__ == "__main__":
    main_single(run)
