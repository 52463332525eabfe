"""The OpenMP wait rule (src/device/openmp_wait.h, NEURON_OPENMP_WAIT): importing torchneuron
parks an idle OpenMP team so that PyTorch's idle OpenMP workers spin briefly and then sleep
(libgomp's default spin left the cores busy for ~4 ms after each parallel region, starving
OpenBLAS's threads at 2 threads on 2 CPUs); the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT and the
setting leave libgomp as it is. Each case runs in a fresh process:
libgomp reads its variables once, when it loads."""
import os
import subprocess
import sys

import pytest

CPUS = len(os.sched_getaffinity(0))
ONLINE = os.cpu_count()
# The parked team: one thread more than the CPUs (those online; the process's affinity may be
# fewer, libgomp may have counted either).
PARKED = str(max(CPUS, ONLINE) + 1)
needs_two_cpus = pytest.mark.skipif(ONLINE < 2, reason="the rule parks a team only with 2+ CPUs")

# The rule's name, the parked team's size, and the threads named after the helper: the helper and
# the team's other threads (libgomp's threads take the name of the thread that started them).
REPORT = """
import os, torch, torchneuron
names = []
for t in os.listdir("/proc/self/task"):
    try:
        names.append(open(f"/proc/self/task/{t}/comm").read().strip())
    except OSError:  # a thread that ended meanwhile
        pass
print(torchneuron.openmp_wait_rule(), torchneuron._C.parked_openmp_team_size(),
      names.count("neuron-omp-park"))
"""

# CPU time the process spends while it sleeps after each of 20 parallel regions of PyTorch's
# OpenMP team: libgomp's default spin keeps its idle worker busy for milliseconds each time
# (70-85 ms in all on this VM), the rule's short spin for microseconds (2-5 ms in all).
IDLE_SPIN = """
import time, torch, torchneuron
torch.set_num_threads(2)
x = torch.empty(1 << 17)  # fill_ splits 2^17 elements between the two threads
x.fill_(0.0)
time.sleep(0.1)
spent = 0.0
for _ in range(20):
    x.fill_(1.0)
    start = time.process_time()
    time.sleep(0.02)
    spent += time.process_time() - start
print(torchneuron.openmp_wait_rule(), spent * 1000)
"""


def environment_without_openmp_variables():
    """This process's environment less OpenMP's own variables (they change the rule and the
    counts) and NEURON_OPENMP_WAIT, whatever the caller's environment."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OMP_", "GOMP_", "KMP_")) and k != "NEURON_OPENMP_WAIT"}


def run(script, preexec_fn=None, **settings):
    env = environment_without_openmp_variables()
    # No background work of the device's own (the warm start reads the cache) during the sleeps.
    env.update(OMP_NUM_THREADS="2", NEURON_CACHE="0", NEURON_WARM_START="0", **settings)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=120, preexec_fn=preexec_fn)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split(), done.stderr


@needs_two_cpus
def test_by_default_the_import_parks_one_team_of_one_thread_more_than_the_cpus():
    words, _ = run(REPORT)
    assert words == ["short-spin", PARKED, PARKED]


@needs_two_cpus
def test_idle_openmp_workers_then_do_not_keep_a_core_busy():
    words, _ = run(IDLE_SPIN)
    assert words[0] == "short-spin"
    assert float(words[1]) < 25.0, f"{words[1]} ms of CPU while idle after 20 parallel regions"


@needs_two_cpus
def test_nor_in_a_process_pinned_to_one_cpu_after_libgomp_counted_two():
    """libgomp counted the CPUs when torch loaded; the import, pinned since, still parks enough."""
    words, _ = run("import os, torch\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
                   + IDLE_SPIN)
    assert words[0] == "short-spin"
    assert float(words[1]) < 25.0, f"{words[1]} ms of CPU while idle after 20 parallel regions"


@pytest.mark.parametrize("settings, rule", [
    ({"OMP_WAIT_POLICY": "passive"}, "passive"),
    ({"OMP_WAIT_POLICY": " PASSIVE "}, "passive"),
    ({"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "1000000"}, "user-set"),
    ({"OMP_WAIT_POLICY": "active"}, "user-set"),
    ({"GOMP_SPINCOUNT": "1000"}, "user-set"),
    ({"NEURON_OPENMP_WAIT": "unchanged"}, "unchanged"),
])
def test_the_users_openmp_variables_and_the_setting_leave_libgomp_alone(settings, rule):
    words, _ = run(REPORT, **settings)
    assert words == [rule, "0", "0"]


@needs_two_cpus
def test_a_bad_setting_warns_naming_it_and_keeps_the_default():
    words, stderr = run(REPORT, NEURON_OPENMP_WAIT="sometimes")
    assert words == ["short-spin", PARKED, PARKED]
    assert ("NEURON_OPENMP_WAIT=sometimes is not a wait rule for OpenMP's idle workers ('short' "
            "or 'unchanged'); the default (short) is used") in stderr


@needs_two_cpus
def test_a_process_started_on_one_cpu_parks_a_team_too():
    """libgomp counted one CPU and throttles any team of 2 threads already; the park costs sleeping
    threads only, and the rule is the same wherever the process is pinned later."""
    one_cpu = min(os.sched_getaffinity(0))
    words, _ = run(REPORT, preexec_fn=lambda: os.sched_setaffinity(0, {one_cpu}))
    assert words == ["short-spin", PARKED, PARKED]


@needs_two_cpus
def test_a_child_forked_after_the_park_computes_on_the_device():
    """The helper and its team are the parent's alone; the child (at one thread, as DataLoader's
    workers run: libgomp's team is not usable after fork) is not held up by them."""
    script = REPORT + """
import torch
torch.set_num_threads(2)
x = torch.ones(1 << 18)
assert x.sum().item() == 1 << 18
pid = os.fork()
if pid == 0:
    torch.set_num_threads(1)
    y = torch.ones(1 << 18, device=torchneuron.device()) * 2
    os._exit(0 if y.sum().item() == 2 * (1 << 18) else 1)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""
    words, _ = run(script)
    assert words[:3] == ["short-spin", PARKED, PARKED] and words[-2:] == ["child", "0"]
