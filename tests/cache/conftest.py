"""Fixtures the cache tests share."""
import os
import subprocess

import pytest

# Cache tests count compiles and stored kernels after a program's first ops: those compiles are
# waited for (as tests/run_isolated.sh sets) instead of running in the background while the ops
# run on the CPU (interim launches).
os.environ.setdefault("NEURON_INTERIM_LAUNCHES", "0")


@pytest.fixture
def cli(capfd, monkeypatch):
    """Runs torchneuron-cache in this process (a fresh interpreter per call costs over a second of
    CPU): returns its exit status and what it wrote to stdout and stderr (file descriptors 1 and
    2) as a CompletedProcess; `check=True` asserts the status is 0. The command-line entry point
    itself is tested in test_cache_trust.py."""
    from torchneuron import cache as cache_cli

    def run(*args, env=None, check=False):
        capfd.readouterr()
        with monkeypatch.context() as patch:
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            status = cache_cli.main(list(args))
        out, err = capfd.readouterr()
        if check:
            assert status == 0, (args, out, err)
        return subprocess.CompletedProcess(args, status, out, err)
    return run
