"""fork() while other threads compile (DESIGN.md hazard "fork()"; docs/architecture.md, "Threads
and fork"): 20 forks, each child runs device ops, compiling one kernel itself, and exits; no child
may hang. The scenario runs in a process of its own (fork_while_compiling.py) with an empty
persistent cache of its own, so the threads' kernels really compile. The fork hangs this scenario
caught each have a deterministic test of their own: a lazy registration under a lock fork()
waited for (tests/support/fork_handlers_test.cpp), and a thread inside torch.rand holding
PyTorch's CPU generator (tests/device/generator_fork_test.cpp). A third, a thread inside the
first initialization of ATen's CPU capability (a function-local static), is made impossible by
making it at import (src/device/torch_fork_safety.h)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

# Every pairing of the child's kernel rank (five) and its way out (two) twice.
FORKS = 20
CHILD_TIMEOUT_S = 20  # a child takes well under a second; one that takes this long has hung


def test_twenty_forks_while_threads_compile_leave_no_child_hung():
    cache = tempfile.mkdtemp(prefix="neuron-fork-safety-")
    try:
        env = dict(os.environ, NEURON_CACHE_DIR=cache, NEURON_FALLBACK="silent")
        script = os.path.join(os.path.dirname(__file__), "fork_while_compiling.py")
        run = subprocess.run([sys.executable, script, str(FORKS), str(CHILD_TIMEOUT_S)], env=env,
                             capture_output=True, text=True, timeout=FORKS * CHILD_TIMEOUT_S)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["hung"] == [], (
        f"the children of fork iterations {result['hung']} hung (killed after "
        f"{CHILD_TIMEOUT_S} s)")
    assert result["failed"] == [], f"children failed (iteration, report, exit code): " \
                                   f"{result['failed']}"
    assert result["thread_errors"] == [], f"a compiling thread raised: {result['thread_errors']}"
    # The forks overlapped real compiles.
    assert result["compiles_during_forks"] > 0
