"""Long rows across threads (device/reduction_split.h): a reduction with one kept row of at
least 2^18 elements, of an op whose result is a function of its chunks' results, runs as two
compiled launches, the op over equal chunks of the row's outermost dimension into partial results
and a combining op over those.
Every result is checked against float64 on the CPU (the device accumulates sums in float64, so
it is closer to that than the CPU's float32 result), against the CPU within tolerance, and for
the same bits at 1 and 2 threads: the chunks depend on the row's length, not on the threads."""

import pytest
import torch
import torch.nn.functional as F
import torchneuron
from torch.testing import assert_close

from conftest import launched_since, launches_now

ROW = 1 << 20  # splits into 64 chunks of 16384


def values(n=ROW, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


# name: (program, inputs, the op's launch counter, relative tolerance against float64)
CASES = {
    "sum": (lambda x: x.sum(), [values()], "aten::sum", 1e-6),
    "mean": (lambda x: x.mean(), [values()], "aten::mean", 1e-6),
    "amax": (lambda x: x.amax(), [values()], "aten::amax", 0),
    "amin": (lambda x: x.amin(), [values()], "aten::amin", 0),
    "max": (lambda x: x.max(), [values()], "aten::max", 0),
    "prod": (lambda x: x.prod(), [1 + values() * 1e-4], "aten::prod", 1e-6),
    "int sum": (lambda x: x.sum(), [(values() * 50).to(torch.int32)], "aten::sum", 0),
    "bool sum": (lambda x: x.sum(), [values() > 0], "aten::sum", 0),
    "float64 sum": (lambda x: x.sum(), [values().double()], "aten::sum", 1e-12),
    "sum to float64": (lambda x: x.sum(dtype=torch.float64), [values()], "aten::sum", 1e-12),
    "2-D keepdim": (lambda x: x.view(1024, 1024).sum((0, 1), keepdim=True), [values()],
                    "aten::sum.dim_IntList", 1e-6),
    "strided": (lambda x: x[::2].sum(), [values(2 * ROW)], "aten::sum", 1e-6),
    # Reduced dimensions are walked in memory order: these merge into one contiguous row.
    "transposed": (lambda x: x.view(512, 2048).t().sum(), [values()], "aten::sum", 1e-6),
    "permuted": (lambda x: x.view(16, 256, 256).permute(2, 0, 1).mean(), [values()],
                 "aten::mean", 1e-6),
    # Dimensions that do not merge: the row is cut along its outermost one.
    "column slice": (lambda x: x.view(1024, 1024)[:, :1000].sum(), [values()], "aten::sum",
                     1e-6),
    "3-D slice": (lambda x: torch.linalg.vector_norm(x.view(64, 128, 128)[:, 1:, :100]),
                  [values()], "aten::linalg_vector_norm", 1e-6),
    "2-norm": (lambda x: torch.linalg.vector_norm(x), [values()], "aten::linalg_vector_norm",
               1e-6),
    "1-norm": (lambda x: torch.linalg.vector_norm(x, 1), [values()], "aten::linalg_vector_norm",
               1e-6),
    "inf-norm": (lambda x: torch.linalg.vector_norm(x, float("inf")), [values()],
                 "aten::linalg_vector_norm", 0),
    "-inf-norm": (lambda x: torch.linalg.vector_norm(x, float("-inf")), [values()],
                  "aten::linalg_vector_norm", 0),
    "0-norm": (lambda x: torch.linalg.vector_norm(x, 0), [torch.relu(values())],
               "aten::linalg_vector_norm", 0),
    "mse mean": (lambda a, b: F.mse_loss(a, b), [values(), values(seed=1)], "aten::mse_loss",
                 1e-6),
    "mse sum": (lambda a, b: F.mse_loss(a, b, reduction="sum"), [values(), values(seed=1)],
                "aten::mse_loss", 1e-6),
    "huber": (lambda a, b: F.huber_loss(a, b, delta=0.5), [values(), values(seed=1)],
              "aten::huber_loss", 1e-6),
    "smooth l1": (lambda a, b: F.smooth_l1_loss(a, b, beta=0.7, reduction="sum"),
                  [values(), values(seed=1)], "aten::smooth_l1_loss", 1e-6),
}


def on_device(program, inputs, dev, threads):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        result = program(*[t.to(dev) for t in inputs])
        torchneuron.synchronize()
        return result.cpu()
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("name", CASES.keys())
def test_a_long_row_runs_as_chunks_and_their_combination(dev, name):
    program, inputs, counter, tolerance = CASES[name]
    before = launches_now()
    got = on_device(program, inputs, dev, threads=2)
    launched = launched_since(before)
    assert launched["fallback"] == {} and launched["library"] == {}
    assert launched["compiled"] == {counter: 2}, launched  # the chunks, then their partials
    want = program(*inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    exact = program(*[t.double() if t.is_floating_point() else t for t in inputs])
    if tolerance == 0:
        assert torch.equal(got, want)
    else:
        assert_close(got.double(), exact.double(), rtol=tolerance, atol=0)
        # The CPU's own float32 result is further from float64: its product of 2^20 factors
        # near 1 by 6.5e-4.
        assert_close(got, want, rtol=1e-3, atol=1e-3)
    assert torch.equal(on_device(program, inputs, dev, threads=1), got)


def test_nan_and_infinity_reach_the_combined_result(dev):
    x = values()
    x[ROW // 3] = float("nan")
    for program in (lambda t: t.sum(), lambda t: t.amax(), lambda t: t.amin(),
                    lambda t: torch.linalg.vector_norm(t)):
        assert torch.isnan(on_device(program, [x], dev, threads=2))
    y = values()
    y[5], y[ROW - 7] = float("inf"), float("-inf")
    assert on_device(lambda t: t.amax(), [y], dev, threads=2) == float("inf")
    assert torch.isnan(on_device(lambda t: t.sum(), [y], dev, threads=2))  # inf + -inf


@pytest.mark.parametrize("n, view, why", [
    (2 * 1000003, None, "no divisor from 4 to 64: 2 x 1000003"),
    (1000003, None, "a prime"),
    ((1 << 18) - 64, None, "below the 2^18 elements a split needs"),
    (1031 * 1024, (1031, 1024), "a column slice whose outermost size, 1031, is a prime"),
])
def test_a_row_that_does_not_split_runs_in_one_launch(dev, n, view, why):
    x = values(n)
    program = (lambda t: t.sum()) if view is None else (lambda t: t.view(view)[:, :1000].sum())
    before = launches_now()
    got = on_device(program, [x], dev, threads=2)
    assert launched_since(before)["compiled"] == {"aten::sum": 1}, why
    assert_close(got.double(), program(x.double()), rtol=1e-6, atol=0)


def test_reductions_over_transposed_dimensions_walk_memory_in_order_and_keep_indices_logical(dev):
    x = values().view(64, 128, 128)
    x[5, 7, 9] = 100.0  # one maximum: its index is logical, whatever order the kernel walks
    t = x.permute(2, 0, 1)  # [128, 64, 128], strides (1, 16384, 128)
    d = x.to(dev).permute(2, 0, 1)
    # float32 blocks summed in f64: ATen's float32 cascade sum is off by up to 5.4e-5 here
    assert_close(d.sum((1, 2)).cpu().double(), t.double().sum((1, 2)), rtol=1e-6, atol=1e-4)
    assert_close(d.sum((0, 2)).cpu().double(), t.double().sum((0, 2)), rtol=1e-6, atol=1e-4)
    assert torch.equal(d.amax((0, 1)).cpu(), t.amax((0, 1)))
    assert torch.equal(d.argmax().cpu(), t.argmax())
    assert torch.equal(d.reshape(128, -1).argmax(1).cpu(), t.reshape(128, -1).argmax(1))
    assert torch.equal(d.max(2).indices.cpu(), t.max(2).indices)
    assert_close(torch.linalg.vector_norm(d, dim=(0, 2)).cpu().double(),
                 torch.linalg.vector_norm(t.double(), dim=(0, 2)), rtol=1e-6, atol=0)
    assert_close(d.var((1, 2)).cpu().double(), t.double().var((1, 2)), rtol=1e-5, atol=0)
    assert_close(torch.softmax(d, 1).cpu(), torch.softmax(t, 1), rtol=1e-5, atol=1e-7)


def test_a_norm_of_another_order_and_a_variance_do_not_split(dev):
    x = values()
    for program, counter in ((lambda t: torch.linalg.vector_norm(t, 3),
                              "aten::linalg_vector_norm"),
                             (lambda t: t.var(), "aten::var.correction")):
        before = launches_now()
        got = on_device(program, [x], dev, threads=2)
        assert launched_since(before)["compiled"] == {counter: 1}
        assert_close(got.double(), program(x.double()), rtol=1e-6, atol=0)


def test_an_out_tensor_gets_the_combined_result_and_nothing_else(dev):
    x = values()
    out = torch.full((), 7.0).to(dev)
    torch.sum(x.to(dev), dim=0, out=out)
    assert_close(out.cpu().double(), x.double().sum(), rtol=1e-6, atol=0)
    keep = torch.full((1, 1), 7.0).to(dev)
    torch.mean(x.view(1024, 1024).to(dev), dim=(0, 1), keepdim=True, out=keep)
    assert keep.shape == (1, 1)
    assert_close(keep.cpu().double(), x.double().mean().view(1, 1), rtol=1e-6, atol=0)


def test_gradients_of_split_reductions_match_the_cpu(dev):
    a, b = values(), values(seed=1)
    a_cpu, a_dev = a.clone().requires_grad_(), a.to(dev).requires_grad_()
    for t, other in ((a_cpu, b), (a_dev, b.to(dev))):
        (F.mse_loss(t, other) + t.mean() * 3 + torch.linalg.vector_norm(t)).backward()
    assert_close(a_dev.grad.cpu(), a_cpu.grad, rtol=1e-5, atol=1e-7)


def test_in_adaptive_mode_a_loss_fuses_its_prologue_into_the_chunks(dev):
    """((a - b) ** 2).mean(): the subtraction and the square run inside the chunks' kernel (the
    fused reduction), new inputs every step, each step equal to the CPU's."""
    previous = torchneuron.adaptive_enabled()
    torchneuron.set_adaptive(True)
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
    torchneuron.reset_metrics()
    try:
        for step in range(6):
            a, b = values(seed=2 * step), values(seed=2 * step + 1)
            got = ((a.to(dev) - b.to(dev)) ** 2).mean() * 0.5
            want = ((a.double() - b.double()) ** 2).mean() * 0.5
            assert_close(got.cpu().double(), want, rtol=1e-6, atol=0)
        metrics = torchneuron.metrics()["adaptive"]
        assert metrics["fused_reduction_runs"] >= 3, metrics
    finally:
        torchneuron.set_adaptive(previous)
