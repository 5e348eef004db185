"""Sub-groups: two disjoint halves of the world (a one-rank group when the world has 2 ranks),
then three overlapping groups used in turns (ranks 0..W-2, ranks 1..W-1, and all ranks as a group
of its own), then one group destroyed while the others stay in use. With device_id bound at init,
torch makes sub-communicators with ncclCommSplit; without it, with fresh ncclCommInitRankConfig.

Run by suite.py, or alone: torchrun --standalone --nproc_per_node=N groups.py"""
import torch
import torch.distributed as dist

from baton_common import main_single


def group_sum(ctx, group, members, what, n=4097):
    xs = ctx.all_inputs(ctx.next_seed(), n, -8, 9)
    if ctx.rank not in members:
        return
    t = xs[ctx.rank].to(torch.float32)
    dist.all_reduce(t, group=group)
    ctx.close(t, sum(xs[r] for r in members), f"{what}: all_reduce over {members}")
    ctx.check(dist.get_world_size(group) == len(members),
              f"{what}: group size {dist.get_world_size(group)}, want {len(members)}")
    ctx.check(dist.get_rank(group) == members.index(ctx.rank),
              f"{what}: group rank {dist.get_rank(group)}, want {members.index(ctx.rank)}")


def group_broadcast_gather(ctx, group, members, what, n=1029):
    xs = ctx.all_inputs(ctx.next_seed(), n, -8, 9)
    if ctx.rank not in members:
        return
    src = members[-1]
    t = xs[ctx.rank].to(torch.float32)
    dist.broadcast(t, src=src, group=group)  # src is a global rank
    ctx.close(t, xs[src], f"{what}: broadcast from {src}")
    out = torch.full((len(members) * n,), -99.0, device=ctx.device)
    dist.all_gather_into_tensor(out, xs[ctx.rank].to(torch.float32), group=group)
    ctx.close(out, torch.cat([xs[r] for r in members]), f"{what}: all_gather_into_tensor")


def run(ctx):
    w = ctx.world
    half = max(1, w // 2)
    lo, hi = list(range(half)), list(range(half, w))
    g_lo = dist.new_group(lo)
    g_hi = dist.new_group(hi) if hi else None
    for _ in range(2):
        group_sum(ctx, g_lo, lo, "disjoint lower half")
        if hi:
            group_sum(ctx, g_hi, hi, "disjoint upper half")
        group_broadcast_gather(ctx, g_lo, lo, "disjoint lower half")
        if hi:
            group_broadcast_gather(ctx, g_hi, hi, "disjoint upper half")

    if w >= 2:
        a, b, c = list(range(w - 1)), list(range(1, w)), list(range(w))
        g_a, g_b, g_c = dist.new_group(a), dist.new_group(b), dist.new_group(c)
        for i in range(3):
            group_sum(ctx, g_a, a, f"overlapping A round {i}")
            group_sum(ctx, g_c, c, f"overlapping C round {i}", n=(1 << 20) + 1)
            group_sum(ctx, g_b, b, f"overlapping B round {i}")
        group_broadcast_gather(ctx, g_c, c, "overlapping C")
        ctx.sync()
        dist.destroy_process_group(g_c)
        group_sum(ctx, g_a, a, "A after C was destroyed")
        group_sum(ctx, g_b, b, "B after C was destroyed")
        group_sum(ctx, None, c, "world after C was destroyed")
    ctx.sync()
    ctx.log("groups: done")


if __name__ == "__main__":
    main_single(run)
