"""Adversarial checks of remembered partitions (src/tracer/partition_memo.h): a hot window's batch
reuses the partition of an earlier batch with the same structural fingerprint. Each test runs a
program whose batches have the same launches (the same ops on the same window inputs, one window
signature where the program allows it) but differ in one element of the fingerprint in a way that
changes the right partition, in the order that makes a wrong reuse give wrong values: the batch
with the looser partition (more fused, fewer stores) first, then the one that needs a stricter
one. Every result is compared with the CPU bitwise (no transcendental op, sums of integers), and
the counters show that batches really reused a remembered partition. The fingerprint element
each test pins is named in its docstring; dropping that element from the fingerprint in
PartitionMemo::partition makes the test fail."""

import torch
import torchneuron

# The basics' fixture (adaptive mode, fusion, compiles awaited, fresh counters) applies here too.
from test_adaptive_fusion import fused_adaptive_mode, fusion_metrics  # noqa: F401


def as_list(results):
    return list(results) if isinstance(results, (list, tuple)) else [results]


def run_schedule(dev, program, schedule, make_inputs):
    """Runs `program(*inputs, variant)` for each variant of `schedule` in order, on device copies
    of `make_inputs(step, variant)` and on the CPU, and compares every result bitwise."""
    for step, variant in enumerate(schedule):
        inputs = make_inputs(step, variant)
        got = [t.cpu() for t in as_list(program(*[t.to(dev) for t in inputs], variant))]
        expected = as_list(program(*[t.clone() for t in inputs], variant))
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g.dtype == e.dtype and torch.equal(g, e), (
                f"step {step} (variant {variant!r}), result {i}: "
                f"{(g != e).sum().item()} of {e.numel()} elements differ")


def randn_inputs(*shapes, seed=0):
    """`make_inputs` for run_schedule: fresh normal values of `shapes` at each step (a stale store
    never holds the right value by chance)."""
    def make(step, variant):
        generator = torch.Generator().manual_seed(seed * 1000 + step)
        return [torch.randn(shape, generator=generator) for shape in shapes]
    return make


def assert_reused(m, reused_at_least):
    """The memo served batches (partitions_computed may be 0: the memo is the process's, and
    another test may have partitioned a batch of the same structure before)."""
    assert m["partitions_reused"] >= reused_at_least, m
    assert m["fused_kernel_runs"] >= 2, m


def test_batches_of_one_shape_with_another_specialized_kernel_are_partitioned_apart(dev):
    """Element: the interned kernel signature. pow's exponent is a number, so x.pow(2) and
    x.pow(3) give one window signature and batches of one geometry, but the kernels are
    specialized on the exponent (op_registry.h special_values): a partition remembered for the
    square would run the cube's window as a fused square."""
    def program(x, exponent):
        return ((x + 1).pow(exponent) * 2 - 1,)

    run_schedule(dev, program, [2] * 4 + [3] * 4 + [2, 3] * 3, randn_inputs(2048))
    assert_reused(fusion_metrics(), 6)


def test_an_intermediate_kept_in_some_steps_is_stored_in_those_steps(dev):
    """Element: whether a launch's output escapes. The program returns an intermediate only in
    some steps: one window signature, one geometry, but in those steps the intermediate is
    referenced from Python when the window runs and must be stored. A partition remembered from a
    step that dropped it skips its store and the returned tensor holds stale memory."""
    def program(x, keep):
        a = x * 2 + 1
        b = a * a - 3
        return (b * 0.5, a) if keep else (b * 0.5,)

    run_schedule(dev, program, [False] * 4 + [True] * 4 + [False, True] * 3, randn_inputs(4096))
    assert_reused(fusion_metrics(), 6)


def test_a_write_into_a_slice_at_another_offset_is_read_from_memory(dev):
    """Element: a memref's byte offset in its storage. mul writes x * 2 into buf[s:s + 64] with
    out=, then buf[64:128] is read. At s = 64 the read is the written memref (the value flows
    through a register); at s = 0 it is other memory of buf, read as it was; at s = 32 it
    overlaps the write with another geometry (no fusion across). The offsets are not in the
    window signature: a partition remembered for s = 64 would give s = 0 the product instead of
    buf's contents."""
    def program(x, buf, s):
        torch.mul(x, 2, out=buf[s:s + 64])
        r = buf[64:128] + 1
        return r * 3, buf

    schedule = [64] * 4 + [0] * 4 + [32] * 4 + [64, 0, 32] * 2
    run_schedule(dev, program, schedule, randn_inputs(64, 192, seed=1))
    assert_reused(fusion_metrics(), 8)


