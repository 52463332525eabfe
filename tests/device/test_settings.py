"""The NEURON_* settings from Python (support/settings.h, README "Environment variables"): a
bad NEURON_FALLBACK fails the import naming variable and value; a bad cache knob is one
UserWarning naming variable and value, then the default; accepted spellings are silent. And
warnings raised off the Python thread (the warm start's) reach Python as UserWarnings at the
next op, once. Each case runs in a fresh process (settings are read at import); the bad knobs
share one."""

import glob
import os
import shutil
import subprocess
import sys
import tempfile

import pytest


@pytest.fixture
def cache_dir():
    directory = tempfile.mkdtemp(prefix="neuron-settings-")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def run(program, cache_dir, **env):
    full = dict(os.environ, NEURON_CACHE_DIR=cache_dir, **env)
    full.pop("NEURON_FALLBACK", None)
    full.update(env)
    return subprocess.run([sys.executable, "-c", program], env=full, capture_output=True,
                          text=True, timeout=300)


# Imports with every warning recorded and prints those from torchneuron, one per line.
IMPORT = r"""
import warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    import torch, torchneuron
    torchneuron.synchronize()
for w in seen:
    if "[cache]" in str(w.message):
        print(w.category.__name__, str(w.message))
"""


def test_bad_fallback_mode_fails_the_import_naming_variable_and_value(cache_dir):
    done = run(IMPORT, cache_dir, NEURON_FALLBACK="loudly")
    assert done.returncode != 0
    assert "RuntimeError: [fallback] NEURON_FALLBACK must be 'warn', 'silent' or 'error', got " \
           "'loudly'" in done.stderr, done.stderr[-2000:]


BAD_KNOBS = [
    ("NEURON_CACHE", "maybe"),
    ("NEURON_WARM_START", "bogus"),
    ("NEURON_CACHE_RETRY_FAILED", "2"),
    ("NEURON_CACHE_MAX_BYTES", "99999999999999999999999"),
    ("NEURON_CACHE_MEMORY_MAX_BYTES", "-1"),
    ("NEURON_WARM_START_MAX_BYTES", "1e23"),
    ("NEURON_LIST_LAUNCHES", "sometimes"),
    ("NEURON_LAUNCH_POOL", "fibers"),
    ("NEURON_OPENMP_WAIT", "sometimes"),
    ("NEURON_HUGE_PAGES", "large"),
    ("NEURON_PERF_MAP", "maybe"),
]


@pytest.fixture(scope="module")
def bad_knobs_import():
    """One import with every knob of BAD_KNOBS bad at once: each variable is parsed, and warned
    about, on its own (one warning per variable name), so one process shows them all."""
    directory = tempfile.mkdtemp(prefix="neuron-settings-")
    done = run(IMPORT, directory, **dict(BAD_KNOBS))
    shutil.rmtree(directory, ignore_errors=True)
    return done


@pytest.mark.parametrize("variable,value", BAD_KNOBS)
def test_bad_cache_knob_is_one_user_warning_naming_it(bad_knobs_import, variable, value):
    done = bad_knobs_import
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    # One warning per bad knob and no other: none of them warns twice or about anything else.
    assert len(lines) == len(BAD_KNOBS), done.stdout + done.stderr[-2000:]
    [line] = [line for line in lines if f" [cache] {variable}=" in line]
    assert line.startswith(f"UserWarning [cache] {variable}={value} is not a ")
    assert "the default" in line


def test_documented_spellings_are_accepted_silently(cache_dir):
    done = run(IMPORT, cache_dir, NEURON_CACHE="yes", NEURON_WARM_START="on",
               NEURON_CACHE_RETRY_FAILED="true", NEURON_CACHE_MAX_BYTES="1G",
               NEURON_CACHE_MEMORY_MAX_BYTES="64M", NEURON_WARM_START_MAX_BYTES="0",
               NEURON_FALLBACK="silent")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""


def test_memory_cap_below_one_kernel_warns_once(cache_dir):
    program = IMPORT + r"""
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    d = torch.ones(8, device=torchneuron.device())
    for t in (d + 1, d * 2, d.exp()):
        t.cpu()
print("\n".join(str(w.message) for w in seen if "[cache]" in str(w.message)))
"""
    done = run(program, cache_dir, NEURON_CACHE_MEMORY_MAX_BYTES="100")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    assert "NEURON_CACHE_MEMORY_MAX_BYTES=100 bytes cannot hold one kernel" in lines[0]


# Makes a profile (first run), or, with a damaged one, waits for the warm start without draining
# the warning queue (_C.metrics, not torchneuron.metrics) and expects the thread's warning at the
# next device op, as a UserWarning, once.
WARM = r"""
import os, sys, time, warnings, pytest, torch, torchneuron
if os.environ["PHASE"] == "damaged":
    deadline = time.time() + 60
    while not torchneuron._C.metrics()["warm_start"]["done"] and time.time() < deadline:
        time.sleep(0.01)
    # The first device op that needs a kernel raises what the thread queued.
    with pytest.warns(UserWarning, match=r"\[cache\] the warm-start profile .* is unusable"):
        d = torch.ones(16, device=torchneuron.device())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (d + 1).cpu()  # once per kind: nothing more
        torchneuron.synchronize()
d = torch.ones(16, device=torchneuron.device())
(d * 3).exp().cpu()
print("ok")
"""


def test_warm_start_thread_warning_reaches_python_at_the_next_op(cache_dir):
    first = run(WARM, cache_dir, PHASE="first")
    assert first.returncode == 0 and first.stdout.strip() == "ok", first.stderr[-2000:]
    [profile] = glob.glob(os.path.join(cache_dir, "profiles", "*.profile"))
    with open(profile, "w") as f:
        f.write("not a profile\n")
    damaged = run(WARM, cache_dir, PHASE="damaged")
    assert damaged.returncode == 0 and damaged.stdout.strip() == "ok", damaged.stderr[-3000:]


@pytest.mark.parametrize("pool", ["openmp", "tbb"])
def test_each_launch_pool_runs_parallel_launches_right(cache_dir, pool):
    """NEURON_LAUNCH_POOL (launcher/parallel_launch.h) at 2 threads: an elementwise kernel, a
    reduction and a list launch large enough to be split across threads equal the CPU's."""
    program = r"""
import torch, torchneuron
torch.set_num_threads(2)
dev = torchneuron.device()
torch.manual_seed(0)
x, y = torch.randn(1 << 21), torch.randn(1 << 21)
xs = [torch.randn(n) for n in (3, 300000, 70000, 1)]
ds = [t.to(dev) for t in xs]
torch._foreach_mul_(ds, 1.5)
torch._foreach_mul_(xs, 1.5)
checks = [torch.equal((x.to(dev) * y.to(dev) + 1).cpu(), x * y + 1),
          torch.allclose(x.to(dev).view(512, -1).sum(1).cpu(), x.view(512, -1).sum(1), atol=1e-4),
          all(torch.equal(d.cpu(), c) for d, c in zip(ds, xs))]
print("ok" if all(checks) else checks)
"""
    done = run(program, cache_dir, NEURON_LAUNCH_POOL=pool, NEURON_INTERIM_LAUNCHES="0")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "ok", done.stdout + done.stderr[-2000:]
