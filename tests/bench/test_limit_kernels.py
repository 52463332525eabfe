"""The limit loops of make bench (bench/limit/limit_kernels.h, docs/benchmarks.md) compute what
the workloads' steps compute: each loop runs on a workload's own CPU state (bench/workloads.py,
at the report's shape and at odd ones that leave vector tails and uneven thread splits) and must
match the step run by PyTorch within the tolerance the harness checks devices with. Also: the
loops call glibc's vector math, loading the library leaves the process's float mode alone, and
every limit benchmark is named after a workload."""
import ctypes
import os
import re
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from workloads import (GeluMlpInference, LayerNormResidual, Softmax, TanhGelu,  # noqa: E402
                       VariableLengthLoop, all_workloads, tanh_gelu)

BUILD = os.environ.get("NEURON_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
LIBRARY = os.path.join(BUILD, "bench", "libneuron_limit_kernels.so")
MICRO_BENCH = os.path.join(BUILD, "bench", "neuron_micro_bench")
THREADS = (1, 2)


@pytest.fixture(scope="module")
def limit():
    assert os.path.exists(LIBRARY), f"{LIBRARY} is missing: build the project first"
    lib = ctypes.CDLL(LIBRARY)
    p, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
    lib.neuron_limit_gelu_tanh_accumulate.argtypes = [p, p, i64, i32]
    lib.neuron_limit_layer_norm_residual.argtypes = [p, p, p, p, p, i64, i64, f32, i32]
    lib.neuron_limit_softmax.argtypes = [p, p, i64, i64, i32]
    lib.neuron_limit_gelu_mlp.argtypes = [p, p, p, i64, i64, i64, p, p, i32]
    lib.neuron_limit_varlen_step.argtypes = [p, p, p, p, p, p, i64, i64, i32]
    lib.neuron_limit_max_pool2x2.argtypes = [p, p, p, i64, i64, i64, i32]
    lib.neuron_limit_batch_norm.argtypes = [p, p, p, p, p, p, i64, i64, i64, f32, i32]
    lib.neuron_limit_batch_norm_backward.argtypes = [p, p, p, p, p, p, p, p, i64, i64, i64, i32]
    return lib


def ptr(t):
    assert t.is_contiguous() and t.dtype == torch.float32
    return ctypes.c_void_p(t.data_ptr())


def close(workload, actual, expected):
    torch.testing.assert_close(actual, expected, rtol=workload.tolerance, atol=workload.tolerance)


def reference_and_state(workload, steps):
    """The workload's state after `steps` of its own step on the CPU, and a fresh state."""
    torch.set_num_threads(1)
    reference = workload.build(torch.device("cpu"))
    for _ in range(steps):
        workload.step(reference)
    return reference, workload.build(torch.device("cpu"))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("elements", [1 << 10, 1 << 16, 1 << 20, 1003, 65537])
def test_gelu_tanh_accumulates_the_steps(limit, elements, threads):
    workload = TanhGelu(elements, str(elements))
    reference, state = reference_and_state(workload, steps=2)
    for _ in range(2):
        limit.neuron_limit_gelu_tanh_accumulate(ptr(state["x"]), ptr(state["sum"]), elements, threads)
    close(workload, state["sum"], reference["sum"])


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape", [(32, 128, 768), (5, 7, 100), (1001, 100)])
def test_layer_norm_residual_is_the_step(limit, shape, threads):
    workload = LayerNormResidual(shape)
    reference, state = reference_and_state(workload, steps=1)
    out = torch.empty(shape)
    rows = out.numel() // shape[-1]
    limit.neuron_limit_layer_norm_residual(ptr(state["x"]), ptr(state["r"]), ptr(state["w"]),
                                           ptr(state["b"]), ptr(out), rows, shape[-1], 1e-5, threads)
    close(workload, out, reference["x"])


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape", [(8, 12, 128, 128), (7, 33), (2001, 33)])
def test_softmax_is_the_step(limit, shape, threads):
    workload = Softmax(shape)
    reference, state = reference_and_state(workload, steps=1)
    out = torch.empty(shape)
    limit.neuron_limit_softmax(ptr(state["x"]), ptr(out), out.numel() // shape[-1], shape[-1], threads)
    close(workload, out, reference["x"])


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("layers,batch,width", [(3, 64, 1024), (2, 5, 40), (1, 3, 8), (4, 130, 512)])
def test_gelu_mlp_accumulates_the_steps(limit, layers, batch, width, threads):
    workload = GeluMlpInference(layers, batch, width)
    reference, state = reference_and_state(workload, steps=2)
    linears = list(state["model"])
    weights = (ctypes.c_void_p * layers)(*(l.weight.data_ptr() for l in linears))
    biases = (ctypes.c_void_p * layers)(*(l.bias.data_ptr() for l in linears))
    hidden = torch.empty(2 * batch * width)
    for _ in range(2):
        limit.neuron_limit_gelu_mlp(ptr(state["x"]), weights, biases, layers, batch, width,
                                    ptr(hidden), ptr(state["sum"]), threads)
    close(workload, state["sum"], reference["sum"])


@pytest.mark.parametrize("threads", THREADS)
def test_varlen_step_sums_what_the_workload_sums(limit, threads):
    # Every length of the workload in turn, twice (steps 20-39 read the same inputs again).
    workload = VariableLengthLoop()
    steps = 2 * len(workload.lengths)
    reference, state = reference_and_state(workload, steps)
    width = state["w"].shape[1]
    hidden = torch.empty(4 * max(workload.lengths) * width)
    y = torch.empty(4 * max(workload.lengths))
    for i in range(steps):
        x = state["xs"][i % len(state["xs"])]
        rows = x.numel() // width
        limit.neuron_limit_varlen_step(ptr(x), ptr(state["w"]), ptr(state["b"]), ptr(hidden),
                                       ptr(y), ptr(state["sum"]), rows, width, threads)
        expected = (tanh_gelu(x @ state["w"]) + state["b"]).sum(-1)
        close(workload, y[:rows].view(expected.shape), expected)
    close(workload, state["sum"], reference["sum"])


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape", [(64, 64, 24, 24), (3, 5, 7, 9), (2, 1, 2, 34), (1, 600, 8, 8)])
def test_max_pool_is_the_cpus_max_pool2d_with_indices(limit, shape, threads):
    """bench/max_pool.py's limit: maxima and indices exactly as ATen's (ties included)."""
    x = torch.randn(*shape)
    x[..., ::3, ::2] = 0.5  # equal maxima in some windows: the first one's index
    n, c, h, w = shape
    out = torch.empty(n, c, h // 2, w // 2)
    indices = torch.empty(out.shape, dtype=torch.long)
    limit.neuron_limit_max_pool2x2(ptr(x), ptr(out), ctypes.c_void_p(indices.data_ptr()), n * c,
                                   h, w, threads)
    values, expected_indices = torch.nn.functional.max_pool2d(x, 2, return_indices=True)
    assert torch.equal(out, values) and torch.equal(indices, expected_indices)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape", [(16, 64, 14, 14), (3, 5, 7, 9), (64, 3, 1, 1)])
def test_batch_norm_is_the_cpus_native_batch_norm_and_its_backward(limit, shape, threads):
    """bench/batch_norm.py's limit: the training forward and backward as ATen's."""
    n, c, h, w = shape
    x, dy = torch.randn(*shape) * 2 + 1, torch.randn(*shape)
    weight, bias = torch.randn(c), torch.randn(c)
    out, mean, invstd = torch.empty(shape), torch.empty(c), torch.empty(c)
    limit.neuron_limit_batch_norm(ptr(x), ptr(weight), ptr(bias), ptr(out), ptr(mean),
                                  ptr(invstd), n, c, h * w, 1e-5, threads)
    expected = torch.native_batch_norm(x, weight, bias, None, None, True, 0.1, 1e-5)
    for got, want in zip((out, mean, invstd), expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5)
    dx, grad_weight, grad_bias = torch.empty(shape), torch.empty(c), torch.empty(c)
    limit.neuron_limit_batch_norm_backward(ptr(dy), ptr(x), ptr(mean), ptr(invstd), ptr(weight),
                                           ptr(dx), ptr(grad_weight), ptr(grad_bias), n, c,
                                           h * w, threads)
    expected = torch.ops.aten.native_batch_norm_backward(dy, x, weight, None, None, mean, invstd,
                                                         True, 1e-5, [True, True, True])
    for got, want in zip((dx, grad_weight, grad_bias), expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_loops_call_vector_math_and_leave_the_float_mode_alone(limit):
    """The limit is only a limit if tanhf and expf run as libmvec's vector variants; and a
    library linked with -ffast-math would set flush-to-zero for the whole process at load."""
    with open(LIBRARY, "rb") as f:
        image = f.read()
    for function in (b"tanhf", b"expf"):
        assert re.search(rb"_ZGV[bcde]N(4|8|16)v_" + function, image), \
            f"{LIBRARY} calls no vector {function.decode()}"
    assert (torch.tensor([1e-38]) / 100).item() != 0, "denormals flushed after loading the library"


def test_every_limit_benchmark_names_a_workload():
    listed = subprocess.run([MICRO_BENCH, "--benchmark_list_tests", "--benchmark_filter=BM_Limit"],
                            capture_output=True, text=True, check=True).stdout.split()
    names = {re.match(r"BM_Limit/(.+?)/threads:(\d+)(/iterations:\d+)?/real_time$", n).group(1)
             for n in listed}
    assert names == {"gelu-tanh-1K", "gelu-tanh-64K", "gelu-tanh-1M", "gelu-tanh-16M",
                     "layernorm-residual", "softmax", "inference-gelu-mlp", "varlen-loop"}
    assert names <= {w.name for w in all_workloads()}
    assert {re.search(r"threads:(\d+)", n).group(1) for n in listed} == {"1", "2"}
