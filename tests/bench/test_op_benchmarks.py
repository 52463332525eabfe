"""The in-process op benchmarks run to the end: each case of bench/softmax_ops.py (softmax and
log_softmax, forward and backward, at two shapes), of bench/reductions.py (a bias gradient's sum
over rows, its mean, layer norm's backward, amax, max and argmax over rows) and of
bench/copies.py (transposes made contiguous, a clone) and of bench/random_draws.py (dropout's masks
drawn with bernoulli_, dropout itself, uniform_ and kaiming_uniform_) matches the CPU before it is timed (the
scripts raise otherwise) and reports positive times for stock and the device; and
bench/backward_handoff.py times each part of each variant."""
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")


@pytest.mark.parametrize("script, cases", [("softmax_ops.py", 8), ("reductions.py", 9),
                                           ("copies.py", 5), ("random_draws.py", 6)])
def test_op_benchmark_checks_and_times_every_case(script, cases):
    done = subprocess.run([sys.executable, os.path.join(BENCH, script), "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    reported = json.loads(done.stdout.strip().splitlines()[-1])["cases"]
    assert len(reported) == cases, sorted(reported)
    for name, case in reported.items():
        assert case["stock_us"] > 0 and case["device_us"] > 0, (name, case)


def test_backward_handoff_times_every_part_of_every_variant():
    """bench/backward_handoff.py: the device's parameters match stock's after 20 steps, each
    variant reports each part, the device's backward runs on the caller's thread and PyTorch's
    engine (the comparison variant) runs it on its device thread."""
    done = subprocess.run([sys.executable, os.path.join(BENCH, "backward_handoff.py"), "--rounds",
                           "1", "--steps", "5"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    steps = result["us_per_step"]
    assert not result["backward_on_another_thread"]
    assert result["engine_thread_backward_on_another_thread"]
    assert set(steps) == {"stock", "device", "device-engine-thread", "device-no-backward"}
    for name, parts in steps.items():
        assert all(parts[p] > 0 for p in ("zero_grad", "forward", "step", "total")), (name, parts)
        assert (parts["backward"] > 1) == (name != "device-no-backward"), (name, parts)
