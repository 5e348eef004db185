"""torch.distributed.all_reduce (float32, SUM, eager) latency and bandwidth sweep.

  torchrun --standalone --nproc_per_node=N bench_allreduce.py [--min-bytes 8] [--max-bytes 256M] [--factor 4]

Per size: one checked all_reduce of integer data, then warm-up and timed iterations between two
CUDA events (time per call = elapsed / iterations). The timed data is random and tiny (1e-30
scale) so that repeated in-place sums stay finite. busbw = algbw * 2(n-1)/n, as in nccl-tests.
Rank 0 prints 'BENCH size=... time_us=... algbw=... busbw=... ok=0|1' lines, then a table.
Exit status 1 when a check failed."""
import argparse
import sys
import time

import torch
import torch.distributed as dist

import baton_common


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="256M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    ctx = baton_common.setup(use_device_id=True)
    w = ctx.world
    sizes, s = [], parse_size(args.min_bytes)
    while s <= parse_size(args.max_bytes):
        sizes.append(s)
        s *= args.factor
    if sizes[-1] != parse_size(args.max_bytes):
        sizes.append(parse_size(args.max_bytes))
    rows = []
    for size in sizes:
        n = max(1, size // 4)
        seed = ctx.next_seed()
        xs = ctx.all_inputs(seed, n, -8, 9)
        t = xs[ctx.rank].to(torch.float32)
        dist.all_reduce(t)
        ok = ctx.close(t, torch.stack(xs).sum(0), f"bench all_reduce check n={n}")
        iters = max(5, min(40, int(2e9 // max(size, 1))))
        g = torch.Generator(device=ctx.device)
        g.manual_seed(seed)
        buf = (torch.rand(n, generator=g, device=ctx.device) * 2 - 1) * 1e-30
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        ctx.sync()
        dist.barrier()
        if ctx.cpu:
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            us = (time.perf_counter() - t0) * 1e6 / iters
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                dist.all_reduce(buf)
            end.record()
            torch.cuda.synchronize()
            us = start.elapsed_time(end) * 1e3 / iters
        ctx.check(bool(torch.isfinite(buf).all()), f"bench n={n}: timed buffer became non-finite")
        algbw = n * 4 / us / 1e3
        busbw = algbw * 2 * (w - 1) / w
        # Everyone's verdict, so rank 0 prints a size as ok only when all ranks agree.
        flag = torch.tensor([0 if ok else 1], device=ctx.device)
        dist.all_reduce(flag)
        rows.append((n * 4, us, algbw, busbw, int(flag.item()) == 0))
        if ctx.rank == 0:
            print(f"BENCH size={n * 4} time_us={us:.2f} algbw={algbw:.2f} busbw={busbw:.2f} "
                  f"ok={int(rows[-1][4])}", flush=True)
    ctx.log(f"{'size(B)':>12} {'time(us)':>10} {'algbw':>8} {'busbw':>8}  check")
    for size, us, algbw, busbw, ok in rows:
        ctx.log(f"{size:>12} {us:>10.2f} {algbw:>8.2f} {busbw:>8.2f}  {'OK' if ok else 'WRONG'}")
    return baton_common.finish(ctx)


if __name__ == "__main__":
    sys.exit(main())
