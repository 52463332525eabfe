"""Training-script behaviours that once went wrong on the device (issue 15): traced modules,
sparse embeddings under an optimizer, device tensors in DataLoader workers, and autocast."""
import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torchneuron  # noqa: F401  (registers the device kernels the first test reads)

# PyTorch 1.13's tracer does not record these (DONT_RECORD_TRACE in tools/autograd/
# gen_trace_type.py): it records what their kernels call. A device kernel for one of them calls
# nothing the tracer sees, so a trace would hold its result as a constant.
UNRECORDED_BY_TRACER = ["convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
                        "conv_transpose2d", "conv_transpose3d", "lstm_cell", "gru_cell",
                        "rnn_tanh_cell", "rnn_relu_cell"]


@pytest.mark.parametrize("name", UNRECORDED_BY_TRACER)
def test_ops_the_tracer_does_not_record_have_no_device_kernel(name):
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    assert schemas, name
    for schema in schemas:
        overload = schema.name + (f".{schema.overload_name}" if schema.overload_name else "")
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(overload, "PrivateUse1"), overload


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.up = nn.ConvTranspose2d(4, 2, 2, stride=2)
        self.conv1d = nn.Conv1d(2, 3, 3)
        self.fc = nn.Linear(3 * 254, 5)
        self.cell = nn.LSTMCell(5, 4)
        self.gru = nn.GRUCell(4, 4)
        self.rnn = nn.RNNCell(4, 3)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = self.up(x).flatten(2)              # (n, 2, 256)
        x = self.fc(torch.relu(self.conv1d(x)).flatten(1))
        h, _ = self.cell(x)
        h = self.gru(h, h)
        return self.rnn(h) @ torch.ones(3, 2, device=x.device)


def test_traced_cnn_and_linear_equal_eager_on_new_inputs(dev):
    torch.manual_seed(0)
    cpu_model = SmallCnn()
    model = copy.deepcopy(cpu_model).to(dev)
    traced = torch.jit.trace(model, torch.randn(2, 3, 8, 8, device=dev))
    # The trace recorded the computation (what the CPU's trace records), not constants.
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert {"aten::_convolution", "aten::linear", "aten::matmul", "aten::sigmoid_"} <= kinds
    for _ in range(2):
        x = torch.randn(2, 3, 8, 8)
        out = traced(x.to(dev))
        torch.testing.assert_close(out.cpu(), model(x.to(dev)).cpu(), rtol=0, atol=0)
        torch.testing.assert_close(out.cpu(), cpu_model(x), rtol=1e-5, atol=1e-5)
    # Gradients through the traced module equal eager ones (convolution_backward included).
    x = torch.randn(2, 3, 8, 8)
    traced(x.to(dev)).pow(2).sum().backward()
    cpu_model(x).pow(2).sum().backward()
    for (name, p_cpu), p_dev in zip(cpu_model.named_parameters(), model.parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_convolution_runs_as_library_kernel(dev):
    import torchneuron
    torchneuron.reset_metrics()
    conv = nn.Conv2d(2, 3, 3).to(dev)
    conv(torch.randn(1, 2, 5, 5, device=dev, requires_grad=True)).sum().backward()
    library = torchneuron.metrics()["ops"]["library"]
    assert library.get("aten::convolution") == 1, library
    assert library.get("aten::convolution_backward") == 1, library
    assert "aten::convolution_overrideable" not in torchneuron.metrics()["ops"]["fallback"]


def sparse_embedding_run(device, optimizer):
    torch.manual_seed(0)
    embedding = nn.Embedding(10, 3, sparse=True).to(device)
    opt = optimizer(embedding.parameters())
    for indices in ([1, 2, 1], [2, 7, 7, 0]):
        opt.zero_grad()
        embedding(torch.tensor(indices, device=device)).pow(2).sum().backward()
        opt.step()
    return embedding.weight.detach(), embedding.weight.grad


# SparseAdam is not here: it builds sparse tensors with the legacy grad.new(indices, values, size),
# which PyTorch 1.13's Python layer refuses for SparsePrivateUse1 (README, known limits).
@pytest.mark.parametrize("optimizer", [lambda p: torch.optim.SGD(p, lr=0.1),
                                       lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)],
                         ids=["SGD", "SGD-momentum"])
def test_two_optimizer_steps_of_sparse_embedding_equal_cpu(dev, optimizer):
    weight, grad = sparse_embedding_run(dev, optimizer)
    cpu_weight, cpu_grad = sparse_embedding_run("cpu", optimizer)
    assert grad.is_sparse and grad.device == dev
    torch.testing.assert_close(weight.cpu(), cpu_weight)
    torch.testing.assert_close(grad.cpu().to_dense(), cpu_grad.to_dense())


def test_zero_of_sparse_tensor_as_on_cpu(dev):
    cpu = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.ones(2, 3), (4, 3))
    device = cpu.to(dev)
    cpu.zero_()
    device.zero_()
    assert device.device == dev and device._indices().device == dev
    assert device._values().device == dev
    assert (device.sparse_dim(), device.dense_dim(), device._nnz(), device.is_coalesced()) == \
        (cpu.sparse_dim(), cpu.dense_dim(), cpu._nnz(), cpu.is_coalesced())
    assert torch.equal(device.to_dense().cpu(), torch.zeros(4, 3))


class Items(torch.utils.data.Dataset):
    def __init__(self, device, to_cpu=False):
        self.device, self.to_cpu = device, to_cpu

    def __len__(self):
        return 4

    def __getitem__(self, i):
        item = torch.full((3,), float(i), device=self.device) * 2
        return item.cpu() if self.to_cpu else item


