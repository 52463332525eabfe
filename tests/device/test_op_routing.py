"""The one routing point (src/device/op_routing.cpp): the autograd-key policy, each route kind
taken by a representative op (read from metrics()), and the registration order."""
import os
import re
import subprocess
import sys

import pytest
import torch
import torchneuron

from conftest import assert_same


def ops_by_kind():
    return torchneuron.metrics()["ops"]


def counted(before, after):
    """The launches between two ops_by_kind() snapshots: {kind: {op: count}}, nonzero only."""
    return {kind: {op: n - before[kind].get(op, 0) for op, n in ops.items()
                   if n != before[kind].get(op, 0)}
            for kind, ops in after.items()}


def run(fn):
    before = ops_by_kind()
    result = fn()
    return result, counted(before, ops_by_kind())


# --- the autograd-key policy -----------------------------------------------------------------

@pytest.fixture(scope="module")
def ops_without_autograd():
    """Two ops with no autograd kernel, as c10d's collectives have none: `twice` has only a CPU
    kernel (the device runs it through the fallback), `halve` is given a device kernel too.
    The kernels detach their input: a Python kernel would otherwise record autograd of its own on
    CPU tensors, which a C++ kernel (c10d's) does not."""
    lib = torch.library.Library("neuron_routing_test", "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x.detach() * 2, "CPU")
    lib.define("halve(Tensor x) -> Tensor")
    lib.impl("halve", lambda x: x.detach() / 2, "CPU")
    lib.impl("halve", lambda x: x.detach() / 2, "PrivateUse1")
    yield torch.ops.neuron_routing_test
    del lib


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("name", ["twice", "halve"])
def test_op_without_autograd_kernel_runs_on_device_tensors_as_on_the_cpu(
        dev, ops_without_autograd, name, requires_grad):
    op = getattr(ops_without_autograd, name)
    cpu = torch.arange(4., requires_grad=requires_grad)
    on_device = torch.arange(4., device=dev, requires_grad=requires_grad)
    expected = op(cpu)
    result = op(on_device)  # without the AutogradPrivateUse1 fallthrough: "Could not run"
    assert_same(result, expected)
    assert result.requires_grad == expected.requires_grad


def test_every_device_kernel_belongs_to_an_op_with_its_own_autograd_kernel():
    # The fallthrough is safe only because of this: it can never skip a derivative.
    registered = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    assert "aten::add.Tensor" in registered and "aten::native_group_norm" in registered
    autograd_kernel = re.compile(r"^(Autograd\[alias\]|AutogradPrivateUse1):", re.MULTILINE)
    without = [op for op in registered
               if op.startswith("aten::") and not autograd_kernel.search(torch._C._dispatch_dump(op))]
    assert without == []


def grads_of(fn, cpu_inputs, dev):
    cpu = [t.clone().requires_grad_() for t in cpu_inputs]
    on_device = [t.to(dev).requires_grad_() for t in cpu_inputs]
    cpu_out, dev_out = fn(*cpu), fn(*on_device)
    assert type(dev_out.grad_fn).__name__ == type(cpu_out.grad_fn).__name__
    cpu_out.square().sum().backward()
    dev_out.square().sum().backward()
    assert_same(dev_out.detach(), cpu_out.detach(), rtol=1e-4, atol=1e-5)
    for d, c in zip(on_device, cpu):
        assert d.grad is not None
        assert_same(d.grad, c.grad, rtol=1e-4, atol=1e-5)


def test_composite_op_keeps_its_decomposition_and_autograd(dev):
    # gru_cell has no autograd kernel of its own: it must stay composite on the device (its
    # parts record autograd); a device kernel would run it with no gradient at all.
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(3, 4, generator=g), torch.randn(3, 5, generator=g),
              torch.randn(15, 4, generator=g), torch.randn(15, 5, generator=g),
              torch.randn(15, generator=g), torch.randn(15, generator=g)]
    grads_of(torch.gru_cell, inputs, dev)


def test_rerouted_and_compiled_ops_keep_their_autograd(dev):
    g = torch.Generator().manual_seed(1)
    x, w, b = torch.randn(2, 6, 5, generator=g), torch.randn(6, generator=g), torch.randn(6, generator=g)
    # native_group_norm: a composite op with a CPU kernel, routed to its CPU kernel (library).
    grads_of(lambda x, w, b: torch.nn.functional.group_norm(x, 3, w, b), [x, w, b], dev)
    # native_layer_norm: a compiled op.
    w5, b5 = torch.randn(5, generator=g), torch.randn(5, generator=g)
    grads_of(lambda x, w, b: torch.nn.functional.layer_norm(x, (5,), w, b), [x, w5, b5], dev)


# --- each route kind ----------------------------------------------------------------------

