"""Turns bench rows into report.json, report.md and report.png: medians with min and max,
speedups over stock eager and over the tuned-malloc baseline, bandwidth against the triad, each
mode against the physical limit (the step as one hand-fused loop, measured by the micro
benchmarks), and the compiled-eager figures of issue 3."""
import json
import os
import statistics

from rounds import round_speedups, spread

MODES = ["stock", "stock-tuned", "lazy-ts", "neuron-eager", "neuron-adaptive"]


def cold_pass_lines(cold):
    """The cold first pass against the cache off (bench/cache_bench.py, issue 11)."""
    if not cold:
        return []
    return [f"- cold first pass, {cold['kernels']} kernels compiled: {cold['cold_pass_ms']:.0f} ms "
            f"with the cache on an empty directory, {cold['cache_off_pass_ms']:.0f} ms with "
            f"NEURON_CACHE=0 (the floor: the compiles alone): {cold['cold_over_off']:.2f}x "
            f"(median of {cold['rounds']} rounds, {cold['cold_over_off_min']:.2f}x-"
            f"{cold['cold_over_off_max']:.2f}x); its {cold['cold_writes']:.0f} store writes went in "
            f"{cold['cold_write_batches']:.0f} background batches, durable "
            f"{cold['cold_durable_ms'] - cold['cold_pass_ms']:.0f} ms after the pass "
            f"(synchronize()); a second process compiled {cold['second_compiles_max']} "
            f"({cold['second_pass_ms']:.0f} ms)"]


def cold_start_lines(cold):
    """The first training step on a cold cache against stock's (bench/cache_bench.py, issue 15)."""
    if not cold:
        return []
    return [f"- cold start, first transformer-block training step on an empty cache: "
            f"{cold['interim_first_ms']:.0f} ms with interim launches ({cold['interim_launches']:.0f} "
            f"ops ran on the CPU while {cold['kernels']:.0f} kernels compiled in the background) = "
            f"{cold['interim_over_stock']:.2f}x stock's first step of {cold['stock_first_ms']:.0f} ms "
            f"({cold['interim_over_stock_min']:.2f}x-{cold['interim_over_stock_max']:.2f}x over "
            f"{cold['rounds']} rounds); waiting for each compile instead: "
            f"{cold['waiting_first_ms']:.0f} ms = {cold['waiting_over_stock']:.2f}x"]


def remote_lines(remote):
    """The remote tier against the node's own disk tier (bench/cache_bench.py, issue 16)."""
    if not remote:
        return []
    lines = []
    for name, label in (("redis", "a Redis server"), ("shared_directory", "a shared directory")):
        r = remote[name]
        lines.append(
            f"- load of one kernel from {label} (fetch, MAC and key-material checks, ORC link, "
            f"handed to the disk tier): median {r['remote_hit_ms_median']:.2f} ms "
            f"({r['remote_hit_ms_min']:.2f}-{r['remote_hit_ms_max']:.2f} ms over {remote['rounds']} "
            f"fresh nodes of {r['kernels']} kernels each), against {r['local_hit_ms_median']:.2f} ms "
            f"({r['local_hit_ms_min']:.2f}-{r['local_hit_ms_max']:.2f} ms) from the node's own disk tier")
    c = remote["cluster"]
    lines.append(f"- {c['nodes']} nodes x {c['processes'] // c['nodes']} processes started at once on "
                 f"cold caches and one Redis: {c['total_compiles']} compiles in total for "
                 f"{c['distinct_kernels']} distinct kernels ({c['lease_waits']} lease waits); a node "
                 f"started after them compiled {c['late_node_compiles']} "
                 f"({c['late_node_remote_hits']} remote hits)")
    return lines


def index(rows):
    return {(r["workload"], r["mode"], r["threads"]): r for r in rows}


def micro_value(micro, name, key="real_time"):
    entry = micro.get(name)
    return entry[key] if entry else None


def triad_gbps(micro, threads):
    value = micro_value(micro, f"BM_StreamTriad/threads:{threads}/real_time", "bytes_per_second")
    return value / 1e9 if value else None


MS_PER_UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def limit_name(workload, threads):
    """The micro benchmark of a workload's limit loop (bench/micro/limit_bench.cpp)."""
    return f"BM_Limit/{workload}/threads:{threads}/real_time"


def limit_ms(micro, workload, threads):
    entry = micro.get(limit_name(workload, threads))
    return entry["real_time"] * MS_PER_UNIT[entry["time_unit"]] if entry else None


