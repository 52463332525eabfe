"""Epilogue fusion (fusion/window_partition.h): the elementwise launches of a hot window that
consume a reduction's or row-wise op's outputs run inside that op's kernel, computed where it
stores them: over every element for a row-wise op (softmax, log_softmax, layer norm), over the
kept dimensions for a reduction's per-row results. Every test compares the fused program with
the same program unfused on the device and with the CPU (check_fused), and reads from the
counters whether the group really ran fused. The hazard tests (an epilogue writing what the
reduction reads, reading its output in another order, reading a prologue's unstored
intermediate, updating in place) give wrong values when the partitioner ignores them."""

import torch
import torch.nn.functional as F
import torchneuron
from torch.testing import assert_close

from test_adaptive_fusion import fused_adaptive_mode, fusion_metrics  # noqa: F401
from test_prologue_fusion import check_fused


def test_a_scaled_softmax_with_a_bias_runs_in_the_softmax_kernel(dev):
    def program(x, b):
        return torch.softmax(x, dim=-1) * 2 + b

    # softmax, mul, add: one kernel, two launches saved a run.
    check_fused(program, [torch.randn(6, 40), torch.randn(40)], dev, prologues=1,
                saved_per_run=2)


def test_a_layer_norm_modulated_by_precomputed_scale_and_shift(dev):
    def program(x, w, b, scale, shift):
        return F.layer_norm(x, (48,), w, b) * scale + shift  # adaLN's modulation, scale = 1 + s

    # The scale and shift are broadcast over each sample's 5 tokens: the kernel's rows [20] are
    # refined to [4, 5] for them.
    inputs = [torch.randn(4, 5, 48), torch.randn(48), torch.randn(48), torch.randn(4, 1, 48),
              torch.randn(4, 1, 48)]
    check_fused(program, inputs, dev, prologues=1, saved_per_run=2)


def test_per_row_results_take_their_consumers(dev):
    def program(x, w):
        # Each reduction with the ops on its [8] or [8, 1] results: the kept dimensions.
        return x.sum(-1) * w + 1, torch.rsqrt(x.var(-1, keepdim=True) + 1e-5)

    check_fused(program, [torch.randn(8, 30), torch.randn(8)], dev, prologues=2,
                saved_per_run=4)


def test_a_full_reduction_takes_its_prologue_and_its_epilogue(dev):
    def program(a, b):
        return ((a - b) ** 2).mean() * 0.5

    check_fused(program, [torch.randn(20, 30), torch.randn(20, 30)], dev, prologues=1,
                saved_per_run=3)


def test_a_prologue_and_an_epilogue_share_the_kernel(dev):
    def program(x, b):
        return torch.log_softmax(x * 0.5 + b, -1).exp() * 3

    check_fused(program, [torch.randn(7, 24), torch.randn(24)], dev, prologues=1,
                saved_per_run=4)


def test_the_reduction_output_and_epilogue_results_the_program_keeps_are_stored(dev):
    def program(x, w):
        y = torch.softmax(x, -1)
        y2 = y * 2
        s = x.sum(-1)
        z = s * w
        return y, y2, s, z, z + 1

    check_fused(program, [torch.randn(5, 16), torch.randn(5)], dev, prologues=2,
                saved_per_run=3)


def test_an_epilogue_with_a_broadcast_mask_and_a_comparison(dev):
    def program(x, mask):
        y = torch.softmax(x, -1) * mask  # the mask broadcast over the batch
        return y, y > 0.05

    inputs = [torch.randn(3, 8, 32), (torch.rand(8, 32) > 0.3).float()]
    check_fused(program, inputs, dev, prologues=1, saved_per_run=2)


def test_an_in_place_update_of_the_output_is_not_an_epilogue(dev):
    def program(x):
        y = torch.softmax(x, -1)
        y.mul_(2).add_(1)  # two stores to one address in one kernel: LLVM may reorder them
        return y

    # The softmax runs alone; the two in-place updates fuse with each other.
    check_fused(program, [torch.randn(6, 20)], dev, prologues=0, saved_per_run=1)


def test_accumulating_into_an_input_is_not_an_epilogue(dev):
    def program(x, acc):
        acc.add_(torch.softmax(x, -1))
        return acc

    check_fused(program, [torch.randn(6, 20), torch.randn(6, 20)], dev, prologues=0,
                saved_per_run=0)


def test_an_epilogue_writing_the_reductions_input_is_not_fused(dev):
    def program(x):
        y = torch.softmax(x, -1)
        x.mul_(y)  # later rows of the softmax read x: it must not change under them
        return x, y

    check_fused(program, [torch.randn(6, 20)], dev, prologues=0, saved_per_run=0)


