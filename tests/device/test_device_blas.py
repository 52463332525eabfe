"""The device's BLAS (device/device_blas.h): where the CPU has AVX-512 and ATen's OpenBLAS does not
run AVX-512 kernels, the device's products (mm, addmm, bmm, baddbmm, and the tracer's accumulating
products) call an OpenBLAS of the device's own with its SkylakeX kernels; NEURON_DEVICE_BLAS=aten
or set_device_blas("aten") keeps ATen's BLAS and the CPU's results bit for bit. Products are
checked against float64 products in every layout the direct path takes and hands back."""

import ctypes
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import torchneuron

OWN_LIBRARY = "/usr/lib/x86_64-linux-gnu/openblas64-openmp/libopenblas64.so.0"
AVX512 = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def atens_openblas_core():
    """The kernels of the OpenBLAS ATen calls, from its own report (None: not OpenBLAS)."""
    try:
        lib = ctypes.CDLL("libopenblas.so.0")
    except OSError:
        return None
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return lib.openblas_get_corename().decode()


def own_blas_expected():
    core = atens_openblas_core()
    return (AVX512 <= cpu_flags() and core not in ("SkylakeX", "Cooperlake", "SapphireRapids")
            and os.path.exists(OWN_LIBRARY))


@pytest.fixture
def blas():
    """Restores the process's choice (auto) after a test that changes it."""
    yield torchneuron.set_device_blas
    torchneuron.set_device_blas("auto")


def test_the_device_blas_is_the_one_the_cpu_and_atens_blas_call_for():
    info = torchneuron.device_blas()
    assert info == torchneuron.metrics()["blas"]
    assert info["reason"]
    if own_blas_expected():
        assert info["library"] == OWN_LIBRARY and info["core"] == "SkylakeX", info
    else:
        assert info["library"] == "aten" and info["core"] == "", info


def test_choosing_atens_blas_says_so_and_auto_chooses_again(blas):
    before = torchneuron.device_blas()
    blas("aten")
    info = torchneuron.device_blas()
    assert info["library"] == "aten" and "aten" in info["reason"]
    blas("auto")
    assert torchneuron.device_blas() == before


def test_an_unknown_blas_name_is_an_error_naming_it():
    with pytest.raises(ValueError, match="'mkl' is not a device BLAS"):
        torchneuron.set_device_blas("mkl")
    assert torchneuron.device_blas()["library"] in ("aten", OWN_LIBRARY)


def layouts(rows, cols, dtype, g):
    """Row-major, column-major, padded both ways, and both strides above 1 (ATen copies it)."""
    yield torch.randn(rows, cols, dtype=dtype, generator=g)
    yield torch.randn(cols, rows, dtype=dtype, generator=g).t()
    yield torch.randn(rows, cols + 3, dtype=dtype, generator=g)[:, :cols]
    yield torch.randn(cols + 2, rows, dtype=dtype, generator=g)[:cols].t()
    yield torch.randn(rows, cols * 2, dtype=dtype, generator=g)[:, ::2]


def assert_close_to_float64(got, want64, k):
    """Within float rounding of a k-term dot product (each term a product of unit normals)."""
    eps = torch.finfo(got.dtype).eps
    tolerance = 4 * eps * (k ** 0.5 + 1) * (want64.abs().max().item() + 1)
    error = (got.cpu().double() - want64).abs().max().item()
    assert error <= tolerance, (error, tolerance)


