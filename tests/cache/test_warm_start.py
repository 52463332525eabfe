"""Warm start across processes (src/device/warm_start.h): a rerun of a program finds the
kernels and memory blocks of its previous run ready; a damaged, foreign or missing profile is a
cold start with at most one warning; NEURON_WARM_START=0 reads and writes nothing."""
import glob
import os
import shutil
import tempfile

import pytest

from cache_program import copy_cache, result_of, run_program

# Waits until the warm start is done before its first device op, so that what the background
# thread made ready is counted deterministically; then runs a few kernels over 1 MiB tensors.
# With FORK_AT_START=1 it first forks children at once after import, while the warm start works
# (the environment is not part of the program's identity: the profile is the same).
PROGRAM = r"""
import json, os, sys, time, torch, torchneuron
if os.environ.get("FORK_AT_START") == "1":
    statuses = []
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            doubled = (torch.arange(4.0).to(torchneuron.device()) * 2).cpu()
            sys.exit(0 if torch.equal(doubled, torch.arange(4.0) * 2) else 3)
        statuses.append(os.waitpid(pid, 0)[1])
    assert all(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in statuses), statuses
if os.environ.get("WAIT_FOR_WARM_START") == "1":
    deadline = time.time() + 60
    while not torchneuron.metrics()["warm_start"]["done"] and time.time() < deadline:
        time.sleep(0.01)
torch.manual_seed(0)
x = torch.randn(256, 1024)
d = x.to(torchneuron.device())
def ops(t):
    return [torch.tanh(t) * 2 + 1, torch.softmax(t, 1), t.sum(0), torch.nn.functional.gelu(t)]
ok = all(torch.allclose(o.cpu(), e, atol=1e-5) for o, e in zip(ops(d), ops(x)))
m = torchneuron.metrics()
print(json.dumps({"ok": ok, "compiles": m["compiles"], "persistent_hits": m["persistent_hits"],
                  "rejected": m["persistent_rejected"], "warm": m["warm_start"],
                  "allocator": m["allocator"]}))
"""

OTHER_PROGRAM = PROGRAM.replace("torch.manual_seed(0)", "torch.manual_seed(1)")


@pytest.fixture
def cache_dir():
    directory = tempfile.mkdtemp(prefix="neuron-warm-start-")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def run(cache_dir, program=PROGRAM, **env):
    done = run_program(dict({"NEURON_CACHE_DIR": cache_dir, "WAIT_FOR_WARM_START": "1",
                             "PYTHONWARNINGS": "always"}, **env), program=program)
    result = result_of(done)
    result["warnings"] = [line for line in done.stderr.splitlines() if "[cache]" in line]
    return result


def profiles(cache_dir):
    return glob.glob(os.path.join(cache_dir, "profiles", "*.profile"))


@pytest.fixture(scope="module")
def first_run():
    """PROGRAM's first run in an empty cache directory: that directory (its kernels stored, its
    profile written), kept as a template, and the run's result."""
    directory = tempfile.mkdtemp(prefix="neuron-warm-start-template-")
    result = run(directory)
    assert result["ok"] and result["compiles"] > 0 and len(profiles(directory)) == 1
    yield directory, result
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def warmed(first_run, cache_dir):
    """`cache_dir` as PROGRAM's first run left it (a copy of the template); the number of kernels
    that run compiled."""
    template, result = first_run
    copy_cache(template, cache_dir)
    return result["compiles"]


def test_rerun_finds_its_kernels_linked_and_its_memory_faulted_in(first_run, cache_dir):
    template, first = first_run  # PROGRAM's first run, in an empty directory
    assert first["ok"] and first["compiles"] > 0
    assert not first["warm"]["profile_found"]
    assert len(profiles(template)) == 1
    copy_cache(template, cache_dir)
    second = run(cache_dir)
    assert second["ok"] and second["warnings"] == []
    warm = second["warm"]
    assert warm["profile_found"] and warm["done"]
    assert warm["kernels_listed"] == first["compiles"]
    assert warm["kernels_prefetched"] == first["compiles"]
    assert second["compiles"] == 0 and second["persistent_hits"] == first["compiles"]
    # Every block the program used was made ahead of need: no allocation waited for the OS.
    assert warm["bytes_prefaulted"] == warm["bytes_listed"] > 1 << 20
    assert second["allocator"]["prefaulted_bytes"] == warm["bytes_prefaulted"]
    assert second["allocator"]["system_allocations"] == second["allocator"]["prefaulted_blocks"]


