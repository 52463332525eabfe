"""The persistent compile cache across processes: reruns compile nothing, eight processes on a
cold directory compile each kernel once in total, faults fail open, and the torchneuron-cache
CLI manages it."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from cache_program import copy_cache, result_of, run_program, PROGRAM


# PROGRAM, then either waits for the background writer (synchronize) and reports its counters
# with PROGRAM's, or reports how many kernels it compiled and is killed at once, its unwritten
# batches lost.
WRITER_PROGRAM = PROGRAM + r"""
import os, signal, sys
if sys.argv[-1] == "kill":
    print(json.dumps({"compiles": torchneuron.metrics()["compiles"]}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
torchneuron.synchronize()
m = torchneuron.metrics()
print(json.dumps({"ok": ok, "compiles": m["compiles"], "writes": m["persistent_writes"],
                  "batches": m["persistent_write_batches"],
                  "pending": m["persistent_writes_pending"], "loaded": m["kernels_loaded"],
                  "memory_bytes": m["kernel_cache_bytes"],
                  "evictions": m["kernel_cache_evictions"]}))
"""


@pytest.fixture
def cache_dir():
    directory = tempfile.mkdtemp(prefix="neuron-cache-")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def first_run():
    """WRITER_PROGRAM's run in an empty cache directory: that directory, kept as a template, and
    the run's result."""
    directory = tempfile.mkdtemp(prefix="neuron-cache-first-run-")
    result = result_of(run_program({"NEURON_CACHE_DIR": directory}, program=WRITER_PROGRAM))
    yield directory, result
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def uncached_run():
    """PROGRAM's run with the persistent tier off (NEURON_CACHE=0) and NEURON_CACHE_DIR an empty
    directory: its result (its compiles are the number of distinct kernels PROGRAM has) and what
    that directory held afterwards."""
    directory = tempfile.mkdtemp(prefix="neuron-cache-off-")
    result = result_of(run_program({"NEURON_CACHE": "0", "NEURON_CACHE_DIR": directory}))
    yield result, os.listdir(directory)
    shutil.rmtree(directory, ignore_errors=True)


def test_second_run_compiles_nothing(first_run, cache_dir, cli):
    # The first run's compiles went to the store in background batches, durable by synchronize().
    template, writer = first_run
    copy_cache(template, cache_dir)
    assert writer["compiles"] > 1 and writer["pending"] == 0
    assert writer["writes"] == writer["compiles"]  # one entry per compile, none refreshed yet
    assert 1 <= writer["batches"] <= writer["writes"]
    assert cli("--dir", cache_dir, "list").stdout.count("authentic") == writer["compiles"]
    first = writer
    second_run = run_program({"NEURON_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "always"})
    assert "[cache]" not in second_run.stderr, second_run.stderr
    second = result_of(second_run)
    assert second["rejected"] == 0
    assert first["ok"] and second["ok"]
    assert first["compiles"] > 0
    assert second["compiles"] == 0
    assert second["persistent_hits"] == first["compiles"]


def test_eight_processes_on_a_cold_directory_compile_each_kernel_once(cache_dir, uncached_run):
    expected = uncached_run[0]["compiles"]
    env = dict(os.environ, NEURON_CACHE_DIR=cache_dir)
    processes = [subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(8)]
    results = []
    for p in processes:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    assert sum(r["compiles"] for r in results) == expected
    assert sum(r["compiles"] + r["persistent_hits"] for r in results) == 8 * expected
    # Each compile lock's file goes with its holder: none piles up under locks/.
    assert os.listdir(os.path.join(cache_dir, "locks")) == []


def test_memory_tier_evicts_least_recently_used_and_reloads_from_disk(first_run, cache_dir):
    template, everything = first_run
    copy_cache(template, cache_dir)
    assert everything["evictions"] == 0 and everything["loaded"] == everything["compiles"]
    cap = everything["memory_bytes"] // 3  # room for a few kernels, not for all of them
    capped = result_of(run_program({"NEURON_CACHE_DIR": cache_dir,
                                    "NEURON_CACHE_MEMORY_MAX_BYTES": str(cap)}))
    assert capped["ok"]
    assert capped["evictions"] > 0
    assert capped["memory_bytes"] <= cap
    assert capped["loaded"] < everything["loaded"]
    assert capped["compiles"] == 0  # evicted kernels come back from the disk tier
    assert capped["persistent_hits"] > everything["compiles"]
    # Without a disk tier, an evicted kernel is compiled again, and results stay right.
    alone = result_of(run_program({"NEURON_CACHE": "0", "NEURON_CACHE_MEMORY_MAX_BYTES": str(cap)}))
    assert alone["ok"] and alone["evictions"] > 0


@pytest.fixture(scope="module")
def bad_caps_run():
    """PROGRAM's run with both byte caps bad: each is parsed, and warned about, on its own, so one
    process shows both."""
    directory = tempfile.mkdtemp(prefix="neuron-cache-bad-caps-")
    yield run_program({"NEURON_CACHE_DIR": directory, "NEURON_CACHE_MEMORY_MAX_BYTES": "-5",
                       "NEURON_CACHE_MAX_BYTES": "lots"})
    shutil.rmtree(directory, ignore_errors=True)


def test_bad_memory_cap_names_the_value(bad_caps_run):
    done = bad_caps_run
    assert result_of(done)["ok"]
    assert "NEURON_CACHE_MEMORY_MAX_BYTES=-5 is not a byte count" in done.stderr


def test_cache_off_writes_nothing(uncached_run):
    result, left_in_directory = uncached_run
    assert result["ok"] and result["compiles"] > 0
    assert left_in_directory == []


def test_unusable_directory_runs_and_warns_once(cache_dir):
    blocker = os.path.join(cache_dir, "a-file")
    open(blocker, "w").close()
    done = run_program({"NEURON_CACHE_DIR": os.path.join(blocker, "cache"), "PYTHONWARNINGS": "always"})
    assert result_of(done)["ok"]
    cache_warnings = [l for l in done.stderr.splitlines() if "[cache]" in l]
    assert 1 <= len(cache_warnings) <= 2, done.stderr  # the directory, then the write attempt
    assert len(set(cache_warnings)) == len(cache_warnings)


def test_bad_size_cap_names_the_value(bad_caps_run):
    done = bad_caps_run
    assert result_of(done)["ok"]
    assert "NEURON_CACHE_MAX_BYTES=lots is not a byte count" in done.stderr


@pytest.fixture
def cli(cli):
    """The CLI in this process (conftest.py), asserting exit status 0 unless check=False."""
    def run(*args, check=True, env=None):
        return cli(*args, check=check, env=env)
    return run


def test_cli_stats_list_verify_prune_export_import_clear(cache_dir, cli):
    # Two caches of one cluster: one key file (the per-user keys of two directories differ).
    elsewhere = tempfile.mkdtemp(prefix="neuron-cache-files-")
    shared = {"NEURON_CACHE_KEY_FILE": os.path.join(elsewhere, "cluster.key")}
    cli("keygen", shared["NEURON_CACHE_KEY_FILE"])
    kernels = result_of(run_program({"NEURON_CACHE_DIR": cache_dir, **shared}))["compiles"]
    assert f"entries   {kernels}" in cli("--dir", cache_dir, "stats", env=shared).stdout
    listing = cli("--dir", cache_dir, "list", env=shared).stdout
    assert f"{kernels} entries" in listing and "DAMAGED" not in listing
    assert listing.count("1 step: kernel 0") == kernels and listing.count("authentic") == kernels
    assert "0 damaged" in cli("--dir", cache_dir, "verify", env=shared).stdout

    exported = os.path.join(elsewhere, "warm.cache")
    assert f"exported {kernels} entries" in cli("--dir", cache_dir, "export", exported, env=shared).stdout
    other = tempfile.mkdtemp(prefix="neuron-cache-import-")
    assert f"imported {kernels} entries, rejected 0" in cli("--dir", other, "import", exported,
                                                            env=shared).stdout
    assert result_of(run_program({"NEURON_CACHE_DIR": other, **shared}))["compiles"] == 0

    with open(exported, "r+b") as f:  # damage one entry's payload
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0xFF]))
    third = tempfile.mkdtemp(prefix="neuron-cache-damaged-")
    damaged = cli("--dir", third, "import", exported, check=False, env=shared)
    assert damaged.returncode == 1 and "rejected 1 damaged" in damaged.stdout
    shutil.rmtree(elsewhere)
    shutil.rmtree(third)

    assert f"evicted {kernels} " in cli("--dir", cache_dir, "prune", "--max-bytes", "0").stdout
    assert "entries   0" in cli("--dir", cache_dir, "stats").stdout
    cli("--dir", other, "clear")
    assert "entries   0" in cli("--dir", other, "stats").stdout
    bad = cli("--dir", cache_dir, "prune", "--max-bytes", "-5", check=False)
    assert bad.returncode == 2 and "'-5'" in bad.stderr
    missing = cli("--dir", cache_dir, "import", "/nonexistent/file", check=False)
    assert missing.returncode == 2 and "/nonexistent/file" in missing.stderr


def test_a_process_killed_before_its_writes_land_leaves_a_usable_cache(cache_dir, cli):
    env = dict(os.environ, NEURON_CACHE_DIR=cache_dir)
    killed = subprocess.run([sys.executable, "-c", WRITER_PROGRAM, "kill"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    compiled = result_of(killed)["compiles"]
    assert cli("--dir", cache_dir, "verify").returncode == 0
    rerun = result_of(run_program({"NEURON_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "always"}))
    assert rerun["ok"] and rerun["rejected"] == 0
    assert rerun["compiles"] + rerun["persistent_hits"] == compiled
    assert os.listdir(os.path.join(cache_dir, "locks")) == []  # the killed holder's went too


def test_a_process_whose_store_opens_late_exits_cleanly(tmp_path):
    """The store writer's exit handler must run before RocksDB's statics go. RocksDB makes some
    of them (its periodic task scheduler) at the first DB::Open; when that came after the writer
    was made (an empty cache written to late in a short run), the writer's last batch at exit
    opened the database after they were destroyed and the process aborted ("pthread lock:
    Invalid argument"), 8 runs of 8 with this program before the fix."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, NEURON_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("NEURON_ADAPTIVE_MIN_BYTES", None)  # the tracer's defaults, as in the failing runs
    for _ in range(2):
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        done = subprocess.run([sys.executable, os.path.join(repo, "bench", "adaptive_overhead.py"),
                               "--rounds", "3", "--steps", "200"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "pthread lock" not in done.stderr
        assert os.listdir(tmp_path / "cache" / "db")  # its entries went to disk
