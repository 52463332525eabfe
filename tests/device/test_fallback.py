import os
import subprocess
import sys
import warnings

import pytest
import torch
import torchneuron

pytestmark = pytest.mark.loud_fallback

# The compiled kernels compute no complex numbers and no library kernel is registered for them, so
# complex math takes the fallback: these tests use it. (Special functions, factorizations and
# integer division are library ops: test_library_math_ops.py.)
COMPLEX_ONES = "torch.ones(3, dtype=torch.complex64).to(torchneuron.device())"


def complex_ones(dev, n=3):
    return torch.ones(n, dtype=torch.complex64).to(dev)


def run_fresh(code, **env):
    """Runs `code` in a new interpreter: warn-once state is per process."""
    full_env = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", "import torch, torchneuron\n" + code],
                          capture_output=True, text=True, env=full_env, timeout=120)


def test_warns_once_per_op_naming_it_and_the_cpu():
    result = run_fresh(
        f"x = {COMPLEX_ONES}\n"
        "for _ in range(3): torch.exp(x)\n", NEURON_FALLBACK="warn", PYTHONWARNINGS="always")
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stderr.splitlines() if "[fallback]" in l]
    assert len(lines) == 1, result.stderr
    assert "aten::exp" in lines[0] and "ran on the CPU" in lines[0]


def test_default_policy_is_warn(dev, monkeypatch):
    monkeypatch.delenv("NEURON_FALLBACK", raising=False)
    result = run_fresh(f"torch.sgn({COMPLEX_ONES})", PYTHONWARNINGS="always")
    assert "aten::sgn" in result.stderr


def test_silent_policy_does_not_warn():
    # A fresh process: in this one an earlier test may have used up exp's one warning.
    result = run_fresh(
        f"x = {COMPLEX_ONES}\n"
        "torch.exp(x)\n"
        "print(torchneuron.metrics()['ops']['fallback'])\n",
        NEURON_FALLBACK="silent", PYTHONWARNINGS="always")
    assert result.returncode == 0, result.stderr
    assert "'aten::exp': 1" in result.stdout  # it did fall back
    assert "[fallback]" not in result.stderr, result.stderr


def test_error_policy_raises_naming_the_op(dev, monkeypatch):
    monkeypatch.setenv("NEURON_FALLBACK", "error")
    x = complex_ones(dev)
    with pytest.raises(RuntimeError, match=r"aten::sqrt has no neuron device kernel and "
                                           r"NEURON_FALLBACK=error"):
        torch.sqrt(x)


def test_bad_policy_value_names_it(dev, monkeypatch):
    monkeypatch.setenv("NEURON_FALLBACK", "loud")
    with pytest.raises(RuntimeError, match="NEURON_FALLBACK must be 'warn', 'silent' or 'error', got 'loud'"):
        torch.exp(complex_ones(dev, 2))


def test_counts_per_op_in_metrics(dev, monkeypatch):
    monkeypatch.setenv("NEURON_FALLBACK", "silent")
    torchneuron.reset_metrics()
    x = complex_ones(dev, 5)
    for _ in range(3):
        torch.sqrt(x)
    m = torchneuron.metrics()
    assert m["ops"]["fallback"]["aten::sqrt"] == 3
    assert m["launches"]["fallback"] == sum(m["ops"]["fallback"].values())


def test_results_are_device_tensors_and_inplace_writes_through_views(dev, monkeypatch):
    monkeypatch.setenv("NEURON_FALLBACK", "silent")
    base = torch.arange(8., device=dev)
    before = base.data_ptr()
    base[2:5].exp_()
    expected = torch.arange(8.)
    expected[2:5].exp_()
    assert base.data_ptr() == before
    torch.testing.assert_close(base.cpu(), expected)
    out = torch.sort(base.flip(0))
    assert out.values.device == dev and out.indices.device == dev


def test_out_argument_of_wrong_size_is_resized_on_the_device(dev, monkeypatch):
    monkeypatch.setenv("NEURON_FALLBACK", "silent")
    out = torch.empty(1, device=dev)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's own "resized a non-empty tensor" warning
        torch.cos(torch.zeros(6, device=dev), out=out)
    assert out.device == dev and out.shape == (6,)
    assert torch.equal(out.cpu(), torch.ones(6))


WRITE_PAST_STORAGE = '''
import torch, torchneuron
dev = torchneuron.device()
x = torch.randn(64, 64).to(dev)
for _ in range(3):
    before = [torch.full((64,), 7.0).to(dev) for _ in range(50)]
    out = torch.empty(64).to(dev).expand(64, 64)  # 64 floats of storage, 4,096 elements
    after = [torch.full((64,), 7.0).to(dev) for _ in range(50)]
    torch._softmax(x, 1, False, out=out)
    assert all(bool((t.cpu() == 7.0).all()) for t in before + after), "neighbours overwritten"
print("intact")
'''


def test_a_kernel_writing_an_expanded_out_as_contiguous_overwrites_no_other_tensor():
    # 1.13's _softmax.out writes its out= argument as if it were contiguous, whatever its strides:
    # on the CPU an expanded one corrupts the heap (the process aborts); here it overwrote the
    # device tensors after it (a segmentation fault, or silently wrong neighbours). The host
    # memory for such an argument has room for the run (HostAliasSet::giveWriteRoom). In a child
    # process, since a failure is a crash.
    env = dict(os.environ, NEURON_FALLBACK="silent")
    done = subprocess.run([sys.executable, "-c", WRITE_PAST_STORAGE], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "intact" in done.stdout, done.stderr[-2000:]


def test_fallback_view_op_returns_device_alias(dev, monkeypatch):
    monkeypatch.setenv("NEURON_FALLBACK", "silent")
    sparse = torch.sparse_coo_tensor([[0, 2]], [1., 2.], (4,)).coalesce().to(dev)
    torchneuron.reset_metrics()
    values = sparse._values()  # a view op with SparseCPU's kernel only: the fallback runs it
    assert torchneuron.metrics()["ops"]["fallback"] == {"aten::_values": 1}
    assert values.device == dev
    values.mul_(10)  # writes through the alias into the sparse tensor's values
    assert torch.equal(sparse.to_dense().cpu(), torch.tensor([10., 0., 20., 0.]))
