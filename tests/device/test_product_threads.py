"""Which threads run a matrix product (device/direct_gemm.h, ProductThreads): at 2+ threads, a
product autograd does not record (no grad, or no operand requiring grad) and not run by a
backward pass is split over the device's threads, each part an OpenBLAS call on its own
thread: the CPU's product to float rounding (OpenBLAS's sums depend on the sizes it is given).
A training step's products (recorded by autograd, or run in backward) keep OpenBLAS's own
threads and ATen's bits. metrics()["products_split"] counts the split ones; OpenBLAS's thread
count is what it was after every split product."""

import ctypes
import itertools
import select
import signal
import threading

import pytest
import torch
import torchneuron

EPS = torch.finfo(torch.float32).eps


def openblas():
    try:
        library = ctypes.CDLL("libopenblas.so.0")
    except OSError:
        pytest.skip("OpenBLAS is not the BLAS here: products always run on the BLAS's own threads")
    return library


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    torchneuron.reset_metrics()
    yield
    torch.set_num_threads(before)


def split_count():
    return torchneuron.metrics()["products_split"]


def assert_within_rounding(got, want, a, b, alpha=1.0, addend=None):
    """|got - want| within what summing k products in another order may give: 4 k eps
    (|alpha| |a| @ |b| + |addend| + 1)."""
    magnitude = abs(alpha) * (a.abs() @ b.abs())
    if addend is not None:
        magnitude = magnitude + addend.abs()
    bound = 4 * a.size(-1) * EPS * (magnitude + 1)
    error = (got.cpu() - want).abs()
    assert bool((error <= bound).all()), f"worst error {error.max().item()}"


def on_device(t, dev):
    """t on the device with its own strides (a transpose stays a transpose)."""
    d = torch.empty_strided(t.size(), t.stride(), device=dev)
    d.copy_(t)
    return d


def matrix(rows, cols, transposed, g):
    return torch.randn(cols, rows, generator=g).t() if transposed else torch.randn(rows, cols,
                                                                                   generator=g)


SIZES = [(64, 64, 64), (100, 70, 200), (512, 256, 768), (17, 1000, 300), (300, 60, 17)]


@pytest.mark.parametrize("m, k, n", SIZES, ids=["x".join(map(str, s)) for s in SIZES])
def test_products_without_autograd_split_and_equal_the_cpus_within_rounding(dev, two_threads, m,
                                                                            k, n):
    g = torch.Generator().manual_seed(m + k + n)
    with torch.no_grad():
        for ta, tb, tc in itertools.product([False, True], repeat=3):
            a, b = matrix(m, k, ta, g), matrix(k, n, tb, g)
            da, db = on_device(a, dev), on_device(b, dev)
            before = split_count()
            if tc:  # a column-major result: ATen swaps the operands
                got = torch.full((n, m), float("nan")).t().to(dev)
                torch.mm(da, db, out=got)
            else:
                got = da @ db
            assert_within_rounding(got, a @ b, a, b)
            bias = torch.randn(n, generator=g)
            got = torch.addmm(bias.to(dev), da, db, beta=0.5, alpha=2.0)
            assert_within_rounding(got, torch.addmm(bias, a, b, beta=0.5, alpha=2.0), a, b,
                                   alpha=2.0, addend=0.5 * bias)
            assert split_count() > before, (ta, tb, tc)


BATCHES = [(16, 128, 64, 128), (3, 64, 64, 64), (1, 200, 100, 50)]


@pytest.mark.parametrize("batches, m, k, n", BATCHES, ids=["x".join(map(str, s)) for s in BATCHES])
def test_bmm_without_autograd_splits_its_batch_and_equals_the_cpus_within_rounding(
        dev, two_threads, batches, m, k, n):
    """A batch of at least as many products as threads is shared out; a single product is split."""
    g = torch.Generator().manual_seed(batches * m)
    for ta, tb in itertools.product([False, True], repeat=2):
        a = (torch.randn(batches, k, m, generator=g).transpose(1, 2) if ta
             else torch.randn(batches, m, k, generator=g))
        b = (torch.randn(batches, n, k, generator=g).transpose(1, 2) if tb
             else torch.randn(batches, k, n, generator=g))
        before = split_count()
        assert_within_rounding(torch.bmm(on_device(a, dev), on_device(b, dev)), torch.bmm(a, b),
                               a, b)
        assert split_count() > before
    every_other = torch.randn(2 * batches, m, k, generator=g)[::2]  # a batch stride of 2 matrices
    b = torch.randn(batches, k, n, generator=g)
    assert_within_rounding(torch.bmm(on_device(every_other, dev), b.to(dev)),
                           torch.bmm(every_other, b), every_other, b)