def annotate(result):
    """Adds speedups and triad fractions to each row, and the summary figures."""
    rows, micro = result["rows"], result["micro"]
    cells = index(rows)
    for r in rows:
        if not r.get("ok"):
            continue
        for base in ("stock", "stock-tuned"):
            b = cells.get((r["workload"], base, r["threads"]))
            if b and b.get("ok"):
                r[f"speedup_vs_{base}"] = b["median_ms"] / r["median_ms"]
        triad = triad_gbps(micro, r["threads"])
        if triad and "gbps" in r:
            r["triad_fraction"] = r["gbps"] / triad
    figures = {"triad_gbps": {t: triad_gbps(micro, t) for t in (1, 2)}}
    for t in (1, 2):
        # Headline figures from measurements that alternate the two sides in one process.
        add_bps = micro_value(micro, f"BM_DispatchAdd/neuron:1/n:16777216/threads:{t}/real_time",
                              "bytes_per_second")
        if add_bps and figures["triad_gbps"][t]:
            figures[f"add_16M_triad_fraction_threads{t}"] = add_bps / 1e9 / figures["triad_gbps"][t]
        tiny = result.get("op_overhead", {}).get(t, {}).get("ops", {}).get("add")
        if tiny:
            figures[f"tiny_op_ratio_threads{t}"] = tiny["ratio_median"]
            figures[f"tiny_op_us_threads{t}"] = {"neuron": tiny["neuron_ns"] / 1000,
                                                 "stock": tiny["stock_ns"] / 1000}
        # The same from the workload cells (separate processes, so noisier).
        add = cells.get(("add-16M", "neuron-eager", t))
        if add and add.get("ok") and figures["triad_gbps"][t]:
            figures[f"add_16M_cell_triad_fraction_threads{t}"] = add["gbps"] / figures["triad_gbps"][t]
        tiny, stock = cells.get(("tiny-add-8", "neuron-eager", t)), cells.get(("tiny-add-8", "stock", t))
        if tiny and stock and tiny.get("ok") and stock.get("ok"):
            figures[f"tiny_add_cell_ratio_threads{t}"] = tiny["median_ms"] / stock["median_ms"]
    annotate_adaptive(rows, cells, figures)
    annotate_limit(rows, micro, figures)
    spreads = []
    for r in rows:
        base = cells.get((r["workload"], "stock", r["threads"]))
        if r.get("ok") and r["mode"] != "stock" and base and base.get("ok"):
            speedups = round_speedups(r, base)
            if len(speedups) > 1:
                r["round_speedups"] = speedups
                spreads.append(spread(speedups))
    if spreads:
        spreads.sort()
        figures["round_spread"] = {"cells": len(spreads), "median": statistics.median(spreads),
                                   "p90": spreads[int(0.9 * (len(spreads) - 1))],
                                   "max": spreads[-1]}
    latencies = [r["compile_ms_median"] for r in rows
                 if r.get("mode") == "neuron-eager" and r.get("compiles_total")]
    if latencies:
        figures["compile_ms_median"] = statistics.median(latencies)
        figures["compile_ms_worst_workload_median"] = max(latencies)
    figures["micro"] = {
        "dispatch_add8_ns": {"stock": micro_value(micro, "BM_DispatchAdd/neuron:0/n:8/threads:1/real_time"),
                             "neuron": micro_value(micro, "BM_DispatchAdd/neuron:1/n:8/threads:1/real_time")},
        "kernel_launch_ns": {"8": micro_value(micro, "BM_KernelLaunch/n:8/threads:1/real_time"),
                             "16M_1thread": micro_value(micro, "BM_KernelLaunch/n:16777216/threads:1/real_time"),
                             "16M_2threads": micro_value(micro, "BM_KernelLaunch/n:16777216/threads:2/real_time")},
        "alloc_64MB_ms": {"stock": micro_value(micro, "BM_Alloc64MB/neuron:0/real_time"),
                          "neuron": micro_value(micro, "BM_Alloc64MB/neuron:1/real_time"),
                          "neuron_fresh": micro_value(micro, "BM_FreshAlloc64MB/real_time")},
        "cache_load_ms": micro_value(micro, "BM_CacheLoad/iterations:40/real_time"),
    }
    result["figures"] = figures
    return result


def fresh_alloc_ms(value):
    """A report from before BM_FreshAlloc64MB existed has no figure for it."""
    return "n/a" if value is None else f"{value:.2f} ms"


