#!/usr/bin/env python3
"""Reads the logs that tests/gpu/run.sh writes and judges them. Standard library only.

  parse_nccl_tests.py check LOG [--expect-lib ours|stock]
      One nccl-tests run: counts result rows and #wrong, looks for failure lines, and names the
      library that printed the NCCL_DEBUG=VERSION banner. Prints one line; exit 0 = pass.

  parse_nccl_tests.py onegpu --dir LOGDIR --out onegpu.md
      One rank on one GPU (issue 17): onegpu/<coll>.<lib>.log sweeps side by side, out-of-place and
      in-place apart (speed ours/stock = stock time / our time; PASS when >= 0.9 at every size
      out of place), and onegpu/graph.<coll>.<lib>[.<n>].log (nccl-tests -G: CUDA-graph replay, the
      GPU's time alone; PASS when ours <= 1.5x stock's). Prints RESULT and SUMMARY lines too.

  parse_nccl_tests.py compare --dir LOGDIR --out perf.md [--ngpus N]
      Stock against Baton: perf/<coll>.<lib>.log (nccl-tests), torch/bench.<lib>.log (torch sweep),
      init/*.<lib>*.log (communicator init/destroy). Writes perf.md and prints RESULT lines
      (RESULT<TAB>stage<TAB>name<TAB>PASS|FAIL|MET|MISS<TAB>note) and a short SUMMARY block.

Ratios are ours/stock. Time of a size = mean of the out-of-place and in-place times (whichever
are printed); bus bandwidth likewise. Small messages are 0 < size <= 64 KiB, large ones
size >= 64 MiB.
  target (DEVELOPERS.md): geomean latency ratio <= 0.5 on small, geomean busbw ratio >= 1.05 on
                          large. Reported as MET/MISS, not as a failure.
  floor (issue 4):        every small size latency ratio <= 1.5, every large size busbw ratio
                          >= 0.8. Reported as PASS/FAIL.
"""
import argparse
import glob
import math
import os
import re
import sys

SMALL_MAX = 64 * 1024
LARGE_MIN = 64 * 1024 * 1024
TARGET_LAT, TARGET_BW = 0.5, 1.05
FLOOR_LAT, FLOOR_BW = 1.5, 0.8

FAIL_PATTERNS = [
    re.compile(p)
    for p in (
        r"Test NCCL failure",
        r"Test CUDA failure",
        r"Test failure",
        r"Test timeout",
        r"#wrong=\s*[1-9]",
        r"Out of bounds values\s*:\s*[1-9]",
        r"Segmentation fault",
        r"core dumped",
        r"Aborted",
        r"terminate called",
    )
]
BANNER = re.compile(r"NCCL version (\S+)")


def number(tok):
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def half_of(tokens):
    """time algbw busbw #wrong of one half; 'N/A' (not measured, or not checked) reads as None.
    None for the whole half when a token is neither a number nor N/A."""
    vals = []
    for tok in tokens:
        v = number(tok)
        if v is None and tok != "N/A":
            return None
        vals.append(v)
    time_us, algbw, busbw, wrong = vals
    return {"time": time_us, "algbw": algbw, "busbw": busbw,
            "wrong": None if wrong is None else int(wrong)}


def parse_rows(text):
    """nccl-tests table rows, read from both ends: size and count first, then type, redop, root
    (redop is empty in some tests, e.g. hypercube_perf), and last (time algbw busbw #wrong) for
    the out-of-place then the in-place run."""
    rows = []
    for line in text.splitlines():
        t = line.split()
        if len(t) < 11 or not t[0].isdigit() or not t[1].isdigit():
            continue
        middle = t[2:-8]  # type [redop] root
        if not 2 <= len(middle) <= 3 or number(middle[0]) is not None or number(middle[-1]) is None:
            continue
        oop, ip = half_of(t[-8:-4]), half_of(t[-4:])
        if oop is None or ip is None or (oop["time"] is None and ip["time"] is None):
            continue
        rows.append({"size": int(t[0]), "type": middle[0], "op": middle[1] if len(middle) == 3 else None,
                     "oop": oop, "ip": ip})
    return rows