def test_a_training_steps_products_keep_openblas_threads_and_atens_bits(dev, two_threads):
    """Forward products autograd records and backward's products are ATen's calls as they are
    on the CPU at the same thread count: the CPU's bits, and nothing split."""
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128))
    device = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                 torch.nn.Linear(512, 128))
    device.load_state_dict(cpu.state_dict())
    device.to(dev)
    x, grad = torch.randn(96, 256), torch.randn(96, 128)
    out = cpu(x)
    out_dev = device(x.to(dev))
    assert torch.equal(out_dev.detach().cpu(), out.detach())
    out.backward(grad)
    out_dev.backward(grad.to(dev))
    for layer_cpu, layer_dev in zip(cpu[::2], device[::2]):
        assert torch.equal(layer_dev.weight.grad.cpu(), layer_cpu.weight.grad)
    assert split_count() == 0


def test_one_thread_never_splits_and_keeps_atens_bits(dev):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    torchneuron.reset_metrics()
    try:
        g = torch.Generator().manual_seed(1)
        a, b = torch.randn(300, 200, generator=g), torch.randn(200, 400, generator=g)
        with torch.no_grad():
            assert torch.equal((a.to(dev) @ b.to(dev)).cpu(), a @ b)
            x, y = torch.randn(4, 64, 96, generator=g), torch.randn(4, 96, 80, generator=g)
            assert torch.equal(torch.bmm(x.to(dev), y.to(dev)).cpu(), torch.bmm(x, y))
        assert split_count() == 0
    finally:
        torch.set_num_threads(before)


def test_openblas_thread_count_is_restored_after_split_products_even_from_two_threads(
        dev, two_threads):
    """OpenBLAS's thread count is global: it is 1 while split products run and what it was once
    the last one ends, also when two threads' products overlap."""
    library = openblas()
    threads_before = library.openblas_get_num_threads()
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(384, 384, generator=g), torch.randn(384, 384, generator=g)
    want = a @ b
    da, db = a.to(dev), b.to(dev)
    failures = []

    def products():
        try:
            with torch.no_grad():
                for _ in range(20):
                    assert_within_rounding(da @ db, want, a, b)
        except AssertionError as error:  # reported by the main thread
            failures.append(error)

    workers = [threading.Thread(target=products) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures, failures[0]
    assert split_count() >= 40
    assert library.openblas_get_num_threads() == threads_before


def test_products_a_hot_window_runs_split_as_they_would_eagerly(dev, two_threads):
    """In adaptive mode a no-grad product is recorded as a step of its window and split when the
    window runs, decided at its call."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(256, 256, generator=g)
    xs = [torch.randn(128, 256, generator=g) for _ in range(6)]
    dw = w.to(dev)
    with torch.no_grad(), torchneuron.adaptive():
        for x in xs:
            got = torch.tanh(x.to(dev) @ dw) + 1
            # tanh moves no difference further apart, and rounds within a few eps itself
            error = (got.cpu() - (torch.tanh(x @ w) + 1)).abs()
            bound = 4 * 256 * EPS * (x.abs() @ w.abs() + 1) + 8 * EPS
            assert bool((error <= bound).all()), error.max().item()
    assert torchneuron.metrics()["adaptive"]["ops_deferred"] > 0
    assert split_count() >= len(xs)


def test_a_child_forked_while_products_split_gets_openblas_threads_back(dev, two_threads):
    """A child forked while another thread's product runs split inherits OpenBLAS at one thread;
    its first device product puts the count back (and the product is right). Under the adaptive
    suite the worker's products are traced: the fork also takes the tracer's window lock."""
    import os
    library = openblas()
    threads_before = library.openblas_get_num_threads()
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)
    da, db = a.to(dev), b.to(dev)
    stop = threading.Event()

    def products():
        with torch.no_grad():
            while not stop.is_set():
                da @ db

    worker = threading.Thread(target=products)
    worker.start()
    counts = []
    try:
        for _ in range(6):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: one device product, then OpenBLAS's count
                code = 1
                try:
                    os.close(read_end)
                    with torch.no_grad():
                        small = torch.ones(4, 4).to(dev) @ torch.ones(4, 4).to(dev)
                    ok = bool((small.cpu() == 4).all())
                    os.write(write_end, f"{int(ok)} {library.openblas_get_num_threads()}".encode())
                    code = 0
                finally:
                    os._exit(code)
            os.close(write_end)
            # A child that waits forever on a lock the fork did not hold fails the test, not ctest.
            if not select.select([read_end], [], [], 120)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                os.close(read_end)
                pytest.fail("the forked child hung (a lock inherited from another thread)")
            with os.fdopen(read_end) as f:
                reply = f.read()
            _, status = os.waitpid(pid, 0)
            assert os.WEXITSTATUS(status) == 0, reply
            ok, count = reply.split()
            assert ok == "1"
            counts.append(int(count))
    finally:
        stop.set()
        worker.join()
    assert counts == [threads_before] * len(counts), counts
    assert library.openblas_get_num_threads() == threads_before
