"""Backward passes on the calling thread (bindings/caller_thread_engine.h,
python/torchneuron/_backward_engine.py): a device graph's backward ops run on the thread that
called backward(), with PyTorch's engine semantics: gradients, errors and their types, hooks,
reentrant passes (checkpointing, deeper than the engine's recursion limit), final callbacks,
torch.autograd.grad's options, concurrent passes of two threads, and a forked child."""
import os
import subprocess
import sys
import threading

import pytest
import torch
import torch.nn as nn
import torch.utils.checkpoint as checkpoint
import torchneuron
from torchneuron import _backward_engine
from test_openmp_wait import environment_without_openmp_variables

dev = torchneuron.device()


@pytest.fixture(autouse=True)
def one_intra_op_thread():
    """NEURON_BACKWARD_ON_CALLER=auto (the default) runs passes on the caller's thread at one
    intra-op thread whatever OpenMP's wait rule; the tests below run there, except where they set
    the count themselves."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def threads_of_backward(tensor_device):
    """The native ids of the threads a pass's hooks ran on."""
    seen = set()
    t = torch.ones(8, device=tensor_device, requires_grad=True)
    t.register_hook(lambda grad: seen.add(threading.get_native_id()))
    (t.exp() * 3).sum().backward()
    return seen


def test_a_device_pass_runs_on_the_calling_thread():
    assert _backward_engine.on_caller()
    assert threads_of_backward(dev) == {threading.get_native_id()}


def test_pytorchs_engine_ran_it_on_its_device_thread():
    """What the caller-thread engine replaces, and the comparison the bench's variant makes."""
    with _backward_engine.pytorch_engine():
        assert not _backward_engine.on_caller()
        seen = threads_of_backward(dev)
    assert _backward_engine.on_caller()
    assert len(seen) == 1 and seen != {threading.get_native_id()}


def test_by_default_passes_at_two_threads_run_on_the_caller_unless_idle_openmp_workers_spin():
    """The import's OpenMP wait rule (test_openmp_wait.py) decides: where idle workers spin
    briefly, passes at 2 threads run on the caller's thread too."""
    torch.set_num_threads(2)
    on_caller = not torchneuron._C.idle_openmp_workers_spin_long()
    assert _backward_engine.on_caller() == on_caller
    assert (threads_of_backward(dev) == {threading.get_native_id()}) == on_caller
    torch.set_num_threads(1)
    assert threads_of_backward(dev) == {threading.get_native_id()}


def test_the_setting_and_the_openmp_wait_rule_choose_the_engine_and_a_bad_value_warns():
    script = ("import threading, torch, torchneuron\n"
              "from torchneuron import _backward_engine\n"
              "torch.set_num_threads(2)\n"
              "seen = set(); t = torch.ones(4, device=torchneuron.device(), requires_grad=True)\n"
              "t.register_hook(lambda g: seen.add(threading.get_native_id()))\n"
              "t.sum().backward()\n"
              "print(_backward_engine.on_caller(), seen == {threading.get_native_id()})\n")
    spinning = {"NEURON_OPENMP_WAIT": "unchanged"}  # libgomp's long spin: PyTorch's engine
    for value, openmp, expected in (
            ("0", {}, "False False"), ("1", {}, "True True"), ("1", spinning, "True True"),
            ("auto", {}, "True True"), ("auto", spinning, "False False"),
            ("auto", {"OMP_WAIT_POLICY": "active"}, "False False"),
            ("auto", {"OMP_WAIT_POLICY": "passive"}, "True True"), ("yes", {}, "True True")):
        env = environment_without_openmp_variables()
        env.update(NEURON_BACKWARD_ON_CALLER=value, **openmp)
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split()[-2:] == expected.split(), (value, openmp, done.stdout)
        warned = "NEURON_BACKWARD_ON_CALLER='yes' is not one of auto, 1, 0" in done.stderr
        assert warned == (value == "yes"), done.stderr


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))


def test_gradients_of_a_training_step_equal_the_cpus():
    cpu_model = mlp()
    device_model = mlp().to(dev)
    x, y = torch.randn(16, 6), torch.randn(16, 3)
    for model, xs, ys in ((cpu_model, x, y), (device_model, x.to(dev), y.to(dev))):
        nn.functional.mse_loss(model(xs), ys).backward()
    for a, b in zip(cpu_model.parameters(), device_model.parameters()):
        torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-5, atol=1e-6)