ADAPTIVE_FLOOR = 0.95  # issue 13: adaptive at least 0.95x eager's speed, every cell and round


def annotate_adaptive(rows, cells, figures):
    """Each neuron-adaptive row's speed against the neuron-eager row of its workload and thread
    count (eager ms / adaptive ms, pooled and per round); the cells below ADAPTIVE_FLOOR."""
    below, compared = [], 0
    for r in rows:
        eager = cells.get((r["workload"], "neuron-eager", r["threads"]))
        if r["mode"] != "neuron-adaptive" or not r.get("ok") or not (eager and eager.get("ok")):
            continue
        compared += 1
        r["speed_vs_eager"] = eager["median_ms"] / r["median_ms"]
        r["round_speeds_vs_eager"] = round_speedups(r, eager)
        lowest = min([r["speed_vs_eager"]] + r["round_speeds_vs_eager"])
        if lowest < ADAPTIVE_FLOOR:
            below.append({"workload": r["workload"], "threads": r["threads"], "lowest": lowest})
    if compared:
        figures["adaptive_vs_eager"] = {"cells": compared, "floor": ADAPTIVE_FLOOR, "below": below}


def annotate_limit(rows, micro, figures):
    """Each row's time against its workload's limit at its thread count (mode ms / limit ms: 1.00x
    is the limit, 2.00x half its speed), and the limit's own time and bandwidth."""
    limits = {}
    for r in rows:
        limit = limit_ms(micro, r["workload"], r["threads"])
        if limit is None:
            continue
        entry = limits.setdefault(r["workload"], {}).get(r["threads"])
        if entry is None:
            entry = {"ms": limit, "over_limit": {}}
            bps = micro_value(micro, limit_name(r["workload"], r["threads"]), "bytes_per_second")
            triad = triad_gbps(micro, r["threads"])
            if bps:
                entry["gbps"] = bps / 1e9
                if triad:
                    entry["triad_fraction"] = entry["gbps"] / triad
            limits[r["workload"]][r["threads"]] = entry
        if r.get("ok"):
            r["limit_ms"] = limit
            r["over_limit"] = r["median_ms"] / limit
            entry["over_limit"][r["mode"]] = r["over_limit"]
    if limits:
        figures["limit"] = limits
        figures["limit_targets"] = limit_targets(rows, limits)


# Issue 14's targets that read the limit: workload, mode, figure (a row's key), direction, bound.
LIMIT_TARGETS = [
    ("gelu-tanh-16M", "neuron-adaptive", "over_limit", "at most", 1.5),
    ("layernorm-residual", "neuron-adaptive", "triad_fraction", "at least", 0.75),
    ("layernorm-residual", "neuron-adaptive", "speedup_vs_stock-tuned", "at least", 1.5),
    ("varlen-loop", "neuron-adaptive", "speed_vs_eager", "at least", 1.3),
]
FIGURE_TEXT = {"over_limit": "time / the limit's", "triad_fraction": "bandwidth / the triad's",
               "speedup_vs_stock-tuned": "speed / stock-tuned's",
               "speed_vs_eager": "speed / neuron-eager's"}


def limit_targets(rows, limits):
    """Issue 14's targets at each thread count where their cell ran: the value and whether it
    meets its bound."""
    cells = index(rows)
    targets = []
    for workload, mode, figure, direction, bound in LIMIT_TARGETS:
        for threads in sorted(limits.get(workload, {})):
            r = cells.get((workload, mode, threads))
            if r and r.get("ok") and figure in r:
                value = r[figure]
                target = {"workload": workload, "mode": mode, "threads": threads,
                          "figure": figure, "direction": direction, "bound": bound, "value": value,
                          "met": value <= bound if direction == "at most" else value >= bound}
                # A speed over eager's can be at most eager's time over the limit's.
                eager = limits[workload][threads]["over_limit"].get("neuron-eager")
                if figure == "speed_vs_eager" and eager:
                    target["ceiling"] = eager
                targets.append(target)
    return targets


def figure_text(figure, value):
    return f"{value * 100:.0f}%" if figure == "triad_fraction" else f"{value:.2f}x"


