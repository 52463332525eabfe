import atexit
import os
import shutil
import tempfile

# Each test process starts with an empty persistent compile cache of its own, so counts of
# compiles do not depend on earlier runs (read by the cache at the first compile). Registered
# before torchneuron is imported, the removal runs after torchneuron's own exit handlers.
os.environ["NEURON_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchneuron-test-cache-")
atexit.register(shutil.rmtree, os.environ["NEURON_CACHE_DIR"], True)
# Tests expect an op's first call to run its kernel: compiles are waited for (as
# tests/run_isolated.sh sets), unless a test says otherwise (test_interim_launches.py).
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")
# The adaptive tests exercise recording on small tensors: every call the tracer can defer is
# deferred (as tests/run_isolated.sh sets), unless a test says otherwise.
os.environ.setdefault("NEURON_ADAPTIVE_MIN_BYTES", "0")

import pytest  # noqa: E402

# torch and torchneuron are imported by the test files that use them, not here: the files whose
# tests only run programs in fresh processes (settings, fork safety) spare their pytest process
# that import (over 2 s of CPU).


@pytest.fixture
def dev():
    import torchneuron
    return torchneuron.device()


@pytest.fixture(autouse=True)
def quiet_fallback(monkeypatch, request):
    """Fallback warnings are tested in test_fallback.py; elsewhere they are noise."""
    if "loud_fallback" not in request.keywords:
        monkeypatch.setenv("NEURON_FALLBACK", "silent")


def assert_child_check_passes(check):
    """Forks; the child runs `check()` (true when its results are right) and reports through a
    pipe. Asserts that the child exited cleanly and reported success."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_end, b"ok" if check() else b"wrong")
        finally:
            os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    report = os.read(read_end, 16)
    os.close(read_end)
    assert status == 0 and report == b"ok", report


def last_lines_under_settings(program, variable, values, timeout=300):
    """Runs the Python `program` in a fresh process once per value of the environment
    `variable`; asserts each exits cleanly and returns {value: the last line it printed}."""
    import subprocess
    import sys
    lines = {}
    for value in values:
        env = dict(os.environ, **{variable: value})
        run = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                             text=True, timeout=timeout)
        assert run.returncode == 0, run.stderr
        lines[value] = run.stdout.strip().splitlines()[-1]
    return lines


def assert_same(device_tensor, cpu_tensor, **kwargs):
    import torch
    import torchneuron
    assert device_tensor.device.type == torchneuron.DEVICE_TYPE
    torch.testing.assert_close(device_tensor.cpu(), cpu_tensor, **kwargs)


def launches_now():
    """torchneuron.metrics()'s launch counts, {kind: {op: count}}, copied (for launched_since)."""
    import torchneuron
    return {kind: dict(ops) for kind, ops in torchneuron.metrics()["ops"].items()}


def launched_since(before):
    """The launches since `before` (a launches_now()), {kind: {op: count}}, ops that did not
    launch left out."""
    import torchneuron
    after = torchneuron.metrics()["ops"]
    return {kind: {op: n - before[kind].get(op, 0) for op, n in ops.items()
                   if n != before[kind].get(op, 0)}
            for kind, ops in after.items()}
