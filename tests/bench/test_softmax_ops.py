"""bench/softmax_ops.py runs to the end: each of its eight cases (softmax and log_softmax, forward
and backward, at the attention and logits shapes) matches the CPU before it is timed (the
script raises otherwise) and reports positive times for stock and the device."""
import json
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "softmax_ops.py")


def test_softmax_ops_bench_checks_and_times_every_case():
    done = subprocess.run([sys.executable, SCRIPT, "--rounds", "1"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])["cases"]
    assert len(cases) == 8, sorted(cases)
    for name, case in cases.items():
        assert case["stock_us"] > 0 and case["device_us"] > 0, (name, case)
