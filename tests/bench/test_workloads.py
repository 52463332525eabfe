"""The bench harness's rules (docs/benchmarks.md): every step's result reaches the value read at
the end of a repetition, warm-up covers the adaptive threshold, and the report flags adaptive
cells below 0.95x of eager. CPU only: the rules are the harness's, the same in every mode."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import report  # noqa: E402
import run_workload  # noqa: E402
from rounds import cells_in_round, merge_rounds  # noqa: E402
from workloads import all_workloads  # noqa: E402


@pytest.mark.parametrize("workload", all_workloads(), ids=lambda w: w.name)
def test_every_step_changes_the_observed_value(workload):
    """A step whose result never reached observe() would leave it as it was: dead work a lazy
    mode could skip. Two steps each (feeding forward, softmax's rows become uniform later)."""
    torch.set_num_threads(1)
    state = workload.build(torch.device("cpu"))
    for step in range(2):
        before = workload.observe(state).detach().clone()
        workload.step(state)
        after = workload.observe(state).detach()
        assert not torch.equal(before, after), f"{workload.name}: step {step} left observe() unchanged"
        assert torch.isfinite(after).all(), f"{workload.name}: step {step} gave non-finite values"


def test_warmup_covers_the_adaptive_threshold(monkeypatch):
    monkeypatch.delenv("NEURON_ADAPTIVE_THRESHOLD", raising=False)
    assert run_workload.warmup_repetitions(None) == 4
    assert run_workload.warmup_repetitions(6) == 6
    with pytest.raises(ValueError, match=r"--warmup 3 is below the adaptive threshold \+ 2 \(4\)"):
        run_workload.warmup_repetitions(3)
    monkeypatch.setenv("NEURON_ADAPTIVE_THRESHOLD", "5")
    assert run_workload.warmup_repetitions(None) == 7
    for bad in ("0", "two"):
        monkeypatch.setenv("NEURON_ADAPTIVE_THRESHOLD", bad)
        with pytest.raises(ValueError, match=f"NEURON_ADAPTIVE_THRESHOLD must be an integer >= 1, got '{bad}'"):
            run_workload.warmup_repetitions(None)


def test_warmup_below_the_threshold_is_refused_at_the_command_line(monkeypatch, capsys):
    monkeypatch.delenv("NEURON_ADAPTIVE_THRESHOLD", raising=False)
    with pytest.raises(SystemExit):
        run_workload.parse(["--mode", "stock", "--threads", "1", "--workload", "softmax", "--warmup", "1"])
    assert "--warmup 1 is below the adaptive threshold + 2 (4)" in capsys.readouterr().err


def cell(mode, round_medians, workload="w", threads=1):
    rounds = [{"workload": workload, "mode": mode, "threads": threads, "ok": True, "median_ms": m,
               "times_ms": [m], "compiles": 0} for m in round_medians]
    return merge_rounds(rounds)


def test_report_flags_adaptive_cells_below_the_floor_in_any_round():
    rows = [cell("neuron-eager", [1.0, 1.0], "steady"), cell("neuron-adaptive", [1.0, 0.9], "steady"),
            cell("neuron-eager", [1.0, 1.0], "slow"), cell("neuron-adaptive", [1.0, 1.2], "slow")]
    result = {"rows": rows, "micro": {}}
    report.annotate(result)
    summary = result["figures"]["adaptive_vs_eager"]
    assert summary["cells"] == 2
    assert [(b["workload"], round(b["lowest"], 3)) for b in summary["below"]] == [("slow", 0.833)]
    steady = next(r for r in rows if r["workload"] == "steady" and r["mode"] == "neuron-adaptive")
    assert steady["round_speeds_vs_eager"] == pytest.approx([1.0, 1.0 / 0.9])
    lines = "\n".join(report.adaptive_lines(result))
    assert "| slow | 1 | 1 | 1.1 | 0.91x | 1.00x, 0.83x | - | **below 0.95x** |" in lines
    assert "| steady | 1 | 1 | 0.95 | 1.05x | 1.00x, 1.11x | - |  |" in lines


def test_report_states_each_mode_against_the_limit():
    """Issue 14: each cell's time over its workload's limit loop (the micro benchmark of this
    run, in its own time unit), the limit's share of the triad, and the targets that read it."""
    rows = [cell("stock-tuned", [6.0, 6.0], "gelu-tanh-16M"), cell("neuron-adaptive", [4.0, 4.0], "gelu-tanh-16M"),
            cell("stock-tuned", [3.0, 3.0], "layernorm-residual"),
            cell("neuron-adaptive", [1.0, 1.0], "layernorm-residual"), cell("stock", [1.0, 1.0], "softmax")]
    for r in rows:
        if r["workload"] == "layernorm-residual":
            r["gbps"] = 9.0 / r["median_ms"]
    micro = {"BM_Limit/gelu-tanh-16M/threads:1/real_time": {"real_time": 2e6, "time_unit": "ns",
                                                            "bytes_per_second": 6e9},
             "BM_Limit/layernorm-residual/threads:1/real_time": {"real_time": 800.0, "time_unit": "us",
                                                                 "bytes_per_second": 11.25e9},
             "BM_StreamTriad/threads:1/real_time": {"real_time": 1.0, "time_unit": "ms",
                                                    "bytes_per_second": 15e9}}
    result = {"rows": rows, "micro": micro}
    report.annotate(result)
    limit = result["figures"]["limit"]
    assert set(limit) == {"gelu-tanh-16M", "layernorm-residual"}  # softmax: no limit measured
    assert limit["gelu-tanh-16M"][1]["over_limit"] == pytest.approx({"stock-tuned": 3.0, "neuron-adaptive": 2.0})
    assert limit["layernorm-residual"][1]["ms"] == pytest.approx(0.8)
    assert limit["layernorm-residual"][1]["triad_fraction"] == pytest.approx(0.75)
    targets = {(t["workload"], t["figure"]): (round(t["value"], 3), t["met"])
               for t in result["figures"]["limit_targets"]}
    assert targets == {("gelu-tanh-16M", "over_limit"): (2.0, False),
                       ("layernorm-residual", "triad_fraction"): (0.6, False),
                       ("layernorm-residual", "speedup_vs_stock-tuned"): (3.0, True)}
    lines = "\n".join(report.limit_lines(result))
    assert "| gelu-tanh-16M | 1 | 2 | 6.0 (40%) | 3.00x | 2.00x |" in lines
    assert "| layernorm-residual | 1 | 0.8 | 11.2 (75%) | 3.75x | 1.25x |" in lines
    assert ("- gelu-tanh-16M, neuron-adaptive, 1 thread(s): time / the limit's 2.00x (target: at most "
            "1.50x): **not met**") in lines


def test_a_speed_over_eager_target_states_what_the_limit_allows():
    """varlen-loop's 1.3x over eager: no mode can beat the limit, so eager's time over the
    limit's is the most it can gain, stated beside the target."""
    rows = [cell("neuron-eager", [1.3, 1.3], "varlen-loop"),
            cell("neuron-adaptive", [1.1, 1.1], "varlen-loop")]
    micro = {"BM_Limit/varlen-loop/threads:1/real_time": {"real_time": 1.0, "time_unit": "ms",
                                                          "bytes_per_second": None}}
    result = {"rows": rows, "micro": micro}
    report.annotate(result)
    [target] = result["figures"]["limit_targets"]
    assert (target["figure"], target["met"]) == ("speed_vs_eager", False)
    assert target["value"] == pytest.approx(1.3 / 1.1)
    assert target["ceiling"] == pytest.approx(1.3)
    assert ("- varlen-loop, neuron-adaptive, 1 thread(s): speed / neuron-eager's 1.18x (target: at "
            "least 1.30x): **not met**; the limit allows at most 1.30x") in "\n".join(
                report.limit_lines(result))


def test_rounds_run_each_workloads_modes_in_alternating_order():
    """A process that follows another runs slower on this VM: two rounds measure every pair of
    modes once in each order, and every cell once per round."""
    modes = ["stock-tuned", "neuron-eager", "neuron-adaptive"]
    first = cells_in_round([1, 2], ["softmax", "add-16M"], modes, 1)
    second = cells_in_round([1, 2], ["softmax", "add-16M"], modes, 2)
    assert first[:3] == [(1, "softmax", m) for m in modes]
    assert second[:3] == [(1, "softmax", m) for m in reversed(modes)]
    assert sorted(first) == sorted(second) and len(set(first)) == 12
    for index in range(0, 12, 3):  # each workload's modes run back to back
        assert len({(t, w) for t, w, _ in first[index:index + 3]}) == 1
    assert cells_in_round([1], ["softmax"], modes, 3) == first[:3]
