#!/usr/bin/env python3
"""Draws baton-perf's JSON (--json): bus bandwidth and time against message size, one pair of
panels per collective, one line per library (out-of-place; in-place dashed).

usage: baton_plot.py RESULTS.json OUT.png|OUT.svg"""
import json
import os
import sys


def main(argv):
    if len(argv) != 3 or not argv[2].endswith((".png", ".svg")):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # A python3 of its own (pyenv, a virtualenv) may lack what the system's has.
        system = "/usr/bin/python3"
        if os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system) \
                and not os.environ.get("BATON_PLOT_REEXEC"):
            os.environ["BATON_PLOT_REEXEC"] = "1"
            os.execv(system, [system] + argv)
        print("baton-perf --plot: matplotlib is not installed (Debian: apt-get install "
              "python3-matplotlib; or pip install matplotlib)", file=sys.stderr)
        return 3
    with open(argv[1]) as f:
        data = json.load(f)
    libs = data["libraries"]
    colls = []
    for lib in libs:
        for r in lib["results"]:
            if r["collective"] not in colls:
                colls.append(r["collective"])
    fig, axes = plt.subplots(len(colls), 2, figsize=(11, 3.6 * len(colls)), squeeze=False)
    where = "GPUs" if data["executor"] == "gpu" else "host-executor ranks"
    for row, coll in enumerate(colls):
        bw_ax, t_ax = axes[row]
        for i, lib in enumerate(libs):
            name = lib["description"].split(": ", 1)[-1].split(" (")[0]
            label = "%s: %s" % ("AB"[i], name)
            for in_place, style in ((False, "-"), (True, "--")):
                pts = sorted((r["bytes"], r["busbw_gbs"], r["time_us"]) for r in lib["results"]
                             if r["collective"] == coll and r["in_place"] == in_place)
                if not pts:
                    continue
                sizes = [p[0] for p in pts]
                suffix = " (in place)" if in_place else ""
                bw_ax.plot(sizes, [p[1] for p in pts], style, marker="o", markersize=3,
                           color="C%d" % i, label=label + suffix)
                t_ax.plot(sizes, [p[2] for p in pts], style, marker="o", markersize=3,
                          color="C%d" % i, label=label + suffix)
        for ax, ylabel in ((bw_ax, "bus bandwidth (GB/s)"), (t_ax, "time (us)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.set_ylabel(ylabel)
            ax.set_title("%s, %d %s" % (coll, data["nranks"], where))
            ax.grid(True, which="both", alpha=0.3)
        t_ax.set_yscale("log")
        bw_ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
