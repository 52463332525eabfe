"""Special functions, matrix factorizations and solvers, Fourier transforms, integer division and
the other ops PyTorch's OpInfos found on the fallback run ATen's CPU kernels on device memory as
library ops (op_routing.cpp: kSpecialFunctionOps, kFactorizationOps, kRemainingLibraryOps, and
the integer calls of div/floor_divide/remainder/fmod): the CPU's results, bit for bit, no fallback
launch and so no fallback warning, in eager and in adaptive mode, where their inputs may be
pending results of the window (x * 1 below). Complex math keeps the fallback (test_fallback.py)."""
import copy

import pytest
import torch
import torch.nn.functional as F
import torchneuron

from conftest import assert_same


def assert_all_same(actual, expected):
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_all_same(a, e)
    elif isinstance(expected, torch.Tensor):
        assert actual.device == torchneuron.device()
        assert_same(actual, expected, equal_nan=True)
    else:
        assert actual == expected


def special_function_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(40, generator=g) * 4 + 0.1  # in every function's domain
    u = torch.rand(40, generator=g) * 0.98 + 0.01  # in (0, 1)
    s = torch.randn(40, generator=g) * 3
    s[:4] = torch.tensor([float("inf"), -float("inf"), float("nan"), 0.0])
    n = torch.arange(40) % 5
    return {
        "lgamma": (lambda x: torch.lgamma(x * 1), (s,)),
        "digamma": (lambda x: torch.digamma(x * 1), (x,)),
        "polygamma": (lambda x: torch.polygamma(2, x * 1), (x,)),
        "mvlgamma": (lambda x: torch.mvlgamma(x * 1 + 2, 3), (x,)),
        "erfinv": (lambda u: torch.erfinv(u * 2 - 1), (u,)),
        "i0": (lambda x: torch.i0(x * 1), (s,)),
        "i0e i1 i1e": (lambda x: (torch.special.i0e(x * 1), torch.special.i1(x * 1),
                                  torch.special.i1e(x * 1)), (s,)),
        "logit": (lambda u: torch.logit(u * 1, eps=0.05), (u,)),
        "sinc": (lambda x: torch.sinc(x * 1), (s,)),
        "igamma igammac": (lambda x, u: (torch.igamma(x * 1, u), torch.igammac(x * 1, u)), (x, u)),
        "nextafter": (lambda x, s: torch.nextafter(x * 1, s), (x, s)),
        "heaviside": (lambda s: torch.heaviside(s * 1, torch.tensor(0.5, device=s.device)), (s,)),
        "frexp": (lambda s: torch.frexp(s * 1), (s,)),
        "isposinf isneginf": (lambda s: (torch.isposinf(s * 1), torch.isneginf(s * 1)), (s,)),
        "logaddexp2": (lambda x, s: torch.logaddexp2(x * 1, s), (x, s)),
        "round decimals": (lambda s: torch.round(s * 1, decimals=2), (s,)),
        "entr erfcx": (lambda s: (torch.special.entr(s * 1), torch.special.erfcx(s * 1)), (s,)),
        "log_ndtr ndtri": (lambda s, u: (torch.special.log_ndtr(s * 1), torch.special.ndtri(u * 1)),
                           (s, u)),
        "xlog1py zeta": (lambda x, s: (torch.special.xlog1py(s * 1, x), torch.special.zeta(x + 1, x)),
                         (x, s)),
        "bessel and airy": (lambda s: (torch.special.bessel_j0(s * 1), torch.special.bessel_y1(
            s.abs() + 0.1), torch.special.airy_ai(s * 1), torch.special.modified_bessel_k0(
                s.abs() + 0.1)), (s,)),
        "polynomials": (lambda u, n: (torch.special.chebyshev_polynomial_t(u * 1, n),
                                      torch.special.hermite_polynomial_h(u * 1, n),
                                      torch.special.legendre_polynomial_p(u * 1, n)), (u, n)),
    }


