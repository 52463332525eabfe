"""Accumulating products in adaptive mode (src/tracer/accumulating_products.h; docs/adaptive-eager.md,
"Accumulating products"): in a hot window that runs fused, a matrix product whose only use is an
in-place add into another tensor (autograd accumulating a weight's gradient) adds itself into it
(gemm with beta = 1), and the add does not run. Every test compares with the CPU; the counters
say whether the pair was joined, and each refusal is a case where joining would give a wrong
result (the product read again or kept, the target touched in between, alpha other than 1)."""

import torch
import torchneuron
from conftest import last_lines_under_settings
from torch.testing import assert_close

# The fusion tests' fixture: adaptive mode with fusion, compiles awaited, fresh counters.
from test_adaptive_fusion import fused_adaptive_mode, fusion_metrics  # noqa: F401

STEPS = 6


def operands(seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(64, 48, generator=generator), torch.randn(64, 32, generator=generator),
            torch.randn(32, 48, generator=generator))


def run_on_both(program, dev, steps=STEPS):
    """`program(target, a, b)` `steps` times on the CPU and on device copies (the target carried
    from step to step), comparing the target and whatever the program returns after each step;
    the number of products that were joined."""
    target, a, b = operands()
    device_target = target.to(dev)
    device_a, device_b = a.to(dev), b.to(dev)
    torchneuron.reset_metrics()
    for _ in range(steps):
        expected = program(target, a, b)
        got = program(device_target, device_a, device_b)
        assert_close(device_target.cpu(), target, rtol=1e-5, atol=1e-5)
        for g, e in zip(got, expected):
            assert_close(g.cpu(), e, rtol=1e-5, atol=1e-5)
    return fusion_metrics()["accumulating_products"]


def test_a_product_added_in_place_adds_itself_into_the_target(dev):
    def program(target, a, b):
        target.add_(a.mm(b))
        return []

    joined = run_on_both(program, dev)
    # Hot from the third window (threshold 2); the probe batch joins it too.
    assert joined >= STEPS - 3


def test_a_product_the_program_keeps_is_stored_and_not_joined(dev):
    kept = []

    def program(target, a, b):
        product = a.mm(b)
        target.add_(product)
        kept.append(product)
        return [product]

    assert run_on_both(program, dev) == 0
    assert_close(kept[-1].cpu(), operands()[1] @ operands()[2], rtol=1e-5, atol=1e-5)


def test_a_product_read_after_the_add_is_not_joined(dev):
    def program(target, a, b):
        product = a.mm(b)
        target.add_(product)
        return [product.sum(0)]  # the product dies at return, read by the sum

    assert run_on_both(program, dev) == 0


def test_a_target_touched_between_the_product_and_the_add_is_not_joined(dev):
    def program(target, a, b):
        product = a.mm(b)
        target.mul_(0.5)  # the add must see the halved target
        target.add_(product)
        return []

    assert run_on_both(program, dev) == 0


def test_a_product_added_into_one_of_its_own_operands_is_not_joined(dev):
    """`x += x @ w`: gemm would write the memory it still reads."""
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(256, 256, generator=generator)
    w = torch.randn(256, 256, generator=generator) / 256
    device_x, device_w = x.to(dev), w.to(dev)
    for _ in range(STEPS):
        x += x @ w
        device_x += device_x @ device_w
        assert_close(device_x.cpu(), x, rtol=1e-4, atol=1e-4)
    assert fusion_metrics()["accumulating_products"] == 0


def test_an_add_with_alpha_other_than_one_is_not_joined(dev):
    def program(target, a, b):
        target.add_(a.mm(b), alpha=2)
        return []

    assert run_on_both(program, dev) == 0


def test_a_product_added_into_two_targets_is_not_joined(dev):
    second = {}

    def program(target, a, b):
        other = second.setdefault(target.device.type, torch.zeros_like(target))
        product = a.mm(b)
        target.add_(product)
        other.add_(product)
        return [other]

    assert run_on_both(program, dev) == 0


def test_training_with_kept_gradients_joins_every_weight_gradient_and_matches_the_cpu(dev):
    """A linear model trained with zero_grad() (gradients kept and zeroed, PyTorch 1.13's
    default): each weight's gradient product is joined with its accumulation, also at the
    default NEURON_ADAPTIVE_MIN_BYTES, where the biases' small accumulations are recorded into
    the batch rather than running it first."""
    torchneuron.set_adaptive_min_bytes(32 << 10)
    try:
        torch.manual_seed(0)
        cpu_model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.GELU(),
                                        torch.nn.Linear(128, 128))
        device_model = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.GELU(),
                                           torch.nn.Linear(128, 128))
        device_model.load_state_dict(cpu_model.state_dict())
        device_model.to(dev)
        optimizers = [torch.optim.SGD(m.parameters(), lr=1e-2) for m in (cpu_model, device_model)]
        x = torch.randn(256, 128)  # activations over NEURON_ADAPTIVE_MIN_BYTES too
        joined_per_step = []
        for _ in range(8):
            before = fusion_metrics()["accumulating_products"]
            for model, optimizer, inputs in zip((cpu_model, device_model), optimizers,
                                                (x, x.to(dev))):
                model(inputs).pow(2).mean().backward()
                optimizer.step()
                optimizer.zero_grad()
            joined_per_step.append(fusion_metrics()["accumulating_products"] - before)
            for p_cpu, p_dev in zip(cpu_model.parameters(), device_model.parameters()):
                assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=1e-4, atol=1e-5)
        # The first step steals the fresh gradients (no add); from the hot steps on, both
        # weights' gradients are joined every step.
        assert joined_per_step[-3:] == [2, 2, 2], joined_per_step
    finally:
        torchneuron.set_adaptive_min_bytes(0)


def test_neuron_adaptive_accumulate_off_joins_nothing():
    program = """
import torch, torchneuron
torchneuron.set_adaptive(True)
torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
dev = torchneuron.device()
target, a, b = torch.zeros(64, 48).to(dev), torch.randn(64, 32).to(dev), torch.randn(32, 48).to(dev)
for _ in range(6):
    target.add_(a.mm(b))
    target.cpu()
print(torchneuron.metrics()["adaptive"]["accumulating_products"])
"""
    counts = last_lines_under_settings(program, "NEURON_ADAPTIVE_ACCUMULATE", ("0", "1"))
    assert int(counts["0"]) == 0
    assert int(counts["1"]) > 0
