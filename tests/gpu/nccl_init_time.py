#!/usr/bin/env python3
"""Times ncclCommInitRank, the first all-reduce and ncclCommDestroy of one libnccl.so.2 (given by
path), one spawned process per GPU, without torch (so nothing else loads a libnccl).

  nccl_init_time.py --lib /path/to/libnccl.so.2 [--ngpus N] [--reps R] [--timeout S]

Every repetition makes a new unique id on rank 0, then all ranks start ncclCommInitRank after a
barrier; a rank's time is its own, the repetition's time is the slowest rank's. Repetition 0 is
'cold' (first use of the library in the process); the others are summarised by their median.
The all-reduce sums rank+1 over one float and is checked. Prints INIT lines, then INIT_SUMMARY.
Exit status: 0 when every repetition initialised, reduced correctly and destroyed in time.
"""
import argparse
import ctypes
import glob
import multiprocessing as mp
import os
import statistics
import sys
import time


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def load_cudart():
    candidates = [os.environ.get("CUDART_LIB", "")]
    candidates += sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so*"))
    for base in sys.path:
        candidates += sorted(glob.glob(os.path.join(base, "nvidia", "*", "lib", "libcudart.so*")))
    for path in candidates:
        if path and os.path.exists(path):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    raise RuntimeError("libcudart not found (set CUDART_LIB)")


def load_nccl(path):
    lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(UniqueId)]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
    lib.ncclCommDestroy.argtypes = [ctypes.c_void_p]
    lib.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    lib.ncclGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
    return lib


def nccl_ok(lib, rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} failed: {rc} ({lib.ncclGetErrorString(rc).decode()})")


def cuda_ok(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what} failed: cudaError {rc}")


def rank_main(rank, n, reps, libpath, id_queues, barrier, results):
    try:
        cudart = load_cudart()
        cuda_ok(cudart.cudaSetDevice(rank), "cudaSetDevice")
        cuda_ok(cudart.cudaFree(ctypes.c_void_p(0)), "cudaFree(0)")  # context made before timing
        nccl = load_nccl(libpath)
        version = ctypes.c_int(0)
        nccl_ok(nccl, nccl.ncclGetVersion(ctypes.byref(version)), "ncclGetVersion")
        buf = ctypes.c_void_p()
        cuda_ok(cudart.cudaMalloc(ctypes.byref(buf), ctypes.c_size_t(8)), "cudaMalloc")
        for rep in range(reps):
            uid = UniqueId()
            if rank == 0:
                nccl_ok(nccl, nccl.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
                for q in id_queues[1:]:
                    q.put(ctypes.string_at(ctypes.addressof(uid), 128))  # raw, NULs included
            else:
                ctypes.memmove(ctypes.byref(uid), id_queues[rank].get(timeout=60), 128)
            value = ctypes.c_float(rank + 1)
            cuda_ok(cudart.cudaMemcpy(buf, ctypes.byref(value), ctypes.c_size_t(4), 1), "cudaMemcpy H2D")
            barrier.wait(timeout=60)
            comm = ctypes.c_void_p()
            t0 = time.perf_counter()
            nccl_ok(nccl, nccl.ncclCommInitRank(ctypes.byref(comm), n, uid, rank), "ncclCommInitRank")
            t1 = time.perf_counter()
            nccl_ok(nccl, nccl.ncclAllReduce(buf, buf, 1, 7, 0, comm, None), "ncclAllReduce")  # float, sum
            cuda_ok(cudart.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
            t2 = time.perf_counter()
            cuda_ok(cudart.cudaMemcpy(ctypes.byref(value), buf, ctypes.c_size_t(4), 2), "cudaMemcpy D2H")
            barrier.wait(timeout=60)
            t3 = time.perf_counter()
            nccl_ok(nccl, nccl.ncclCommDestroy(comm), "ncclCommDestroy")
            t4 = time.perf_counter()
            want = n * (n + 1) / 2
            results.put((rank, rep, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t4 - t3) * 1e3,
                         value.value == want, version.value, ""))
    except Exception as e:  # reported by the parent; the other ranks time out on the barrier
        results.put((rank, -1, 0, 0, 0, False, 0, repr(e)))
        barrier.abort()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--ngpus", type=int, default=0)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    n = a.ngpus
    if n <= 0:
        count = ctypes.c_int(0)
        # Counting devices in this (parent) process is fine: the ranks are spawned, not forked.
        load_cudart().cudaGetDeviceCount(ctypes.byref(count))
        n = count.value
    if n <= 0:
        print("no GPU", flush=True)
        return 1
    ctx = mp.get_context("spawn")
    id_queues = [ctx.Queue() for _ in range(n)]
    barrier = ctx.Barrier(n)
    results = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, n, a.reps, a.lib, id_queues, barrier, results))
             for r in range(n)]
    for p in procs:
        p.start()
    rows, errors = {}, []
    deadline = time.time() + a.timeout
    expected = n * a.reps
    while len(rows) < expected and time.time() < deadline:
        try:
            rank, rep, init_ms, ar_ms, destroy_ms, ok, version, err = results.get(timeout=1)
        except Exception:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
            continue
        if rep < 0:
            errors.append(f"rank {rank}: {err}")
            continue
        rows[(rank, rep)] = (init_ms, ar_ms, destroy_ms, ok, version)
    for p in procs:
        p.join(timeout=max(1.0, deadline - time.time()))
        if p.is_alive():
            p.kill()
    print(f"# lib={os.path.realpath(a.lib)} ranks={n} reps={a.reps}")
    per_rep = []
    for rep in range(a.reps):
        got = [rows[(r, rep)] for r in range(n) if (r, rep) in rows]
        if len(got) < n:
            break
        init_ms = max(g[0] for g in got)
        ar_ms = max(g[1] for g in got)
        destroy_ms = max(g[2] for g in got)
        ok = all(g[3] for g in got)
        per_rep.append((init_ms, ar_ms, destroy_ms, ok))
        print(f"INIT rep={rep} init_ms={init_ms:.2f} first_allreduce_ms={ar_ms:.2f} "
              f"destroy_ms={destroy_ms:.2f} sum_ok={int(ok)} version={got[0][4]}")
    for e in errors:
        print("ERROR " + e)
    complete = len(per_rep) == a.reps and not errors
    if per_rep:
        warm = per_rep[1:] or per_rep
        print("INIT_SUMMARY "
              f"cold_init_ms={per_rep[0][0]:.2f} "
              f"warm_init_ms={statistics.median(r[0] for r in warm):.2f} "
              f"first_allreduce_ms={statistics.median(r[1] for r in warm):.2f} "
              f"destroy_ms={statistics.median(r[2] for r in warm):.2f}")
    ok = complete and all(r[3] for r in per_rep)
    print("INIT_RESULT " + ("PASS" if ok else "FAIL"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
