#!/usr/bin/env python3
"""fit_model.py: the tuning model (src/topo/tuning.c) against graph-replay times of every algorithm.

  fit_model.py extract LOGS_DIR RUN COMMIT > FILE
      FILE in tests/data/tuning's format from a sweep's logs (tests/gpu/sweep.sh; cases named
      <Algo><Proto>.<coll><ngpus>, e.g. RingSimple.ar4, each with NCCL_ALGO/NCCL_PROTO forced and
      its TUNING log tun.<case>.<pid>, as tests/gpu/cases/r47.cases): one line per point the
      library ran as named: ranks collective bytes algo proto channels us
  fit_model.py fit FILE      fits the constants, family by family, and prints them (tuning.c's
                             names); needs scipy
  fit_model.py check FILE    the model's choice at every (ranks, collective, bytes): its price, the
                             measured time of that choice, the fastest measured
  fit_model.py compare FILE  this copy's price against tuning.c's at each line of FILE, "ranks
                             collective bytes algo proto channels us" (the C model's price to
                             0.1 us, as its INFO line prints it: tests/tools/check_model_copy.sh);
                             exits 1 if any differs by more than that rounding

The model written here must be kept equal to tuning.c's (test_coll_plan holds the C model to the
same file). Each family is fitted on the points where it is within 25 % of the fastest measured;
elsewhere only a price more than 3 % below what it took counts (a slow algorithm priced high is
harmless; priced low, it would be chosen)."""
import collections
import glob
import math
import os
import re
import sys

LINK = 18 * 20.6  # stage_read_gbs of an H100 (NV18), as res_gpu.c and test_coll_plan set it
LAT = 0.8  # RES_GPU_NVL_LAT_US
NCH = 62  # the communicator's channels on these machines
HALF = 8 << 20  # a staging half (NCCL_BATON_STAGE_BYTES' default)
SIMPLE_CHAN_GBS = 12.0  # tuning.c's simple_chan_gbs
FUNCS = {"broadcast": 0, "reduce": 1, "all_gather": 2, "reduce_scatter": 3, "all_reduce": 4}
BC, RD, AG, RS, AR = range(5)
ALGOS = ["Tree", "Ring", "OneShot", "TwoShot"]
PROTOS = ["LL", "LL128", "Simple"]
SHORT = {"ar": "all_reduce", "ag": "all_gather", "rs": "reduce_scatter", "bc": "broadcast",
         "rd": "reduce"}

C = dict(  # tuning.c's constants; per protocol, proto_costs' fields as FAMILY_FIELD_PROTO
    # (ring_base_us_LL is proto_costs[PROTO_LL].base_us, tree_eff_LL its tree_eff)
    ring_base_us_LL=5.77, ring_base_us_LL128=5.99, ring_base_us_Simple=9.22,
    ring_step_us_LL=3.92, ring_step_us_LL128=4.07, ring_step_us_Simple=5.55,
    ring_copy_bw_LL=0.508, ring_copy_bw_LL128=0.532, ring_copy_bw_Simple=0.962,
    ring_reduce_bw_LL=0.312, ring_reduce_bw_LL128=0.247, ring_reduce_bw_Simple=0.925,
    ring_fill_steps_LL=0.665, ring_fill_steps_LL128=0.354, ring_fill_steps_Simple=0.458,
    tree_eff_LL=0.748, tree_eff_LL128=0.548, tree_eff_Simple=0.828,
    chain_base_us_BC=10.79, chain_base_us_RD=11.88, chain_bw_BC=0.897, chain_bw_RD=0.910,
    chain_ll_step_share=0.122, chain_ll_reduce_us=1.98,
    direct_base_us=5.67, direct_peer_us=1.19, direct_bc_less_us=1.95, direct_bw=0.0393,
    stage_base_us=0.53, stage_rs_us=1.61, stage_barrier_us=5.8, stage_reduce_src_us=0.566,
    stage_copy_peer_us=0.803, stage_copy_bytes_per_us=1151000.0,
    stage_combine_bytes_per_us=1123000.0, stage_pull_share=1.115, stage_duplex=0.214, stage_serve_share=1.13)