def limit_lines(result):
    """The physical limit (issue 14): each mode's time against the hand-fused loop's."""
    limits = result["figures"].get("limit")
    if not limits:
        return []
    modes = [m for m in MODES if any(r["mode"] == m and "over_limit" in r for r in result["rows"])]
    lines = ["## Physical limit (issue 14)", "",
             "The limit: the workload's step as one hand-fused C++ loop (`bench/limit/`; -O3 "
             "-march=native -ffast-math, glibc's vector tanhf/expf, OpenBLAS sgemm for the "
             "matrix products), its output buffers reused, measured by the micro benchmarks of this run "
             "(median of 7 interleaved repetitions). Each mode's median time over the limit's: "
             "1.00x is the limit, 2.00x half its speed.", "",
             "| workload | threads | limit ms | limit GB/s (of triad) | "
             + " | ".join(f"{m} / limit" for m in modes) + " |", "|---" * (4 + len(modes)) + "|"]
    for workload, by_threads in limits.items():
        for threads, entry in sorted(by_threads.items()):
            bandwidth = (f"{entry['gbps']:.1f} ({entry['triad_fraction'] * 100:.0f}%)"
                         if "triad_fraction" in entry else
                         f"{entry['gbps']:.1f}" if "gbps" in entry else "-")
            ratios = [f"{entry['over_limit'][m]:.2f}x" if m in entry["over_limit"] else "-" for m in modes]
            lines.append(f"| {workload} | {threads} | {entry['ms']:.4g} | {bandwidth} | "
                         + " | ".join(ratios) + " |")
    targets = result["figures"].get("limit_targets", [])
    if targets:
        lines += ["", "Issue 14's targets:", ""]
    for t in targets:
        lines.append(f"- {t['workload']}, {t['mode']}, {t['threads']} thread(s): "
                     f"{FIGURE_TEXT[t['figure']]} {figure_text(t['figure'], t['value'])} (target: "
                     f"{t['direction']} {figure_text(t['figure'], t['bound'])}): "
                     f"{'met' if t['met'] else '**not met**'}"
                     + (f"; the limit allows at most {t['ceiling']:.2f}x" if "ceiling" in t else ""))
    return lines + [""]


