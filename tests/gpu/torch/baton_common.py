"""Shared pieces of the torch checks under torchrun: process-group setup and teardown, the
loaded-library check, seeded inputs and a failure recorder.

A check records a failure and goes on instead of raising, so one wrong result does not leave the
other ranks waiting inside a collective; the suite exits nonzero when any rank saw a failure.
Inputs are small integers drawn from a CUDA generator seeded by (case, rank), so every rank can
rebuild every other rank's input and compute the expected result itself in float64.

Environment read here (set by tests/gpu/run.sh):
  BATON_EXPECT_LIB  ours | stock: which libnccl must be mapped into the process
  BATON_OURS_LIB    path of Baton's libnccl.so.2 (LD_PRELOADed for 'ours')
  BATON_STOCK_LIB   path of stock's libnccl.so.2 (what torch loads by itself)
  BATON_TORCH_CPU=1 self-test of these scripts on a machine without a GPU: gloo on the CPU, the
                    checks that need NCCL or CUDA (AVG, PREMUL_SUM, CUDA graphs) skipped
"""
import ctypes
import datetime
import os
import time

import torch
import torch.distributed as dist

CPU = os.environ.get("BATON_TORCH_CPU") == "1"


class Ctx:
    def __init__(self):
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))
        self.cpu = CPU
        # Ranks beyond the GPU count share GPUs (NCCL_MULTI_RANK_GPU_ENABLE=1, run.sh SHARE_GPU=1).
        self.device = (torch.device("cpu") if CPU else
                       torch.device("cuda", self.local_rank % max(1, torch.cuda.device_count())))
        self.checks = 0
        self.failures = []
        self.seed = 0
        self.times = {}

    def sync(self):
        if not self.cpu:
            torch.cuda.synchronize(self.device)

    # ---- reporting ----------------------------------------------------------------------------
    def log(self, msg):
        if self.rank == 0:
            print(msg, flush=True)

    def check(self, ok, what):
        self.checks += 1
        if not ok:
            self.failures.append(what)
            print(f"[rank {self.rank}] FAIL {what}", flush=True)
        return bool(ok)

    def close(self, got, want, what, rtol=0.0, atol=0.0):
        """got (any dtype) against want (float64): exact when rtol == atol == 0; NaN never passes."""
        g = got.detach().to(torch.float64).reshape(-1)
        w = want.detach().to(device=g.device, dtype=torch.float64).reshape(-1)
        if g.numel() != w.numel():
            return self.check(False, f"{what}: {g.numel()} elements, expected {w.numel()}")
        if g.numel() == 0:
            return self.check(True, what)
        bad = ~torch.isclose(g, w, rtol=rtol, atol=atol, equal_nan=False)
        nbad = int(bad.sum().item())
        if nbad == 0:
            return self.check(True, what)
        i = int(bad.nonzero()[0].item())
        return self.check(False, f"{what}: {nbad}/{g.numel()} wrong, first at {i}: "
                                 f"got {g[i].item()!r} want {w[i].item()!r}")

    def probe(self, name, t):
        """Prints a fingerprint of a result whose right value is 'what stock does' (rank 0):
        run.sh compares the ABI_PROBE lines of the stock and the Baton run."""
        d = t.detach().to(torch.float64).reshape(-1)
        if self.rank == 0:
            print(f"ABI_PROBE {name} sum={d.sum().item()!r} absmax={d.abs().max().item()!r} "
                  f"first={d[0].item()!r}", flush=True)

    def next_seed(self):
        self.seed += 1
        return self.seed

    # ---- inputs -------------------------------------------------------------------------------
    def ints(self, seed, rank, n, low, high):
        """float64 tensor of n integers in [low, high), the same on every rank for (seed, rank)."""
        g = torch.Generator(device=self.device)
        g.manual_seed(seed * 1000003 + rank * 7919 + 17)
        return torch.randint(low, high, (n,), generator=g, device=self.device).to(torch.float64)

    def all_inputs(self, seed, n, low, high, nranks=None):
        return [self.ints(seed, r, n, low, high) for r in range(nranks or self.world)]


def tol(dtype):
    """Relative tolerance for a dtype: inputs are small integers, so results are near exact."""
    return {torch.float16: 1e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6}.get(dtype, 0.0)


def real(path):
    """Symlinks resolved: the build dir's python/nvidia/nccl/lib/libnccl.so.2 shim links to Baton's
    libnccl.so.2, and LD_PRELOAD names Baton's libnccl.so.2, a link to libnccl.so.2.<version>."""
    return os.path.realpath(path)


