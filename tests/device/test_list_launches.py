"""List launches (src/device/list_launch.h): in eager mode a _foreach_* call on device tensors runs
its element ops' compiled kernels as one table launch (launcher/table_launch.h), counted as one
compiled launch of the list op. Results equal the CPU's; launches that depend on each other keep
their order; anything else that reaches device memory waits for the pending launches."""
import pytest
import torch
import torchneuron
from torch.testing import assert_close

from test_adaptive_foreach import OPTIMIZERS, list_programs


@pytest.fixture(autouse=True)
def eager_mode():
    """These are eager mode's list calls (adaptive mode records the element ops instead, tested in
    test_adaptive_foreach.py), also when the suite runs in adaptive mode."""
    with torchneuron.adaptive(False):
        yield


def compiled_launches():
    return dict(torchneuron.metrics()["ops"]["compiled"])


def launched_since(before):
    after = compiled_launches()
    return {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}


@pytest.mark.parametrize("name,program", list_programs(), ids=[n for n, _ in list_programs()])
def test_every_list_op_matches_the_cpu(dev, name, program):
    torch.manual_seed(0)
    xs = [torch.rand(n) * 0.8 + 0.1 for n in (64, 48, 80)]  # in every unary op's domain
    ys = [torch.rand(n) * 0.8 + 0.1 for n in (64, 48, 80)]
    expected = program([x.clone() for x in xs], [y.clone() for y in ys])
    got = program([x.to(dev) for x in xs], [y.to(dev) for y in ys])
    for g, e in zip(got, expected):
        assert_close(g.cpu(), e)


def test_a_list_call_is_one_compiled_launch_over_every_element(dev):
    """Seven tensors of different sizes and ranks: each list call is one launch of the list op,
    and none of its element ops launches on its own."""
    shapes = [(3,), (70000,), (5, 7), (1,), (130, 257), (2, 3, 4), (40000,)]
    xs = [torch.randn(s) for s in shapes]
    ys = [torch.randn(s) for s in shapes]
    on_dev, ys_dev = [x.to(dev) for x in xs], [y.to(dev) for y in ys]
    torch._foreach_add_(on_dev, ys_dev, alpha=0.5)  # compiles the element kernel
    before = compiled_launches()
    torch._foreach_add_(on_dev, ys_dev, alpha=0.5)
    roots = torch._foreach_sqrt(torch._foreach_abs(on_dev))
    torch._foreach_addcdiv_(on_dev, ys_dev, roots, 0.25)
    assert launched_since(before) == {"aten::_foreach_add_.List": 1, "aten::_foreach_abs": 1,
                                      "aten::_foreach_sqrt": 1,
                                      "aten::_foreach_addcdiv_.Scalar": 1}
    torch._foreach_add_(xs, ys, alpha=0.5)
    torch._foreach_add_(xs, ys, alpha=0.5)
    expected_roots = torch._foreach_sqrt(torch._foreach_abs(xs))
    torch._foreach_addcdiv_(xs, ys, expected_roots, 0.25)
    for got, expected in zip([*on_dev, *roots], [*xs, *expected_roots]):
        assert torch.equal(got.cpu(), expected)


def test_a_tensor_in_two_places_of_the_lists_keeps_the_order_of_its_updates(dev):
    """One tensor twice in a list, and a list whose element reads another element the same call
    writes: the second update reads the first's result, as ATen's loop over the lists does."""
    base = [torch.arange(6.0), torch.arange(6.0) * 2]
    on_dev = [t.to(dev) for t in base]
    torch._foreach_mul_(on_dev, 3.0)  # compiles mul_
    torch._foreach_mul_(base, 3.0)
    before = compiled_launches()
    torch._foreach_mul_([on_dev[0], on_dev[0]], 3.0)
    torch._foreach_add_([on_dev[1], on_dev[0]], [on_dev[0], on_dev[1]])
    # Each second launch waits for the first: two table launches per call.
    assert launched_since(before) == {"aten::_foreach_mul_.Scalar": 2,
                                      "aten::_foreach_add_.List": 2}
    torch._foreach_mul_([base[0], base[0]], 3.0)
    torch._foreach_add_([base[1], base[0]], [base[0], base[1]])
    for got, expected in zip(on_dev, base):
        assert torch.equal(got.cpu(), expected)


def test_views_of_one_storage_in_a_list_are_updated_in_order(dev):
    """Two halves of one storage, each added into the other: the second element reads what the
    first wrote, so its launch waits for the first."""
    flat = torch.arange(12.0)
    on_dev = flat.to(dev)
    torch._foreach_add_([on_dev[0:6], on_dev[6:12]], [on_dev[6:12], on_dev[0:6]])
    before = compiled_launches()
    torch._foreach_add_([on_dev[0:6], on_dev[6:12]], [on_dev[6:12], on_dev[0:6]])
    assert launched_since(before) == {"aten::_foreach_add_.List": 2}
    for _ in range(2):
        torch._foreach_add_([flat[0:6], flat[6:12]], [flat[6:12], flat[0:6]])
    assert torch.equal(on_dev.cpu(), flat)


