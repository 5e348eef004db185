"""Point-to-point around a ring: blocking send/recv and unbatched isend/irecv, both ordered by rank
parity, and batch_isend_irecv sending to both neighbours at once. With 2 ranks both neighbours are
the same peer, which also checks that messages to one peer arrive in the order they were posted.

Under NCCL's rules an unbatched send (isend included: it is its own ncclSend on the stream) waits
for the matching receive, so a ring where every rank posts its send first, or its receive first,
blocks every rank. Unbatched patterns here are ordered by parity: even ranks send then receive, odd
ranks receive then send (also deadlock-free for an odd world: rank 0 sends to an odd rank first).
Only batch_isend_irecv posts sends and receives concurrently.

Run by suite.py, or alone: torchrun --standalone --nproc_per_node=N p2p.py"""
import torch
import torch.distributed as dist

from baton_common import main_single


def run(ctx):
    w, me = ctx.world, ctx.rank
    if w < 2:
        ctx.log("p2p: skipped, needs 2 ranks")
        return
    nxt, prv = (me + 1) % w, (me - 1) % w
    for n in (1, 4099, (1 << 20) + 7):
        seed = ctx.next_seed()
        xs = ctx.all_inputs(seed, n, -100, 100)
        ys = ctx.all_inputs(seed + 50000, n, -100, 100)

        # Blocking send/recv, parity-ordered.
        got = torch.full((n,), -999.0, device=ctx.device)
        if me % 2 == 0:
            dist.send(xs[me].to(torch.float32), dst=nxt)
            dist.recv(got, src=prv)
        else:
            dist.recv(got, src=prv)
            dist.send(xs[me].to(torch.float32), dst=nxt)
        ctx.close(got, xs[prv], f"send/recv ring n={n}")

        # Unbatched isend / irecv, parity-ordered like send/recv; waited for only after both posts.
        got = torch.full((n,), -999.0, device=ctx.device)
        src = xs[me].to(torch.float32)
        if me % 2 == 0:
            reqs = [dist.isend(src, dst=nxt), dist.irecv(got, src=prv)]
        else:
            reqs = [dist.irecv(got, src=prv), dist.isend(src, dst=nxt)]
        for r in reqs:
            r.wait()
        ctx.sync()
        ctx.close(got, xs[prv], f"isend/irecv ring n={n}")

        # batch_isend_irecv, both directions: A goes to the next rank, B to the previous one.
        a, b = xs[me].to(torch.float32), ys[me].to(torch.float32)
        from_prev = torch.full((n,), -999.0, device=ctx.device)
        from_next = torch.full((n,), -999.0, device=ctx.device)
        ops = [
            dist.P2POp(dist.isend, a, nxt),
            dist.P2POp(dist.isend, b, prv),
            dist.P2POp(dist.irecv, from_prev, prv),
            dist.P2POp(dist.irecv, from_next, nxt),
        ]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        ctx.close(from_prev, xs[prv], f"batch_isend_irecv from previous n={n}")
        ctx.close(from_next, ys[nxt], f"batch_isend_irecv from next n={n}")
    ctx.sync()
    ctx.log("p2p: done")


if __name__ == "__main__":
    main_single(run)
