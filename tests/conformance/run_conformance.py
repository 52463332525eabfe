#!/usr/bin/env python3
"""Conformance referee: every OpInfo of PyTorch's op_db in every dtype it supports on the CPU
(float32, float64, float16, bfloat16, int64, int32, int16, int8, uint8, bool), on the CPU and on
the device.

For each sample the op runs on the CPU and on the neuron device (same seed); outputs are
compared (values within the dtype's assert_close tolerances, NaN positions, the sign of zeros)
and, where the op supports autograd in that dtype, so are the gradients. A sample ends as
  pass          device matches CPU (or, for an ill-conditioned sample, differs from it by no
                more than the CPU differs from itself when the inputs move by one ulp;
                counted separately as "ill_conditioned")
  mismatch      device result differs from CPU
  device_error  the device raised (or crashed) where the CPU did not
  skipped       the CPU itself cannot run the sample (reason recorded)
Per OpInfo it records how the device ran it: "compiled", "library" or "fallback" (the
least native kind any of its samples needed) and which ATen ops fell back.

--adaptive runs the device side under the adaptive eager tracer (docs/adaptive-eager.md): each
device sample runs three times (threshold + 1 when NEURON_ADAPTIVE_THRESHOLD is above 2: cold,
hot, replayed), each run judged as above; a sample is "replayed" when its last run replayed at
least one recorded window (the tracer's own replay counter). Every float32 sample runs; the other
dtypes run the --quick selection.

--eager-replay runs the device side in eager mode three times per sample the same way: the
second run is captured by the eager call cache (src/device/eager_call_cache.h) and the third
replays it; a sample is "replayed" when its last run replayed at least one call (the cache's
own counter). --min-replayed applies to either mode.

The unit of work is one OpInfo in one dtype. Work is split over worker processes; a worker that
crashes marks the OpInfo and dtype it was running as device_error ("crashed") and the run goes
on with a new worker.

    /usr/bin/python3 tests/conformance/run_conformance.py [--quick] [--adaptive | --eager-replay]
        [--min-replayed N] [--ops a,b]
        [--dtypes d,e] --output FILE
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The referee checks the device's kernels: an op's first call waits for its compile instead of
# running ATen's CPU kernel meanwhile (interim launches), in this process and in its workers.
os.environ["NEURON_INTERIM_LAUNCHES"] = "0"
# Under --adaptive it referees recording and fused replay, on OpInfo samples of a few elements:
# every call the tracer can defer is deferred, however small (NEURON_ADAPTIVE_MIN_BYTES=0).
os.environ["NEURON_ADAPTIVE_MIN_BYTES"] = "0"
sys.path.insert(0, os.path.join(HERE, "compat"))
sys.path.insert(0, HERE)
from conformance_ops import DEFAULT_DTYPES, check_dtype_name  # noqa: E402 (after path setup)

# OpInfos the device cannot run for a reason outside this project, each with that reason. They
# still count in `device_error`/`mismatch`; they are listed apart and do not fail the run.
KNOWN_LIMITATIONS = {
    "sparse.sampled_addmm": "its samples are sparse CSR tensors; PyTorch 1.13 has no "
                            "sparse-compressed dispatch key for PrivateUse1 devices",
}


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", required=True, help="summary JSON to write")
    parser.add_argument("--quick", action="store_true",
                        help="the subset `make test` runs: the first 2 samples of each OpInfo in "
                             "float32, the first one in each other dtype, except for OpInfos that "
                             "ran wholly on the CPU fallback in float32")
    parser.add_argument("--adaptive", action="store_true",
                        help="run the device side under the adaptive eager tracer: each device "
                             "sample three times (cold, hot, replayed), counting the samples "
                             "whose last run replayed a recorded window; every float32 sample, "
                             "the --quick selection in the other dtypes")
    parser.add_argument("--eager-replay", action="store_true",
                        help="run each device sample three times in eager mode (captured by the "
                             "eager call cache, then replayed), counting the samples whose last "
                             "run replayed a call; every float32 sample, the quick selection in "
                             "the other dtypes")
    parser.add_argument("--min-replayed", type=int, default=0, metavar="N",
                        help="with --adaptive or --eager-replay: fail unless at least N samples "
                             "replayed")
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES),
                        help="comma-separated dtypes (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: op list file
    parser.add_argument("--results", help=argparse.SUPPRESS)  # internal: JSON lines out
    parser.add_argument("--plan", help=argparse.SUPPRESS)  # internal: list the work here first
    args = parser.parse_args(argv)
    if args.min_replayed < 0:
        parser.error(f"--min-replayed must be 0 or more, got {args.min_replayed}")
    if args.adaptive and args.eager_replay:
        parser.error("--adaptive and --eager-replay are two modes: choose one")
    if args.min_replayed and not (args.adaptive or args.eager_replay):
        parser.error(f"--min-replayed {args.min_replayed} needs --adaptive or --eager-replay "
                     "(only those modes run a sample more than once)")
    return args


def checked_dtypes(args):
    dtypes = [d for d in args.dtypes.split(",") if d]
    for name in dtypes:
        try:
            check_dtype_name(name)
        except ValueError as e:
            sys.exit(str(e))
    return dtypes


def work_items(args):
    """Each OpInfo to run with the dtypes to run it in, in op_db order (loads op_db: torch)."""
    from conformance_ops import load_op_db, opinfo_dtypes, opinfo_name

    dtypes = checked_dtypes(args)
    ops = [(opinfo_name(op), opinfo_dtypes(op, dtypes)) for op in load_op_db()]
    ops = [(name, supported) for name, supported in ops if supported]
    if args.ops:
        wanted = set(args.ops.split(","))
        unknown = wanted - {name for name, _ in ops}
        if unknown:
            sys.exit(f"[conformance] unknown OpInfo name(s) (or none of the dtypes "
                     f"{args.dtypes} supported): {', '.join(sorted(unknown))}")
        ops = [(name, supported) for name, supported in ops if name in wanted]
    return ops


def shard_items(ops, index, workers):
    """(OpInfo name, dtype name) pairs of shard `index`: an OpInfo's dtypes stay in one worker
    (its sample code and kernels are warm there)."""
    return [(name, d) for name, supported in ops[index::workers] for d in supported]


def run_parent(args):
    """Runs the shards in worker processes and writes the summary. This process never imports
    torch (about 3.7 CPU seconds with op_db): the first worker lists the work (the plan) before
    it runs its shard, and the other shards start once the plan is there."""
    checked_dtypes(args)
    started = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        plan = os.path.join(scratch, "plan.json")
        runners = [ShardRunner(0, None, args, scratch, plan=plan)]
        while True:
            if runners[0].items is None and os.path.exists(plan):
                with open(plan) as f:
                    ops = json.load(f)
                runners[0].items = shard_items(ops, 0, args.workers)
                runners += [ShardRunner(i, shard_items(ops, i, args.workers), args, scratch)
                            for i in range(1, args.workers)]
            running = [runner.running() for runner in runners]  # each one polled
            if runners[0].items is None and not running[0]:
                print()
                print(f"[conformance] the worker listing the work ended without a plan (exit "
                      f"{runners[0].exit_code})", file=sys.stderr)
                return 1
            if not any(running):
                break
            time.sleep(0.5)
            done = sum(len(runner.records) for runner in runners)
            total = sum(len(runner.items) for runner in runners if runner.items is not None)
            print(f"\r[conformance] {done}/{total or '?'} OpInfo dtypes", end="", flush=True)
        print()
        records = [r for runner in runners for r in runner.records]
    summary = summarize(records, quick=args.quick, seconds=time.time() - started,
                        adaptive=args.adaptive or args.eager_replay)
    if args.eager_replay:  # no tracer, no threshold: the call cache replays from the third run
        summary["eager_replay"] = {"runs_per_sample": 3}
        del summary["adaptive"]
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    print_report(summary, args.output)
    if (args.adaptive or args.eager_replay) and summary["replayed"] < args.min_replayed:
        print(f"[conformance] {summary['replayed']} samples replayed, fewer "
              f"than --min-replayed {args.min_replayed}", file=sys.stderr)
        return 1
    return 0 if not summary["unexpected_failures"] else 1


class ShardRunner:
    """Runs one shard of OpInfos in a worker process, restarting past a crashed op. Its items
    are None until the plan is read when its worker is the one that writes the plan."""

    def __init__(self, index, items, args, scratch, plan=None):
        self.items = None if items is None else list(items)
        self.args = args
        self.scratch = scratch
        self.index = index
        self.records = []
        self.process = None
        self.exit_code = None
        self.restarts = 0
        self._start(plan)

    def _start(self, plan=None):
        remaining = None if self.items is None else self.items[len(self.records):]
        if remaining == []:
            self.process = None
            return
        base = os.path.join(self.scratch, f"shard{self.index}.{self.restarts}")
        self.results_path = base + ".jsonl"
        command = [sys.executable, __file__, "--output", self.args.output, "--worker", base + ".ops",
                   "--results", self.results_path] + (["--quick"] if self.args.quick else []) \
            + (["--adaptive"] if self.args.adaptive else []) \
            + (["--eager-replay"] if self.args.eager_replay else [])
        if remaining is None:  # the worker writes the plan, then this shard's items, and runs them
            command += ["--plan", plan, "--ops", self.args.ops, "--dtypes", self.args.dtypes,
                        "--workers", str(self.args.workers)]
        else:
            with open(base + ".ops", "w") as f:
                f.write("\n".join(f"{name}\t{dtype}" for name, dtype in remaining))
        self.offset = 0
        env = dict(os.environ, NEURON_FALLBACK="silent", OMP_NUM_THREADS="1")
        self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)

    def _collect(self):
        if not os.path.exists(self.results_path):
            return
        with open(self.results_path) as f:
            f.seek(self.offset)
            for line in f:
                if line.endswith("\n"):
                    self.offset += len(line)
                    self.records.append(json.loads(line))

    def running(self):
        if self.process is None:
            return False
        code = self.process.poll()
        self._collect()
        if code is None:
            return True
        self.exit_code = code
        if self.items is None:  # ended before its plan was read: the caller decides
            return False
        if len(self.records) < len(self.items):
            crashed, dtype = self.items[len(self.records)]
            self.records.append({"name": crashed, "dtype": dtype, "kind": "unknown",
                                 "fallback_ops": [],
                                 "samples": [{"outcome": "device_error",
                                              "detail": f"worker crashed (exit {code})"}]})
            self.restarts += 1
            self._start()
            return True
        return False


def write_plan(args):
    """In the first worker: the plan (every OpInfo with its dtypes) for the parent, written whole
    or not at all, and this worker's items (shard 0)."""
    ops = work_items(args)
    with open(args.plan + ".partial", "w") as f:
        json.dump(ops, f)
    os.replace(args.plan + ".partial", args.plan)
    with open(args.worker, "w") as f:
        f.write("\n".join(f"{name}\t{dtype}" for name, dtype in shard_items(ops, 0, args.workers)))