def library_of(text):
    """'ours' when the banner names Baton, 'stock' for another banner, None without one."""
    versions = BANNER.findall(text)
    if not versions:
        return None
    if any("baton" in v.lower() for v in versions):
        return "ours" if all("baton" in v.lower() for v in versions) else "mixed"
    return "stock"


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def cmd_check(args):
    text = read(args.log)
    rows = parse_rows(text)
    wrong = sum(h["wrong"] or 0 for r in rows for h in (r["oop"], r["ip"]))
    fails = sorted({p.pattern for p in FAIL_PATTERNS if p.search(text)})
    lib = library_of(text)
    rcs = re.findall(r"^# rc=(\d+)", text, re.M)  # written by run.sh after the command
    rc = int(rcs[-1]) if rcs else None
    problems = []
    if not rows:
        problems.append("no result rows")
    if wrong:
        problems.append(f"{wrong} wrong")
    if fails:
        problems.append("log has: " + ", ".join(fails))
    if rc not in (None, 0):
        problems.append("timed out" if rc in (124, 137) else f"exit {rc}")
    versions = re.search(r"nccl-headers=(\d+) nccl-library=(\d+)", text)
    # A library older than the headers nccl-tests was built with is wrong; a newer one (Baton says
    # 2.32.3 under nccl-tests built against stock 2.28.9's header) is how a drop-in is used.
    if versions and int(versions.group(2)) < int(versions.group(1)):
        problems.append(f"ncclGetVersion says {versions.group(2)}, headers {versions.group(1)}")
    if args.expect_lib and lib != args.expect_lib:
        problems.append(f"library {lib or 'unknown (no NCCL_DEBUG=VERSION banner)'}, expected {args.expect_lib}")
    print(f"rows={len(rows)} wrong={wrong} lib={lib} " + ("OK" if not problems else "; ".join(problems)))
    return 0 if not problems else 1


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def by_size(rows):
    """First row of each size (runs with one type and op have exactly one), size 0 dropped."""
    out = {}
    for r in rows:
        if r["size"] > 0 and r["size"] not in out:
            out[r["size"]] = {
                "time": mean([r["oop"]["time"], r["ip"]["time"]]),
                "busbw": mean([r["oop"]["busbw"], r["ip"]["busbw"]]),
            }
    return out


def parse_bench(text):
    """torch sweep lines: BENCH size=<bytes> time_us=<t> algbw=<x> busbw=<y> ok=<0|1>."""
    out = {}
    for m in re.finditer(r"^BENCH (.*)$", text, re.M):
        kv = dict(p.split("=", 1) for p in m.group(1).split() if "=" in p)
        try:
            out[int(kv["size"])] = {"time": float(kv["time_us"]), "busbw": float(kv["busbw"]),
                                    "ok": kv.get("ok") == "1"}
        except (KeyError, ValueError):
            continue
    return out


