"""Prologue fusion (fusion/window_partition.h): the elementwise launches of a hot window that feed
a reduction or row-wise op run inside that op's kernel, computed where it loads them, and their
intermediates are never written. Every test compares the fused program with the same program
unfused on the device and with the CPU. Not bitwise: the fused kernel rounds each intermediate
to its dtype as the eager kernels store it, but its reduction loops have a larger body, for
which LLVM may pick another vector interleave, so partial sums combine in another order (one
float32 rounding apart); and reads from the counters whether the group really ran fused: a residual add and a
layer norm are two launches unfused and one fused, so `launches_saved` counts one per fused run.
The hazard tests (an in-place prologue, a reduction writing over the group's input, a transposed
or shifted read, an intermediate the program keeps) give wrong values when the partitioner
ignores them."""

import torch
import torch.nn.functional as F
import torchneuron

from torch.testing import assert_close

# The fusion basics' fixture (adaptive mode, fusion, compiles awaited, fresh counters).
from test_adaptive_fusion import fused_adaptive_mode, fusion_metrics, run_unfused_and_fused  # noqa: F401


def check_fused(program, inputs, dev, prologues=None, saved_per_run=None, steps=4):
    """Runs `program` unfused and fused: results one rounding apart, equal to the CPU's within
    tolerance. `prologues`: the reductions that run with their prologue in each fused run;
    `saved_per_run`: the launches each fused run saves. Returns the fused run's metrics."""
    unfused, fused, runs = run_unfused_and_fused(program, inputs, dev, steps)
    for a_step, b_step in zip(unfused, fused):
        for a, b in zip(a_step, b_step):
            assert_close(b, a, rtol=2e-6, atol=2e-6)
    expected = program(*[t.clone() for t in inputs])
    for got, want in zip(fused[-1], expected if isinstance(expected, (list, tuple)) else [expected]):
        assert_close(got, want, rtol=1e-5, atol=1e-5)
    metrics = fusion_metrics()
    replays = metrics["replays"]
    assert replays >= 2
    if prologues is not None:
        assert metrics["fused_reduction_runs"] == prologues * replays
    if saved_per_run is not None:
        assert metrics["launches_saved"] == saved_per_run * replays
    return metrics


def residual_layer_norm(x, r, w, b):
    return F.layer_norm(x + r, (x.shape[-1],), w, b)


def test_a_residual_add_runs_inside_the_layer_norm_kernel(dev):
    x, r = torch.randn(4, 16, 96), torch.randn(4, 16, 96)
    w, b = torch.randn(96), torch.randn(96)
    check_fused(residual_layer_norm, [x, r, w, b], dev, prologues=1, saved_per_run=1)


def test_a_chain_with_a_broadcast_bias_feeds_the_layer_norm(dev):
    def program(x, bias, r, w, b):
        return F.layer_norm(torch.relu(x + bias) * 0.5 + r, (64,), w, b)

    inputs = [torch.randn(8, 64), torch.randn(64), torch.randn(8, 64), torch.randn(64),
              torch.randn(64)]
    # x + bias iterates two dimensions (the bias is broadcast), the rest one: the group joins
    # them over their common dimensions, and all four run inside the layer norm.
    check_fused(program, inputs, dev, prologues=1, saved_per_run=4)


def test_an_intermediate_the_program_keeps_is_written_by_the_fused_kernel(dev):
    def program(x, r, w, b):
        h = x + r  # the residual stream: returned, so it escapes the window
        return h, F.layer_norm(h, (32,), w, b)

    inputs = [torch.randn(6, 32), torch.randn(6, 32), torch.randn(32), torch.randn(32)]
    check_fused(program, inputs, dev, prologues=1, saved_per_run=1)


def test_a_kept_intermediate_written_with_a_step_is_stored_at_its_strides(dev):
    def program(x, r, buf):
        h = torch.add(x, r, out=buf[:, ::2])  # the kept sum lands in every second column
        return buf, h.sum(-1)

    check_fused(program, [torch.randn(6, 40), torch.randn(6, 40), torch.zeros(6, 80)], dev,
                prologues=1, saved_per_run=1)


def test_a_scaled_and_masked_softmax_fuses_its_mask_add(dev):
    def program(x, mask):
        return torch.softmax(x * 0.125 + mask, dim=-1)

    t = 16
    mask = torch.triu(torch.full((t, t), float("-inf")), 1)
    # The mul iterates one dimension, the masked add two: both run inside the softmax kernel.
    check_fused(program, [torch.randn(2, 3, t, t), mask], dev, prologues=1, saved_per_run=2)


def test_a_chain_over_mixed_dimensions_fuses_without_a_reduction(dev):
    def program(x, bias, r):
        h = torch.relu(x + bias)  # two dimensions (the bias is broadcast)
        return h * r - 1          # one dimension

    check_fused(program, [torch.randn(12, 40), torch.randn(40), torch.randn(12, 40)], dev,
                prologues=0, saved_per_run=3)


