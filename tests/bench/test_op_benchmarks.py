"""The in-process op benchmarks run to the end: each case of bench/softmax_ops.py (softmax and
log_softmax, forward and backward, at two shapes), of bench/reductions.py (a bias gradient's sum
over rows, its mean, layer norm's backward, amax, max and argmax over rows) and of
bench/copies.py (transposes made contiguous, a clone) matches the CPU before it is timed (the
scripts raise otherwise) and reports positive times for stock and the device."""
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")


@pytest.mark.parametrize("script, cases", [("softmax_ops.py", 8), ("reductions.py", 9),
                                           ("copies.py", 5)])
def test_op_benchmark_checks_and_times_every_case(script, cases):
    done = subprocess.run([sys.executable, os.path.join(BENCH, script), "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    reported = json.loads(done.stdout.strip().splitlines()[-1])["cases"]
    assert len(reported) == cases, sorted(reported)
    for name, case in reported.items():
        assert case["stock_us"] > 0 and case["device_us"] > 0, (name, case)
