"""Interim launches (issue 15, "no cold-start penalty"): an op whose kernel is not compiled yet
runs ATen's CPU kernel on host views at once while its kernel compiles in the background, then
switches to it; deterministic mode waits instead. Each case runs a program in a fresh process
with interim launches on (the test suite otherwise runs with them off) and its own cache."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = textwrap.dedent("""
    import json, os, sys, warnings
    warnings.simplefilter("error")  # an interim launch must not warn
    import torch, torchneuron
    dev = torchneuron.device()
    torch.manual_seed(0)
    x_cpu = torch.randn(64, 33)
    y_cpu = torch.randn(64, 33)
    x, y = x_cpu.to(dev), y_cpu.to(dev)

    def ops(x, y):
        z = torch.empty_like(x)
        torch.mul(x, 3, out=z)          # out=
        w = y.clone()
        w.add_(x, alpha=2)              # in place
        w[:, ::2].mul_(0.5)             # in place through a strided view
        return [torch.tanh(x) * 2 + 1, torch.softmax(x, 1), x.sum(0), x.t().exp(),
                torch.where(x > 0, x, y), x.double(), z, w,
                torch.nn.functional.layer_norm(x + y, (33,))]

    def check(results):
        for got, want in zip(results, ops(x_cpu, y_cpu)):
            torch.testing.assert_close(got.cpu(), want)

    def counts():
        m = torchneuron.metrics()
        return {"interim": m["launches"]["interim"], "compiled": m["launches"]["compiled"],
                "fallback": m["launches"]["fallback"], "compiles": m["compiles"],
                "background": m["background_compiles"],
                "pending": m["background_compiles_pending"],
                "persistent_hits": m["persistent_hits"],
                "interim_ops": sorted(m["ops"]["interim"])}
