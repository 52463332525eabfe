"""Recurrent layers on the device (src/device/recurrent_layers.h): nn.LSTM, nn.GRU and nn.RNN over
padded sequences run as on the CPU, each layer's input projection one linear over the whole
sequence, with the CPU's outputs, final states and gradients; the calls the device leaves to
ATen's composite (packed sequences, inference mode, bad calls) still run, or fail, as on the
CPU."""

import copy

import pytest
import torch
import torch.nn as nn
import torchneuron

from conftest import assert_same

TOL = {"rtol": 1e-4, "atol": 1e-5}


def make_layer(kind, **kwargs):
    torch.manual_seed(0)
    if kind == "lstm":
        return nn.LSTM(**kwargs)
    if kind == "gru":
        return nn.GRU(**kwargs)
    return nn.RNN(nonlinearity=kind.split("-")[1], **kwargs)


def initial_state(kind, layer, batch):
    directions = 2 if layer.bidirectional else 1
    rows = layer.num_layers * directions
    out_size = layer.proj_size if getattr(layer, "proj_size", 0) else layer.hidden_size
    g = torch.Generator().manual_seed(5)
    h = torch.randn(rows, batch, out_size, generator=g)
    if kind == "lstm":
        return (h, torch.randn(rows, batch, layer.hidden_size, generator=g))
    return h


def to_device(state, dev):
    if isinstance(state, tuple):
        return tuple(s.to(dev).requires_grad_() for s in state)
    return state.to(dev).requires_grad_()


def requiring_grad(state):
    if isinstance(state, tuple):
        return tuple(s.clone().requires_grad_() for s in state)
    return state.clone().requires_grad_()


def flat(state):
    return list(state) if isinstance(state, tuple) else [state]


def run_forward_backward(layer, x, state):
    out, final = layer(x, state) if state is not None else layer(x)
    g = torch.Generator().manual_seed(9)
    loss = (out * torch.randn(out.shape, generator=g).to(out.device)).sum()
    for f in flat(final):
        loss = loss + (f * torch.randn(f.shape, generator=g).to(f.device)).sum()
    loss.backward()
    return out, final


def check_against_cpu(kind, dev, *, batch=3, steps=7, with_state=True, dtype=torch.float32,
                      **kwargs):
    cpu_layer = make_layer(kind, **kwargs).to(dtype)
    dev_layer = copy.deepcopy(cpu_layer).to(dev)
    batch_first = kwargs.get("batch_first", False)
    shape = (batch, steps, kwargs["input_size"]) if batch_first else (steps, batch,
                                                                       kwargs["input_size"])
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=dtype)
    cpu_x, dev_x = x.clone().requires_grad_(), x.to(dev).requires_grad_()
    cpu_state = dev_state = None
    if with_state:
        state = initial_state(kind, cpu_layer, batch)
        state = tuple(s.to(dtype) for s in state) if isinstance(state, tuple) else state.to(dtype)
        cpu_state, dev_state = requiring_grad(state), to_device(state, dev)
    cpu_out, cpu_final = run_forward_backward(cpu_layer, cpu_x, cpu_state)
    dev_out, dev_final = run_forward_backward(dev_layer, dev_x, dev_state)
    assert_same(dev_out.detach(), cpu_out.detach(), **TOL)
    for d, c in zip(flat(dev_final), flat(cpu_final)):
        assert_same(d.detach(), c.detach(), **TOL)
    assert_same(dev_x.grad, cpu_x.grad, **TOL)
    if with_state:
        for d, c in zip(flat(dev_state), flat(cpu_state)):
            assert_same(d.grad, c.grad, **TOL)
    for (name, d), (_, c) in zip(dev_layer.named_parameters(), cpu_layer.named_parameters()):
        assert d.grad is not None, f"no gradient for {name}"
        assert_same(d.grad, c.grad, **TOL)


KINDS = ["lstm", "gru", "rnn-tanh", "rnn-relu"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layers,bidirectional,batch_first,bias", [
    (1, False, False, True), (2, True, True, True), (3, False, True, False),
    (2, True, False, False)])
def test_layers_match_the_cpu_with_gradients(dev, kind, layers, bidirectional, batch_first, bias):
    check_against_cpu(kind, dev, input_size=5, hidden_size=6, num_layers=layers,
                      bidirectional=bidirectional, batch_first=batch_first, bias=bias)


@pytest.mark.parametrize("kind", KINDS)
def test_layers_without_an_initial_state_match_the_cpu(dev, kind):
    check_against_cpu(kind, dev, with_state=False, input_size=4, hidden_size=8, num_layers=2)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_with_projections_matches_the_cpu(dev, bidirectional):
    check_against_cpu("lstm", dev, input_size=5, hidden_size=8, proj_size=3, num_layers=2,
                      bidirectional=bidirectional)