def factorization_cases():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(6, 6, generator=g, dtype=torch.float64)
    spd = a @ a.T + 6 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, 3, generator=g, dtype=torch.float64)
    tall = torch.randn(9, 4, generator=g, dtype=torch.float64)
    v = torch.randn(4, 3, generator=g)
    return {
        "svd": (lambda a: torch.linalg.svd(a * 1), (a,)),
        "qr": (lambda a: torch.linalg.qr(a * 1), (tall,)),
        "eigh": (lambda s: torch.linalg.eigh(s * 1), (spd,)),
        "eig": (lambda a: torch.linalg.eig(a * 1), (a,)),
        "cholesky and its solve": (lambda s, b: torch.cholesky_solve(
            b * 1, torch.linalg.cholesky(s * 1)), (spd, b)),
        "cholesky_inverse": (lambda s: torch.cholesky_inverse(torch.linalg.cholesky(s * 1)), (spd,)),
        "inv": (lambda a: torch.linalg.inv(a * 1), (a,)),
        "solve": (lambda a, b: torch.linalg.solve(a * 1, b), (a, b)),
        "det slogdet": (lambda a: (torch.linalg.det(a * 1), torch.linalg.slogdet(a * 1)), (a,)),
        "lu_factor lu_solve": (lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a * 1), b),
                               (a, b)),
        "lu": (lambda a: torch.linalg.lu(a * 1), (a,)),
        "solve_triangular": (lambda a, b: torch.linalg.solve_triangular(
            a.triu() + 6 * torch.eye(6, dtype=a.dtype, device=a.device), b * 1, upper=True),
            (a, b)),
        "lstsq": (lambda t, b: torch.linalg.lstsq(t * 1, b[:, :2].repeat(2, 1)[:9]).solution,
                  (tall, b)),
        "ldl": (lambda s, b: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(s * 1), b), (spd, b)),
        "householder_product": (lambda t: torch.linalg.householder_product(
            *torch.geqrf(t * 1)), (tall,)),
        "matrix_exp": (lambda a: torch.linalg.matrix_exp(a * 0.1), (a,)),
        "cross": (lambda v: torch.linalg.cross(v * 1, v.flip(0)), (v,)),
        "pinv matrix_rank cond": (lambda t: (torch.linalg.pinv(t * 1), torch.linalg.matrix_rank(
            t * 1), torch.linalg.cond(t * 1)), (tall,)),
    }


def remaining_cases():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, 16, generator=g)
    x_nan = x.clone()
    x_nan[::3, ::5] = float("nan")
    t = torch.randint(0, 3, (24,), generator=g)
    return {
        "rfft irfft": (lambda x: torch.fft.irfft(torch.fft.rfft(x * 1), n=16), (x,)),
        "fft as real": (lambda x: torch.view_as_real(torch.fft.fft(x * 1)), (x,)),
        "equal": (lambda x: (torch.equal(x * 1, x), torch.equal(x * 1, x + 1)), (x,)),
        "nansum nanmedian": (lambda x: (torch.nansum(x * 1, 1), torch.nanmedian(x * 1, 1),
                                        torch.nanmedian(x * 1)), (x_nan,)),
        "median": (lambda x: torch.median(x * 1), (x,)),
        "histogram": (lambda x: torch.histogram(x * 1, bins=5), (x,)),
        "unique_consecutive": (lambda t: torch.unique_consecutive(t * 1, return_counts=True), (t,)),
        "unique dim": (lambda t: torch.unique(t.view(8, 3) * 1, dim=0, return_inverse=True), (t,)),
        "diag": (lambda x: (torch.diag(x[0] * 1), torch.diag(x * 1, 2)), (x,)),
        "angle": (lambda x: torch.angle(x * 1), (x,)),
        "complex": (lambda x: torch.view_as_real(torch.complex(x * 1, x.flip(0))), (x,)),
        "renorm": (lambda x: torch.renorm(x * 1, 2, 0, 1.5), (x,)),
        "segment_reduce": (lambda x: torch.segment_reduce(
            x[0] * 1, "max", lengths=torch.tensor([3, 0, 13], device=x.device)), (x,)),
    }


