"""Tensor.new(...) of device tensors (python/torchneuron/_legacy_new.py): PyTorch 1.13's legacy
constructor refuses PrivateUse1, which broke nn.init.orthogonal_, optim.Rprop, Adamax with
foreach, several distributions' sample/rsample and nn.CrossMapLRN2d on the device (found by an
adversarial pass, 2026-12-06). Each form means what it means on the CPU, on the device."""
import pytest
import torch

NEW_FORMS = {
    "no arguments": lambda x: x.new(),
    "sizes": lambda x: x.new(2, 3),
    "torch.Size": lambda x: x.new(torch.Size([2, 3])),
    "tuple is data": lambda x: x.new((2, 3)),
    "list is data": lambda x: x.new([1.5, 2.5]),
    "nested data": lambda x: x.new([[1, 2], [3, 4]]),
}


@pytest.mark.parametrize("form", list(NEW_FORMS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_each_form_gives_the_cpus_shape_dtype_and_data_on_the_device(dev, form, dtype):
    make = NEW_FORMS[form]
    on_cpu = make(torch.zeros(1, dtype=dtype))
    on_device = make(torch.zeros(1, dtype=dtype, device=dev))
    assert on_device.device == torch.device(dev) and on_device.dtype == dtype
    assert on_device.shape == on_cpu.shape and not on_device.requires_grad
    if form not in ("sizes", "torch.Size"):  # those are uninitialized, as on the CPU
        assert torch.equal(on_device.cpu(), on_cpu)


def test_new_of_a_device_tensor_aliases_it(dev):
    x = torch.zeros(2, device=dev)
    y = torch.ones(3, device=dev)
    alias = x.new(y)
    alias.add_(1)
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


@pytest.mark.parametrize("call, error, message", [
    (lambda x, d: x.new(torch.ones(3, dtype=torch.int64, device=d)), TypeError, "expected"),
    (lambda x, d: x.new(torch.ones(3)), TypeError, "expected"),
    (lambda x, d: x.new(2, device="cpu"), RuntimeError,
     "legacy constructor expects device type: privateuseone but device type: cpu was passed"),
], ids=["other dtype", "cpu tensor", "cpu device"])
def test_what_the_cpu_refuses_is_refused_alike(dev, call, error, message):
    with pytest.raises(error, match=message):
        call(torch.zeros(2, device=dev), dev)


def both(dev, build):
    """build(device) run from the same seed on the CPU and on the device: both results on the CPU."""
    results = []
    for device in ("cpu", dev):
        torch.manual_seed(7)
        results.append(build(device).detach().cpu())
    return results


@pytest.mark.parametrize("name, build", [
    ("orthogonal_", lambda d: torch.nn.init.orthogonal_(torch.empty(4, 6, device=d))),
    ("Exponential.rsample", lambda d: torch.distributions.Exponential(
        torch.ones(5, device=d)).rsample()),
    ("Laplace.rsample", lambda d: torch.distributions.Laplace(
        torch.zeros(5, device=d), torch.ones(5, device=d)).rsample()),
    ("Cauchy.rsample", lambda d: torch.distributions.Cauchy(
        torch.zeros(5, device=d), torch.ones(5, device=d)).rsample()),
    ("Geometric.sample", lambda d: torch.distributions.Geometric(
        torch.full((5,), 0.3, device=d)).sample()),
    ("Multinomial.sample", lambda d: torch.distributions.Multinomial(
        5, torch.tensor([0.2, 0.3, 0.5], device=d)).sample()),
    ("CrossMapLRN2d", lambda d: torch.nn.CrossMapLRN2d(3)(torch.randn(2, 4, 5, 5).to(d))),
])
def test_pytorch_code_built_on_new_runs_as_on_the_cpu(dev, name, build):
    on_cpu, on_device = both(dev, build)
    torch.testing.assert_close(on_device, on_cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optimizer, options", [(torch.optim.Rprop, {}),
                                                (torch.optim.Adamax, {"foreach": True})])
def test_optimizers_built_on_new_train_as_on_the_cpu(dev, optimizer, options):
    def train(device):
        layer = torch.nn.Linear(4, 2).to(device)
        opt = optimizer(layer.parameters(), **options)
        for _ in range(3):
            opt.zero_grad()
            layer(torch.ones(5, 4, device=device)).pow(2).sum().backward()
            opt.step()
        return layer.weight
    on_cpu, on_device = both(dev, train)
    torch.testing.assert_close(on_device, on_cpu, rtol=1e-5, atol=1e-6)