def test_chains_that_fuse_at_equal_sizes_are_split_at_other_sizes(dev):
    """Element: memref sizes. Two independent chains join one fused loop when their tensors have
    the same size and must not otherwise; sizes are run-time arguments, so every step has one
    window signature. A partition remembered for equal sizes would run the second chain over the
    first chain's 300 elements only and leave the rest of its result unwritten."""
    def program(a, b, sizes):
        return (a + 1) * 3 - a, (b + 1) * 3 - b

    def make(step, sizes):
        generator = torch.Generator().manual_seed(2000 + step)
        return [torch.randn(n, generator=generator) for n in sizes]

    schedule = [(1000, 1000)] * 4 + [(300, 1000)] * 4 + [(1000, 1000), (300, 1000)] * 3
    run_schedule(dev, program, schedule, make)
    assert_reused(fusion_metrics(), 6)


def test_a_read_with_other_strides_of_memory_written_in_place_is_not_read_through(dev):
    """Element: memref strides. w, a [32, 32] view of buf with strides (64, 1), is doubled in
    place; then a view of buf at the same offset with the same sizes is read. With w's strides it
    is w itself (its value flows through a register); with strides (65, 1) or (0, 1) (row 0 read
    for every row) it reaches elements that w writes at other iterations, so the read must wait
    for the whole write. Same kernels, offsets and sizes: only the strides tell the batches
    apart (the (0, 1) read is another layout class, so another window signature, but the memo is
    the process's)."""
    def program(buf, strides):
        buf.as_strided((32, 32), (64, 1), 0).mul_(2)
        r = buf.as_strided((32, 32), strides, 0) + 1
        return r * 3, buf

    schedule = [(64, 1)] * 4 + [(65, 1)] * 4 + [(0, 1)] * 4 + [(64, 1), (65, 1), (0, 1)] * 2
    run_schedule(dev, program, schedule, randn_inputs(4096, seed=3))
    assert_reused(fusion_metrics(), 8)


def test_an_intermediate_a_later_reduction_reads_is_stored(dev):
    """Element: the storages each step touches (a step the partitioner does not fuse). Two
    programs with the same elementwise chain end with a sum, of the chain's first intermediate or
    of the window input. Nothing in Python holds the intermediate, so only the reduction's touch
    of its storage after the group says that the fused kernel must store it. The two windows
    have different signatures (the sum's source), but their batches share one memo."""
    def program(x, sum_of):
        a = x * 2
        b = a + 1
        c = b * 3
        return c, (a if sum_of == "intermediate" else x).sum()

    def make(step, variant):
        generator = torch.Generator().manual_seed(4000 + step)
        # Integers in float32: the sums are exact in any order.
        return [torch.randint(-100, 100, (1024,), generator=generator).float()]

    schedule = ["input"] * 4 + ["intermediate"] * 4 + ["input", "intermediate"] * 3
    run_schedule(dev, program, schedule, make)
    assert_reused(fusion_metrics(), 6)


def test_a_read_of_the_written_tensor_is_not_confused_with_a_read_of_another(dev):
    """Element: which storage each memref lies in. x is doubled in place, then either x or
    another input z of the same geometry is read: the same kernels, offsets, sizes and strides,
    with the read in the written storage (through a register) or in another one (from memory).
    A partition remembered for the read of x would give z's window 2x + 1 instead of z + 1."""
    def program(x, z, reads):
        x.mul_(2)
        r = (x if reads == "written" else z) + 1
        return r * 3, x

    schedule = ["written"] * 4 + ["other"] * 4 + ["written", "other"] * 3
    run_schedule(dev, program, schedule, randn_inputs(2048, 2048, seed=5))
    assert_reused(fusion_metrics(), 6)


def test_batches_with_cpu_numbers_reuse_their_partition_and_read_each_number(dev):
    """CPU numbers (a Python number, a CPU 0-dim tensor) are memrefs outside any device storage,
    numbered in the fingerprint by their address among the batch's host memrefs: each call's
    number is its own (copied when recorded), so batches that differ only in the numbers reuse
    one partition (a fingerprint keyed by their addresses would never match), and each fused run
    reads its own numbers."""
    def program(x, numbers):
        s = torch.tensor(numbers[0])  # a CPU 0-dim tensor
        return ((x * s + numbers[1]) * 2 - s,)

    schedule = [(0.25 * step - 1, 0.5 + step) for step in range(10)]
    run_schedule(dev, program, schedule, randn_inputs(1024, seed=6))
    assert_reused(fusion_metrics(), 6)