def script_op_cases():
    g = torch.Generator().manual_seed(5)
    image = torch.randn(2, 8, 6, 6, generator=g)
    table = torch.randn(10, 4, generator=g) * 3
    index = torch.randint(0, 6, (2, 8, 6, 6), generator=g)
    return {
        "interpolate nearest-exact": (lambda i: F.interpolate(i * 1, scale_factor=1.5,
                                                              mode="nearest-exact"), (image,)),
        "interpolate antialiased": (lambda i: (F.interpolate(i * 1, size=(4, 3), mode="bilinear",
                                                             antialias=True),
                                               F.interpolate(i * 1, size=(3, 4), mode="bicubic",
                                                             antialias=True)), (image,)),
        "channel_shuffle": (lambda i: F.channel_shuffle(i * 1, 4), (image,)),
        "embedding max_norm": (lambda t: (F.embedding(torch.tensor([1, 3, 1], device=t.device),
                                                       t, max_norm=1.0), t), (table * 1,)),
        "isin bucketize searchsorted with numbers": (lambda t: (
            torch.isin(t * 1, 0.5), torch.bucketize(0.25, t.sort().values),
            torch.searchsorted(t.sort().values, 0.25)), (table[0],)),
        "out= of library ops": (lambda i, x: (
            torch.gather(i * 1, 2, x, out=torch.empty_like(i)),
            torch.index_select(i * 1, 1, x[0, 0, 0], out=torch.empty(0, device=i.device)),
            torch.take(i * 1, x[0, 0], out=torch.empty(0, device=i.device)),
            torch.range(1, 4, out=torch.empty(4, device=i.device))), (image, index)),
        "scatter_ with reduce": (lambda i, x: (i * 1).scatter_(2, x, 2.0, reduce="multiply"),
                                 (image, index)),
    }


def reduced_precision_cases():
    """Half and bfloat16 calls the compiled kernels leave to ATen, which rounds their steps to the
    narrow dtype (reduced_precision_calls.h): ATen's kernels as library calls, the CPU's bits."""
    g = torch.Generator().manual_seed(6)
    rows = torch.randn(6, 96, generator=g)
    cases = {}
    for dtype in (torch.bfloat16, torch.float16):
        r = rows.to(dtype)
        name = str(dtype).replace("torch.", "")
        cases[f"{name} reductions"] = (lambda r: (
            (r * 1).sum(-1), (r * 1).mean(0), (r * 1).var(-1), (r * 1).norm(dim=-1),
            (r * 1).float().sum(-1, dtype=r.dtype)), (r,))
        cases[f"{name} floor_divide remainder"] = (lambda r: ((r * 1) // 0.3, (r * 1) % 0.7,
                                                              torch.fmod(r * 1, r.flip(1))), (r,))
    # PyTorch 1.13's CPU has no half softmax, logsumexp or layer norm.
    r = rows.to(torch.bfloat16)
    cases["bfloat16 softmax logsumexp layer_norm"] = (lambda r: (
        (r * 1).softmax(-1), (r * 1).log_softmax(0), torch.logsumexp(r * 1, -1),
        F.layer_norm(r * 1, (96,), torch.ones(96, dtype=r.dtype, device=r.device))), (r,))
    return cases