def test_turned_off_reads_and_writes_nothing(cache_dir, warmed):
    assert profiles(cache_dir)
    before = {p: os.path.getmtime(p) for p in profiles(cache_dir)}
    off = run(cache_dir, NEURON_WARM_START="0")
    assert off["ok"] and off["compiles"] == 0  # the compile cache itself still works
    assert not off["warm"]["profile_found"] and off["warm"]["kernels_prefetched"] == 0
    assert off["allocator"]["prefaulted_bytes"] == 0
    assert {p: os.path.getmtime(p) for p in profiles(cache_dir)} == before
    fresh = tempfile.mkdtemp(prefix="neuron-warm-start-off-")
    run(fresh, NEURON_WARM_START="0")
    assert profiles(fresh) == []
    shutil.rmtree(fresh)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_damaged_profile_is_a_cold_start_with_one_warning_then_rewritten(cache_dir, warmed,
                                                                         damage):
    kernels = warmed
    [path] = profiles(cache_dir)
    with open(path, "rb") as f:
        text = f.read()
    if damage == "truncate":
        text = text[: len(text) // 2]
    elif damage == "flip":
        middle = len(text) // 2
        text = text[:middle] + bytes([text[middle] ^ 0x01]) + text[middle + 1:]
    else:
        text = os.urandom(300)
    with open(path, "wb") as f:
        f.write(text)
    damaged = run(cache_dir)
    assert damaged["ok"] and damaged["compiles"] == 0  # kernels still come from the store
    assert not damaged["warm"]["profile_found"]
    assert len(damaged["warnings"]) == 1 and "warm-start profile" in damaged["warnings"][0]
    assert path in damaged["warnings"][0]
    healed = run(cache_dir)  # the damaged run wrote a good profile back
    assert healed["warm"]["profile_found"] and healed["warm"]["kernels_prefetched"] == kernels
    assert healed["warnings"] == []


def test_profile_naming_entries_the_store_lacks_is_harmless(cache_dir, warmed):
    kernels = warmed
    empty_store = tempfile.mkdtemp(prefix="neuron-warm-start-empty-")
    os.makedirs(os.path.join(empty_store, "profiles"))
    [path] = profiles(cache_dir)
    shutil.copy(path, os.path.join(empty_store, "profiles"))  # same program, same identity
    moved = run(empty_store)
    assert moved["ok"] and moved["warnings"] == []
    assert moved["warm"]["profile_found"] and moved["warm"]["kernels_prefetched"] == 0
    assert moved["compiles"] == kernels
    shutil.rmtree(empty_store)


def test_another_program_does_not_use_the_profile(cache_dir, warmed):
    other = run(cache_dir, program=OTHER_PROGRAM)
    assert other["ok"] and not other["warm"]["profile_found"]
    assert other["compiles"] == 0  # same kernels: the compile cache is shared, the profile is not
    assert len(profiles(cache_dir)) == 2


def test_memory_cap_bounds_what_is_made_ahead(cache_dir, warmed):
    kernels = warmed
    capped = run(cache_dir, NEURON_WARM_START_MAX_BYTES="0")
    assert capped["ok"] and capped["warm"]["bytes_prefaulted"] == 0
    assert capped["allocator"]["prefaulted_bytes"] == 0
    assert capped["warm"]["kernels_prefetched"] == kernels
    bad = run(cache_dir, NEURON_WARM_START_MAX_BYTES="lots")
    assert bad["ok"] and bad["warm"]["bytes_prefaulted"] > 0  # the default cap
    assert len(bad["warnings"]) == 1 and "NEURON_WARM_START_MAX_BYTES=lots" in bad["warnings"][0]


def test_a_forked_child_exits_without_joining_or_writing(cache_dir):
    program = PROGRAM + r"""
import sys
pid = os.fork()
if pid == 0:
    ok = torch.equal((torch.ones(3).to(torchneuron.device()) + 1).cpu(), torch.full((3,), 2.0))
    sys.exit(0 if ok else 3)  # a normal interpreter exit: atexit handlers run in the child
_, status = os.waitpid(pid, 0)
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
"""
    run(cache_dir, program=program)
    run(cache_dir, program=program)
    assert len(profiles(cache_dir)) == 1
    assert not any(".tmp." in name for name in os.listdir(os.path.join(cache_dir, "profiles")))


def test_forks_while_the_warm_start_works_leave_working_children(cache_dir, warmed):
    # Children forked at once after import, while the background thread links and faults in:
    # fork() waits for the item in hand, so no child starts with a lock the thread held. The
    # profile the thread works from is PROGRAM's own, from the template.
    forked = run(cache_dir, FORK_AT_START="1", WAIT_FOR_WARM_START="0")
    assert forked["ok"] and forked["warm"]["profile_found"]


def test_cli_clear_removes_profiles(cache_dir, warmed, cli):
    assert profiles(cache_dir)
    cli("--dir", cache_dir, "clear", check=True)
    assert profiles(cache_dir) == []