class HookError(ValueError):
    pass


def test_a_python_exception_in_a_hook_is_raised_as_itself_and_the_next_pass_works():
    t = torch.ones(4, device=dev, requires_grad=True)
    handle = t.register_hook(lambda grad: (_ for _ in ()).throw(HookError("hook says no")))
    with pytest.raises(HookError, match="hook says no"):
        (t * 2).sum().backward()
    handle.remove()
    (t * 2).sum().backward()
    assert t.grad.cpu().tolist() == [2.0] * 4


class Refuses(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise KeyError("custom backward refuses")


def test_a_custom_functions_exception_keeps_its_type():
    t = torch.ones(3, device=dev, requires_grad=True)
    with pytest.raises(KeyError, match="custom backward refuses"):
        Refuses.apply(t).sum().backward()


def test_pytorchs_errors_are_its_own():
    t = torch.ones(3, device=dev)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        t.sum().backward()
    w = torch.ones(3, device=dev, requires_grad=True)
    loss = (w.exp() * 2).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        loss.backward()
    unused = torch.ones(2, device=dev, requires_grad=True)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        torch.autograd.grad((w * 3).sum(), [w, unused])
    with pytest.raises(TypeError):
        torch.autograd.backward(w.sum(), grad_tensors=5)


def test_grad_with_inputs_unused_and_create_graph_equals_the_cpu():
    results = {}
    for where in ("cpu", dev):
        x = torch.linspace(-1, 1, 5, device=where).requires_grad_()
        unused = torch.ones(2, device=where, requires_grad=True)
        y = (x.sin() * x).sum()
        gx, gu = torch.autograd.grad(y, [x, unused], create_graph=True, allow_unused=True)
        assert gu is None
        (ggx,) = torch.autograd.grad(gx.sum(), x)  # a second-order gradient
        x.grad = None
        y2 = (x ** 3).sum()
        y2.backward(inputs=[x])
        results[str(where)] = (gx.detach().cpu(), ggx.cpu(), x.grad.cpu())
    for a, b in zip(results["cpu"], results[str(dev)]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


def test_a_reentrant_checkpoint_equals_the_cpu():
    grads = {}
    for where in ("cpu", dev):
        model = mlp(1).to(where)
        x = torch.randn(8, 6, generator=torch.Generator().manual_seed(2)).to(where)
        x.requires_grad_()
        out = checkpoint.checkpoint(model, x, use_reentrant=True)
        out.square().sum().backward()
        grads[str(where)] = [x.grad.cpu()] + [p.grad.cpu() for p in model.parameters()]
    for a, b in zip(grads["cpu"], grads[str(dev)]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


class Nested(torch.autograd.Function):
    """Its backward runs a backward pass of its own through `depth` more of itself: a reentrant
    pass inside a pass, deeper than the engine's recursion limit (60 in 1.13), past which the
    engine hands passes to helper threads."""

    @staticmethod
    def forward(ctx, x, depth):
        ctx.depth = depth
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if ctx.depth > 0:
            with torch.enable_grad():
                inner = torch.ones(2, device=grad.device, requires_grad=True)
                torch.autograd.backward(Nested.apply(inner * 1, ctx.depth - 1).sum())
            grad = grad + inner.grad.sum()
        return grad, None


def test_reentrant_passes_deeper_than_the_engines_limit_finish():
    x = torch.ones(2, device=dev, requires_grad=True)
    Nested.apply(x, 70).sum().backward()
    # Level d's gradient is 1 + the sum of level d-1's over its 2 elements: 2^(d+1) - 1, rounded
    # as float32 rounds it step by step.
    expected = torch.ones((), dtype=torch.float32)
    for _ in range(70):
        expected = 1 + 2 * expected
    assert x.grad.cpu().tolist() == [expected.item()] * 2


DEEP_PASSES_ON_SHORT_LIVED_THREADS = r"""
import os, sys, threading, torch, torchneuron
torch.set_num_threads(1)
dev = torchneuron.device()
sys.path.insert(0, TESTS)
from test_backward_on_caller import Nested
def work():
    x = torch.ones(2, device=dev, requires_grad=True)
    Nested.apply(x, 62).sum().backward()
    assert x.grad.cpu().tolist() == [2.0 ** 63 - 1] * 2
def shallow():
    x = torch.ones(2, device=dev, requires_grad=True)
    (x * 3).sum().backward()
    assert x.grad.cpu().tolist() == [3.0, 3.0]
def on_a_thread(fn):
    t = threading.Thread(target=fn)
    t.start()
    t.join()
work()
for _ in range(12):
    on_a_thread(work)  # each leaves its engine, and the helpers it started, to the next
from torchneuron import _autograd
made = _autograd.engines_made()
for _ in range(12):
    on_a_thread(shallow)  # no helpers start, so no helper thread makes an engine meanwhile
print("engines", made, _autograd.engines_made())
"""


def test_deep_passes_on_short_lived_threads_reuse_the_engines_helpers():
    """A pass deeper than the recursion limit starts helper threads that keep using their engine:
    a thread's engine outlives the thread (it was freed under them: a crash with freed memory
    poisoned) and the next thread reuses it and its helpers (each thread made an engine and
    helpers of its own: 2 -> 5 -> 17 OS threads over 10 threads)."""
    script = DEEP_PASSES_ON_SHORT_LIVED_THREADS.replace(
        "TESTS", repr(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NEURON_ADAPTIVE_EAGER": "0", "MALLOC_PERTURB_": "165",
                               "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"})
    assert done.returncode == 0, done.stderr[-3000:]
    # The last twelve threads take engines earlier threads left (each thread's own engine, with
    # helpers of its own, piled up before). Helper threads that run nested passes have engines
    # too, made during the deep passes. The OS thread count is no measure: PyTorch starts a
    # helper whenever none is idle at that instant, more often under load.
    # A thread's engine goes back when the OS thread ends, which can be just after join()
    # returns (Python releases the join first): the next thread then makes one more, and the
    # late one is there for the threads after it. Without passing engines on: 12 more.
    words = done.stdout.split()
    assert words[0] == "engines" and int(words[2]) - int(words[1]) <= 2, done.stdout


def test_a_callback_queued_during_the_pass_runs_at_its_end():
    from torch.autograd.variable import Variable
    order = []
    t = torch.ones(3, device=dev, requires_grad=True)

    def hook(grad):
        order.append("hook")
        Variable._execution_engine.queue_callback(lambda: order.append("callback"))
        return grad
    t.register_hook(hook)
    (t * 5).sum().backward()
    assert order == ["hook", "callback"]
    assert t.grad.cpu().tolist() == [5.0] * 3


def test_two_threads_pass_side_by_side_with_the_cpus_gradients():
    x, y = torch.randn(16, 6), torch.randn(16, 3)
    expected = mlp(3)
    nn.functional.mse_loss(expected(x), y).backward()
    errors = []
    # Made here: torch.manual_seed in two threads at once would interleave their draws.
    models = [mlp(3).to(dev) for _ in range(2)]

    def train(model):
        try:
            for _ in range(30):
                model.zero_grad()
                nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
        except Exception as error:  # reported below, on the test's thread
            errors.append(error)
    threads = [threading.Thread(target=train, args=(model,)) for model in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors
    for model in models:
        for a, b in zip(expected.parameters(), model.parameters()):
            torch.testing.assert_close(b.grad.cpu(), a.grad, rtol=1e-5, atol=1e-6)


FORKED_CHILD_TRAINS = r"""
import os, torch, torchneuron
torch.set_num_threads(1)  # passes on the caller's thread: no engine threads, no fork guard
d = torchneuron.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to(d)
x, y = torch.randn(16, 4).to(d), torch.randn(16, 1).to(d)
def step():
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.cpu() for p in model.parameters()]
first = step()
child = os.fork()
if child == 0:
    same = all(torch.equal(a, b) for a, b in zip(first, step()))
    os._exit(0 if same else 3)
_, status = os.waitpid(child, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


def test_a_child_forked_after_a_pass_runs_passes_of_its_own():
    done = subprocess.run([sys.executable, "-c", FORKED_CHILD_TRAINS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["child", "0"], done.stdout + done.stderr[-2000:]
