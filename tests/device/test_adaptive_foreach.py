"""Multi-tensor (foreach=True) optimizer steps in adaptive mode (docs/adaptive-eager.md, "Fusion",
"List calls"). Inside a hot window a _foreach_* op records its element ops on the device, the
batch is regrouped into independent chains (tracer/independent_chains.h), and each parameter's
whole update runs as one fused kernel. Every test compares with the CPU's optimizer (or program)
and checks from the counters that the chains fused: without the regrouping, a step's launches
come op by op over the parameters and none of them fuses."""

import pytest
import torch
import torchneuron

from torch.testing import assert_close

# The fusion tests' fixture: adaptive mode with fusion, compiles awaited, fresh counters.
from test_adaptive_fusion import fused_adaptive_mode, fusion_metrics  # noqa: F401

OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.01, foreach=True),
    "adam-amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, foreach=True),
    "sgd-nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                               weight_decay=0.01, foreach=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, foreach=True),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, weight_decay=0.01, foreach=True),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-2, momentum=0.5, centered=True,
                                              foreach=True),
}

# Distinct element counts, so that no two parameters' chains share an iteration space (which
# would let them join one fused group): each parameter's update is then one kernel of its own.
SHAPES = [(48, 32), (40,), (24, 16, 3), (200,)]


def train(make_optimizer, device, steps, shapes=SHAPES, after_step=None):
    """`steps` optimizer steps with seeded gradients; the parameters (CPU copies)."""
    torch.manual_seed(0)
    params = [torch.randn(s).to(device).requires_grad_() for s in shapes]
    optimizer = make_optimizer(params)
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator).to(device)
        optimizer.step()
        if after_step is not None:
            after_step(step)
    return [p.detach().cpu() for p in params]


def assert_matches_cpu(program, lists, dev, runs=5):
    """Runs `program` on CPU copies and on device copies of `lists` (a tuple of tensor lists),
    `runs` times (hot from the third), comparing every result."""
    for _ in range(runs):
        expected = program(*[[t.clone() for t in ts] for ts in lists])
        got = program(*[[t.to(dev) for t in ts] for ts in lists])
        for g, e in zip(got, expected):
            assert_close(g.cpu(), e)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_foreach_optimizer_steps_match_the_cpu_and_fuse_each_parameters_update(dev, name):
    expected = train(OPTIMIZERS[name], "cpu", steps=6)
    fused_per_step, tables_per_step = [], []

    def count(step):
        torchneuron.synchronize()  # one window per step: hot from the third
        m = fusion_metrics()
        fused_per_step.append(m["fused_kernel_runs"])
        tables_per_step.append((m["fused_table_launches"], m["fused_kernels_in_tables"]))

    got = train(OPTIMIZERS[name], dev, steps=6, after_step=count)
    for p, q in zip(got, expected):
        assert_close(p, q, rtol=1e-5, atol=1e-6)
    last_steps = [b - a for a, b in zip(fused_per_step[3:], fused_per_step[4:])]
    # Plain SGD's update is one op: nothing to fuse, but it must still be right.
    if name != "sgd":
        assert last_steps == [len(SHAPES)] * len(last_steps), fused_per_step
        assert fusion_metrics()["launches_saved"] > 0
        # The parameters' updates, one kernel each, run as one table launch per step.
        tables = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(tables_per_step[3:],
                                                               tables_per_step[4:])]
        assert tables == [(1, len(SHAPES))] * len(tables), tables_per_step


def test_lists_that_share_tensors_keep_the_order_of_their_updates(dev):
    """Lists that share tensors (a list naming one tensor twice, two lists that are rotations of
    each other) and a reduction reading an element between two list calls join every element's
    chain into one: regrouping must leave such a batch in program order."""
    def program(xs):
        ys = xs[1:] + xs[:1]  # ys[i] is xs[i + 1]: every chain joins its neighbour's
        torch._foreach_mul_(xs, 1.5)
        torch._foreach_add_(xs, ys, alpha=0.25)
        total = xs[0].sum()  # reads xs[0] between the list calls
        torch._foreach_addcmul_(ys, xs, xs, value=0.125)
        torch._foreach_add_([xs[2], xs[2]], [xs[3], xs[3]])  # one tensor twice in a list
        halves = torch._foreach_mul(xs, 0.5)
        return [total] + [h + 1 for h in halves]

    assert_matches_cpu(program, ([torch.randn(64) for _ in range(5)],), dev)
    assert fusion_metrics()["ops_deferred"] > 0


def test_an_element_written_through_a_view_between_list_calls_is_seen(dev):
    """A write into one parameter through a view, between two list calls, joins that
    parameter's chain: the second list call reads the written values."""
    def program(xs):
        torch._foreach_mul_(xs, 2.0)
        xs[1][:8].fill_(3.0)
        torch._foreach_add_(xs, 1.0)
        return [x * 1 for x in xs]

    assert_matches_cpu(program, ([torch.randn(256) for _ in range(3)],), dev)
    assert fusion_metrics()["fused_kernel_runs"] > 0


