"""bench/adaptive_pairs.py (adaptive mode against eager mode, repetitions alternating in one
process): a workload's pairs are timed and summarised, the adaptive ones ran fused kernels,
nothing compiles while they run, an
unknown workload is refused naming it, and the report marks a workload below 0.95x."""
import json
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import report  # noqa: E402


def test_pairs_time_both_modes_on_the_same_state():
    done = subprocess.run([sys.executable, os.path.join(BENCH, "adaptive_pairs.py"), "--threads",
                           "1", "--workloads", "gelu-tanh-64K,softmax", "--pairs", "3"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.strip().splitlines()]
    assert [r["workload"] for r in rows] == ["gelu-tanh-64K", "softmax"]
    for r in rows:
        assert r["ok"], r
        assert len(r["eager_times_ms"]) == len(r["adaptive_times_ms"]) == 3
        assert r["speedup_min"] <= r["adaptive_speedup"] <= r["speedup_max"]
        assert 0 <= r["pairs_adaptive_slower"] <= 3
        assert r["compiles"] == 0, r  # warm-up compiled everything, fused kernels included
    # The adaptive repetitions really ran adaptively: the GELU chain's windows fused (the times
    # themselves are the bench's to report, not a test's to assert).
    assert rows[0]["adaptive"]["ops_deferred"] > 0, rows[0]
    assert rows[0]["adaptive"]["fused_kernel_runs"] > 0, rows[0]


def test_stock_is_a_third_arm_paired_the_same_way():
    """--stock: the workload built on the CPU is timed in the same rotation; each round's stock
    time over each mode's gives the paired ratios (their medians inside their ranges)."""
    done = subprocess.run([sys.executable, os.path.join(BENCH, "adaptive_pairs.py"), "--threads",
                           "1", "--workloads", "tiny-regression-train", "--pairs", "3", "--stock"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["ok"], row
    assert len(row["stock_times_ms"]) == 3 and row["stock_ms"] > 0
    for arm in ("eager", "adaptive"):
        assert row[f"{arm}_vs_stock_min"] <= row[f"{arm}_vs_stock"] <= row[f"{arm}_vs_stock_max"]
    ratios = sorted(s / e for s, e in zip(row["stock_times_ms"], row["eager_times_ms"]))
    assert row["eager_vs_stock"] == ratios[1]


def test_an_unknown_workload_is_refused_naming_it():
    done = subprocess.run([sys.executable, os.path.join(BENCH, "adaptive_pairs.py"),
                           "--workloads", "no-such-workload"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert "no-such-workload" in done.stderr


def test_the_report_marks_a_workload_below_the_floor():
    rows = [{"workload": "fast", "ok": True, "eager_ms": 2.0, "adaptive_ms": 1.0,
             "adaptive_speedup": 2.0, "speedup_min": 1.8, "speedup_max": 2.2,
             "pairs_adaptive_slower": 0, "pairs": 8},
            {"workload": "slow", "ok": True, "eager_ms": 1.0, "adaptive_ms": 1.1,
             "adaptive_speedup": 0.91, "speedup_min": 0.85, "speedup_max": 0.97,
             "pairs_adaptive_slower": 8, "pairs": 8},
            {"workload": "broken", "ok": False, "error": "RuntimeError: boom"}]
    lines = report.adaptive_pair_lines({1: rows})
    fast = next(l for l in lines if l.startswith("| fast"))
    slow = next(l for l in lines if l.startswith("| slow"))
    assert "2.00x" in fast and "<0.95x" not in fast
    assert "0.91x" in slow and "<0.95x" in slow and "8/8" in slow
    assert any("broken" in l and "boom" in l for l in lines)
    assert not any("stock-tuned" in l for l in lines)  # no stock arm: no stock columns


def test_the_report_gives_the_stock_arm_its_columns_and_marks_them():
    row = {"workload": "cnn", "ok": True, "eager_ms": 45.0, "adaptive_ms": 44.0,
           "adaptive_speedup": 1.02, "speedup_min": 0.98, "speedup_max": 1.05,
           "pairs_adaptive_slower": 2, "pairs": 8, "stock_ms": 54.0,
           "eager_vs_stock": 1.2, "eager_vs_stock_min": 1.1, "eager_vs_stock_max": 1.3,
           "adaptive_vs_stock": 0.9, "adaptive_vs_stock_min": 0.8, "adaptive_vs_stock_max": 1.0}
    lines = report.adaptive_pair_lines({1: [row, {"workload": "broken", "ok": False,
                                                  "error": "boom"}]})
    header = next(l for l in lines if l.startswith("| workload"))
    cnn = next(l for l in lines if l.startswith("| cnn"))
    broken = next(l for l in lines if l.startswith("| broken"))
    assert "stock-tuned ms" in header and "adaptive vs stock-tuned" in header
    assert header.count("|") == cnn.count("|") == broken.count("|")
    assert "| 54 |" in cnn and "1.20x [1.10-1.30] |" in cnn and "0.90x [0.80-1.00] **<0.95x**" in cnn