""")


def run(body, tmp_path, cache="cache", args=(), **env):
    environment = dict(os.environ, NEURON_CACHE_DIR=str(tmp_path / cache),
                       NEURON_INTERIM_LAUNCHES="1", NEURON_FALLBACK="silent")
    environment.pop("NEURON_DETERMINISTIC", None)
    environment.update(env)
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args],
                          env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cold_ops_run_at_once_on_the_cpu_then_on_their_compiled_kernels(tmp_path):
    result = run("""
        first = ops(x, y)
        cold = counts()
        check(first)
        torchneuron.wait_for_compiles()
        compiled = counts()
        torchneuron.reset_metrics()
        check(ops(x, y))
        print(json.dumps({"cold": cold, "compiled": compiled, "warm": counts()}))
    """, tmp_path)
    cold, compiled, warm = result["cold"], result["compiled"], result["warm"]
    # Every op's first call ran interim, none fell back, and its kernel compiled in the background.
    assert cold["interim"] >= 10 and cold["fallback"] == 0, cold
    assert {"aten::tanh", "aten::mul.out", "aten::add_.Tensor", "aten::_softmax",
            "aten::copy_"} <= set(cold["interim_ops"]), cold
    assert compiled["pending"] == 0 and compiled["background"] >= 10, compiled
    assert compiled["compiles"] == compiled["background"], compiled
    # Compiled: the same calls launch their kernels.
    assert warm["interim"] == 0 and warm["fallback"] == 0 and warm["compiled"] >= 10, warm
    assert warm["compiles"] == 0, warm


def test_float16_and_bfloat16_calls_wait_for_their_kernels(tmp_path):
    # PyTorch 1.13's CPU has no float16 exp or bfloat16 sigmoid: such a call cannot run interim.
    result = run("""
        h, b = x.half(), x.bfloat16()
        torch.testing.assert_close(torch.exp(h).cpu(), torch.exp(x_cpu).half(), rtol=2e-3, atol=1e-3)
        torch.testing.assert_close(torch.sigmoid(b).cpu(), torch.sigmoid(x_cpu).bfloat16(),
                                   rtol=2e-2, atol=1e-2)
        m = torchneuron.metrics()
        print(json.dumps({"compiled": m["ops"]["compiled"], "interim": m["ops"]["interim"]}))
    """, tmp_path)
    assert "aten::exp" in result["compiled"] and "aten::sigmoid" in result["compiled"], result
    assert "aten::exp" not in result["interim"] and "aten::sigmoid" not in result["interim"], result


@pytest.mark.parametrize("how", ["environment", "torch"])
def test_deterministic_mode_waits_for_each_compile(tmp_path, how):
    result = run("""
        if sys.argv[1:] == ["torch"]:
            torch.use_deterministic_algorithms(True)
        check(ops(x, y))
        print(json.dumps(counts()))
    """, tmp_path, args=[how], **({"NEURON_DETERMINISTIC": "1"} if how == "environment" else {}))
    assert result["interim"] == 0 and result["background"] == 0, result
    assert result["compiled"] >= 10 and result["compiles"] >= 10, result


def test_interim_launches_off_waits_for_each_compile(tmp_path):
    result = run("""
        check(ops(x, y))
        print(json.dumps(counts()))
    """, tmp_path, NEURON_INTERIM_LAUNCHES="0")
    assert result["interim"] == 0 and result["background"] == 0 and result["compiled"] >= 10


def test_a_process_that_exits_at_once_leaves_its_kernels_for_the_next(tmp_path):
    first = run("""
        ops(x, y)
        print(json.dumps(counts()))
    """, tmp_path, NEURON_WARM_START="0")
    assert first["interim"] > 0, first
    # Its exit finished the background compiles and stored them: a rerun compiles nothing and
    # runs every op's kernel from its first call (loaded from the store on the calling thread).
    second = run("""
        check(ops(x, y))
        print(json.dumps(counts()))
    """, tmp_path, NEURON_WARM_START="0")
    assert second["compiles"] == 0 and second["interim"] == 0, second
    assert second["persistent_hits"] > 0 and second["compiled"] >= 10, second


def test_a_child_forked_while_kernels_compile_runs_correctly(tmp_path):
    result = run("""
        ops(x, y)                                  # queues the background compiles
        pid = os.fork()
        if pid == 0:
            try:
                check(ops(x, y))
                torchneuron.wait_for_compiles()    # the child's own worker: must not hang
                torchneuron.reset_metrics()
                check(ops(x, y))
                c = counts()
                os._exit(0 if c["interim"] == 0 and c["compiled"] >= 10 else 3)
            except BaseException:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
        check(ops(x, y))
        torchneuron.wait_for_compiles()
        print(json.dumps({"child": os.waitstatus_to_exitcode(status), "parent": counts()}))
    """, tmp_path)
    assert result["child"] == 0, result
    assert result["parent"]["pending"] == 0, result


def test_training_in_adaptive_mode_with_interim_launches_matches_the_cpu(tmp_path):
    result = run("""
        def train(device):
            torch.manual_seed(1)
            model = torch.nn.Sequential(torch.nn.Linear(33, 40), torch.nn.GELU(),
                                        torch.nn.LayerNorm(40), torch.nn.Linear(40, 5)).to(device)
            opt = torch.optim.Adam(model.parameters(), lr=1e-2)
            data, target = x_cpu.to(device), (y_cpu[:, :5] > 0).float().to(device)
            losses = []
            for step in range(8):
                opt.zero_grad()
                loss = torch.nn.functional.binary_cross_entropy_with_logits(model(data), target)
                loss.backward()
                opt.step()
                losses.append(loss.item())
                if step == 3:
                    torchneuron.wait_for_compiles()  # later steps: compiled kernels, hot windows
            return losses, [p.detach().cpu() for p in model.parameters()]
        torchneuron.set_adaptive(True)
        got_losses, got_params = train(dev)
        torchneuron.set_adaptive(False)
        want_losses, want_params = train(torch.device("cpu"))
        # Steps 0-3 ran some ops on the CPU and some compiled, where timing put the switch:
        # results agree to rounding, as eager mode's do.
        torch.testing.assert_close(torch.tensor(got_losses), torch.tensor(want_losses),
                                   rtol=1e-4, atol=1e-5)
        for g, w in zip(got_params, want_params):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        m = torchneuron.metrics()
        print(json.dumps({"counts": counts(), "replays": m["adaptive"]["replays"],
                          "interim_syncs": m["adaptive"]["syncs"]["interim"],
                          "explain": torchneuron.explain()}))
    """, tmp_path)
    assert result["counts"]["interim"] > 0 and result["counts"]["fallback"] == 0, result
    assert result["replays"] > 0, result
    # Interim launches ended windows, but those windows are not counted as signatures (they are
    # cut where compiles happened to stand): none of them is listed, none pins its site.
    assert result["interim_syncs"] > 0, result
    assert "ended by interim" not in result["explain"], result["explain"]
    assert "pinned" not in result["explain"], result["explain"]


def test_a_bad_setting_warns_naming_it_and_keeps_the_default(tmp_path):
    environment = dict(os.environ, NEURON_CACHE_DIR=str(tmp_path / "cache"),
                       NEURON_INTERIM_LAUNCHES="sometimes")
    done = subprocess.run([sys.executable, "-W", "always", "-c",
                           "import torch, torchneuron; x = torch.ones(3).to(torchneuron.device());"
                           "(x * 2).cpu(); print(torchneuron.metrics()['launches']['interim'])"],
                          env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "NEURON_INTERIM_LAUNCHES" in done.stderr and "sometimes" in done.stderr, done.stderr
    assert int(done.stdout.strip().splitlines()[-1]) > 0  # the default: on