SIZES = [(1, 1, 1), (5, 3, 1), (33, 17, 31), (130, 300, 70), (257, 64, 129)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("m, k, n", SIZES, ids=["x".join(map(str, s)) for s in SIZES])
def test_mm_and_addmm_match_float64_products_in_every_layout(dev, dtype, m, k, n):
    g = torch.Generator().manual_seed(m + 7 * k + 13 * n)
    bias = torch.randn(n, dtype=dtype, generator=g)
    for a in layouts(m, k, dtype, g):
        for b in layouts(k, n, dtype, g):
            want = a.double() @ b.double()
            got = torch.mm(a.to(dev), b.to(dev))
            assert got.dtype == dtype and got.stride() == torch.mm(a, b).stride()
            assert_close_to_float64(got, want, k)
            got = torch.addmm(bias.to(dev), a.to(dev), b.to(dev), beta=0.5, alpha=-2)
            assert_close_to_float64(got, 0.5 * bias.double() - 2 * want, k)


BATCHED = [(3, 4, 5, 6), (4, 33, 17, 31), (6, 64, 48, 80)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("batches, m, k, n", BATCHED, ids=["x".join(map(str, s)) for s in BATCHED])
def test_bmm_and_baddbmm_match_float64_products_in_every_layout(dev, dtype, batches, m, k, n):
    g = torch.Generator().manual_seed(batches + m + 7 * k + 13 * n)
    a_layouts = [torch.randn(batches, m, k, dtype=dtype, generator=g),
                 torch.randn(batches, k, m, dtype=dtype, generator=g).transpose(1, 2),
                 torch.randn(m, batches, k, dtype=dtype, generator=g).transpose(0, 1),
                 torch.randn(batches, m, k * 2, dtype=dtype, generator=g)[..., ::2]]
    b_layouts = [torch.randn(batches, k, n, dtype=dtype, generator=g),
                 torch.randn(batches, n, k, dtype=dtype, generator=g).transpose(1, 2)]
    selves = [torch.randn(m, n, dtype=dtype, generator=g),
              torch.randn(batches, 1, n, dtype=dtype, generator=g),
              torch.full((batches, m, n), float("nan"), dtype=dtype)]
    for a in a_layouts:
        for b in b_layouts:
            want = a.double() @ b.double()
            assert_close_to_float64(torch.bmm(a.to(dev), b.to(dev)), want, k)
            for self in selves:
                for beta, alpha in ((1, 1), (0.5, -2), (0, 3)):
                    if beta != 0 and self.isnan().any():
                        continue
                    got = torch.baddbmm(self.to(dev), a.to(dev), b.to(dev), beta=beta, alpha=alpha)
                    # beta 0 ignores self, NaN included, as on the CPU
                    base = 0 if beta == 0 else beta * self.double()
                    assert_close_to_float64(got, base + alpha * want, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("batches, m, k, n", [(3, 4, 5, 6), (3, 20, 30, 40)], ids=["loops", "gemm"])
def test_baddbmm_with_beta_zero_ignores_what_its_new_output_held_before(dev, dtype, batches, m,
                                                                         k, n):
    """beta 0 ignores self, NaN included. ATen 1.13's loops for small products multiply the old
    output by beta anyway (torch.baddbmm(..., beta=0, out=a_nan_tensor) is NaN on the CPU), and a
    device output reuses freed memory: here memory that held NaN."""
    g = torch.Generator().manual_seed(8)
    a = torch.randn(batches, m, k, dtype=dtype, generator=g)
    b = torch.randn(batches, k, n, dtype=dtype, generator=g)
    self = torch.full((batches, m, n), float("nan"), dtype=dtype).to(dev)
    for _ in range(3):
        junk = torch.full((batches, m, n), float("nan"), dtype=dtype, device=dev)
        del junk
        got = torch.baddbmm(self, a.to(dev), b.to(dev), beta=0, alpha=2)
        assert not got.isnan().any()
        assert_close_to_float64(got, 2 * (a.double() @ b.double()), k)


def test_products_atens_blas_runs_equal_the_cpus_bit_for_bit(dev, blas):
    """With ATen's BLAS, the device makes ATen's own calls: the CPU's bits, bmm included."""
    blas("aten")
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(70, 300, generator=g), torch.randn(300, 90, generator=g)
    x, y = torch.randn(5, 40, 30, generator=g), torch.randn(5, 30, 50, generator=g)
    bias = torch.randn(90, generator=g)
    assert torch.equal(torch.mm(a.to(dev), b.to(dev)).cpu(), a @ b)
    assert torch.equal(torch.addmm(bias.to(dev), a.to(dev), b.to(dev)).cpu(),
                       torch.addmm(bias, a, b))
    assert torch.equal(torch.bmm(x.to(dev), y.to(dev)).cpu(), torch.bmm(x, y))
    assert torch.equal(torch.baddbmm(x.to(dev) @ y.to(dev), x.to(dev), y.to(dev), beta=0.5).cpu(),
                       torch.baddbmm(x @ y, x, y, beta=0.5))


def test_small_batched_products_run_atens_loops_with_either_blas(dev):
    """Fewer than 400 multiply-adds per batch: ATen's own loops, so the CPU's bits."""
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(50, 3, 4, generator=g), torch.randn(50, 4, 5, generator=g)
    assert torch.equal(torch.bmm(x.to(dev), y.to(dev)).cpu(), torch.bmm(x, y))


def test_products_have_the_same_bits_at_one_and_two_threads(dev):
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(300, 256, generator=g), torch.randn(256, 200, generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = torch.mm(a.to(dev), b.to(dev)).cpu()
        torch.set_num_threads(2)
        two = torch.mm(a.to(dev), b.to(dev)).cpu()
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    assert_close_to_float64(one, a.double() @ b.double(), 256)


def test_a_linear_layers_training_gradients_match_the_cpus(dev):
    torch.manual_seed(6)
    layer = torch.nn.Linear(96, 48)
    layer_dev = torch.nn.Linear(96, 48).to(dev)
    layer_dev.load_state_dict(layer.state_dict())
    x = torch.randn(64, 96)
    for module, inputs in ((layer, x), (layer_dev, x.to(dev))):
        F.mse_loss(module(inputs), torch.ones(64, 48, device=inputs.device)).backward()
    for p, p_dev in zip(layer.parameters(), layer_dev.parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)


def test_adaptive_products_and_accumulating_gradients_match_the_cpus(dev):
    """Products recorded in hot windows (host steps, and gradients accumulated into by gemm)."""
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 8))
    model_dev = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(),
                                    torch.nn.Linear(128, 8)).to(dev)
    model_dev.load_state_dict(model.state_dict())
    x = torch.randn(32, 64)
    with torchneuron.adaptive():
        for _ in range(5):  # gradients accumulate across steps (no zero_grad)
            model_dev(x.to(dev)).pow(2).mean().backward()
        torchneuron.synchronize()
    for _ in range(5):
        model(x).pow(2).mean().backward()
    for p, p_dev in zip(model.parameters(), model_dev.parameters()):
        torch.testing.assert_close(p_dev.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5)


def test_a_forked_child_runs_products_on_one_thread_and_exits(dev):
    """libgomp's team does not survive fork(): the child's products must not wait for it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = torch.randn(512, 512)
        (a.to(dev) @ a.to(dev)).cpu()  # the parent's team exists
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                got = (a.to(dev) @ a.to(dev)).cpu()
                ok = bool(torch.allclose(got, a @ a, rtol=1e-4, atol=1e-3))
            finally:
                os.write(write_end, b"ok" if ok else b"wrong")
                os._exit(0)
        os.close(write_end)
        _, status = os.waitpid(pid, 0)
        report = os.read(read_end, 16)
        os.close(read_end)
        assert status == 0 and report == b"ok", report
    finally:
        torch.set_num_threads(threads)


def run_python(program, **env):
    environment = dict(os.environ, **env)
    done = subprocess.run([sys.executable, "-c", program], env=environment, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_neuron_device_blas_aten_keeps_atens_blas_and_the_cpus_bits():
    program = (
        "import torch, torchneuron\n"
        "d = torchneuron.device()\n"
        "a, b = torch.randn(200, 300), torch.randn(300, 100)\n"
        "print(torchneuron.device_blas()['library'], "
        "torch.equal(torch.mm(a.to(d), b.to(d)).cpu(), a @ b))\n")
    assert run_python(program, NEURON_DEVICE_BLAS="aten") == "aten True"


def test_the_process_environment_is_left_as_it_was():
    """OPENBLAS_CORETYPE is set only for the device BLAS's load: a user's value survives it,
    and none is left behind."""
    program = ("import os, torch, torchneuron\n"
               "print(os.environ.get('OPENBLAS_CORETYPE', '-'), "
               "os.popen('echo ${OPENBLAS_CORETYPE:--}').read().strip())\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["-", "-"]
    assert run_python(program, OPENBLAS_CORETYPE="Haswell") == "Haswell Haswell"
