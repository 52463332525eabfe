"""Autograd end to end on the device, each compared with the same code on the CPU."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F


def clone_to(module, device):
    return copy.deepcopy(module).to(device)


def compare_module(module, inputs, dev, loss_fn=lambda out: out.float().pow(2).sum(), atol=1e-5,
                   rtol=1.3e-6, train=True):
    torch.manual_seed(0)
    cpu_module = module.train(train)
    dev_module = clone_to(module, dev).train(train)
    torch.manual_seed(1)
    cpu_out = cpu_module(*inputs)
    torch.manual_seed(1)
    dev_out = dev_module(*[x.to(dev) if isinstance(x, torch.Tensor) else x for x in inputs])
    if isinstance(cpu_out, tuple):
        cpu_out, dev_out = cpu_out[0], dev_out[0]
    torch.testing.assert_close(dev_out.cpu(), cpu_out, atol=atol, rtol=rtol)
    loss_fn(cpu_out).backward()
    loss_fn(dev_out).backward()
    for (name, p_cpu), p_dev in zip(cpu_module.named_parameters(), dev_module.parameters()):
        assert p_dev.grad is not None and p_dev.grad.device == dev, name
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad, atol=atol, rtol=rtol, msg=name)


def test_linear(dev):
    compare_module(nn.Linear(8, 5), (torch.randn(4, 8),), dev)


def test_conv2d(dev):
    compare_module(nn.Conv2d(3, 4, 3, padding=1), (torch.randn(2, 3, 8, 8),), dev, atol=1e-4)


def test_batchnorm2d_updates_running_stats(dev):
    compare_module(nn.BatchNorm2d(3), (torch.randn(4, 3, 5, 5),), dev, atol=1e-4)
    cpu = nn.BatchNorm2d(3)
    on_device = clone_to(cpu, dev)
    x = torch.randn(4, 3, 5, 5)
    cpu(x)
    on_device(x.to(dev))
    torch.testing.assert_close(on_device.running_mean.cpu(), cpu.running_mean)


def test_layernorm(dev):
    compare_module(nn.LayerNorm(16), (torch.randn(3, 7, 16),), dev, atol=1e-5)


def test_embedding(dev):
    compare_module(nn.Embedding(20, 6), (torch.randint(0, 20, (4, 5)),), dev)


def test_dropout_same_mask_under_seed(dev):
    compare_module(nn.Sequential(nn.Linear(10, 10), nn.Dropout(0.4)), (torch.randn(8, 10),), dev)


def test_multihead_attention(dev):
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16)
    compare_module(mha, (x, x, x), dev, atol=1e-5)


def test_lstm(dev):
    compare_module(nn.LSTM(6, 8, num_layers=2, batch_first=True), (torch.randn(3, 4, 6),), dev,
                   atol=1e-5)


def test_cross_entropy_and_mse_loss(dev):
    logits = torch.randn(6, 5, requires_grad=True)
    target = torch.randint(0, 5, (6,))
    logits_dev = logits.detach().to(dev).requires_grad_()
    F.cross_entropy(logits, target).backward()
    F.cross_entropy(logits_dev, target.to(dev)).backward()
    torch.testing.assert_close(logits_dev.grad.cpu(), logits.grad)
    pred = torch.randn(7, requires_grad=True)
    goal = torch.randn(7)
    pred_dev = pred.detach().to(dev).requires_grad_()
    F.mse_loss(pred, goal).backward()
    F.mse_loss(pred_dev, goal.to(dev)).backward()
    torch.testing.assert_close(pred_dev.grad.cpu(), pred.grad)


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc1 = nn.Linear(4 * 6 * 6, 32)
        self.ln = nn.LayerNorm(32)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(32, 3)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = self.drop(F.gelu(self.ln(self.fc1(x.flatten(1)))))
        return self.fc2(x)


OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.05),
}


def loss_curve(device, make_optimizer, steps=20):
    torch.manual_seed(0)
    model = SmallNet().to(device)
    optimizer = make_optimizer(model.parameters())
    data = torch.Generator().manual_seed(1)
    x = torch.randn(16, 1, 6, 6, generator=data)
    y = torch.randint(0, 3, (16,), generator=data)
    x, y = x.to(device), y.to(device)
    curve = []
    torch.manual_seed(2)
    for _ in range(steps):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        curve.append(loss.item())
    return curve


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_20_step_training_loss_curve_matches_cpu(dev, optimizer):
    on_device = loss_curve(dev, OPTIMIZERS[optimizer])
    on_cpu = loss_curve(torch.device("cpu"), OPTIMIZERS[optimizer])
    assert len(on_device) == 20
    assert on_device[-1] < on_device[0]  # it trains
    torch.testing.assert_close(torch.tensor(on_device), torch.tensor(on_cpu), atol=1e-4, rtol=1e-4)