def test_an_epilogue_reading_the_output_in_another_order_is_not_fused(dev):
    def program(x):
        y = torch.softmax(x, -1)
        out = torch.empty(12, 12, device=x.device)
        torch.mul(y.t(), 2, out=out)  # iterates out's order: another element of y each time
        return out, y[:, 1:] * 3      # a shifted slice: other elements too

    check_fused(program, [torch.randn(12, 12)], dev, prologues=0, saved_per_run=0)


def test_an_epilogue_reading_a_transposed_output_in_its_memory_order_fuses(dev):
    def program(x):
        return torch.softmax(x, -1).t() * 2  # the product is laid out as the softmax's output

    check_fused(program, [torch.randn(12, 12)], dev, prologues=1, saved_per_run=1)


def test_an_epilogue_reading_an_intermediate_of_the_prologue_is_not_joined(dev):
    def program(x, b):
        h = x + b  # computed inside the softmax's kernel, never stored
        return torch.softmax(h, -1) * h

    # The add runs inside the softmax kernel; the product stays a launch of its own.
    check_fused(program, [torch.randn(6, 20), torch.randn(20)], dev, prologues=1,
                saved_per_run=1)


def test_an_op_that_does_not_consume_the_reduction_stays_the_next_ones_prologue(dev):
    def program(x, y):
        return torch.log_softmax(x, -1), (x - y).amax(-1)

    # x - y reads no output of the log_softmax: it feeds the amax instead.
    check_fused(program, [torch.randn(5, 40), torch.randn(5, 40)], dev, prologues=1,
                saved_per_run=1)


def test_gradients_through_a_fused_softmax_epilogue_match(dev):
    def program(x, b):
        x = x.requires_grad_()
        y = (torch.softmax(x, -1) * 2 + b)
        y.backward(torch.ones_like(y) * torch.arange(y.shape[-1], device=y.device))
        return y.detach(), x.grad

    check_fused(program, [torch.randn(6, 16), torch.randn(16)], dev)


def test_a_consumer_that_feeds_the_next_reduction_is_its_prologue_not_an_epilogue(dev):
    def program(x, r, w, b):
        for _ in range(3):  # a residual stream: each add reads the last layer norm's output
            x = F.layer_norm(x + r, (32,), w, b)
        return x

    # As an epilogue the add would be stored for the next layer norm; as its prologue it is
    # computed where that layer norm loads it: three prologues a run, no epilogue.
    check_fused(program, [torch.randn(6, 32), torch.randn(6, 32), torch.randn(32),
                          torch.randn(32)], dev, prologues=3, saved_per_run=3)


