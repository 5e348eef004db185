"""A small DDP model trained 50 steps with a fixed seed: AMP (float16 autocast + GradScaler),
bucket_cap_mb=1 (several buckets), gradient_as_bucket_view=True, and gradient accumulation over
2 micro-batches with no_sync on the first.

Checks, on top of the run finishing:
  * every rank ends with bit-identical parameters;
  * rank 0 trains a plain (non-DDP) replica on all ranks' micro-batches, summing the per-rank
    gradients and dividing by the world size, and its losses and final parameters must match
    DDP's to 1e-3 relative (the only difference is the order of the float32 additions);
  * the loss falls (the data is learnable).
Rank 0 writes the per-step global loss to the file named by --losses (suite.py) or
BATON_DDP_LOSSES, one 'step loss' line each, so run.sh can compare Baton's run with stock's.

Run by suite.py, or alone: torchrun --standalone --nproc_per_node=N ddp.py"""
import contextlib
import copy
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from baton_common import main_single

STEPS, ACCUM, BATCH, DIN, HIDDEN, CLASSES = 50, 2, 64, 64, 1024, 10


def make_model():
    return torch.nn.Sequential(
        torch.nn.Linear(DIN, HIDDEN), torch.nn.GELU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU(),
        torch.nn.Linear(HIDDEN, CLASSES))


def batch(ctx, teacher, step, micro, rank):
    g = torch.Generator(device=ctx.device)
    g.manual_seed(1_000_000 + step * 1000 + micro * 100 + rank)
    x = torch.randn(BATCH, DIN, generator=g, device=ctx.device)
    y = (x @ teacher).argmax(dim=1)
    return x, y


def train_step_losses(ctx, model, opt, scaler, teacher, step, ranks, ddp_model=None):
    """One optimizer step. With ddp_model: this rank's micro-batches through DDP. Without: a plain
    replica that runs every rank's micro-batches itself and averages the gradients."""
    total = torch.zeros((), device=ctx.device, dtype=torch.float32)
    for micro in range(ACCUM):
        for r in ranks:
            x, y = batch(ctx, teacher, step, micro, r)
            net = ddp_model if ddp_model is not None else model
            sync = contextlib.nullcontext()
            if ddp_model is not None and micro < ACCUM - 1:
                sync = ddp_model.no_sync()
            with sync:
                # (no autocast in the CPU self-test: bfloat16 matmuls trap on some CPUs)
                with torch.autocast(ctx.device.type, dtype=torch.float16, enabled=not ctx.cpu):
                    loss = F.cross_entropy(net(x), y) / ACCUM
                scaler.scale(loss).backward()
            total += loss.detach().float()
    if ddp_model is None:
        for p in model.parameters():
            p.grad.div_(len(ranks))
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=False)  # with gradient_as_bucket_view the grads stay bucket views
    return total


def run(ctx):
    losses_path = getattr(ctx, "opts", {}).get("losses") or os.environ.get("BATON_DDP_LOSSES")
    torch.manual_seed(1234)
    g = torch.Generator(device=ctx.device)
    g.manual_seed(4321)
    teacher = torch.randn(DIN, CLASSES, generator=g, device=ctx.device)
    model = make_model().to(ctx.device)
    replica = copy.deepcopy(model) if ctx.rank == 0 else None

    ddp_model = DDP(model, device_ids=None if ctx.cpu else [ctx.device.index], bucket_cap_mb=1,
                    gradient_as_bucket_view=True)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(ctx.device.type)
    if replica is not None:
        r_opt = torch.optim.SGD(replica.parameters(), lr=0.05, momentum=0.9)
        r_scaler = torch.amp.GradScaler(ctx.device.type)

    losses, ref_losses = [], []
    for step in range(STEPS):
        local = train_step_losses(ctx, model, opt, scaler, teacher, step, [ctx.rank], ddp_model)
        dist.all_reduce(local, op=dist.ReduceOp.AVG)
        losses.append(local.item())
        if replica is not None:
            ref = train_step_losses(ctx, replica, r_opt, r_scaler, teacher, step, list(range(ctx.world)))
            ref_losses.append(ref.item() / ctx.world)

    # Every rank must hold the same parameters, bit for bit.
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
    everyone = [torch.empty_like(flat) for _ in range(ctx.world)]
    dist.all_gather(everyone, flat)
    for r in range(ctx.world):
        ctx.check(torch.equal(everyone[r], flat), f"ddp: rank {r}'s parameters differ from rank {ctx.rank}'s")

    if ctx.rank == 0:
        worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses, ref_losses))
        ctx.check(worst <= 1e-3, f"ddp: losses differ from the single-process replica by {worst:.2e} (rel)")
        ref_flat = torch.cat([p.detach().reshape(-1).float() for p in replica.parameters()])
        pdiff = ((flat - ref_flat).abs().max() / ref_flat.abs().max().clamp_min(1e-12)).item()
        ctx.check(pdiff <= 1e-3, f"ddp: final parameters differ from the replica by {pdiff:.2e} (rel to max)")
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        ctx.check(last < 0.8 * first, f"ddp: loss did not fall ({first:.4f} -> {last:.4f})")
        ctx.log(f"ddp: loss {losses[0]:.5f} -> {losses[-1]:.5f}; vs replica: loss {worst:.2e}, params {pdiff:.2e}")
        if losses_path:
            with open(losses_path, "w") as f:
                for i, v in enumerate(losses):
                    f.write(f"{i} {v!r}\n")
    ctx.sync()


if __name__ == "__main__":
    main_single(run)
