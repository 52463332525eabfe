"""LSTM layers with fused cells (src/device/lstm_sequence.h): each direction of a layer is one
autograd node whose steps are a hidden projection and one compiled cell kernel forward, one cell
kernel and one product backward, with the hidden weights' gradient over the whole sequence at
once. Outputs, final states and every gradient match the CPU's (test_recurrent_layers.py covers
the layer shapes; here: the launches, gradients of some outputs only, float64, adaptive mode,
the missing double backward and the switch that restores it, and a cold start that runs op by
op while the cell kernels compile)."""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torchneuron

from conftest import assert_same, launched_since, launches_now

TOL = {"rtol": 1e-4, "atol": 1e-5}


def lstm(**kwargs):
    torch.manual_seed(0)
    return nn.LSTM(**kwargs)


def inputs(steps, batch, size, dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return torch.randn(steps, batch, size, generator=g, dtype=dtype)


def state(rows, batch, hidden, dtype=torch.float32):
    g = torch.Generator().manual_seed(2)
    return (torch.randn(rows, batch, hidden, generator=g, dtype=dtype),
            torch.randn(rows, batch, hidden, generator=g, dtype=dtype))


def run_both(dev, layer, x, h, loss_of):
    """The loss of (output, (h_n, c_n)) backward on the CPU and on the device; asserts equal
    outputs and gradients of the input, initial state and parameters. Returns the device's
    launches."""
    dev_layer = copy.deepcopy(layer).to(dev)
    results = []
    for module, device in ((layer, "cpu"), (dev_layer, dev)):
        xs = x.detach().clone().to(device).requires_grad_()
        hs = tuple(t.detach().clone().to(device).requires_grad_() for t in h)
        before = launches_now()
        out, final = module(xs, hs)
        loss_of(out, final).backward()
        torchneuron.synchronize()
        launched = launched_since(before)
        results.append((out, final, xs.grad, [t.grad for t in hs],
                        [p.grad for p in module.parameters()], launched))
    cpu, got = results
    assert_same(got[0].detach(), cpu[0].detach(), **TOL)
    for d, c in zip(got[1], cpu[1]):
        assert_same(d.detach(), c.detach(), **TOL)
    for d, c in zip([got[2]] + got[3] + got[4], [cpu[2]] + cpu[3] + cpu[4]):
        if c is None:
            assert d is None
        else:
            assert_same(d, c, **TOL)
    return got[5]


def weighted(t, seed):
    return (t * torch.randn(t.shape, generator=torch.Generator().manual_seed(seed)).to(t.device)
            ).sum()


def test_each_step_is_one_cell_launch_each_way(dev):
    layer = lstm(input_size=6, hidden_size=8, num_layers=2, bidirectional=True)
    x, h = inputs(5, 3, 6), state(4, 3, 8)
    launched = run_both(dev, layer, x, h,
                        lambda out, final: weighted(out, 3) + weighted(final[0], 4)
                        + weighted(final[1], 5))
    # 2 layers x 2 directions x 5 steps, once forward and once backward.
    assert launched["compiled"].get("neuron::lstm_cell") == 20
    assert launched["compiled"].get("neuron::lstm_cell_backward") == 20
    assert launched["fallback"] == {}


@pytest.mark.parametrize("used", ["output", "h_n", "c_n"])
def test_gradients_of_some_outputs_only_match_the_cpu(dev, used):
    layer = lstm(input_size=5, hidden_size=7, num_layers=2)
    x, h = inputs(6, 2, 5), state(2, 2, 7)
    pick = {"output": lambda out, final: weighted(out, 6),
            "h_n": lambda out, final: weighted(final[0], 7),
            "c_n": lambda out, final: weighted(final[1], 8)}[used]
    run_both(dev, layer, x, h, pick)


def test_float64_matches_the_cpu(dev):
    layer = lstm(input_size=4, hidden_size=9, num_layers=1, bidirectional=True).double()
    x, h = inputs(7, 3, 4, torch.float64), state(2, 3, 9, torch.float64)
    launched = run_both(dev, layer, x, h, lambda out, final: weighted(out, 9))
    assert launched["compiled"].get("neuron::lstm_cell") == 14


def test_non_contiguous_gradients_and_batch_first_match_the_cpu(dev):
    layer = lstm(input_size=5, hidden_size=6, num_layers=2, batch_first=True)
    x, h = inputs(4, 7, 5).transpose(0, 1).contiguous(), state(2, 7, 6)
    # The output's gradient arrives batch first: transposed into the layer's time-first order.
    run_both(dev, layer, x, h, lambda out, final: weighted(out, 10) + weighted(final[1], 11))


def test_training_steps_in_adaptive_mode_match_the_cpu(dev):
    layer = lstm(input_size=6, hidden_size=8, num_layers=2)
    x, h = inputs(5, 4, 6), state(2, 4, 8)
    dev_layer = copy.deepcopy(layer).to(dev)
    cpu_opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    dev_opt = torch.optim.SGD(dev_layer.parameters(), lr=0.1)
    before = torchneuron.metrics()["adaptive"]["syncs"].get("eager_region", 0)
    with torchneuron.adaptive(True):
        for _ in range(4):
            for module, opt, device in ((layer, cpu_opt, "cpu"), (dev_layer, dev_opt, dev)):
                out, _ = module(torch.tanh(x.to(device) * 2), tuple(t.to(device) for t in h))
                weighted(out, 12).backward()
                opt.step()
                opt.zero_grad()
    for d, c in zip(dev_layer.parameters(), layer.parameters()):
        assert_same(d.detach(), c.detach(), rtol=1e-4, atol=1e-5)
    assert torchneuron.metrics()["adaptive"]["syncs"]["eager_region"] > before


def double_backward(dev):
    layer = lstm(input_size=3, hidden_size=4).to(dev)
    x = inputs(3, 2, 3).to(dev).requires_grad_()
    out, _ = layer(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    grad.sum().backward()
    return x.grad


def test_double_backward_raises_an_error_naming_the_switch(dev):
    with pytest.raises(RuntimeError, match="NEURON_FUSED_LSTM=0"):
        double_backward(dev)


def test_the_op_by_op_cell_has_a_double_backward(dev):
    torchneuron.set_fused_lstm(False)
    try:
        assert not torchneuron.fused_lstm_enabled()
        got = double_backward(dev)
    finally:
        torchneuron.set_fused_lstm(True)
    cpu = double_backward("cpu")
    assert_same(got, cpu, **TOL)


def test_a_cold_start_runs_op_by_op_while_the_cells_compile(tmp_path):
    """With interim launches on (the default outside tests), the first call finds the cell
    kernels compiling in the background and runs op by op; once they are ready it is fused."""
    script = textwrap.dedent("""
        import torch, torch.nn as nn, torchneuron
        dev = torchneuron.device()
        torch.manual_seed(0)
        layer = nn.LSTM(5, 6).to(dev)
        x = torch.randn(4, 2, 5)
        def cells():
            return torchneuron.metrics()["ops"]["compiled"].get("neuron::lstm_cell", 0)
        first = layer(x.to(dev))[0].cpu()
        print(cells())
        torchneuron.wait_for_compiles()
        second = layer(x.to(dev))[0].cpu()
        print(cells())
        print(torch.allclose(first, second, rtol=1e-5, atol=1e-6))
    """)
    env = dict(os.environ, NEURON_INTERIM_LAUNCHES="1", NEURON_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "4", "True"], done.stdout + done.stderr


def test_batched_gradients_take_aten_ops_and_match_the_cpu(dev):
    """autograd.grad(is_grads_batched=True) (jacobian(vectorize=True)) hands backward gradients
    without storage: the node computes with ATen ops then. Found by review."""
    layer = lstm(input_size=3, hidden_size=4)
    x, v = inputs(2, 2, 3), torch.randn(5, 2, 2, 4)

    def vjps(module, device):
        xs = x.clone().to(device).requires_grad_()
        out, _ = module(xs)
        return torch.autograd.grad(out, xs, v.clone().to(device), is_grads_batched=True)[0]

    assert_same(vjps(copy.deepcopy(layer).to(dev), dev), vjps(layer, "cpu"), **TOL)


def test_forward_mode_gradients_run_op_by_op(dev):
    """Dual tensors need a jvp, which 1.13's C++ functions cannot have: the call runs op by op.
    Found by review."""
    import torch.autograd.forward_ad as forward_ad
    layer = lstm(input_size=3, hidden_size=4)
    x, tangent = inputs(2, 2, 3), torch.randn(2, 2, 3)

    def jvp(module, device):
        with forward_ad.dual_level():
            out, _ = module(forward_ad.make_dual(x.clone().to(device), tangent.clone().to(device)))
            return forward_ad.unpack_dual(out).tangent

    assert_same(jvp(copy.deepcopy(layer).to(dev), dev), jvp(layer, "cpu"), **TOL)


@pytest.mark.parametrize("device", ["cpu", "device"])
def test_a_state_changed_in_place_before_backward_raises_as_on_the_cpu(dev, device):
    """Carrying the state in place (h.copy_(h_n)) before backward is autograd's error, as on the
    CPU: the node saves h0 and c0 for their version counters. Found by review."""
    device = dev if device == "device" else "cpu"
    layer = lstm(input_size=4, hidden_size=6).to(device)
    h, c = (t[0:1].clone().to(device) for t in state(1, 3, 6))
    out, (h_n, c_n) = layer(inputs(5, 3, 4).to(device), (h, c))
    h.copy_(h_n.detach())
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (out ** 2).sum().backward()
