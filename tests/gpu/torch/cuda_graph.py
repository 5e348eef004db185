"""all_reduce captured in a CUDA graph and replayed: a small (odd count) and a large all_reduce with
a kernel between them, captured once, replayed 100 times with fresh inputs copied into the static
buffers before each replay, every replay checked.

Run by suite.py, or alone: torchrun --standalone --nproc_per_node=N cuda_graph.py"""
import torch
import torch.distributed as dist

from baton_common import main_single

REPLAYS = 100


def run(ctx):
    if ctx.cpu:
        ctx.log("cuda_graph: skipped on the CPU")
        return
    small_n, big_n = 1031, (1 << 20) + 3
    small = torch.zeros(small_n, device=ctx.device)
    big = torch.zeros(big_n, device=ctx.device)

    # Warm up on a side stream (torch's recipe), so that lazy setup stays out of the capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            dist.all_reduce(small)
            dist.all_reduce(big)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(small)
        big.mul_(2.0)
        dist.all_reduce(big)
    torch.cuda.synchronize()

    bad = 0
    for i in range(REPLAYS):
        seed = ctx.next_seed()
        xs = ctx.all_inputs(seed, small_n, -8, 9)
        ys = ctx.all_inputs(seed + 70000, big_n, -8, 9)
        small.copy_(xs[ctx.rank])
        big.copy_(ys[ctx.rank])
        graph.replay()
        torch.cuda.synchronize()
        ok_small = ctx.close(small, torch.stack(xs).sum(0), f"graph replay {i}: small all_reduce")
        ok_big = ctx.close(big, 2.0 * torch.stack(ys).sum(0), f"graph replay {i}: big all_reduce")
        bad += (not ok_small) + (not ok_big)
    del graph
    torch.cuda.synchronize()
    ctx.log(f"cuda_graph: {REPLAYS} replays checked, {bad} wrong")


if __name__ == "__main__":
    main_single(run)
