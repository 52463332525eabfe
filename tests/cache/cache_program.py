"""A small device program the cache tests run in fresh processes: a handful of distinct kernels,
each run twice; prints its metrics and whether every result matched the CPU's."""
import ctypes
import json
import os
import shutil
import subprocess
import sys

PROGRAM = r"""
import json, torch, torchneuron
dev = torchneuron.device()
torch.manual_seed(0)
x = torch.randn(64, 33)
d = x.to(dev)
# sign and sgn lower to the same MLIR: two kernels, two symbols, one process.
def ops(t):
    return [torch.tanh(t) * 2 + 1, torch.softmax(t, 1), t.sum(0), torch.nn.functional.gelu(t),
            t.t().exp(), torch.sign(t), torch.sgn(t)]
expected = ops(x)
ok = True
for _ in range(2):  # the second pass finds every kernel loaded, unless the memory tier evicted it
    ok = ok and all(torch.allclose(o.cpu(), e, atol=1e-5) for o, e in zip(ops(d), expected))
m = torchneuron.metrics()
print(json.dumps({"ok": ok, "compiles": m["compiles"], "persistent_hits": m["persistent_hits"],
                  "rejected": m["persistent_rejected"], "loaded": m["kernels_loaded"],
                  "memory_bytes": m["kernel_cache_bytes"], "evictions": m["kernel_cache_evictions"]}))
"""


# One kernel, to leave a cache that PROGRAM adds to.
ONE_KERNEL_PROGRAM = r"""
import torch, torchneuron
assert torch.equal((torch.ones(4).to(torchneuron.device()) * 3).cpu(), torch.full((4,), 3.0))
"""


def run_program(env_extra, check=True, program=PROGRAM, **popen_options):
    """Runs `program` with `env_extra` added to the environment; `popen_options` go to subprocess.
    """
    env = dict(os.environ, **env_extra)
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True,
                          timeout=300, **popen_options)
    if check:
        assert done.returncode == 0, done.stderr[-2000:]
    return done


def result_of(done):
    return json.loads(done.stdout.strip().splitlines()[-1])


def copy_cache(template, directory):
    """A copy of the cache directory `template` (store, key, locks, profiles; modes and times kept)
    at `directory` (new or empty): for a test that needs a cache some program already filled,
    without a run of that program (a fresh interpreter and its compiles) of its own."""
    shutil.copytree(template, directory, symlinks=True, dirs_exist_ok=True)
    return directory


PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2


def drop_permission_override():
    """preexec_fn: the child loses CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (from its bounding
    set, so also across exec), so modes bind it even as root. It stays the same user: it can still
    reach the checkout (wherever it lies) and still owns the cache directory."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def as_reader_without_write_access():
    """Popen options under which a directory of mode 0555 owned by this user is read-only."""
    return {"preexec_fn": drop_permission_override} if os.geteuid() == 0 else {}
