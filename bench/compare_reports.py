#!/usr/bin/env python3
"""Does a fresh benchmark run match a reference one (the README's table) within the run-to-run
spread the reference reports? Compares each cell's speedup over stock eager, the figure the
README's claims rest on. The band is the reference's 90th-percentile round-to-round spread
(report.json: figures.round_spread.p90); a cell matches when its speedup is within that
factor of the reference's, either way.

    /usr/bin/python3 bench/compare_reports.py bench/results/reference.json build/bench/report.json

Exit status: 0 when at least --required (default 0.8) of the cells match, 1 otherwise, 2 on
unusable input.
"""
import argparse
import json
import sys


def load(path):
    try:
        with open(path) as f:
            report = json.load(f)
        return report, {(r["workload"], r["mode"], r["threads"]): r for r in report["rows"]}
    except (OSError, ValueError, KeyError) as error:
        raise SystemExit(f"compare_reports: cannot read a report from {path}: {error}")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("fresh")
    parser.add_argument("--required", type=float, default=0.8,
                        help="fraction of cells that must match (default 0.8)")
    args = parser.parse_args(argv)
    if not 0 <= args.required <= 1:
        parser.error(f"--required must be a fraction between 0 and 1, got {args.required}")
    reference, ref_cells = load(args.reference)
    _, new_cells = load(args.fresh)
    spread = reference.get("figures", {}).get("round_spread", {}).get("p90")
    if spread is None:
        print(f"compare_reports: {args.reference} states no round-to-round spread "
              "(a run with --rounds 2 or more does)", file=sys.stderr)
        return 2
    band = 1 + spread
    matched, compared, outside = 0, 0, []
    for key, ref in sorted(ref_cells.items()):
        new = new_cells.get(key)
        if not new or "speedup_vs_stock" not in ref or "speedup_vs_stock" not in new:
            continue
        compared += 1
        ratio = new["speedup_vs_stock"] / ref["speedup_vs_stock"]
        if 1 / band <= ratio <= band:
            matched += 1
        else:
            outside.append((key, ref["speedup_vs_stock"], new["speedup_vs_stock"]))
    if compared == 0:
        print("compare_reports: the two reports have no cell with a speedup in common", file=sys.stderr)
        return 2
    print(f"band: speedups within {band:.2f}x of the reference (its p90 round-to-round spread)")
    print(f"matched {matched}/{compared} cells ({matched / compared * 100:.0f}%)")
    for (workload, mode, threads), old, new in outside:
        print(f"  outside: {workload} / {mode} / {threads} thread(s): {old:.2f}x then {new:.2f}x")
    return 0 if matched >= args.required * compared else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
