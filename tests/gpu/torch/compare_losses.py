#!/usr/bin/env python3
"""Compares two DDP loss files written by ddp.py ('step loss' per line), e.g. stock's and Baton's.

  compare_losses.py STOCK_FILE OURS_FILE [--rtol 1e-3]

Passes when both have the same steps and every loss agrees to rtol (relative, with a 1e-6 floor
on the denominator). With 2 ranks the two libraries should agree exactly (a sum of two numbers
does not depend on order); with more ranks the summation order may differ, hence the tolerance.
Prints one line; exit 0 = pass."""
import argparse
import math
import sys


def read(path):
    out = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 2:
                out[int(parts[0])] = float(parts[1])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stock")
    ap.add_argument("ours")
    ap.add_argument("--rtol", type=float, default=1e-3)
    a = ap.parse_args()
    try:
        s, o = read(a.stock), read(a.ours)
    except OSError as e:
        print(f"losses: cannot read: {e}")
        return 1
    if not s or set(s) != set(o):
        print(f"losses: steps differ or empty (stock {len(s)}, ours {len(o)})")
        return 1
    worst, where = 0.0, None
    for k in sorted(s):
        if not (math.isfinite(s[k]) and math.isfinite(o[k])):
            print(f"losses: non-finite at step {k}: stock {s[k]!r} ours {o[k]!r}")
            return 1
        d = abs(s[k] - o[k]) / max(abs(s[k]), 1e-6)
        if d > worst:
            worst, where = d, k
    exact = all(s[k] == o[k] for k in s)
    verdict = "PASS" if worst <= a.rtol else "FAIL"
    detail = "bit-identical" if exact else f"worst rel diff {worst:.2e} at step {where}"
    print(f"losses: {verdict} {len(s)} steps, {detail}; last stock {s[max(s)]:.6f} ours {o[max(o)]:.6f}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