@pytest.mark.parametrize("batch_size", [2, None], ids=["batched", "unbatched"])
def test_dataloader_worker_with_device_tensors_says_what_to_do(dev, batch_size):
    # timeout: a worker that cannot send its batch fails the test instead of hanging it.
    loader = torch.utils.data.DataLoader(Items(dev), batch_size=batch_size, num_workers=2,
                                         timeout=30)
    with pytest.raises(RuntimeError) as error:
        list(loader)
    text = str(error.value)
    assert "DataLoader worker" in text and "neuron device" in text, text
    assert "main process" in text and "num_workers=0" in text, text


def test_dataloader_collate_fn_returning_device_tensors_says_what_to_do(dev):
    loader = torch.utils.data.DataLoader(Items("cpu"), batch_size=2, num_workers=2, timeout=30,
                                         collate_fn=lambda items: torch.stack(items).to(dev))
    with pytest.raises(RuntimeError, match="from the collate_fn.*num_workers=0"):
        list(loader)


def test_dataloader_workers_may_compute_on_device_and_return_cpu_tensors(dev):
    loader = torch.utils.data.DataLoader(Items(dev, to_cpu=True), batch_size=2, num_workers=2,
                                         timeout=30)
    batches = [batch.to(dev) for batch in loader]
    assert [b.cpu().tolist() for b in batches] == [[[0.0] * 3, [2.0] * 3], [[4.0] * 3, [6.0] * 3]]


def test_device_tensor_sent_to_another_process_says_what_to_do(dev):
    import multiprocessing.reduction
    with pytest.raises(RuntimeError, match=r"cannot be sent to another process.*tensor\.cpu\(\)"):
        multiprocessing.reduction.ForkingPickler.dumps(torch.ones(2, device=dev))


AUTOCAST_SCRIPT = """
import warnings
warnings.simplefilter("always")
dev = torchneuron.device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(36, 2))
x = torch.randn(2, 3, 5, 5)
model_dev, x_dev = model.to(dev), x.to(dev)
plain = model_dev(x_dev)
with warnings.catch_warnings(record=True) as caught:
    for context in (lambda: torch.autocast("cpu", dtype=torch.bfloat16), torch.cpu.amp.autocast,
                    lambda: torch.autocast("privateuseone"),
                    lambda: torch.autocast(device_type=dev.type, dtype=torch.bfloat16)):
        for _ in range(2):
            with context():
                out = model_dev(x_dev)
            assert out.dtype == torch.float32, out.dtype
            assert torch.equal(out.cpu(), plain.cpu())
    # CPU autocast still casts CPU ops.
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model.cpu()(x).dtype == torch.bfloat16
for w in caught:
    print("WARNING", w.message)
"""


def test_autocast_warns_once_that_it_does_not_apply_and_ops_keep_their_dtype():
    result = subprocess.run([sys.executable, "-c", "import torch, torchneuron\n" + AUTOCAST_SCRIPT],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, NEURON_FALLBACK="silent"))
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stdout.splitlines() if "[autocast]" in l]
    # One from the device ops under CPU autocast, one from torch.autocast("privateuseone").
    assert len(lines) == 2, result.stdout + result.stderr
    for line in lines:
        assert "does not apply to the neuron device" in line and "own dtype" in line, line


# A CPU model trained before `import torchneuron`, then the same model trained on the device: the
# autograd engine started at the first backward pass without the device (PyTorch 1.13 counts the
# devices then, once), and every device backward failed with an internal assert in engine.cpp
# until the import gave the engine the device's worker (src/device/autograd_device_thread.h).
# A child forked afterwards refuses backward passes with PyTorch's own error, as it does after
# any first backward pass of a process that has the device (PyTorch's fork guard).
BACKWARD_BEFORE_IMPORT = r"""
import os, torch
torch.manual_seed(0)
cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
x, y = torch.randn(32, 8), torch.randn(32, 1)
def train(model, x, y, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]
import copy
start = copy.deepcopy(cpu_model)
on_cpu = train(cpu_model, x, y)  # the process's first backward pass: no device exists yet
import torchneuron
d = torchneuron.device()
on_device = train(copy.deepcopy(start).to(d), x.to(d), y.to(d))
assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(on_cpu, on_device))
print("parent trained", flush=True)
child = os.fork()
if child == 0:
    try:
        train(copy.deepcopy(start).to(d), x.to(d), y.to(d))
        print("child trained", flush=True)
    except RuntimeError as error:
        refused = "Unable to handle autograd's threading" in str(error)
        print("child refused" if refused else "child failed: " + str(error), flush=True)
    os._exit(0)
_, status = os.waitpid(child, 0)
assert status == 0, status
assert all(torch.equal(a, b) for a, b in zip(train(copy.deepcopy(start), x, y), on_cpu))
print("cpu trained after", flush=True)
"""


@pytest.mark.parametrize("on_caller", ["1", "0"])
def test_a_backward_pass_before_the_import_leaves_device_training_working(on_caller):
    """With NEURON_BACKWARD_ON_CALLER=0 the device's passes run on the repaired engine's device
    thread; by default on the caller's thread, and the repair still guards forked children."""
    done = subprocess.run([sys.executable, "-c", BACKWARD_BEFORE_IMPORT], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "NEURON_BACKWARD_ON_CALLER": on_caller})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["parent", "trained", "child", "refused", "cpu", "trained",
                                   "after"], done.stdout