def adaptive_lines(result):
    """The adaptive column against the eager one (issue 13): pooled ratio and each round's."""
    rows = [r for r in result["rows"] if "speed_vs_eager" in r]
    if not rows:
        return []
    cells = index(result["rows"])
    summary = result["figures"]["adaptive_vs_eager"]
    lines = ["## Adaptive against eager (issue 13)", "",
             f"Speed of neuron-adaptive against neuron-eager (eager ms / adaptive ms): pooled over the "
             f"rounds, then each round's (both cells of a round ran in the same pass over the "
             f"matrix). Flagged: below {ADAPTIVE_FLOOR:.2f}x in any of them "
             f"({len(summary['below'])} of {summary['cells']} cells). Ops deferred: of the ops the "
             "tracer saw in the timed region, those recorded and replayed at a sync point.", "",
             "| workload | threads | neuron-eager ms | neuron-adaptive ms | adaptive/eager | "
             "per round | ops deferred | |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eager = cells[(r["workload"], "neuron-eager", r["threads"])]
        counts = r.get("adaptive") or {}
        deferred = (f"{counts['ops_deferred']}/{counts['ops_traced']}" if counts.get("ops_traced")
                    else "-")
        low = min([r["speed_vs_eager"]] + r["round_speeds_vs_eager"]) < ADAPTIVE_FLOOR
        lines.append(f"| {r['workload']} | {r['threads']} | {eager['median_ms']:.4g} | "
                     f"{r['median_ms']:.4g} | {r['speed_vs_eager']:.2f}x | "
                     + ", ".join(f"{v:.2f}x" for v in r["round_speeds_vs_eager"])
                     + f" | {deferred} | {'**below ' + format(ADAPTIVE_FLOOR, '.2f') + 'x**' if low else ''} |")
    return lines + [""]


def cell_text(r):
    if r is None:
        return "-"
    if r.get("available") is False:
        return "n/a"
    if not r.get("ok"):
        return "error: " + r.get("error", "")[:60].replace("|", "/")
    text = f"{r['median_ms']:.4g} [{r['min_ms']:.4g}-{r['max_ms']:.4g}]"
    if r["mode"] not in ("stock",) and "speedup_vs_stock" in r:
        tuned = r.get("speedup_vs_stock-tuned")
        text += f" {r['speedup_vs_stock']:.2f}x" + (f" / {tuned:.2f}x" if tuned else "")
    if r.get("compiles"):
        text += f" ({r['compiles']} compiles)"
    return text


def markdown(result):
    m, rows, f = result["machine"], result["rows"], result["figures"]
    cells = index(rows)
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    threads = sorted({r["threads"] for r in rows})
    modes = [mode for mode in MODES if any(r["mode"] == mode for r in rows)]
    lines = [f"# torchneuron benchmarks", "",
             f"{m['date']} on {m['cpu']}, {m['cores']} cores; {'quick' if result['quick'] else 'full'} "
             f"run, {result['seconds']} s. Each cell: median ms per step [min-max] over "
             f"{result.get('rounds', 1)} round(s) of 5+ timed repetitions after warm-up (the "
             "adaptive threshold + 2 repetitions, a wait for background compiles, 2 more), each "
             "round a fresh process, the rounds passing "
             "over the whole matrix one after the other; every step's result consumed and the "
             "last read at the end of each repetition (docs/benchmarks.md); "
             "then the speedup over stock eager / over stock eager with jemalloc (stock-tuned); "
             "compiles counted inside the timed region.", ""]
    if result.get("skipped"):
        lines += [f"Left out of this run (`--skip`): {', '.join(result['skipped'])}.", ""]
    spread_figure = f.get("round_spread")
    if spread_figure:
        lines += [f"Run-to-run spread: a cell's speedup over stock moved by a median of "
                  f"{spread_figure['median'] * 100:.0f}% between rounds (90th percentile "
                  f"{spread_figure['p90'] * 100:.0f}%, worst {spread_figure['max'] * 100:.0f}%; "
                  f"{spread_figure['cells']} cells).", ""]
    limits = f.get("limit", {})
    limit_column = bool(limits)
    for t in threads:
        lines += [f"## {t} thread{'s' if t > 1 else ''}", "",
                  "| workload | " + " | ".join(modes + ["limit"] * limit_column) + " |",
                  "|---" * (len(modes) + 1 + limit_column) + "|"]
        for w in workloads:
            limit = limits.get(w, {}).get(t)
            lines.append(f"| {w} | " + " | ".join(cell_text(cells.get((w, mode, t))) for mode in modes)
                         + (f" | {limit['ms']:.4g}" if limit else " | -") * limit_column + " |")
        lines.append("")
    if limit_column:
        lines += ["limit: the same step as one hand-fused C++ loop, ms (see \"Physical limit\").", ""]
    lines += limit_lines(result)
    lines += adaptive_lines(result)
    lines += ["## Bandwidth", "", f"STREAM-style triad: "
              + ", ".join(f"{v:.1f} GB/s at {t} thread{'s' if t > 1 else ''}"
                          for t, v in f["triad_gbps"].items() if v), "",
              "| workload | threads | mode | GB/s | of triad |", "|---|---|---|---|---|"]
    for r in rows:
        if r.get("ok") and "gbps" in r and r["mode"] in ("stock", "stock-tuned", "neuron-eager", "neuron-adaptive"):
            lines.append(f"| {r['workload']} | {r['threads']} | {r['mode']} | {r['gbps']:.1f} | "
                         f"{r.get('triad_fraction', 0) * 100:.0f}% |")
    for workload, by_threads in f.get("limit", {}).items():
        for t, entry in sorted(by_threads.items()):
            if "triad_fraction" in entry:
                lines.append(f"| {workload} | {t} | limit | {entry['gbps']:.1f} | "
                             f"{entry['triad_fraction'] * 100:.0f}% |")
    lines += ["", "## Compiled eager (issue 3)", ""]
    for t in threads:
        if f"add_16M_triad_fraction_threads{t}" in f:
            lines.append(f"- 16M float32 add (C++ dispatch into a reused output, alternating with the "
                         f"triad) at {t} thread(s): {f[f'add_16M_triad_fraction_threads{t}'] * 100:.0f}% "
                         "of the triad" + (f"; the add-16M cell: {f[f'add_16M_cell_triad_fraction_threads{t}'] * 100:.0f}%"
                                            if f"add_16M_cell_triad_fraction_threads{t}" in f else ""))
        if f"tiny_op_ratio_threads{t}" in f:
            us = f[f"tiny_op_us_threads{t}"]
            lines.append(f"- 8-element add from Python at {t} thread(s), alternating with stock in one "
                         f"process: {us['neuron']:.2f} us vs {us['stock']:.2f} us = "
                         f"{f[f'tiny_op_ratio_threads{t}']:.2f}x" +
                         (f"; the tiny-add-8 cells (separate processes): {f[f'tiny_add_cell_ratio_threads{t}']:.2f}x"
                          if f"tiny_add_cell_ratio_threads{t}" in f else ""))
    if "compile_ms_median" in f:
        lines.append(f"- first compile per kernel: median {f['compile_ms_median']:.1f} ms "
                     f"(median of each workload's median; worst workload {f['compile_ms_worst_workload_median']:.1f} ms)")
    overhead = result.get("op_overhead", {})
    if overhead:
        lines += ["", "## Tiny ops from Python (`bench/op_overhead.py`; 8 elements, or as the name says, per op, device "
                  "and stock alternating in one process; median ratio [min-max] over the rounds)", "",
                  "| op | threads | stock ns | neuron ns | neuron / stock |", "|---|---|---|---|---|"]
        for t, o in sorted(overhead.items()):
            if "error" in o:
                lines.append(f"| error | {t} | {o['error'][:80]} | | |")
                continue
            for name, v in o["ops"].items():
                lines.append(f"| {name} | {t} | {v['stock_ns']:.0f} | {v['neuron_ns']:.0f} | "
                             f"{v['ratio_median']:.2f}x [{v['ratio_min']:.2f}-{v['ratio_max']:.2f}] |")
    micro = f["micro"]
    lines += ["", "## Micro benchmarks (Google Benchmark, medians of 7 interleaved repetitions)", "",
              f"- dispatch of an 8-element add from C++: stock {micro['dispatch_add8_ns']['stock']:.0f} ns, "
              f"neuron {micro['dispatch_add8_ns']['neuron']:.0f} ns",
              f"- kernel launch without the dispatcher: {micro['kernel_launch_ns']['8']:.0f} ns (8 elements); "
              f"16M elements {micro['kernel_launch_ns']['16M_1thread'] / 1e6:.2f} ms (1 thread), "
              f"{micro['kernel_launch_ns']['16M_2threads'] / 1e6:.2f} ms (2 threads)",
              f"- allocate, fill and free 64 MB: stock {micro['alloc_64MB_ms']['stock']:.2f} ms, "
              f"neuron {micro['alloc_64MB_ms']['neuron']:.2f} ms (a cached block), "
              f"{fresh_alloc_ms(micro['alloc_64MB_ms']['neuron_fresh'])} (a fresh block from the OS, on huge pages "
              f"unless NEURON_HUGE_PAGES=0; stock's is fresh every time)"]
    if micro.get("cache_load_ms") is not None:
        lines.append(f"- load one cached executable (parse, checksum, verify, ORC link): "
                     f"{micro['cache_load_ms']:.2f} ms")
    lines.append("")
    cache = result.get("cache")
    if cache:
        lines += ["## Persistent compile cache (issue 4; `bench/cache_bench.py`)", ""]
        if "error" in cache:
            lines.append(f"- error: {cache['error']}")
        else:
            cold, warm, off = cache["cold_run"], cache["second_run"], cache["cache_off_run"]
            eight = cache["eight_processes"]
            lines += [
                f"- transformer-block training step, 1 thread, fresh processes on one cache directory: "
                f"first run {cold['compiles']} compiles, first iteration {cold['first_iteration_ms']:.0f} ms; "
                f"second run {warm['compiles']} compiles ({warm['persistent_hits']} kernels loaded), first "
                f"iteration {warm['first_iteration_ms']:.0f} ms = {warm['first_over_steady']:.2f}x its steady "
                f"{warm['steady_iteration_ms']:.0f} ms (median of {warm.get('runs', 1)} reruns; "
                f"{warm.get('first_over_steady_min', warm['first_over_steady']):.2f}x-"
                f"{warm.get('first_over_steady_max', warm['first_over_steady']):.2f}x; cache off: "
                f"{off['first_over_steady']:.2f}x)" + "".join(
                    f"; {name}'s own first iteration: {cache[key]['first_over_steady']:.2f}x "
                    f"({cache[key]['first_over_steady_min']:.2f}x-{cache[key]['first_over_steady_max']:.2f}x)"
                    for key, name in (("stock_run", "stock"), ("stock_tuned_run", "stock-tuned"))
                    if key in cache),
            ] + warm_start_lines(cache) + [
                f"- load of one cached kernel (store read, verification, ORC link): median "
                f"{warm['load_ms_median']:.2f} ms; loading all {warm['persistent_hits']} adds "
                f"{warm.get('load_share_of_steady', 0) * 100:.1f}% of a steady iteration to the first",
                f"- 8 processes started at once on a cold directory: {eight['total_compiles']} compiles in "
                f"total for {eight['distinct_kernels']} distinct kernels ({eight['total_loads']} loads)"]
            lines += (cold_pass_lines(cache.get("cold_pass")) + cold_start_lines(cache.get("cold_start"))
                      + adaptive_rerun_lines(cache.get("adaptive_rerun"))
                      + remote_lines(cache.get("remote")) + [""])
    lines += allreduce_lines(result.get("allreduce"))
    lines += adaptive_overhead_lines(result.get("adaptive_overhead"))
    lines += adaptive_pair_lines(result.get("adaptive_pairs"))
    failed = [r for r in rows if not r.get("ok") and r.get("available") is not False]
    if failed:
        lines += ["## Failures", ""] + [f"- {r['workload']} / {r['mode']} / {r['threads']}: {r.get('error')}" for r in failed]
    return "\n".join(lines) + "\n"


def adaptive_rerun_lines(rerun):
    """Adaptive mode rerun on the cache its first run filled (bench/cache_bench.py, issue 14)."""
    if not rerun:
        return []
    return [f"- adaptive mode, rerun on the cache its first run filled (median of {rerun['rounds']} "
            f"rounds): {rerun['rerun_compiles_max']} compiles (first run "
            f"{rerun['first_run_compiles']:.0f}, {rerun['first_run_fused_kernels']:.0f} of them fused "
            f"kernels); {rerun['rerun_fused_kernels_loaded']:.0f} fused kernels loaded from the store "
            f"(median load {rerun['rerun_load_ms_median']:.2f} ms a kernel); hot from iteration "
            f"{rerun['rerun_first_hot_iteration']}, fused from iteration "
            f"{rerun['rerun_first_fused_iteration']} (first run: hot from "
            f"{rerun['first_run_first_hot_iteration']}, fused from "
            f"{rerun['first_run_first_fused_iteration']} once its background compiles finished)"]


def adaptive_overhead_lines(overhead):
    """tiny-chain-10 per op (bench/adaptive_overhead.py, issue 13)."""
    if not overhead:
        return []
    lines = ["## tiny-chain-10 per op (issue 13; `bench/adaptive_overhead.py`; medians, alternating)",
             ""]
    for threads, r in sorted(overhead.items()):
        if "error" in r:
            lines.append(f"- {threads} thread(s): error: {r['error']}")
            continue
        ns = r["ns_per_op"]
        lines.append(
            f"- {threads} thread(s): stock {ns['stock']:.0f} ns, device eager {ns['eager']:.0f} ns, "
            f"adaptive {ns['adaptive']:.0f} ns per op (adaptive {r['adaptive_speedup_over_stock']:.2f}x "
            f"stock's speed, eager {r['eager_speedup_over_stock']:.2f}x); floor (empty_like) "
            f"{ns['floor_cpu']:.0f} ns CPU, {ns['floor_device']:.0f} ns device; adaptive above the "
            f"floor {r['adaptive_above_floor_ns']:.0f} ns"
            + (f"; every call recorded (min bytes 0): {ns['adaptive_recorded']:.0f} ns per op "
               f"({r['recorded_speedup_over_stock']:.2f}x stock's speed, "
               f"{r['recorded_above_floor_ns']:.0f} ns above the floor)"
               if "adaptive_recorded" in ns else ""))
    return lines + [""]


def adaptive_pair_lines(pairs):
    """Adaptive against eager mode, paired in one process (bench/adaptive_pairs.py), and each
    against stock-tuned where the pairs had that third arm (--stock)."""
    if not pairs:
        return []
    stock = any("stock_ms" in r for rows in pairs.values() for r in rows)
    lines = ["## Adaptive against eager, paired in one process (`bench/adaptive_pairs.py`)", "",
             "Repetitions alternate between the modes (ABBA) on the same state in one process per "
             "workload; eager time over adaptive time, median of the pairs [range], and the pairs "
             "adaptive lost. Below 0.95x: marked." +
             (" Stock-tuned is a third arm in the same rotation (the workload built on the CPU "
              "from the same seed, jemalloc preloaded): its time over each mode's, paired the "
              "same way." if stock else ""), ""]
    if stock:
        lines += ["| workload | threads | stock-tuned ms | eager ms | adaptive ms | adaptive vs "
                  "eager | pairs lost | eager vs stock-tuned | adaptive vs stock-tuned |",
                  "|---|---|---|---|---|---|---|---|---|"]
    else:
        lines += ["| workload | threads | eager ms | adaptive ms | adaptive vs eager | pairs lost |",
                  "|---|---|---|---|---|---|"]

    def ratio(r, key, low, high):
        mark = " **<0.95x**" if r[key] < 0.95 else ""
        return f"{r[key]:.2f}x [{r[low]:.2f}-{r[high]:.2f}]{mark}"

    for threads, rows in sorted(pairs.items()):
        for r in rows:
            if not r.get("ok"):
                empty = " |" * (6 if stock else 3)
                lines.append(f"| {r['workload']} | {threads} | error: {r.get('error')} |{empty}")
                continue
            cells = [r["workload"], str(threads)]
            if stock:
                cells.append(f"{r['stock_ms']:.4g}")
            cells += [f"{r['eager_ms']:.4g}", f"{r['adaptive_ms']:.4g}",
                      ratio(r, "adaptive_speedup", "speedup_min", "speedup_max"),
                      f"{r['pairs_adaptive_slower']}/{r['pairs']}"]
            if stock:
                cells += [ratio(r, f"{arm}_vs_stock", f"{arm}_vs_stock_min",
                                f"{arm}_vs_stock_max") for arm in ("eager", "adaptive")]
            lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def allreduce_lines(allreduce):
    """The neuron c10d backend against gloo (bench/allreduce_bench.py, issue 17)."""
    if not allreduce:
        return []
    lines = ["## All-reduce, 2 local ranks (issue 17; `bench/allreduce_bench.py`)", ""]
    if "error" in allreduce:
        return lines + [f"- error: {allreduce['error']}", ""]
    for label, what in (("bucket", "gradient bucket"), ("small", "small all-reduce")):
        a = allreduce[label]
        size = (f"{a['bytes'] / 2**20:g} MB" if a["bytes"] >= 2**20 else f"{a['bytes'] / 2**10:g} KB")
        lines.append(
            f"- {size} {what}: neuron backend on device tensors "
            f"{a['neuron_median_ms']:.2f} ms, gloo on CPU tensors {a['gloo_median_ms']:.2f} ms: "
            f"{a['neuron_over_gloo']:.2f}x (medians of {a['repeats']}, alternating; min "
            f"{a['neuron_min_ms']:.2f} / {a['gloo_min_ms']:.2f} ms)")
    return lines + [""]


def warm_start_lines(cache):
    """The warm start's share of the rerun figures (absent from reports made before it)."""
    warm, off = cache["second_run"], cache.get("warm_start_off_run")
    if off is None or "warm_start_kernels" not in warm:
        return []
    return [f"- warm start (docs/warm-start.md): a background thread linked "
            f"{warm['warm_start_kernels']} kernels and faulted in {warm['warm_start_bytes'] / 2**20:.0f} MiB "
            f"in {warm['warm_start_background_ms']:.0f} ms while the script started; with it off "
            f"(NEURON_WARM_START=0) the first iteration is {off['first_over_steady']:.2f}x "
            f"({off['first_over_steady_min']:.2f}x-{off['first_over_steady_max']:.2f}x); script start to the "
            f"end of the first iteration (median): {warm['start_to_first_end_ms_median']:.0f} ms with it, "
            f"{off['start_to_first_end_ms_median']:.0f} ms without"]


def chart(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = result["rows"]
    threads = sorted({r["threads"] for r in rows})
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    modes = [m for m in MODES[1:] if any(r["mode"] == m and r.get("ok") for r in rows)]
    cells = index(rows)
    fig, axes = plt.subplots(len(threads), 1, figsize=(max(8, len(workloads) * 0.9), 4 * len(threads)),
                             squeeze=False)
    width = 0.8 / max(len(modes), 1)
    for ax, t in zip(axes[:, 0], threads):
        for i, mode in enumerate(modes):
            values = [cells.get((w, mode, t), {}).get("speedup_vs_stock", 0) for w in workloads]
            ax.bar([x + i * width for x in range(len(workloads))], values, width, label=mode)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("speedup over stock eager")
        ax.set_title(f"{t} thread{'s' if t > 1 else ''}")
        ax.set_xticks([x + width * (len(modes) - 1) / 2 for x in range(len(workloads))])
        ax.set_xticklabels(workloads, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def write_reports(result, out_dir):
    annotate(result)
    with open(os.path.join(out_dir, "report.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(markdown(result))
    chart(result, os.path.join(out_dir, "report.png"))