def test_double_precision_gru_matches_the_cpu(dev):
    check_against_cpu("gru", dev, dtype=torch.float64, input_size=5, hidden_size=6, num_layers=2)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_dropout_between_layers_draws_as_the_cpu_does(dev, kind):
    cpu_layer = make_layer(kind, input_size=6, hidden_size=16, num_layers=3, dropout=0.4)
    dev_layer = copy.deepcopy(cpu_layer).to(dev)
    x = torch.randn(9, 4, 6, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(11)
    cpu_out = cpu_layer(x)[0]
    torch.manual_seed(11)
    dev_out = dev_layer(x.to(dev))[0]
    assert_same(dev_out.detach(), cpu_out.detach(), **TOL)
    # Dropout changed something: the same layers in eval mode give another result.
    assert not torch.allclose(cpu_layer.eval()(x)[0], cpu_out)


def matmul_launches():
    ops = torchneuron.metrics()["ops"]
    return sum(ops[kind].get(op, 0) for kind in ops for op in ("aten::addmm", "aten::mm", "aten::bmm"))


@pytest.mark.parametrize("kind,layers,bidirectional", [
    ("lstm", 1, False), ("gru", 2, False), ("rnn-tanh", 1, True)])
def test_each_time_step_runs_one_matrix_product(dev, kind, layers, bidirectional):
    """ATen's composite runs two matrix products a step on any device but the CPU (the input's
    and the hidden state's projection): here the input projection is one product a layer."""
    steps = 20
    layer = make_layer(kind, input_size=8, hidden_size=16, num_layers=layers,
                       bidirectional=bidirectional).to(dev)
    x = torch.randn(steps, 2, 8).to(dev)
    torchneuron.synchronize()
    before = matmul_launches()
    with torch.no_grad():
        out = layer(x)[0]
    out.cpu()
    directions = 2 if bidirectional else 1
    assert matmul_launches() - before == layers * directions * (steps + 1)


def test_packed_sequences_still_match_the_cpu(dev):
    cpu_layer = make_layer("lstm", input_size=4, hidden_size=5, num_layers=2, bidirectional=True)
    dev_layer = copy.deepcopy(cpu_layer).to(dev)
    x = torch.randn(6, 3, 4, generator=torch.Generator().manual_seed(4))
    lengths = [6, 4, 2]
    cpu_out = cpu_layer(nn.utils.rnn.pack_padded_sequence(x, lengths))[0]
    dev_out = dev_layer(nn.utils.rnn.pack_padded_sequence(x.to(dev), lengths))[0]
    assert_same(dev_out.data.detach(), cpu_out.data.detach(), **TOL)


def test_inference_mode_matches_the_cpu(dev):
    cpu_layer = make_layer("gru", input_size=4, hidden_size=5, num_layers=2)
    dev_layer = copy.deepcopy(cpu_layer).to(dev)
    x = torch.randn(5, 2, 4)
    with torch.inference_mode():
        assert_same(dev_layer(x.to(dev))[0], cpu_layer(x)[0], **TOL)


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # nn.LSTM's own shape checks
def test_a_traced_lstm_equals_the_eager_one_on_new_inputs(dev):
    layer = make_layer("lstm", input_size=4, hidden_size=5, num_layers=2).to(dev)
    traced = torch.jit.trace(layer, torch.randn(6, 2, 4).to(dev))
    x = torch.randn(6, 2, 4).to(dev)
    for d, e in zip(flat(traced(x)[1]), flat(layer(x)[1])):
        assert_same(d.detach(), e.detach().cpu(), **TOL)
    assert_same(traced(x)[0].detach(), layer(x)[0].detach().cpu(), **TOL)


def error_of(fn):
    with pytest.raises(RuntimeError) as caught:
        fn()
    return str(caught.value)


def lstm_call(x, hx, params):
    return torch.lstm(x, hx, params, True, 1, 0.0, False, False, False)


def test_bad_calls_fail_as_on_the_cpu(dev):
    layer = make_layer("lstm", input_size=4, hidden_size=5)
    params = list(layer._flat_weights)
    dev_params = [p.detach().to(dev) for p in params]
    h = (torch.zeros(1, 2, 5), torch.zeros(1, 2, 5))
    dev_h = tuple(t.to(dev) for t in h)
    x = torch.randn(3, 2, 4)
    # An empty sequence.
    empty = torch.randn(0, 2, 4)
    cpu_error = error_of(lambda: lstm_call(empty, h, params))
    assert error_of(lambda: lstm_call(empty.to(dev), dev_h, dev_params)) == cpu_error
    assert "sequence length" in cpu_error
    # A hidden state on another device.
    message = error_of(lambda: lstm_call(x.to(dev), h, dev_params))
    assert "not at the same device" in message and "hidden" in message
    # A parameter list of the wrong length.
    cpu_error = error_of(lambda: lstm_call(x, h, params[:3]))
    assert error_of(lambda: lstm_call(x.to(dev), dev_h, dev_params[:3])) == cpu_error
    # A weight of the wrong width fails in the input projection, naming the shapes.
    wide = [torch.randn(20, 7)] + params[1:]
    cpu_error = error_of(lambda: lstm_call(x, h, wide))
    assert error_of(lambda: lstm_call(x.to(dev), dev_h, [p.to(dev) for p in wide])) == cpu_error


@pytest.mark.parametrize("cell", [False, True])
def test_gru_gates_run_on_the_device_with_no_fallback(dev, cell):
    """ATen's GRU cell multiplies one gate's block in place by another's (`chunk(3, 1)` of one
    product: interleaved column blocks of one storage, which ATen's overlap check calls too hard
    to judge): shown to share no element, it runs compiled, not on the fallback."""
    torch.manual_seed(0)
    cpu_layer = nn.GRUCell(8, 16) if cell else nn.GRU(8, 16)
    dev_layer = copy.deepcopy(cpu_layer).to(dev)
    x = torch.randn((3, 8) if cell else (5, 3, 8), generator=torch.Generator().manual_seed(1))
    before = torchneuron.metrics()["launches"]["fallback"]
    for _ in range(2):
        outputs = []
        for layer, device in ((cpu_layer, "cpu"), (dev_layer, dev)):
            out = layer(x.to(device))
            out = out if cell else out[0]
            out.sum().backward()
            outputs.append(out.detach())
        assert_same(outputs[1], outputs[0], **TOL)
    assert torchneuron.metrics()["launches"]["fallback"] == before
    for d, c in zip(dev_layer.parameters(), cpu_layer.parameters()):
        assert_same(d.grad, c.grad, **TOL)