def fmt_size(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


class Report:
    def __init__(self):
        self.md = []
        self.results = []  # (stage, name, status, note)
        self.summary = []

    def result(self, stage, name, status, note):
        self.results.append((stage, name, status, note))

    def finish(self, out):
        """Writes the tables to out; prints the RESULT lines and the summary run.sh reads."""
        with open(out, "w") as f:
            f.write("\n".join(self.md) + "\n")
        for stage, name, status, note in self.results:
            print(f"RESULT\t{stage}\t{name}\t{status}\t{note}")
        print("SUMMARY")
        for line in self.summary:
            print("  " + line)
        return 0


def compare_tables(rep, title, stock, ours, stage, key):
    """One side-by-side table plus the target and floor verdicts for it."""
    sizes = sorted(set(stock) & set(ours))
    if not sizes:
        rep.md.append(f"\n## {title}\n\nNo sizes in common (a run is missing or failed).\n")
        rep.result(stage, f"floor:{key}", "FAIL", "no comparable data")
        return
    rep.md.append(f"\n## {title}\n")
    rep.md.append("| size | stock us | ours us | time ours/stock | stock busbw | ours busbw | busbw ours/stock |")
    rep.md.append("|---:|---:|---:|---:|---:|---:|---:|")
    lat, bw = [], []
    for s in sizes:
        a, b = stock[s], ours[s]
        tr, br = ratio(b["time"], a["time"]), ratio(b["busbw"], a["busbw"])
        if s <= SMALL_MAX and tr is not None:
            lat.append((s, tr))
        if s >= LARGE_MIN and br is not None:
            bw.append((s, br))
        rep.md.append(f"| {fmt_size(s)} | {fmt(a['time'])} | {fmt(b['time'])} | {fmt(tr, '.3f')} | "
                      f"{fmt(a['busbw'])} | {fmt(b['busbw'])} | {fmt(br, '.3f')} |")
    lat_geo, bw_geo = geomean([r for _, r in lat]), geomean([r for _, r in bw])
    lat_worst = max(lat, key=lambda x: x[1]) if lat else None
    bw_worst = min(bw, key=lambda x: x[1]) if bw else None
    notes = []
    floor_ok = True
    if lat_worst is not None:
        notes.append(f"lat<=64K geo {lat_geo:.2f}x worst {lat_worst[1]:.2f}x@{fmt_size(lat_worst[0])}")
        floor_ok &= lat_worst[1] <= FLOOR_LAT
    if bw_worst is not None:
        notes.append(f"busbw>=64M geo {bw_geo:.2f}x worst {bw_worst[1]:.2f}x@{fmt_size(bw_worst[0])}")
        floor_ok &= bw_worst[1] >= FLOOR_BW
    if lat_worst is None and bw_worst is None:
        rep.result(stage, f"floor:{key}", "FAIL", "no small or large sizes to judge")
        return
    target_ok = (lat_geo is None or lat_geo <= TARGET_LAT) and (bw_geo is None or bw_geo >= TARGET_BW)
    note = "; ".join(notes)
    rep.md.append(f"\n{note}. Floor: **{'PASS' if floor_ok else 'FAIL'}**; "
                  f"target: **{'MET' if target_ok else 'MISSED'}**.")
    rep.result(stage, f"floor:{key}", "PASS" if floor_ok else "FAIL", note)
    rep.result(stage, f"target:{key}", "MET" if target_ok else "MISS", note)
    rep.summary.append(f"{key:<16} {note}  floor {'PASS' if floor_ok else 'FAIL'}  "
                       f"target {'MET' if target_ok else 'MISS'}")


def init_numbers(logdir, lib):
    """Medians from the ctypes timer and baton-perf, for one library."""
    out = {}
    for path in sorted(glob.glob(os.path.join(logdir, "init", f"ctypes.{lib}.log"))):
        m = re.search(r"^INIT_SUMMARY (.*)$", read(path), re.M)
        if m:
            for p in m.group(1).split():
                k, _, v = p.partition("=")
                if number(v) is not None:
                    out[f"ctypes {k}"] = float(v)
    inits, destroys = [], []
    for path in sorted(glob.glob(os.path.join(logdir, "init", f"bperf.{lib}.*.log"))):
        text = read(path)
        mi = re.search(r"init ([0-9.]+) ms", text)
        md = re.search(r"# destroy ([0-9.]+) ms", text)
        if mi:
            inits.append(float(mi.group(1)))
        if md:
            destroys.append(float(md.group(1)))
    for name, vals in (("baton-perf init_ms", inits), ("baton-perf destroy_ms", destroys)):
        if vals:
            vals.sort()
            out[name] = vals[len(vals) // 2]
    return out


def cmd_compare(args):
    rep = Report()
    rep.md.append(f"# Baton vs stock NCCL: measured on {args.ngpus or '?'} GPUs\n")
    rep.md.append("Ratios are ours/stock. Time of a size = mean of out-of-place and in-place; busbw "
                  "likewise. Small = 8 B..64 KiB, large = >= 64 MiB. Target (MET/MISSED): geomean "
                  f"latency ratio <= {TARGET_LAT} on small and geomean busbw ratio >= {TARGET_BW} on "
                  f"large. Floor (PASS/FAIL): every small size <= {FLOOR_LAT}x stock latency and "
                  f"every large size >= {FLOOR_BW}x stock busbw.")
    colls = sorted({os.path.basename(p).split(".")[0]
                    for p in glob.glob(os.path.join(args.dir, "perf", "*.log"))})
    for coll in colls:
        paths = {lib: os.path.join(args.dir, "perf", f"{coll}.{lib}.log") for lib in ("stock", "ours")}
        if not all(os.path.exists(p) for p in paths.values()):
            rep.result("perf", f"floor:{coll}", "FAIL", "stock or ours log missing")
            continue
        texts = {lib: read(p) for lib, p in paths.items()}
        for lib, text in texts.items():
            got = library_of(text)
            if parse_rows(text) and got != lib:  # a run without rows has already failed
                rep.result("perf", f"library:{coll}.{lib}", "FAIL", f"banner says {got}")
        compare_tables(rep, f"nccl-tests {coll}", by_size(parse_rows(texts["stock"])),
                       by_size(parse_rows(texts["ours"])), "perf", coll)

    bench = {lib: os.path.join(args.dir, "torch", f"bench.{lib}.log") for lib in ("stock", "ours")}
    if all(os.path.exists(p) for p in bench.values()):
        tables = {lib: parse_bench(read(p)) for lib, p in bench.items()}
        bad = [f"{lib}@{fmt_size(s)}" for lib, t in tables.items() for s, v in t.items() if not v["ok"]]
        if bad:
            rep.result("torch", "bench-check", "FAIL", "wrong sums at " + ", ".join(bad[:8]))
        compare_tables(rep, "torch all_reduce (eager, float32)", tables["stock"], tables["ours"],
                       "torch", "torch_allreduce")

    inits = {lib: init_numbers(args.dir, lib) for lib in ("stock", "ours")}
    keys = sorted(set(inits["stock"]) | set(inits["ours"]))
    if keys:
        rep.md.append("\n## Communicator init / destroy (ms, median over repetitions)\n")
        rep.md.append("| measure | stock | ours | ours/stock |")
        rep.md.append("|---|---:|---:|---:|")
        for k in keys:
            a, b = inits["stock"].get(k), inits["ours"].get(k)
            rep.md.append(f"| {k} | {fmt(a)} | {fmt(b)} | {fmt(ratio(b, a), '.2f')} |")
        for k in ("ctypes warm_init_ms", "ctypes destroy_ms", "baton-perf init_ms"):
            a, b = inits["stock"].get(k), inits["ours"].get(k)
            if a is not None and b is not None:
                rep.summary.append(f"{k:<24} stock {a:8.1f} ms  ours {b:8.1f} ms  ({b / a:.2f}x)")

    return rep.finish(args.out)


ONE_SPEED_MIN = 0.9  # issue 17: at least 0.9x stock's speed at every size
ONE_GRAPH_MAX = 1.5  # issue 17: graph replay of an 8-byte all-reduce within 1.5x of stock's time


def cmd_onegpu(args):
    rep = Report()
    rep.md.append("# One rank on one GPU: Baton vs stock (issue 17)\n")
    rep.md.append("Speed ours/stock = stock's time / ours (1.00: the same; above: faster), each "
                  "size's best of the runs of each library. Out of place, both libraries copy (or "
                  "scale) the data; in place, both launch nothing and the time is the host's.")
    d = os.path.join(args.dir, "onegpu")
    colls = sorted({os.path.basename(p).split(".")[0]
                    for p in glob.glob(os.path.join(d, "*.stock*.log")) if "graph" not in p})
    for coll in colls:
        rows = {}
        for lib in ("stock", "ours"):
            rows[lib] = {}
            # repeated runs (<coll>.<lib>.<n>.log): each size's and half's best time
            for path in sorted(glob.glob(os.path.join(d, f"{coll}.{lib}.log")) +
                               glob.glob(os.path.join(d, f"{coll}.{lib}.*.log"))):
                for r in parse_rows(read(path)):
                    best = rows[lib].setdefault(r["size"], r)
                    for half in ("oop", "ip"):
                        t = r[half]["time"]
                        if t is not None and (best[half]["time"] is None or t < best[half]["time"]):
                            best[half] = r[half]
        sizes = sorted(set(rows["stock"]) & set(rows["ours"]))
        if not sizes:
            rep.result("onegpu", f"speed:{coll}", "FAIL", "no comparable rows")
            continue
        rep.md.append(f"\n## {coll}, one rank\n")
        rep.md.append("| size | stock oop us | ours oop us | speed oop | stock ip us | ours ip us | speed ip |")
        rep.md.append("|---:|---:|---:|---:|---:|---:|---:|")
        worst, worst_ip = None, None
        for s in sizes:
            a, b = rows["stock"][s], rows["ours"][s]
            so, oo = a["oop"]["time"], b["oop"]["time"]
            si, oi = a["ip"]["time"], b["ip"]["time"]
            sp, spi = ratio(so, oo), ratio(si, oi)
            if s > 0 and sp is not None and (worst is None or sp < worst[1]):
                worst = (s, sp)
            if s > 0 and spi is not None and (worst_ip is None or spi < worst_ip[1]):
                worst_ip = (s, spi)
            rep.md.append(f"| {fmt_size(s)} | {fmt(so)} | {fmt(oo)} | {fmt(sp)} | {fmt(si)} | {fmt(oi)} | {fmt(spi)} |")
        ok = worst is not None and worst[1] >= ONE_SPEED_MIN
        note = (f"out of place worst {worst[1]:.2f}x@{fmt_size(worst[0])}" if worst else "no sizes")
        if worst_ip:
            note += f"; in place worst {worst_ip[1]:.2f}x@{fmt_size(worst_ip[0])}"
        rep.md.append(f"\n{note}: **{'PASS' if ok else 'FAIL'}** (>= {ONE_SPEED_MIN}x at every size out of place).")
        rep.result("onegpu", f"speed:{coll}", "PASS" if ok else "FAIL", note)
        rep.summary.append(f"{coll:<12} {note}  {'PASS' if ok else 'FAIL'}")
    graphs = sorted({os.path.basename(p).split(".")[1]
                     for p in glob.glob(os.path.join(d, "graph.*.stock*.log"))})
    if graphs:
        rep.md.append("\n## CUDA-graph replay, one rank (nccl-tests -G): GPU time per operation\n")
        rep.md.append("| collective | size | stock us | ours us | ours/stock |")
        rep.md.append("|---|---:|---:|---:|---:|")
    for coll in graphs:
        t = {}
        for lib in ("stock", "ours"):
            t[lib] = {}
            # repeated runs (graph.<coll>.<lib>.<n>.log): each size's best time
            for path in (glob.glob(os.path.join(d, f"graph.{coll}.{lib}.log")) +
                         glob.glob(os.path.join(d, f"graph.{coll}.{lib}.*.log"))):
                for r in parse_rows(read(path)):
                    v = r["oop"]["time"]
                    if v is not None and (t[lib].get(r["size"]) is None or v < t[lib][r["size"]]):
                        t[lib][r["size"]] = v
        sizes = sorted(set(t["stock"]) & set(t["ours"]))
        for s in sizes:
            r = ratio(t["ours"][s], t["stock"][s])
            rep.md.append(f"| {coll} | {fmt_size(s)} | {fmt(t['stock'][s])} | {fmt(t['ours'][s])} | {fmt(r)} |")
            if s == sizes[0]:
                ok = r is not None and r <= ONE_GRAPH_MAX
                note = f"{fmt_size(s)}: stock {fmt(t['stock'][s])} us, ours {fmt(t['ours'][s])} us ({fmt(r)}x)"
                rep.result("onegpu", f"graph:{coll}", "PASS" if ok else "FAIL", note)
                rep.summary.append(f"graph {coll:<8} {note}  {'PASS' if ok else 'FAIL'}")
        if not sizes:
            rep.result("onegpu", f"graph:{coll}", "FAIL", "no comparable rows")
    return rep.finish(args.out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("log")
    c.add_argument("--expect-lib", choices=("ours", "stock"))
    p = sub.add_parser("compare")
    p.add_argument("--dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--ngpus", type=int, default=0)
    o = sub.add_parser("onegpu")
    o.add_argument("--dir", required=True)
    o.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.cmd == "check":
        return cmd_check(args)
    return cmd_onegpu(args) if args.cmd == "onegpu" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