def same_file(a, b):
    if a is None or b is None:
        return False
    if real(a) == real(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def loaded_nccl_paths():
    """Real paths of the libnccl files mapped into this process, each file once."""
    paths = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "libnccl" in os.path.basename(parts[5].strip()):
                p = real(parts[5].strip())
                if not any(same_file(p, q) for q in paths):
                    paths.append(p)
    return sorted(paths)


def check_library(ctx):
    """The libnccl mapped into this process must be the one the run asked for. Paths compare as
    real files, so torch's preload of <build>/python/nvidia/nccl/lib/libnccl.so.2 (a link to ours)
    and LD_PRELOAD=<build>/libnccl.so.2 count as one library."""
    expect = os.environ.get("BATON_EXPECT_LIB", "")
    ours = os.environ.get("BATON_OURS_LIB")
    stock = os.environ.get("BATON_STOCK_LIB")
    ours = real(ours) if ours else None
    stock = real(stock) if stock else None
    paths = loaded_nccl_paths()
    # torch.cuda.nccl.version() is the header torch was built with (2.28.9), whichever library
    # runs: the loaded library's own ncclGetVersion says which it is (Baton: 2.32.3's 23203)
    version = torch.cuda.nccl.version()
    ctx.log(f"libnccl mapped: {paths}; torch.cuda.nccl.version() = {version}; expected {expect or '?'}")
    ctx.check(tuple(version[:3]) == (2, 28, 9),
              f"torch: torch.cuda.nccl.version() = {version}, want 2.28.9 (its build's header)")
    want_code = {"ours": 23203, "stock": 22809}.get(expect)
    for p in paths:
        code = ctypes.c_int(0)
        rc = ctypes.CDLL(p).ncclGetVersion(ctypes.byref(code))
        ctx.log(f"{p}: ncclGetVersion = {code.value} (rc {rc})")
        ctx.check(rc == 0 and (want_code is None or code.value == want_code),
                  f"library: {p} ncclGetVersion = {code.value} (rc {rc}), want {want_code}")

    def is_ours(p):
        return same_file(p, ours)

    def is_stock(p):
        return same_file(p, stock) if stock else os.path.join("nvidia", "nccl") in p

    if expect == "ours":
        ctx.check(ours is not None and paths and all(is_ours(p) for p in paths),
                  f"library: expected only Baton ({ours}) mapped, found {paths}")
    elif expect == "stock":
        ctx.check(paths and all(is_stock(p) and not is_ours(p) for p in paths),
                  f"library: expected only stock ({stock}) mapped, found {paths}")
    else:
        ctx.check(len(paths) == 1, f"library: one libnccl expected, found {paths}")


def setup(use_device_id=True, timeout_s=120):
    """init_process_group (eager when device_id is given), then the library check."""
    ctx = Ctx()
    if not ctx.cpu:
        torch.cuda.set_device(ctx.device)
    kwargs = {"backend": "gloo" if ctx.cpu else "nccl", "timeout": datetime.timedelta(seconds=timeout_s)}
    if use_device_id and not ctx.cpu:
        kwargs["device_id"] = ctx.device
    t0 = time.perf_counter()
    dist.init_process_group(**kwargs)
    ctx.times["init_process_group_ms"] = (time.perf_counter() - t0) * 1e3
    ctx.check(dist.get_rank() == ctx.rank and dist.get_world_size() == ctx.world,
              f"rank/world {dist.get_rank()}/{dist.get_world_size()}, want {ctx.rank}/{ctx.world}")
    t0 = time.perf_counter()
    x = torch.full((4,), float(ctx.rank + 1), device=ctx.device)
    dist.all_reduce(x)
    ctx.sync()
    ctx.times["first_all_reduce_ms"] = (time.perf_counter() - t0) * 1e3
    ctx.close(x, torch.full((4,), ctx.world * (ctx.world + 1) / 2.0), "first all_reduce")
    check_library(ctx)
    nb = os.environ.get("TORCH_NCCL_USE_COMM_NONBLOCKING", "0")
    ctx.log(f"init: world={ctx.world} device_id={'yes' if use_device_id else 'no'} nonblocking={nb} "
            f"init {ctx.times['init_process_group_ms']:.1f} ms, first all_reduce "
            f"{ctx.times['first_all_reduce_ms']:.1f} ms")
    return ctx


def finish(ctx):
    """Adds up failures over all ranks, destroys the process group (timed), returns the exit code."""
    total = torch.tensor([len(ctx.failures)], device=ctx.device, dtype=torch.int64)
    dist.all_reduce(total)
    ctx.sync()
    total_failures = int(total.item())
    t0 = time.perf_counter()
    dist.destroy_process_group()
    destroy_ms = (time.perf_counter() - t0) * 1e3
    ctx.check(destroy_ms < 30000, f"destroy_process_group took {destroy_ms:.0f} ms")
    ctx.log(f"destroy_process_group {destroy_ms:.1f} ms")
    if ctx.rank == 0:
        verdict = "PASS" if total_failures == 0 and not ctx.failures else "FAIL"
        print(f"TORCH_SUITE {verdict} checks={ctx.checks} failures_all_ranks={total_failures} "
              f"init_ms={ctx.times.get('init_process_group_ms', 0):.1f} destroy_ms={destroy_ms:.1f}",
              flush=True)
    return 0 if total_failures == 0 and not ctx.failures else 1


def main_single(run):
    """Runs one test module's run(ctx) by itself under torchrun (with device_id)."""
    import sys

    ctx = setup(use_device_id=True)
    run(ctx)
    sys.exit(finish(ctx))
