"""The in-process op benchmarks run to the end: each case of bench/softmax_ops.py (softmax and
log_softmax, forward and backward, at two shapes), of bench/reductions.py (a bias gradient's sum
over rows, its mean, sums and means of rows, layer norm's backward, amax, max and argmax over
rows) and of
bench/copies.py (transposes made contiguous, a clone), of bench/random_draws.py (dropout's masks
drawn with bernoulli_, dropout itself, uniform_ and kaiming_uniform_), of bench/scalar_operands.py
(ops with a number operand, 64K to 16M elements) and of bench/special_inputs.py (vector math on
inputs outside its ordinary range) matches the CPU before it is timed (the
scripts raise otherwise) and reports positive times for stock and the device; and
bench/backward_handoff.py times each part of each variant; bench/product_share.py finds the
products (and convolutions) of stock's step, bench/openmp_wait.py runs stock under each OpenMP
wait rule."""
import json
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")


@pytest.mark.parametrize("script, cases", [("softmax_ops.py", 8), ("reductions.py", 12),
                                           ("copies.py", 5), ("random_draws.py", 6),
                                           ("scalar_operands.py", 20), ("special_inputs.py", 13)])
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


def test_product_share_finds_the_products_and_convolutions_of_stocks_step():
    done = subprocess.run([sys.executable, os.path.join(BENCH, "product_share.py"), "--steps", "2",
                           "--workloads", "mlp-train,cnn-mnist-train"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["workload"]: r for r in json.loads(done.stdout.strip().splitlines()[-1])["rows"]}
    for name, row in rows.items():
        # No order between the two times is asserted: they come from different rounds, and on a
        # loaded machine the products of a step that is 90% products measured longer than the
        # step (12.92 against 12.03 ms failed a CI run). The share is reported, not tested.
        assert row["product_ms"] > 0 and row["step_ms"] > 0, row
        assert abs(row["product_share"] - row["product_ms"] / row["step_ms"]) <= 0.002, row
        # The ceiling is the ratio of the unrounded times, rounded to 0.01; the times are
        # reported rounded to 0.001 ms, so their ratio can round the other way (1.42 against
        # 14.597 / 10.243 = 1.42507 failed one CI run).
        assert abs(row["ceiling"] - row["step_ms"] / row["product_ms"]) <= 0.01, row
    assert set(rows["mlp-train"]["product_ops_ms"]) <= {"aten::mm", "aten::addmm"}
    assert "aten::convolution_backward" in rows["cnn-mnist-train"]["product_ops_ms"]


def test_openmp_wait_runs_stock_under_each_rule():
    build = ["--build", os.environ["NEURON_BUILD_DIR"]] if "NEURON_BUILD_DIR" in os.environ else []
    done = subprocess.run([sys.executable, os.path.join(BENCH, "openmp_wait.py"), "--processes",
                           "1", "--reps", "2", "--workloads", "mlp-train"] + build,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rules = json.loads(done.stdout.strip().splitlines()[-1])["workloads"]["mlp-train"]
    parked = "short-spin" if os.cpu_count() >= 2 else "one-cpu"
    assert {r: rules[r]["rule_in_force"] for r in rules} == {
        "default": "default", "passive": "passive", "parked": parked,
        "parked-unchanged": "unchanged"}
    assert all(rules[r]["median_ms"] > 0 for r in rules)