OUTCOMES = ("pass", "mismatch", "device_error", "skipped")
KIND_ORDER = ("unknown", "fallback", "library", "compiled", "runtime")  # least native first


def summarize(records, quick, seconds, adaptive=False):
    """Totals, totals per dtype (`samples_by_dtype`, `by_dtype`) and per OpInfo (with its
    dtypes and first problems). With `adaptive`, each of them also counts `replayed` (samples
    whose last run replayed a recorded window), the totals `fused` (samples whose last run ran a
    fused kernel), and `adaptive` says how the samples ran."""
    totals = dict.fromkeys(OUTCOMES, 0)
    by_dtype = {}
    per_op = {}
    ill_conditioned = 0
    replayed = 0
    fused = 0
    for record in records:
        dtype = record.get("dtype", "float32")
        counts = dict.fromkeys(OUTCOMES, 0)
        dtype_totals = by_dtype.setdefault(dtype, {**dict.fromkeys(OUTCOMES, 0), "samples": 0,
                                                   "ill_conditioned": 0, "opinfos": 0,
                                                   "worker_seconds": 0.0})
        record_replayed = sum(bool(sample.get("replayed")) for sample in record["samples"])
        replayed += record_replayed
        fused += sum(bool(sample.get("fused")) for sample in record["samples"])
        dtype_totals["opinfos"] += 1
        dtype_totals["worker_seconds"] = round(dtype_totals["worker_seconds"] +
                                               record.get("seconds", 0.0), 3)
        op = per_op.setdefault(record["name"], {"kind": "runtime", "fallback_ops": [],
                                                **dict.fromkeys(OUTCOMES, 0), "dtypes": {},
                                                "problems": []})
        for sample in record["samples"]:
            counts[sample["outcome"]] += 1
            dtype_totals[sample["outcome"]] += 1
            dtype_totals["samples"] += 1
            ill = bool(sample.get("ill_conditioned"))
            ill_conditioned += ill
            dtype_totals["ill_conditioned"] += ill
            if (sample["outcome"] != "pass" or ill) and len(op["problems"]) < 5:
                op["problems"].append({"dtype": dtype, **sample})
        for key, value in counts.items():
            totals[key] += value
            op[key] += value
        op["dtypes"][dtype] = {"kind": record["kind"], **counts}
        if adaptive:
            for entry in (dtype_totals, op, op["dtypes"][dtype]):
                entry["replayed"] = entry.get("replayed", 0) + record_replayed
        if KIND_ORDER.index(record["kind"]) < KIND_ORDER.index(op["kind"]):
            op["kind"] = record["kind"]
        op["fallback_ops"] = sorted(set(op["fallback_ops"]) | set(record["fallback_ops"]))
    kinds = dict.fromkeys(("compiled", "library", "fallback", "runtime", "unknown"), 0)
    for op in per_op.values():
        kinds[op["kind"]] += 1
    failing = sorted(n for n, o in per_op.items() if o["mismatch"] or o["device_error"])
    extra = {}
    if adaptive:
        # How each device sample ran: the worker's runs per sample and the tracer's threshold
        # (every worker reads the same environment; a crashed pair's record has neither).
        runs = sorted({(r["adaptive_runs"], r["adaptive_threshold"]) for r in records
                       if "adaptive_runs" in r})
        extra = {"replayed": replayed, "fused": fused,
                 "adaptive": [{"runs_per_sample": n, "threshold": t} for n, t in runs]}
    return {**extra, "opinfos": len(per_op), "opinfo_dtypes": len(records),
            "samples": sum(totals.values()), **totals,
            "ill_conditioned": ill_conditioned,
            "samples_by_dtype": {d: t["samples"] for d, t in by_dtype.items()},
            "by_dtype": by_dtype,
            "opinfos_by_kind": kinds, "quick": quick, "seconds": round(seconds, 1),
            "known_limitations": {n: KNOWN_LIMITATIONS[n] for n in failing if n in KNOWN_LIMITATIONS},
            "unexpected_failures": [n for n in failing if n not in KNOWN_LIMITATIONS],
            "ops": per_op}