def test_rms_norm_written_by_hand_is_one_kernel(dev):
    def program(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    # pow feeds the mean (prologue), + eps and rsqrt run on each row's mean (kept epilogue), the
    # two products over the row's elements (row epilogue): six launches, one kernel.
    check_fused(program, [torch.randn(3, 5, 64), torch.randn(64)], dev, prologues=1,
                saved_per_run=5)


def test_per_row_results_broadcast_over_their_rows(dev):
    def program(x, y):
        return x / x.sum(-1, keepdim=True), y - y.mean()  # a row's sum; all of y's mean

    check_fused(program, [torch.rand(6, 40) + 0.5, torch.randn(7, 9)], dev, prologues=2,
                saved_per_run=2)


def test_a_row_op_reading_the_results_in_another_order_is_not_fused(dev):
    def program(x):
        s = x.sum(-1)         # [12], one per row
        return x * s[None, :]  # s along the columns: another row's result at each element

    check_fused(program, [torch.randn(12, 12)], dev, prologues=0, saved_per_run=0)


def test_normalizing_the_reductions_input_in_place_is_not_fused(dev):
    def program(x):
        x.div_(x.sum(-1, keepdim=True))  # later rows' sums read x
        return x

    check_fused(program, [torch.rand(6, 20) + 0.5], dev, prologues=0, saved_per_run=0)


def test_a_softmax_written_by_hand_divides_the_exps_its_sum_stored(dev):
    def program(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    # The amax runs alone; the sub and exp feed the sum (prologue), which stores the exps in its
    # first pass over a row; the division reads them back in the row pass: four launches, one
    # kernel.
    check_fused(program, [torch.randn(6, 40)], dev, prologues=1, saved_per_run=3)


def test_a_row_op_reading_a_prologue_result_transposed_is_not_fused(dev):
    def program(x, b):
        h = x + b
        s = h.sum(-1, keepdim=True)
        out = torch.empty(12, 12, device=x.device)
        torch.div(h.t(), s, out=out)  # another element of h than the row pass has at hand
        return out

    # Positive rows, as the other division tests use: a row sum of randn values near zero made
    # the quotient ill-conditioned, and the CPU's float32 sum and the device's float64 one then
    # differed by more than the tolerance (the inputs are not seeded).
    check_fused(program, [torch.rand(12, 12) + 0.5, torch.rand(12)], dev, prologues=1,
                saved_per_run=1)


def check_fresh_steps(program, make_inputs, dev, steps=8):
    """Runs `program` on the device with new inputs from `make_inputs()` every step, each
    step's results equal to the CPU's: a result left unwritten, or written out of order, cannot
    pass by holding an earlier step's values in reused memory. Returns the fusion counters."""
    torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
    torchneuron.reset_metrics()
    for _ in range(steps):
        inputs = make_inputs()
        got = program(*[t.to(dev) for t in inputs])
        want = program(*inputs)
        for g, w in zip(got, want):
            assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)
    return fusion_metrics()


def test_a_softmax_output_the_program_keeps_is_written_beside_its_epilogue(dev):
    def program(x, b):
        s = torch.softmax(x, -1)
        return s, s * 2 + b  # s escapes: written, and its exps kept in its own memory

    metrics = check_fresh_steps(program, lambda: [torch.randn(6, 40), torch.randn(40)], dev)
    assert metrics["fused_reduction_runs"] >= 3


def test_a_dead_softmax_whose_epilogue_stores_no_float32_result_computes_its_exps_again(dev):
    def program(x, b):
        # The softmax's output is dead, and no stored result of its epilogue is float32 (a
        # comparison's bool, a float64 product) to keep its exps in: the write pass computes them
        # again, to the same values.
        s = torch.softmax(x, -1)
        return s * 40 > 1, torch.softmax(x, -1) * b

    check_fused(program, [torch.randn(6, 40), torch.randn(40, dtype=torch.float64)], dev,
                prologues=2, saved_per_run=3)


def test_a_dead_softmax_keeps_its_exps_in_the_first_float32_result_of_its_epilogue(dev):
    def program(x, b):
        s = torch.softmax(x, -1)
        return s > 0.05, s * b + 1  # the bool result cannot hold exps; the second one does

    check_fused(program, [torch.randn(6, 40), torch.randn(40)], dev, prologues=1,
                saved_per_run=3)


def test_adaln_modulation_with_one_plus_scale_runs_in_the_layer_norm_kernel(dev):
    def program(x, w, b, scale, shift):
        # `1 + scale` reads no output of the layer norm and iterates [4, 1, 48], a fifth of the
        # epilogue's elements: it runs as recorded before the kernel (a hole of the group), and
        # the product and the shift run in the layer norm's kernel.
        return (F.layer_norm(x, (48,), w, b) * (1 + scale) + shift,)

    def inputs():
        return [torch.randn(4, 5, 48), torch.randn(48), torch.randn(48), torch.randn(4, 1, 48),
                torch.randn(4, 1, 48)]

    check_fused(program, inputs(), dev, prologues=1, saved_per_run=2)
    assert check_fresh_steps(program, inputs, dev)["fused_reduction_runs"] >= 3


def test_a_small_launch_no_member_follows_is_partitioned_again_after_the_group(dev):
    def program(x, s, r):
        y = torch.softmax(x, -1) * 2  # the epilogue
        t = s + 1  # small and independent: held as holes, but no member follows
        u = torch.tanh(t) * 3
        return y, u, u * r  # the product: other element counts, after the holes' group

    def inputs():
        return [torch.randn(8, 32), torch.randn(1, 32), torch.randn(8, 32)]

    # The softmax's kernel saves one launch, the holes fused as a group of their own two.
    check_fused(program, inputs(), dev, prologues=1, saved_per_run=3)
    check_fresh_steps(program, inputs, dev)


def test_a_small_launch_updating_what_the_kernel_reads_is_no_hole(dev):
    def program(x, w, b):
        y = F.layer_norm(x, (32,), w, b)
        w.add_(1)  # small, but the layer norm reads w: it must run after the kernel
        return y * 2, w

    check_fresh_steps(program, lambda: [torch.randn(8, 32), torch.randn(32), torch.randn(32)],
                      dev)


def test_a_small_launch_reading_what_the_kernel_writes_is_no_hole(dev):
    def program(x):
        y = torch.softmax(x, -1)
        t = y[:1] * 2  # reads the softmax's first row: it must run after the kernel
        return t, y * 3

    check_fresh_steps(program, lambda: [torch.randn(8, 32)], dev)
