"""Memory of ATen's CPU kernels run for the device (src/device/host_kernel_allocator.h): library
and fallback ops allocate their results and scratch from the device's caching allocator, so a
repeated op faults in no fresh pages, its result becomes the device tensor without a copy, and
nothing is left allocated after it; CPU tensors made anywhere else are untouched."""

import resource

import torch
import torch.nn.functional as F
import torchneuron

from conftest import assert_same


def minor_faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_a_library_ops_result_is_its_kernels_block_not_a_copy(dev):
    x = torch.randn(8, 16, 64, 64)
    d = x.to(dev)
    F.avg_pool2d(d, 2)  # the kernel's first call may allocate what it keeps
    before = torchneuron.memory_stats()["allocations"]
    y = F.avg_pool2d(d, 2)
    # One allocation: the CPU kernel's output, handed to the device tensor (a copy would be a
    # second one).
    assert torchneuron.memory_stats()["allocations"] - before == 1
    assert_same(y, F.avg_pool2d(x, 2))


def test_a_library_ops_list_of_results_are_its_kernels_blocks_not_copies(dev):
    xs = [torch.rand(300 + k, 70) for k in range(5)]
    ds = [x.to(dev) for x in xs]
    torch._foreach_sqrt(ds)
    before = torchneuron.memory_stats()["allocations"]
    ys = torch._foreach_sqrt(ds)
    # One allocation per result (a copy into device memory would be a second each).
    assert torchneuron.memory_stats()["allocations"] - before == len(xs)
    for y, x in zip(ys, xs):
        assert_same(y, torch.sqrt(x))


def test_repeated_library_ops_fault_in_no_fresh_pages(dev):
    x = torch.randn(16, 64, 64, 64, requires_grad=True)  # 16 MiB
    d = x.detach().to(dev).requires_grad_()

    def step(t):
        out, _ = F.max_pool2d(t, 2, return_indices=True)
        out.sum().backward()
        return out

    for _ in range(3):
        step(d)
    faults = minor_faults()
    for _ in range(5):
        out = step(d)
    faults = minor_faults() - faults
    # Fresh memory for the 4 MiB output, its indices (8 MiB) and the 16 MiB gradient faults in
    # about 4,700 pages a step (23,572 in 5 steps measured with fresh memory); with cached blocks
    # about 200 a step remain (Python objects, the C library's small heap).
    assert faults < 5000, f"{faults} minor page faults in 5 steps"
    assert_same(out, F.max_pool2d(x, 2))


def test_nothing_stays_allocated_after_library_and_fallback_ops(dev):
    torchneuron.empty_cache()
    base = torchneuron.memory_allocated()
    conv = torch.nn.Conv2d(3, 8, 3).to(dev)
    x = torch.randn(4, 3, 32, 32).to(dev).requires_grad_()
    for _ in range(3):
        y = conv(x)
        F.relu(y).sum().backward()
        torch.topk(y.flatten(), 5)
    del conv, x, y
    assert torchneuron.memory_allocated() == base


def test_cpu_tensors_outside_device_ops_do_not_use_device_memory(dev):
    d = torch.randn(1000).to(dev)
    torch.topk(d, 3)
    stats = torchneuron.memory_stats()
    cpu = torch.randn(1 << 20) * 2 + 1  # CPU kernels on CPU tensors
    assert torchneuron.memory_stats()["allocations"] == stats["allocations"]
    assert torchneuron.memory_allocated() == stats["allocated_bytes"]
    assert cpu.device.type == "cpu"


def test_a_convolution_through_onednn_matches_the_cpu(dev):
    """oneDNN allocates its buffers with the CPU allocator's raw interface, which needs a
    DataPtr whose context is its data pointer: lent blocks keep that."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 32, 3, padding=1)
    x = torch.randn(8, 16, 28, 28, requires_grad=True)
    dev_conv = torch.nn.Conv2d(16, 32, 3, padding=1).to(dev)
    dev_conv.load_state_dict(conv.state_dict())
    dx = x.detach().to(dev).requires_grad_()
    conv(x).square().sum().backward()
    dev_conv(dx).square().sum().backward()
    assert_same(dx.grad, x.grad, rtol=1e-4, atol=1e-4)
    assert_same(dev_conv.weight.grad, conv.weight.grad, rtol=1e-4, atol=1e-3)