def test_results_the_program_still_holds_do_not_split_a_fused_batch(dev):
    """AdamW with foreach=True allocates the square roots and denominators of every parameter as
    two lists. Counted as pending memory they reached the fused batch bound (16 times the largest
    result, 64 MiB at least) after the square roots, and each parameter's update ran as two
    kernels. The lists are the program's own (eager mode holds them too): only memory the window
    alone holds counts, so the step stays one batch and one kernel per parameter."""
    shapes = [(1 << 20) + 64 * i for i in range(17)]  # 4 MiB each: the lists exceed 64 MiB
    make = OPTIMIZERS["adamw"]
    expected = train(make, "cpu", steps=4, shapes=shapes)
    fused = []

    def count(step):
        torchneuron.synchronize()
        fused.append(fusion_metrics()["fused_kernel_runs"])

    got = train(make, dev, steps=4, shapes=shapes, after_step=count)
    for p, q in zip(got, expected):
        assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert fused[3] - fused[2] == len(shapes), fused


def table_counts_per_step(program, on_dev, cpu, steps=5):
    """Runs `program` on the device lists (one window a step, hot from the third) and on the CPU
    lists, `steps` times: per step, (fused kernels, table launches, kernels in tables)."""
    per_step = []
    for _ in range(steps):
        before = fusion_metrics()
        program(on_dev)
        torchneuron.synchronize()
        program(cpu)
        after = fusion_metrics()
        per_step.append(tuple(after[k] - before[k] for k in (
            "fused_kernel_runs", "fused_table_launches", "fused_kernels_in_tables")))
    return per_step


def test_a_chains_next_fused_kernel_waits_for_the_table_before_it(dev):
    """Each parameter p and its strided view p[::2] are one chain with two fused kernels (the
    updates of p, then of the view, which reads and writes p's memory). The fused kernels of
    different chains share a table launch; a chain's second kernel never joins its first's table:
    [p0], [q0, p1], [q1, p2], [q2], two table launches of two kernels per step."""
    torch.manual_seed(0)
    cpu = [torch.rand(n) + 1 for n in (40, 56, 72)]
    on_dev = [p.to(dev) for p in cpu]

    def program(ps):
        qs = [p[::2] for p in ps]
        torch._foreach_mul_(ps, 2.0)
        torch._foreach_add_(ps, 1.0)
        torch._foreach_mul_(qs, 0.25)
        torch._foreach_add_(qs, 1.0)

    per_step = table_counts_per_step(program, on_dev, cpu)
    assert per_step[-1] == (6, 2, 4), per_step
    for got, expected in zip(on_dev, cpu):
        assert torch.equal(got.cpu(), expected)


def test_a_fused_group_over_several_chains_ends_the_table_its_last_chain_continues(dev):
    """Forty parameters of one shape: the partitioner joins their equal iteration spaces into
    groups of at most 64 launches, so the first group holds chains 0-20 and the first launch of
    chain 21, and the second group the rest of chain 21 onwards. The second continues a chain of
    the first: it runs after it, never beside it in one table launch."""
    torch.manual_seed(0)
    cpu = [torch.rand(16) + 1 for _ in range(40)]
    on_dev = [p.to(dev) for p in cpu]

    def program(ps):
        torch._foreach_mul_(ps, 2.0)
        torch._foreach_add_(ps, 1.0)
        torch._foreach_mul_(ps, 0.5)

    per_step = table_counts_per_step(program, on_dev, cpu)
    assert per_step[-1] == (2, 0, 0), per_step
    for got, expected in zip(on_dev, cpu):
        assert torch.equal(got.cpu(), expected)


def test_a_foreach_op_outside_a_hot_window_is_one_library_launch_on_host_views(dev):
    """Cold (the window's first occurrences) a list call is one library launch of ATen's CPU
    kernel over host views, as in eager mode; a CPU tensor among the lists is refused as it is
    on that path."""
    xs = [torch.ones(8, device=dev), torch.ones(16, device=dev)]
    torchneuron.reset_metrics()
    torch._foreach_add_(xs, 1.0)
    assert [x.cpu().tolist() for x in xs] == [[2.0] * 8, [2.0] * 16]
    launches = torchneuron.metrics()["launches"]
    assert launches["library"] == 1 and launches["compiled"] == 0, launches
    with pytest.raises(RuntimeError, match="device"):
        torch._foreach_add_([torch.ones(8, device=dev), torch.ones(8)], 1.0)


