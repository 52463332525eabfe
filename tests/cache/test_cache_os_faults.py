"""Faults the operating system gives the persistent cache: a full disk and a read-only cache
directory. Each run must finish with correct results, warn at most once per kind of fault, and
leave the cache verifiable."""
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from cache_program import (ONE_KERNEL_PROGRAM, as_reader_without_write_access, copy_cache,
                           result_of, run_program)

def cache_warnings(done):
    return [line for line in done.stderr.splitlines() if "[cache]" in line]


@pytest.fixture(scope="module")
def one_kernel_cache():
    """A cache directory ONE_KERNEL_PROGRAM filled, copied by the tests that start from a cache
    with an entry in it (copying costs no interpreter)."""
    parent = tempfile.mkdtemp(prefix="neuron-cache-one-kernel-")
    directory = os.path.join(parent, "cache")
    run_program({"NEURON_CACHE_DIR": directory}, program=ONE_KERNEL_PROGRAM)
    yield directory
    shutil.rmtree(parent)


@pytest.fixture
def verify(cli):
    """torchneuron-cache verify of a directory, in this process."""
    return lambda directory: cli("--dir", directory, "verify")


@pytest.fixture
def small_filesystem():
    """A 2 MiB tmpfs (a real filesystem that fills up: writes fail with ENOSPC)."""
    mount_point = tempfile.mkdtemp(prefix="neuron-full-disk-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mount_point],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (" + mounted.stderr.strip() + "); the file-size "
                    "limit test covers failing writes")
    yield mount_point
    subprocess.run(["umount", mount_point], check=True)
    os.rmdir(mount_point)


def fill(directory):
    """Writes a file into `directory` until its filesystem has no space left."""
    with open(os.path.join(directory, "filler"), "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


@pytest.mark.parametrize("cache_before", ["none", "one kernel"])
def test_full_disk_runs_correctly_warns_once_and_stays_verifiable(small_filesystem, cache_before,
                                                                    one_kernel_cache, verify):
    cache_dir = os.path.join(small_filesystem, "cache")
    os.mkdir(cache_dir)
    if cache_before == "one kernel":  # the disk fills up under an existing database
        copy_cache(one_kernel_cache, cache_dir)
    fill(small_filesystem)
    done = run_program({"NEURON_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "always"})
    result = result_of(done)
    assert result["ok"] and result["compiles"] > 0
    warned = cache_warnings(done)
    assert 1 <= len(warned) <= 2 and len(set(warned)) == len(warned), done.stderr
    assert any("No space left" in w or "cannot write" in w for w in warned), warned
    # Space comes back: the cache works again, nothing in it is damaged.
    os.remove(os.path.join(small_filesystem, "filler"))
    first = result_of(run_program({"NEURON_CACHE_DIR": cache_dir}))
    second = result_of(run_program({"NEURON_CACHE_DIR": cache_dir}))
    assert first["ok"] and second["ok"] and second["compiles"] == 0
    checked = verify(cache_dir)
    assert checked.returncode == 0 and "0 damaged" in checked.stdout, checked.stdout


def limit_file_size():
    """In the child: every write past 2 KiB of a file fails with EFBIG instead of killing it."""
    import resource
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


def test_failing_writes_run_correctly_and_warn_once(verify):
    cache_dir = tempfile.mkdtemp(prefix="neuron-cache-fsize-")
    done = run_program({"NEURON_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "always"},
                       preexec_fn=limit_file_size)
    result = result_of(done)
    assert result["ok"] and result["compiles"] > 0
    warned = cache_warnings(done)
    assert 1 <= len(warned) <= 2 and len(set(warned)) == len(warned), done.stderr
    rerun = result_of(run_program({"NEURON_CACHE_DIR": cache_dir}))
    assert rerun["ok"]
    assert verify(cache_dir).returncode == 0
    shutil.rmtree(cache_dir)


def test_a_write_failing_at_exit_is_still_reported():
    """One kernel, then exit: its entry is written by the exit's flush, on the writer's thread,
    after the last Python call; its failure must still reach stderr."""
    cache_dir = tempfile.mkdtemp(prefix="neuron-cache-fsize-exit-")
    done = run_program({"NEURON_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "always"},
                       program=ONE_KERNEL_PROGRAM, preexec_fn=limit_file_size)
    warned = cache_warnings(done)
    assert len(warned) == 1, done.stderr
    assert "File too large" in warned[0] or "cannot write" in warned[0], warned
    shutil.rmtree(cache_dir)


def test_read_only_directory_runs_correctly_and_warns_once(one_kernel_cache, verify):
    parent = tempfile.mkdtemp(prefix="neuron-cache-ro-")
    os.chmod(parent, 0o755)
    cache_dir = copy_cache(one_kernel_cache, os.path.join(parent, "cache"))
    for root, dirs, files in os.walk(cache_dir):
        os.chmod(root, 0o555)
        for name in files:
            os.chmod(os.path.join(root, name), 0o444)
    os.chmod(os.path.join(cache_dir, "mac.key"), 0o400)  # a key readable by others is refused
    try:
        # PROGRAM needs kernels the cache does not have: its writes are refused.
        done = run_program({"NEURON_CACHE_DIR": cache_dir, "PYTHONWARNINGS": "always",
                            "HOME": parent}, **as_reader_without_write_access())
        result = result_of(done)
        assert result["ok"] and result["compiles"] > 0
        warned = cache_warnings(done)
        assert 1 <= len(warned) <= 2 and len(set(warned)) == len(warned), done.stderr
        assert any("Permission denied" in w or "Read-only" in w for w in warned), warned
    finally:
        for root, dirs, files in os.walk(cache_dir):
            os.chmod(root, 0o755)
    checked = verify(cache_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    shutil.rmtree(parent)