FILL_CAP = {"LL": 64 << 10, "LL128": 64 << 10, "Simple": 512 << 10}
HOP_FACTOR = {"LL": 1.5, "LL128": 2.0, "Simple": 2.0}
FAMILIES = {
    "ring": [k for k in C if k.startswith("ring_") or k.startswith("chain_ll")],
    "tree": [k for k in C if k.startswith("tree_")],
    "chain": ["chain_base_us_BC", "chain_base_us_RD", "chain_bw_BC", "chain_bw_RD"],
    "direct": [k for k in C if k.startswith("direct_")],
    "stage": [k for k in C if k.startswith("stage_")],
}


def ceil_log2(n):
    return 0 if n <= 1 else math.ceil(math.log2(n))


def supported(f, algo, proto, n):
    if algo == "Ring":
        return True
    if algo == "Tree":
        return f == AR
    if algo == "OneShot":
        return (f != RD or proto == "Simple") and 2 <= n <= 8
    return f == AR and 2 <= n <= 8  # TwoShot


def op_channels(b, algo, proto):
    """coll_op_nchannels and coll_plan_choose's caps (COLL_MIN_CHANNEL_BYTES 4 KiB, 48 channels
    below 16 MiB, COLL_DIRECT_MAX_CHANNELS 8 for the LL direct algorithms)."""
    want = max(1, min((b + 4095) // 4096, NCH))
    if b < (16 << 20):
        want = min(want, 48)
    if algo in ("OneShot", "TwoShot") and proto != "Simple":
        want = min(want, 8)
    return want


def stage_time(p, n, f, algo, b):
    barriers = 1
    if f == AG:
        copy = staged = b / n; inn = out = (n - 1) / n * b; lat = (n - 1) * p["stage_copy_peer_us"]
        comb = 0
    elif f == RS:
        copy = staged = b; inn = out = (n - 1) / n * b; lat = n * p["stage_reduce_src_us"]; comb = b
    elif f == BC:
        copy = staged = b; inn = b; out = (n - 1) * b; lat = p["stage_copy_peer_us"]; comb = 0
    elif f == RD:
        copy = staged = b; inn = (n - 1) * b; out = b; lat = n * p["stage_reduce_src_us"]
        comb = n * b
    elif algo == "TwoShot":
        copy = staged = b; inn = out = 2.0 * (n - 1) / n * b; barriers = 2
        lat = n * p["stage_reduce_src_us"] + (n - 1) * p["stage_copy_peer_us"]; comb = b
    else:
        copy = staged = b; inn = out = (n - 1) * b; lat = n * p["stage_reduce_src_us"]; comb = n * b
    rounds = max(1, (int(staged) + HALF - 1) // HALF) if staged > 0 else 1
    link = LINK * 1e3
    pull = inn / (link * p["stage_pull_share"])
    serve = out / (link * p["stage_serve_share"])
    duplex = 0.0 if f in (BC, RD) else p["stage_duplex"] * inn / link  # pulls and serves at once
    return (p["stage_base_us"] + (p["stage_rs_us"] if f == RS else 0)
            + rounds * (barriers * p["stage_barrier_us"] + lat) + copy / p["stage_copy_bytes_per_us"]
            + comb / p["stage_combine_bytes_per_us"] + max(pull, serve) + duplex)


def model(p, n, f, algo, proto, b, nch):
    if algo in ("OneShot", "TwoShot") and proto == "Simple":
        return stage_time(p, n, f, algo, b)
    if algo in ("OneShot", "TwoShot"):
        whole = f in (AR, BC)
        hops = 2.0 if algo == "TwoShot" else 1.0
        lb = 2.0 * (n - 1) / n * b if algo == "TwoShot" else ((n - 1) * b if whole else (n - 1) / n * b)
        lat = hops * (LAT + (n - 2) * p["direct_peer_us"])
        return (p["direct_base_us"] - (p["direct_bc_less_us"] if f == BC else 0) + lat
                + lb / (LINK * 1e3 * p["direct_bw"]))
    combines = f not in (AG, BC)
    share = p[("ring_reduce_bw_" if combines else "ring_copy_bw_") + proto]
    gbs = LINK / NCH * nch
    if proto == "Simple":  # tuning.c: up to the GPU's NVLink rate, simple_chan_gbs a channel
        gbs = max(gbs, min(LINK, SIMPLE_CHAN_GBS * nch))
    bpu = gbs * 1e3 * share
    if algo == "Tree":
        hops = 2.0 * ceil_log2(n)
        lb = (2.0 if n > 2 else 1.0) * b / p["tree_eff_" + proto]
    elif f == AR:
        hops = 1.0 if (n == 2 and proto != "Simple") else 2.0 * (n - 1)
        lb = 2.0 * (n - 1) / n * b
    elif f in (AG, RS):
        hops = n - 1; lb = (n - 1) / n * b
    else:
        hops = n - 1; lb = b
        if proto == "Simple":
            fn = "BC" if f == BC else "RD"
            return (p["chain_base_us_" + fn] + hops * LAT * HOP_FACTOR[proto]
                    + lb / (LINK * 1e3 * p["chain_bw_" + fn]))
        return (p["ring_base_us_" + proto] + hops * p["ring_step_us_" + proto] * p["chain_ll_step_share"]
                + (p["chain_ll_reduce_us"] if f == RD else 0) + lb / bpu)
    step = min(FILL_CAP[proto], b / (nch * n))
    return (p["ring_base_us_" + proto] + hops * p["ring_step_us_" + proto] + lb / bpu
            + p["ring_fill_steps_" + proto] * step / (bpu / nch))


def load(path):
    pts = []
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        w = line.split()
        pts.append((int(w[0]), w[1], int(w[2]), w[3], w[4], int(w[5]), float(w[6]), w[7:]))
    return pts


def by_point(pts):
    g = collections.defaultdict(dict)
    for n, coll, b, a, pr, nch, us, mark in pts:
        g[(n, coll, b)][(a, pr)] = (us, nch, mark)
    return g


def choose(p, n, coll, b):
    f = FUNCS[coll]
    best = None
    for a in ALGOS:
        for pr in PROTOS:
            if not supported(f, a, pr, n):
                continue
            if a in ("OneShot", "TwoShot") and pr != "Simple" and b > (512 << 10):
                continue  # COLL_DIRECT_MAX_BYTES
            t = model(p, n, f, a, pr, b, op_channels(b, a, pr))
            if best is None or t < best[0]:
                best = (t, a, pr)
    return best


def family(f, a, pr):
    if a in ("OneShot", "TwoShot"):
        return "stage" if pr == "Simple" else "direct"
    if a == "Tree":
        return "tree"
    return "chain" if f in (BC, RD) and pr == "Simple" else "ring"


def extract(logs, run, commit):
    print("# ranks collective bytes algo proto channels us: CUDA-graph replay (nccl-tests -G 10 -n 10,")
    print("# float, out of place), the algorithm and protocol forced, from docs/gpu-results.md run %s" % run)
    print("# (library %s); only the points the library ran as named (its TUNING line)." % commit)
    for log in sorted(glob.glob(os.path.join(logs, "*.*.log"))):
        case = os.path.basename(log)[:-4]
        var, cs = case.split(".")
        m = re.match(r"(Tree|Ring|OneShot|TwoShot)(LL128|LL|Simple)$", var)
        if not m:
            continue
        n, coll = int(cs[-1]), SHORT[cs[:-1]]
        ran = {}
        for t in glob.glob(os.path.join(logs, "tun.%s.*" % case)):
            for line in open(t):
                r = re.search(r"INFO \w+: (\d+) bytes -> algo (\w+) proto (\w+) nchannels (\d+)", line)
                if r and int(r.group(1)) not in ran:
                    ran[int(r.group(1))] = (r.group(2), r.group(3), int(r.group(4)))
        for line in open(log):
            w = line.split()
            if len(w) >= 12 and w[0].isdigit() and w[1].isdigit() and int(w[0]) > 0:
                b = int(w[0])
                if ran.get(b, ("", "", 0))[:2] == (m.group(1), m.group(2)):
                    print("%d %s %d %s %s %d %s" % (n, coll, b, m.group(1), m.group(2), ran[b][2], w[5]))


def residuals(p, pts, fams):
    g = by_point(pts)
    r = []
    for (n, coll, b), vs in g.items():
        best = min(v[0] for v in vs.values())
        f = FUNCS[coll]
        for (a, pr), (us, nch, mark) in vs.items():
            if family(f, a, pr) not in fams:
                continue
            e = (model(p, n, f, a, pr, b, nch) - us) / us
            whole = family(f, a, pr) in ("ring", "tree")  # held everywhere: they extrapolate
            r.append(e if whole or us <= 1.25 * best else min(0.0, e + 0.03))
    return r


def fit(path):
    try:
        import numpy as np
        from scipy.optimize import least_squares
    except ImportError:
        sys.exit("fit_model.py fit needs numpy and scipy (pip install scipy)")
    pts = load(path)
    p = dict(C)
    for fam, keys in FAMILIES.items():
        def f(y, keys=keys):
            q = dict(p)
            q.update(zip(keys, y))
            return np.array(residuals(q, pts, [fam]))
        res = least_squares(f, [p[k] for k in keys], bounds=(1e-6, np.inf), x_scale="jac")
        p.update(zip(keys, res.x))
    for k in C:
        print("%-28s %12.4g -> %12.4g" % (k, C[k], p[k]))
    return p


def check(path, p=C):
    g = by_point(load(path))
    out, slow = 0, []
    for (n, coll, b) in sorted(g):
        vs = g[(n, coll, b)]
        t, a, pr = choose(p, n, coll, b)
        best = min(vs, key=lambda k: vs[k][0])
        if (a, pr) not in vs:
            print("%d %-14s %11d %s%s not measured" % (n, coll, b, a, pr))
            continue
        us = vs[(a, pr)][0]
        e = (t - us) / us
        out += abs(e) > 0.15
        slow.append(us / vs[best][0])
        print("%d %-14s %11d %-13s model %9.2f measured %9.2f %+4.0f%%%s  fastest %s%s %.2f (x%.3f)"
              % (n, coll, b, a + pr, t, us, 100 * e, " OUT" if abs(e) > 0.15 else "    ", best[0],
                 best[1], vs[best][0], us / vs[best][0]))
    print("%d of %d choices outside 15 %%; the choices take %.4f of the fastest (geomean), %.3f at worst"
          % (out, len(slow), math.exp(sum(map(math.log, slow)) / len(slow)), max(slow)))


def compare(path):
    bad = n = 0
    for line in open(path):
        f = line.split()
        if len(f) != 7:
            continue
        ranks, coll, b, algo, proto, nch, c_us = int(f[0]), f[1], int(f[2]), f[3], f[4], int(f[5]), float(f[6])
        py_us = model(C, ranks, FUNCS[coll], algo, proto, b, nch)
        n += 1
        if abs(py_us - c_us) > 0.051 + 1e-4 * c_us:
            bad += 1
            print("DIFFERS %d ranks %s %d bytes %s/%s on %d channels: tuning.c %.1f us, fit_model.py %.2f"
                  % (ranks, coll, b, algo, proto, nch, c_us, py_us))
    print("%d prices compared, %d differ" % (n, bad))
    return 1 if bad or n == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "extract":
        extract(sys.argv[2], sys.argv[3], sys.argv[4])
    elif len(sys.argv) == 3 and sys.argv[1] == "fit":
        check(sys.argv[2], fit(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2]))
    else:
        sys.exit(__doc__)
