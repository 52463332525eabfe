#!/usr/bin/env python3
"""Prints the README's benchmark table from a report.json (bench/results/reference.json is the
run the README shows):

    /usr/bin/python3 bench/readme_table.py bench/results/reference.json
"""
import json
import sys


def cell(row, with_tuned=False, speedup=True):
    if row is None or not row.get("ok"):
        return "n/a" if row is None or row.get("available") is False else "error"
    text = f"{row['median_ms']:.3g}"
    if speedup and "speedup_vs_stock" in row:
        text += f" ({row['speedup_vs_stock']:.2f}x"
        if with_tuned and "speedup_vs_stock-tuned" in row:
            text += f" / {row['speedup_vs_stock-tuned']:.2f}x"
        text += ")"
    return text


def main(argv):
    if len(argv) != 1:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        with open(argv[0]) as f:
            report = json.load(f)
        rows = {(r["workload"], r["mode"], r["threads"]): r for r in report["rows"]}
    except (OSError, ValueError, KeyError) as error:
        print(f"readme_table: cannot read a report from {argv[0]}: {error}", file=sys.stderr)
        return 2
    workloads = list(dict.fromkeys(r["workload"] for r in report["rows"]))
    threads = sorted({r["threads"] for r in report["rows"]})
    print("| workload | threads | stock ms | stock-tuned ms | lazy-ts ms | "
          "neuron-eager ms (vs stock / vs tuned) |")
    print("|---|---|---|---|---|---|")
    for t in threads:
        for w in workloads:
            print(f"| {w} | {t} | {cell(rows.get((w, 'stock', t)), speedup=False)} | "
                  f"{cell(rows.get((w, 'stock-tuned', t)))} | {cell(rows.get((w, 'lazy-ts', t)))} | "
                  f"{cell(rows.get((w, 'neuron-eager', t)), with_tuned=True)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