def test_a_transposed_read_that_follows_memory_order_still_fuses(dev):
    def program(x, bias):
        h = x + bias               # [12, 40]
        return (h.t() * 2).sum(0)  # the product keeps h's memory order, and the sum runs along it

    # The partitioner compares addresses and strides, not shapes: all three are one kernel.
    check_fused(program, [torch.randn(12, 40), torch.randn(40)], dev, prologues=1,
                saved_per_run=2)


def test_a_mixed_chain_reading_a_result_in_another_order_is_cut_there(dev):
    def program(x, bias, z):
        h = x + bias  # [8, 8], two dimensions (the bias is broadcast)
        g = h * 2     # one dimension: the group is mixed, over [8, 8]
        out = torch.empty(8, 8, device=x.device)
        torch.add(h.t(), z, out=out)  # iterates out's order: reads h transposed
        return g, out

    # h + bias and h * 2 fuse; the transposed read does not join them.
    check_fused(program, [torch.randn(8, 8), torch.randn(8), torch.randn(8, 8)], dev,
                prologues=0, saved_per_run=1)


def test_reductions_over_inner_dimensions_take_their_prologue(dev):
    def program(x, y):
        z = x * y - 1
        return z.sum(-1), torch.log_softmax(z * 2, -1), (x - y).amax(-1), (x + 3).var(-1)

    inputs = [torch.randn(5, 7, 40), torch.randn(5, 7, 40)]
    # z = x * y - 1 is kept for the log_softmax's prologue: the sum's kernel stores it.
    check_fused(program, inputs, dev, prologues=4, saved_per_run=5)


def test_full_reductions_take_their_prologue(dev):
    def program(pred, target, bias):
        diff = pred - target
        return ((diff * diff).mean(), (torch.relu(pred + bias) * 0.5).sum(),
                (target.t() * 3).amax(), (pred * target).var(), torch.linalg.vector_norm(diff * 2))

    # Each chain runs inside its reduction's kernel, whose one kept row has size 1: eight
    # launches a run (diff is stored by the first kernel, since the last chain reads it).
    # `target.t() * 3` follows target's transposed strides, which the amax over all elements
    # reads in the same order.
    inputs = [torch.randn(24, 40), torch.randn(40, 24).t(), torch.randn(40)]
    check_fused(program, inputs, dev, prologues=5, saved_per_run=8)


def test_a_full_reduction_of_a_kept_broadcast_result_stores_it_once(dev):
    def program(x, bias):
        h = x + bias  # kept: returned
        return h, (h * h).sum()

    check_fused(program, [torch.randn(3, 5, 16), torch.randn(16)], dev, prologues=1,
                saved_per_run=2)


def test_an_in_place_prologue_on_a_window_input_is_not_fused_but_stays_correct(dev):
    def program(h, r, w, b):
        h.add_(r)  # writes the memory it reads: computing it again per pass would read the sum
        return h, F.layer_norm(h, (32,), w, b)

    inputs = [torch.randn(4, 32), torch.randn(4, 32), torch.randn(32), torch.randn(32)]
    check_fused(program, inputs, dev, prologues=0, saved_per_run=0)


def test_a_reduction_writing_where_a_later_row_reads_is_not_fused(dev):
    def program(x, r):
        # Row i's sum goes to x[1, i]: fused, row 1 would read x[1, 0] after row 0 wrote it.
        torch.sum(x + r, -1, out=x.view(-1)[48:54])
        return x

    check_fused(program, [torch.randn(6, 48), torch.randn(6, 48)], dev, prologues=0,
                saved_per_run=0)


def test_a_row_wise_op_writing_over_its_prologue_input_is_not_fused(dev):
    def program(x, r):
        torch._softmax(x * 2 + r, -1, False, out=x)
        return x

    # Refused although each row reads only itself (the partitioner does not reason about rows);
    # the mul and add still fuse with each other.
    check_fused(program, [torch.randn(6, 48), torch.randn(6, 48)], dev, prologues=0,
                saved_per_run=1)


def test_a_transposed_read_of_the_prologue_is_not_fused(dev):
    def program(x, r):
        return torch.softmax((x + r).t(), dim=-1)

    check_fused(program, [torch.randn(24, 40), torch.randn(24, 40)], dev, prologues=0,
                saved_per_run=0)


def test_a_shifted_slice_of_the_prologue_is_not_fused(dev):
    def program(x, r):
        return (x * r)[1:].sum(-1)

    check_fused(program, [torch.randn(9, 33), torch.randn(9, 33)], dev, prologues=0,
                saved_per_run=0)


def test_layer_norm_training_step_gradients_match_with_prologue_fusion(dev):
    torch.manual_seed(0)

    def program(x, r, w, b):
        x = x.requires_grad_()
        w = w.requires_grad_()
        y = F.layer_norm(x + r, (48,), w, b)
        (y * y).sum().backward()
        return y.detach(), x.grad, w.grad

    inputs = [torch.randn(10, 48), torch.randn(10, 48), torch.randn(48), torch.randn(48)]
    check_fused(program, inputs, dev)