def test_compiled_route(dev):
    a, b = torch.ones(8, device=dev), torch.ones(8, device=dev)
    result, launched = run(lambda: torch.add(a, b))
    assert launched == {"interim": {}, "compiled": {"aten::add.Tensor": 1}, "library": {}, "fallback": {}}
    assert_same(result, torch.full((8,), 2.))
    _, launched = run(lambda: torch.nn.functional.layer_norm(a.view(2, 4), (4,)))
    assert launched["compiled"]["aten::native_layer_norm"] == 1  # one row-wise kernel
    assert launched["fallback"] == {} and launched["library"] == {}


def test_compiled_route_declines_to_the_fallback(dev):
    # complex dtypes are outside the kernels: the compiled kernel declines, the router falls back.
    z = torch.ones(2, dtype=torch.complex64, device=dev)
    result, launched = run(lambda: torch.add(z, z))
    assert launched == {"interim": {}, "compiled": {}, "library": {}, "fallback": {"aten::add.Tensor": 1}}
    assert_same(result, torch.full((2,), 2, dtype=torch.complex64))


def test_library_route(dev):
    m = torch.arange(4., device=dev).view(2, 2)
    result, launched = run(lambda: torch.mm(m, m))
    assert launched == {"interim": {}, "compiled": {}, "library": {"aten::mm": 1}, "fallback": {}}
    assert_same(result, torch.arange(4.).view(2, 2) @ torch.arange(4.).view(2, 2))
    index = torch.tensor([1, 0], device=dev)
    _, launched = run(lambda: torch.index_select(m, 0, index))
    assert launched == {"interim": {}, "compiled": {}, "library": {"aten::index_select": 1}, "fallback": {}}
    # A composite op with a CPU kernel listed as a library op: its CPU kernel, not the composite.
    groups = torch.arange(12., device=dev).view(1, 4, 3)
    _, launched = run(lambda: torch.nn.functional.group_norm(groups, 2))
    assert launched == {"interim": {}, "compiled": {}, "library": {"aten::native_group_norm": 1}, "fallback": {}}
    # A structured loss run as its functional CPU kernel, not as .out (beta 0: the compiled
    # kernel declines it, compiled_losses.cpp).
    x = torch.full((3,), 2., device=dev)
    _, launched = run(lambda: torch.ops.aten.smooth_l1_loss(x, x, 1, 0.0))
    assert launched == {"interim": {}, "compiled": {}, "library": {"aten::smooth_l1_loss": 1},
                        "fallback": {}}


def test_fallback_routes(dev):
    coo_rows = torch.tensor([0, 0, 1, 2, 2], device=dev)
    # An op without a device kernel (a sparse layout conversion's index helper): the PrivateUse1
    # fallback (structured: its .out variant).
    result, launched = run(lambda: torch._convert_indices_from_coo_to_csr(coo_rows, 3))
    assert launched == {"interim": {}, "compiled": {}, "library": {},
                        "fallback": {"aten::_convert_indices_from_coo_to_csr.out": 1}}
    assert result.device == dev and result.cpu().tolist() == [0, 2, 3, 5]
    # A composite op with a CPU kernel, rerouted: the CPU kernel, not the decomposition.
    v = torch.arange(3., device=dev)
    result, launched = run(lambda: torch._stack([v, v]))
    assert launched == {"interim": {}, "compiled": {}, "library": {}, "fallback": {"aten::_stack": 1}}
    assert_same(result, torch._stack([torch.arange(3.), torch.arange(3.)]))


def test_runtime_route_views_and_transfers_launch_nothing(dev):
    base = torch.arange(6., device=dev)
    alias, launched = run(lambda: base.view(2, 3))
    assert launched == {"interim": {}, "compiled": {}, "library": {}, "fallback": {}}
    assert alias.data_ptr() == base.data_ptr()
    z = torch.zeros(3, dtype=torch.complex64, device=dev)
    real, launched = run(lambda: torch.view_as_real(z))
    assert launched == {"interim": {}, "compiled": {}, "library": {}, "fallback": {}}
    assert real.shape == (3, 2) and real.device == dev and real.data_ptr() == z.data_ptr()
    moved, launched = run(lambda: torch.arange(3.).to(dev))
    assert launched == {"interim": {}, "compiled": {}, "library": {}, "fallback": {}}
    assert_same(moved, torch.arange(3.))
    # A copy within the device is a compiled kernel, reached from the runtime's _copy_from.
    _, launched = run(lambda: base.clone())
    assert launched == {"interim": {}, "compiled": {"aten::copy_": 1}, "library": {}, "fallback": {}}


# --- registration --------------------------------------------------------------------------

def test_loading_registers_each_kernel_once_and_says_nothing():
    # A kernel registered twice for one op and key makes the dispatcher print "Overriding a
    # previously registered kernel"; the routing refuses it outright (the import fails).
    result = subprocess.run([sys.executable, "-c", "import torch, torchneuron"],
                            capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
