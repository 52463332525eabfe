"""bench/column_reductions.py runs to the end: each of its cases (a bias gradient's sum over
rows, its mean, layer norm's backward) matches the CPU before it is timed (the script raises
otherwise) and reports positive times for stock and the device."""
import json
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "column_reductions.py")


def test_column_reductions_bench_checks_and_times_every_case():
    done = subprocess.run([sys.executable, SCRIPT, "--rounds", "1"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(done.stdout.strip().splitlines()[-1])["cases"]
    assert len(cases) == 3, sorted(cases)
    for name, case in cases.items():
        assert case["stock_us"] > 0 and case["device_us"] > 0, (name, case)
