#!/usr/bin/env python3
"""fit_stage.py: fits the staged algorithms' model (src/topo/tuning.c, stage_time_us) to sweep rows.

Usage: fit_stage.py CASES SWEEP_TSV [CASE_PREFIX ...]
  CASES      a tests/gpu/cases file; its cases with NCCL_ALGO=OneShot/TwoShot and NCCL_PROTO=Simple
             and `-G` (graph replay) are the staged rows
  SWEEP_TSV  sweep.sh's $OUT/sweep.tsv of that run
  CASE_PREFIX  only cases whose name starts with one of these (default: every staged case of LIB
             `ours`)
Prints the fitted constants (in tuning.c's names), the root-mean-square relative error and every
point's model and measurement. Pure Python (Nelder-Mead on the constants' logarithms), so it runs
on any machine; the model written here must be kept equal to tuning.c's."""
import math
import shlex
import sys

READ_GBS = 18 * 20.6  # stage_read_gbs of an H100 (NV18), as res_gpu.c and test_coll_plan set it
HALF = 8 << 20  # NCCL_BATON_STAGE_BYTES' default
NAMES = ["stage_base_us", "stage_barrier_us", "stage_reduce_src_us", "stage_copy_peer_us",
         "stage_copy_bytes_per_us", "stage_pull_share", "stage_serve_share"]
START = [1.2, 4.6, 1.2, 1.6, 4.6e5, 0.96, 1.44]


def model(p, n, func, algo, b):
    base, barrier, src, peer, copyrate, pull_share, serve_share = p
    barriers = 1
    if func == "all_gather":
        copy = staged = b / n
        inn = out = (n - 1) / n * b
        lat = (n - 1) * peer
    elif func == "reduce_scatter":
        copy = staged = b
        inn = out = (n - 1) / n * b
        lat = n * src
    elif func == "broadcast":
        copy = staged = b
        inn, out = b, (n - 1) * b
        lat = peer
    elif func == "reduce":
        copy = staged = b
        inn, out = (n - 1) * b, b
        lat = n * src
    else:
        copy = staged = b
        if algo == "TwoShot":
            inn = out = 2.0 * (n - 1) / n * b
            barriers = 2
            lat = n * src + (n - 1) * peer
        else:
            inn = out = (n - 1) * b
            lat = n * src
    rounds = max(1, math.ceil(staged / HALF))
    link = READ_GBS * 1e3
    pull, serve = inn / (link * pull_share), out / (link * serve_share)
    return base + rounds * (barriers * barrier + lat) + copy / copyrate + max(pull, serve)


def staged_cases(path, prefixes):
    cases = {}
    for line in open(path):
        if not line.strip() or line.startswith("#"):
            continue
        f = shlex.split(line)
        name, lib, n, coll, args, env = f[0], f[1], int(f[2]), f[3], f[4], f[5:]
        env = dict(e.split("=", 1) for e in env)
        if env.get("NCCL_PROTO") != "Simple" or env.get("NCCL_ALGO") not in ("OneShot", "TwoShot"):
            continue
        if "-G" not in args.split():
            continue
        if prefixes and not any(name.startswith(p) for p in prefixes):
            continue
        if not prefixes and lib != "ours":
            continue
        cases[name] = (n, coll, env["NCCL_ALGO"])
    return cases


def nelder_mead(fn, x0, iters=4000, step=0.3):
    pts = [list(x0)] + [[x + (step if i == j else 0) for j, x in enumerate(x0)]
                        for i in range(len(x0))]
    vals = [fn(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(len(pts)), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        cen = [sum(p[j] for p in pts[:-1]) / (len(pts) - 1) for j in range(len(x0))]
        refl = [c + (c - w) for c, w in zip(cen, pts[-1])]
        fr = fn(refl)
        if fr < vals[0]:
            exp = [c + 2 * (c - w) for c, w in zip(cen, pts[-1])]
            fe = fn(exp)
            pts[-1], vals[-1] = (exp, fe) if fe < fr else (refl, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = refl, fr
        else:
            con = [c + 0.5 * (w - c) for c, w in zip(cen, pts[-1])]
            fc = fn(con)
            if fc < vals[-1]:
                pts[-1], vals[-1] = con, fc
            else:
                for i in range(1, len(pts)):
                    pts[i] = [pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]) for j in range(len(x0))]
                    vals[i] = fn(pts[i])
    best = min(range(len(pts)), key=lambda i: vals[i])
    return pts[best], vals[best]


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    cases = staged_cases(sys.argv[1], sys.argv[3:])
    rows = []
    for line in open(sys.argv[2]):
        f = line.rstrip("\n").split("\t")
        if len(f) < 4 or f[0] not in cases:
            continue
        try:
            rows.append(cases[f[0]] + (int(f[2]), float(f[3]), f[0]))
        except ValueError:
            continue
    if not rows:
        print("fit_stage: no staged graph rows")
        return 1

    def loss(lp):
        p = [math.exp(x) for x in lp]
        return sum(((model(p, n, c, a, b) - us) / us) ** 2 for n, c, a, b, us, _ in rows)

    lp, val = nelder_mead(loss, [math.log(x) for x in START])
    for _ in range(3):  # restarts from the best point
        lp, val = nelder_mead(loss, lp, step=0.1)
    p = [math.exp(x) for x in lp]
    for name, v in zip(NAMES, p):
        print(f"{name} = {v:.4g}")
    print(f"# {len(rows)} points, root-mean-square relative error {math.sqrt(val / len(rows)):.1%}")
    for n, c, a, b, us, name in rows:
        m = model(p, n, c, a, b)
        print(f"{name:10s} {n} {c:15s} {a:8s} {b:>10d} model {m:8.2f} measured {us:8.2f} "
              f"{(m - us) / us:+.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