def print_report(summary, path):
    for name in sorted(summary["unexpected_failures"] + list(summary["known_limitations"])):
        op = summary["ops"][name]
        bad = [d for d, c in op["dtypes"].items() if c["mismatch"] or c["device_error"]]
        problem = next((p for p in op["problems"] if p["outcome"] != "pass"), None)
        detail = f"[{problem['dtype']}] {problem['detail']}" if problem else ""
        known = " [known limitation: " + KNOWN_LIMITATIONS[name] + "]" if name in KNOWN_LIMITATIONS else ""
        print(f"  {name} ({','.join(bad)}): mismatch={op['mismatch']} "
              f"device_error={op['device_error']}  {detail[:200]}{known}")
    for dtype, t in summary["by_dtype"].items():
        print(f"  {dtype:>9}: opinfos={t['opinfos']} samples={t['samples']} pass={t['pass']} "
              f"(ill-conditioned {t['ill_conditioned']}) mismatch={t['mismatch']} "
              f"device_error={t['device_error']} skipped={t['skipped']} "
              + (f"replayed={t['replayed']} " if "replayed" in t else "")
              + f"({t['worker_seconds']:.0f} worker-s)")
    kinds = summary["opinfos_by_kind"]
    print(f"[conformance] opinfos={summary['opinfos']} dtypes={len(summary['by_dtype'])} "
          f"samples={summary['samples']} "
          f"pass={summary['pass']} (ill-conditioned {summary['ill_conditioned']}) "
          f"mismatch={summary['mismatch']} "
          f"device_error={summary['device_error']} skipped={summary['skipped']} "
          + (f"replayed={summary['replayed']} fused={summary['fused']} " if "replayed" in summary else "")
          + "| native "
          f"compiled={kinds['compiled']} library={kinds['library']} fallback={kinds['fallback']} "
          f"| {summary['seconds']}s -> {path}")


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    if arguments.worker:
        if arguments.plan:
            write_plan(arguments)
        from conformance_worker import run_worker
        sys.exit(run_worker(arguments.worker, arguments.results, arguments.quick,
                            arguments.adaptive, arguments.eager_replay))
    sys.exit(run_parent(arguments))
