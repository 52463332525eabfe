#!/usr/bin/env python3
"""Conformance referee: every float32 OpInfo of PyTorch's op_db, on the CPU and on the device.

For each sample the op runs on the CPU and on the neuron device (same seed); outputs are
compared and, where the op supports autograd, so are the gradients. A sample ends as
  pass          device matches CPU (or, for an ill-conditioned sample, differs from it by no
                more than the CPU differs from itself when the inputs move by one ulp;
                counted separately as "ill_conditioned")
  mismatch      device result differs from CPU
  device_error  the device raised (or crashed) where the CPU did not
  skipped       the CPU itself cannot run the sample (reason recorded)
Per OpInfo it records how the device ran it: "compiled", "library" or "fallback" (the
least native kind any of its samples needed) and which ATen ops fell back.

Ops are split over worker processes; a worker that crashes marks the op it was running as
device_error ("crashed") and the run goes on with a new worker.

    /usr/bin/python3 tests/conformance/run_conformance.py [--quick] [--ops a,b] --output FILE
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

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
                        help="at most 2 samples per OpInfo (the subset `make test` runs)")
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--workers", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: op list file
    parser.add_argument("--results", help=argparse.SUPPRESS)  # internal: JSON lines out
    return parser.parse_args(argv)


def run_parent(args):
    sys.path.insert(0, os.path.join(HERE, "compat"))
    from conformance_ops import float32_opinfo_names  # noqa: E402 (after path setup)

    names = float32_opinfo_names()
    if args.ops:
        wanted = set(args.ops.split(","))
        unknown = wanted - set(names)
        if unknown:
            sys.exit(f"[conformance] unknown OpInfo name(s): {', '.join(sorted(unknown))}")
        names = [n for n in names if n in wanted]
    started = time.time()
    shards = [names[i::args.workers] for i in range(args.workers)]
    with tempfile.TemporaryDirectory() as scratch:
        processes = [ShardRunner(i, shard, args, scratch) for i, shard in enumerate(shards)]
        while any(p.running() for p in processes):
            time.sleep(0.5)
            done = sum(len(p.records) for p in processes)
            print(f"\r[conformance] {done}/{len(names)} OpInfos", end="", flush=True)
        print()
        records = [r for p in processes for r in p.records]
    summary = summarize(records, quick=args.quick, seconds=time.time() - started)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    print_report(summary, args.output)
    return 0 if not summary["unexpected_failures"] else 1


class ShardRunner:
    """Runs one shard of OpInfos in a worker process, restarting past a crashed op."""

    def __init__(self, index, names, args, scratch):
        self.names = list(names)
        self.args = args
        self.scratch = scratch
        self.index = index
        self.records = []
        self.process = None
        self.restarts = 0
        self._start()

    def _start(self):
        remaining = self.names[len(self.records):]
        if not remaining:
            self.process = None
            return
        base = os.path.join(self.scratch, f"shard{self.index}.{self.restarts}")
        self.results_path = base + ".jsonl"
        with open(base + ".ops", "w") as f:
            f.write("\n".join(remaining))
        self.offset = 0
        command = [sys.executable, __file__, "--output", self.args.output, "--worker", base + ".ops",
                   "--results", self.results_path] + (["--quick"] if self.args.quick else [])
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
        if len(self.records) < len(self.names):
            crashed = self.names[len(self.records)]
            self.records.append({"name": crashed, "kind": "unknown", "fallback_ops": [],
                                 "samples": [{"outcome": "device_error",
                                              "detail": f"worker crashed (exit {code})"}]})
            self.restarts += 1
            self._start()
            return True
        return False


def summarize(records, quick, seconds):
    totals = {"pass": 0, "mismatch": 0, "device_error": 0, "skipped": 0}
    per_op = {}
    kinds = {"compiled": 0, "library": 0, "fallback": 0, "runtime": 0, "unknown": 0}
    ill_conditioned = 0
    for record in records:
        counts = {k: 0 for k in totals}
        problems = []
        for sample in record["samples"]:
            counts[sample["outcome"]] += 1
            ill_conditioned += bool(sample.get("ill_conditioned"))
            if sample["outcome"] != "pass" or sample.get("ill_conditioned"):
                problems.append(sample)
        for key, value in counts.items():
            totals[key] += value
        kinds[record["kind"]] += 1
        per_op[record["name"]] = {"kind": record["kind"], "fallback_ops": record["fallback_ops"],
                                  **counts, "problems": problems[:5]}
    failing = sorted(n for n, o in per_op.items() if o["mismatch"] or o["device_error"])
    return {"opinfos": len(records), "samples": sum(totals.values()), **totals,
            "ill_conditioned": ill_conditioned,
            "opinfos_by_kind": kinds, "quick": quick, "seconds": round(seconds, 1),
            "known_limitations": {n: KNOWN_LIMITATIONS[n] for n in failing if n in KNOWN_LIMITATIONS},
            "unexpected_failures": [n for n in failing if n not in KNOWN_LIMITATIONS],
            "ops": per_op}


def print_report(summary, path):
    for name in sorted(summary["unexpected_failures"] + list(summary["known_limitations"])):
        op = summary["ops"][name]
        detail = op["problems"][0]["detail"] if op["problems"] else ""
        known = " [known limitation: " + KNOWN_LIMITATIONS[name] + "]" if name in KNOWN_LIMITATIONS else ""
        print(f"  {name}: mismatch={op['mismatch']} device_error={op['device_error']}  {detail[:200]}{known}")
    kinds = summary["opinfos_by_kind"]
    print(f"[conformance] opinfos={summary['opinfos']} samples={summary['samples']} "
          f"pass={summary['pass']} (ill-conditioned {summary['ill_conditioned']}) "
          f"mismatch={summary['mismatch']} "
          f"device_error={summary['device_error']} skipped={summary['skipped']} | native "
          f"compiled={kinds['compiled']} library={kinds['library']} fallback={kinds['fallback']} "
          f"| {summary['seconds']}s -> {path}")


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    if arguments.worker:
        sys.path.insert(0, os.path.join(HERE, "compat"))
        from conformance_worker import run_worker
        sys.exit(run_worker(arguments.worker, arguments.results, arguments.quick))
    sys.exit(run_parent(arguments))