def test_interleaved_chains_are_regrouped_and_a_dependency_between_them_is_kept(dev):
    """Three parameters of distinct sizes, each with its own second tensor: op by op the list
    calls interleave their chains (nothing consecutive shares an iteration space, so nothing
    fuses); regrouped, each chain fuses. A write of one chain reading another (b += a[:48])
    joins those two, and must still come after a's updates and before b's later ones."""
    def program(xs, ws):
        torch._foreach_mul_(xs, 1.5)
        torch._foreach_add_(xs, ws, alpha=0.25)
        torch._foreach_addcmul_(ws, xs, xs, value=0.125)
        xs[1].add_(xs[0][:48])
        torch._foreach_sub_(xs, 1.0)
        return xs + ws

    sizes = (64, 48, 80)
    xs = [torch.randn(n) for n in sizes]
    ws = [torch.randn(n) for n in sizes]
    fused = []
    for _ in range(5):
        expected = program([t.clone() for t in xs], [t.clone() for t in ws])
        before = fusion_metrics()["fused_kernel_runs"]
        got = program([t.to(dev) for t in xs], [t.to(dev) for t in ws])
        for g, e in zip(got, expected):
            assert_close(g.cpu(), e)
        fused.append(fusion_metrics()["fused_kernel_runs"] - before)
    # Hot from the third run: chain c alone (4 launches), chains a and b joined by the write.
    assert fused[-1] >= 2, fused

BINARY = ["add", "sub", "mul", "div"]
POINTWISE = ["addcmul", "addcdiv"]
NOT_UNARY = set(BINARY + POINTWISE + ["maximum", "minimum", "norm", "zero"])
UNARY = sorted(name[len("_foreach_"):] for name in dir(torch._C._VariableFunctions)
               if name.startswith("_foreach_") and not name.endswith("_")
               and hasattr(torch, name + "_") and name[len("_foreach_"):] not in NOT_UNARY)


def list_programs():
    """(name, program) for every _foreach_* overload: each followed by a second list call, so
    that the element ops of both are recorded and fused in a hot window."""
    def f(name):
        return getattr(torch, "_foreach_" + name)

    programs = []
    for name in UNARY:
        programs.append((name, lambda xs, ys, name=name: torch._foreach_mul(f(name)(xs), 1.5)))
        programs.append((name + "_", lambda xs, ys, name=name: (
            f(name + "_")(xs), torch._foreach_add_(xs, 0.25), xs)[-1]))
    scalars = [0.5, 2.0, 1.25]
    for name in BINARY:
        for kind, other in (("Scalar", 0.75), ("List", "ys"), ("ScalarList", scalars)):
            def program(xs, ys, name=name, other=other):
                second = ys if other == "ys" else other
                out = f(name)(xs, second)
                f(name + "_")(xs, second)
                return torch._foreach_add(out, xs)
            programs.append((f"{name}.{kind}", program))
    for name in ("add", "sub"):
        programs.append((f"{name}.List.alpha", lambda xs, ys, name=name: (
            f(name + "_")(xs, ys, alpha=0.5), torch._foreach_mul_(xs, 3.0), xs)[-1]))
    for name in POINTWISE:
        for kind, value in (("Scalar", 0.5), ("ScalarList", scalars)):
            def program(xs, ys, name=name, value=value):
                out = f(name)(xs, ys, ys, value)
                f(name + "_")(xs, out, ys, value)
                return torch._foreach_sub(xs, out)
            programs.append((f"{name}.{kind}", program))
    for name in ("maximum", "minimum"):
        programs.append((name, lambda xs, ys, name=name: torch._foreach_mul(f(name)(xs, ys), 2.0)))
        programs.append((name + "_", lambda xs, ys, name=name: (
            f(name + "_")(xs, ys), torch._foreach_neg_(xs), xs)[-1]))
    programs.append(("norm", lambda xs, ys: torch._foreach_norm(torch._foreach_mul(xs, ys))))
    programs.append(("norm.3", lambda xs, ys: torch._foreach_norm(torch._foreach_add(xs, ys), 3)))
    programs.append(("zero_", lambda xs, ys: (
        torch._foreach_mul_(xs, 2.0), torch._foreach_zero_(xs), torch._foreach_add_(xs, ys),
        xs)[-1]))
    return programs


@pytest.mark.parametrize("name,program", list_programs(), ids=[n for n, _ in list_programs()])
def test_every_list_op_recorded_in_a_hot_window_matches_the_cpu(dev, name, program):
    """Each overload's element ops are recorded in a hot window (the fourth run's calls are all
    deferred, their launches recorded) and the results equal the CPU's. An element op that
    is a library kernel (lgamma) runs the launches recorded before it but does not end the
    window: one window per run, ended by the copy of its results."""
    torch.manual_seed(0)
    xs = [torch.rand(n) * 0.8 + 0.1 for n in (64, 48, 80)]  # in every unary op's domain
    ys = [torch.rand(n) * 0.8 + 0.1 for n in (64, 48, 80)]
    for run in range(4):
        m = fusion_metrics()
        deferred, recorded = m["ops_deferred"], m["launches_recorded"]
        expected = program([x.clone() for x in xs], [y.clone() for y in ys])
        got = program([x.to(dev) for x in xs], [y.to(dev) for y in ys])
        for g, e in zip(got, expected):
            assert_close(g.cpu(), e)
    m = fusion_metrics()
    assert m["windows"] == 4, m["syncs"]
    assert m["ops_deferred"] - deferred >= 2  # the last run's list calls
    assert m["launches_recorded"] - recorded >= 3  # an element op's launches, at least
