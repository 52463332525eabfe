"""Merging a cell's rounds. make bench runs every cell once per round, the rounds one after the
other over the whole matrix, so that a slow spell of this shared machine falls on one round of
every mode rather than on all repetitions of one cell. A merged cell pools the repetitions of
its rounds (median, min, max) and keeps each round's median, from which the report states how
much a speedup moves from one round to the next."""
import statistics


def cells_in_round(threads, workloads, modes, round_number):
    """The (threads, workload, mode) cells of round `round_number` (from 1) in the order they run:
    a workload's modes one after another, in the listed order in odd rounds and reversed in even
    ones, so that a cell's place in the sequence never favours one mode in every round. With
    adaptive mode always run right after eager, `softmax` measured 0.80x-0.89x of eager's speed
    in 6 of 6 rounds (2026-12-06), and about 1.02x in 6 fresh-process pairs of alternating
    order (single processes on this VM differ by up to 1.5x). Two rounds measure every pair of
    modes once in each order."""
    ordered = modes if round_number % 2 == 1 else list(reversed(modes))
    return [(t, w, m) for t in threads for w in workloads for m in ordered]


def merge_rounds(rounds):
    """One row from the rows of the same cell in successive rounds (a failed round fails it)."""
    first = dict(rounds[0])
    if not all(r.get("ok") for r in rounds):
        return next(r for r in rounds if not r.get("ok"))
    times = [t for r in rounds for t in r["times_ms"]]
    first.update(median_ms=statistics.median(times), min_ms=min(times), max_ms=max(times),
                 reps=len(times), rounds=len(rounds), times_ms=times,
                 round_medians_ms=[r["median_ms"] for r in rounds],
                 compiles=max(r["compiles"] for r in rounds))
    if "bytes_per_step" in first:
        first["gbps"] = first["bytes_per_step"] / (first["median_ms"] / 1000) / 1e9
    return first


def round_speedups(row, base):
    """The speedup of `row` over `base` in each round (both merged rows of the same workload)."""
    pairs = zip(base.get("round_medians_ms", []), row.get("round_medians_ms", []))
    return [b / r for b, r in pairs if r > 0]


def spread(values):
    """max/min - 1 of positive values: 0.1 means they lie within 10% of each other."""
    return max(values) / min(values) - 1 if len(values) > 1 else 0.0
