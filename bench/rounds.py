"""Merging a cell's rounds. make bench runs every cell once per round, the rounds one after the
other over the whole matrix, so that a slow spell of this shared machine falls on one round of
every mode rather than on all repetitions of one cell. A merged cell pools the repetitions of
its rounds (median, min, max) and keeps each round's median, from which the report states how
much a speedup moves from one round to the next."""
import statistics


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