def test_an_element_op_without_a_compiled_kernel_runs_as_the_library_did(dev):
    """lgamma has no compiled kernel: its element ops run ATen's kernel on host views (as the
    library ran the whole call), without a fallback warning or count, also under
    NEURON_FALLBACK=error; the compiled list call before it has run by then."""
    xs = [torch.rand(5) + 0.5, torch.rand(9) + 0.5]
    on_dev = [x.to(dev) for x in xs]
    fallbacks = torchneuron.metrics()["launches"]["fallback"]
    torch._foreach_mul_(on_dev, 2.0)
    got = torch._foreach_lgamma(on_dev)
    for g, x in zip(got, xs):
        assert_close(g.cpu(), torch.lgamma(x * 2.0))
    assert torchneuron.metrics()["launches"]["fallback"] == fallbacks


def test_an_element_on_host_views_sees_what_an_earlier_element_launch_wrote(dev):
    """Element 0 is a compiled launch that waits in the scope; element 1 (complex, no compiled
    kernel) runs on host views and reads element 0's result: the pending launch runs first."""
    x, w, z = torch.arange(4.0), torch.ones(4), torch.zeros(4, dtype=torch.complex64)
    dx, dw, dz = x.to(dev), w.to(dev), z.to(dev)
    torch._foreach_add_([dx, dz], [dw, dx])
    torch._foreach_add_([x, z], [w, x])
    assert torch.equal(dx.cpu(), x) and torch.equal(dz.cpu(), z)


def test_a_cpu_number_a_later_element_changes_is_read_as_it_was(dev):
    """Element 0 (on the device) reads the CPU number s and waits in the scope; element 1 (on the
    CPU) squares s in place before the table runs. Element 0 reads s as it was at its call."""
    d, s = torch.ones(4, device=dev), torch.tensor(3.0)
    c, t = torch.ones(4), torch.tensor(3.0)
    torch._foreach_mul_([d, s], [s, s])
    torch._foreach_mul_([c, t], [t, t])
    assert torch.equal(d.cpu(), c) and torch.equal(s, t), (d, s)


def test_with_list_launches_off_a_list_call_is_one_library_launch(dev):
    """torchneuron.set_list_launches(False) (NEURON_LIST_LAUNCHES=0): ATen's CPU kernel over host
    views of the lists, one library launch; the same results."""
    xs = [torch.rand(5), torch.rand(70000)]
    ys = [torch.rand(5), torch.rand(70000)]
    on = [x.to(dev) for x in xs]
    off = [x.to(dev) for x in xs]
    ys_dev = [y.to(dev) for y in ys]
    torch._foreach_addcmul_(on, ys_dev, ys_dev, 0.5)
    assert torchneuron.list_launches_enabled()
    torchneuron.set_list_launches(False)
    try:
        library = torchneuron.metrics()["ops"]["library"].get("aten::_foreach_addcmul_.Scalar", 0)
        torch._foreach_addcmul_(off, ys_dev, ys_dev, 0.5)
        after = torchneuron.metrics()["ops"]["library"].get("aten::_foreach_addcmul_.Scalar", 0)
        assert after - library == 1
    finally:
        torchneuron.set_list_launches(True)
    for a, b in zip(on, off):
        assert_close(a.cpu(), b.cpu())
    with pytest.raises(TypeError, match="expects a bool"):
        torchneuron.set_list_launches(1)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_foreach_optimizers_match_the_cpu_and_launch_compiled_list_ops(dev, name):
    torch.manual_seed(0)
    shapes = [(33, 17), (17,), (5, 4, 3), (1,)]
    params = [torch.randn(s) for s in shapes]
    grads = [[torch.randn(s) for s in shapes] for _ in range(3)]
    cpu = [p.clone().requires_grad_() for p in params]
    on_dev = [p.to(dev).requires_grad_() for p in params]
    cpu_opt, dev_opt = OPTIMIZERS[name](cpu), OPTIMIZERS[name](on_dev)
    before = compiled_launches()
    for step in grads:
        for p, q, g in zip(cpu, on_dev, step):
            p.grad, q.grad = g.clone(), g.to(dev)
        cpu_opt.step()
        dev_opt.step()
    for p, q in zip(cpu, on_dev):
        assert_close(q.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
    launched = launched_since(before)
    assert any(op.startswith("aten::_foreach_") for op in launched), launched
    assert torchneuron.metrics()["ops"]["library"].get("aten::_foreach_add_.List", 0) == 0


def test_a_list_call_inside_another_thread_launches_on_its_own(dev):
    """The scope is per thread: a list call on another thread at the same time collects only its
    own element ops."""
    import threading
    xs = [torch.full((1000,), float(i), device=dev) for i in range(4)]
    ys = [torch.full((50000,), float(i), device=dev) for i in range(4)]
    errors = []

    def update(tensors, times):
        try:
            for _ in range(times):
                torch._foreach_add_(tensors, 1.0)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=update, args=(ys, 50))]
    threads[0].start()
    update(xs, 50)
    threads[0].join()
    assert not errors, errors
    for i, (x, y) in enumerate(zip(xs, ys)):
        assert torch.equal(x.cpu(), torch.full((1000,), i + 50.0))
        assert torch.equal(y.cpu(), torch.full((50000,), i + 50.0))