def integer_cases():
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-50, 50, (32,), generator=g)
    b = torch.randint(1, 9, (32,), generator=g) * torch.where(torch.arange(32) % 2 == 0, 1, -1)
    small = torch.randint(-100, 100, (32,), generator=g, dtype=torch.int8)
    return {
        "floor_divide": (lambda a, b: (a * 1) // b, (a, b)),
        "remainder": (lambda a, b: (a * 1) % b, (a, b)),
        "fmod": (lambda a, b: torch.fmod(a * 1, b), (a, b)),
        "div trunc floor": (lambda a, b: (torch.div(a * 1, b, rounding_mode="trunc"),
                                          torch.div(a * 1, 3, rounding_mode="floor")), (a, b)),
        "in place and out=": (lambda a, b: ((a * 1).floor_divide_(b), (a * 1).remainder_(7),
                                            torch.fmod(a * 1, b, out=torch.empty_like(a))), (a, b)),
        "int8 and number dividends": (lambda s: (s * 1 // 7, 100 % (s.abs() * 1 + 1)), (small,)),
        "gcd lcm": (lambda a, b: (torch.gcd(a * 1, b), torch.lcm(a * 1, b)), (a, b)),
        "shifts": (lambda a, b: ((a * 1) << 3, (a * 1) >> b.abs(), torch.bitwise_left_shift(
            a * 1, b.abs())), (a, b)),
    }


ALL_CASES = {**special_function_cases(), **factorization_cases(), **remaining_cases(),
             **script_op_cases(), **reduced_precision_cases(), **integer_cases()}


@pytest.mark.filterwarnings("ignore:torch.range is deprecated")
@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("name", list(ALL_CASES))
def test_library_math_ops_give_the_cpus_results_without_the_fallback(name, adaptive):
    """In adaptive mode every call is recorded (however small), and each case runs three times,
    so its window recurs and replays; windows that never recurred would get their first op's site
    pinned to op-by-op execution for the rest of the process, other test files' windows
    included."""
    dev = torchneuron.device()
    op, args = ALL_CASES[name]
    expected = op(*args)
    min_bytes = torchneuron.adaptive_min_bytes()
    torchneuron.set_adaptive_min_bytes(0)
    try:
        with torchneuron.adaptive(adaptive):
            for _ in range(3 if adaptive else 1):
                torchneuron.reset_metrics()
                actual = op(*[a.to(dev) for a in args])
                torchneuron.synchronize()
                launches = torchneuron.metrics()["launches"]
                assert launches["fallback"] == 0, torchneuron.metrics()["ops"]["fallback"]
                assert launches["library"] >= 1
                assert_all_same(actual, expected)
    finally:
        torchneuron.set_adaptive_min_bytes(min_bytes)


@pytest.mark.parametrize("adaptive", [False, True])
def test_integer_division_by_zero_raises_at_its_call_and_changes_nothing(adaptive):
    dev = torchneuron.device()
    a = torch.tensor([5, -6, 7]).to(dev)
    zero = torch.tensor([1, 0, 2]).to(dev)
    with torchneuron.adaptive(adaptive):
        for divide in (lambda a, b: a // b, lambda a, b: a % b, lambda a, b: torch.fmod(a, b),
                       lambda a, b: torch.div(a, b, rounding_mode="floor"),
                       lambda a, b: a.floor_divide_(b), lambda a, b: a // 0):
            pending = a * 1
            with pytest.raises(RuntimeError, match="ZeroDivisionError"):
                divide(pending, zero)
            assert pending.cpu().tolist() == [5, -6, 7]


def test_library_math_ops_keep_autograd():
    """Backward through the library ops: logit's own backward kernel, unfold's and the
    factorizations' composite formulas, embedding_bag's per-sample-weights backward, exact
    nearest and antialiased resampling's backward kernels."""
    dev = torchneuron.device()
    g = torch.Generator().manual_seed(4)
    u = torch.rand(30, generator=g) * 0.9 + 0.05
    a = torch.randn(5, 5, generator=g, dtype=torch.float64)
    w = torch.randn(10, 4, generator=g)
    bag = torch.randint(0, 10, (12,), generator=g)
    weights = torch.rand(12, generator=g)
    image = torch.randn(1, 2, 5, 5, generator=g)

    def losses(u, a, w, weights, image):
        unfolded = u.unfold(0, 4, 2)
        offsets = torch.tensor([0, 5], device=u.device)
        return (torch.logit(u, eps=0.01).sum() + (unfolded * unfolded).sum(),
                torch.linalg.det(a) + torch.linalg.svdvals(a).sum() + torch.linalg.inv(a).sum(),
                F.embedding_bag(bag.to(u.device), w, offsets, mode="sum",
                                per_sample_weights=weights).sum(),
                (F.interpolate(image, scale_factor=1.7, mode="nearest-exact") ** 2).sum() +
                (F.interpolate(image, size=(3, 2), mode="bilinear", antialias=True) ** 2).sum())

    def gradients(device):
        leaves = [t.to(device, copy=True).requires_grad_() for t in (u, a, w, weights, image)]
        for loss in losses(*leaves):
            loss.backward()
        return [leaf.grad for leaf in leaves]

    expected = gradients("cpu")
    torchneuron.reset_metrics()
    actual = gradients(dev)
    assert torchneuron.metrics()["launches"]["fallback"] == 0, \
        torchneuron.metrics()["ops"]["fallback"]
    for got, want in zip(actual, expected):
        assert_same(got, want)


@pytest.mark.parametrize("adaptive", [False, True])
def test_a_bfloat16_training_step_needs_no_fallback(adaptive):
    """A bfloat16 model's step: the broadcast bias gradients are bfloat16 sums, layer norm and
    softmax run in bfloat16; every call the compiled kernels leave to ATen is a library call, and
    the gradients are the CPU's bits."""
    dev = torchneuron.device()
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(),
                                torch.nn.Linear(64, 10)).to(torch.bfloat16)
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    target = torch.randint(0, 10, (16,))

    def gradients(model, device):
        model = copy.deepcopy(model).to(device)
        loss = F.cross_entropy(model(x.to(device)), target.to(device))
        loss.backward()
        return [loss] + [p.grad for p in model.parameters()]

    expected = gradients(model, "cpu")
    with torchneuron.adaptive(adaptive):
        torchneuron.reset_metrics()
        actual = gradients(model, dev)
        torchneuron.synchronize()
    assert torchneuron.metrics()["launches"]["fallback"] == 0, \
        torchneuron.metrics()["ops"]["fallback"]
    for got, want in zip(actual, expected):
        assert_same(got, want)


@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference"])
def test_eigvals_of_real_matrices_with_complex_eigenvalues(mode):
    """ATen's linalg_eigvals composite mixed CPU temporaries into the device output and failed for
    a real matrix with complex eigenvalues (eigenvalues.h); the device decomposes it into
    linalg_eig, with autograd, in no_grad and in inference mode, and keeps ATen's out= checks."""
    dev = torchneuron.device()
    a = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(8))
    expected = torch.linalg.eigvals(a)
    assert expected.imag.abs().max() > 0.1  # complex eigenvalues among them
    context = {"grad": torch.enable_grad, "no_grad": torch.no_grad,
               "inference": torch.inference_mode}[mode]
    with context():
        assert_same(torch.linalg.eigvals(a.to(dev)), expected)
        out = torch.empty(0, dtype=torch.complex64).to(dev)
        torch.linalg.eigvals(a.to(dev), out=out)
        assert_same(out, expected)
        with pytest.raises(RuntimeError, match="Expected eigenvalues to be safely castable from "
                                               "ComplexFloat dtype, but got eigenvalues with dtype "
                                               "Float"):
            torch.linalg.eigvals(a.to(dev), out=torch.empty(0).to(dev))
        # Without a gradient the CPU runs geev without eigenvectors, whose eigenvalues of a larger
        # matrix differ in order and last bits from linalg_eig's; the device runs the same.
        big = torch.randn(150, 150, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
        assert_same(torch.linalg.eigvals(big.to(dev)), torch.linalg.eigvals(big))
        with pytest.raises(RuntimeError, match="linalg.eigvals: A must be batches of square "
                                               "matrices, but they are 3 by 4 matrices"):
            torch.linalg.eigvals(torch.zeros(3, 4).to(dev))
    if mode == "grad":
        leaf = a.to(dev).requires_grad_()
        torch.linalg.eigvals(leaf).abs().sum().backward()
        cpu_leaf = a.clone().requires_grad_()
        torch.linalg.eigvals(cpu_leaf).abs().sum().backward()
        assert_same(leaf.grad, cpu_leaf.grad)
