import io

import pytest
import torch
import torchneuron


def roundtrip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def test_save_load_device_tensor_stays_on_device(dev):
    t = torch.randn(3, 4).to(dev)
    loaded = roundtrip(t)
    assert loaded.device == dev
    assert torch.equal(loaded.cpu(), t.cpu())


def test_map_location_device_to_cpu_and_cpu_to_device(dev):
    t = torch.randn(5)
    to_cpu = roundtrip(t.to(dev), map_location="cpu")
    assert to_cpu.device.type == "cpu" and torch.equal(to_cpu, t)
    to_device = roundtrip(t, map_location=dev)
    assert to_device.device == dev and torch.equal(to_device.cpu(), t)


def test_state_dict_roundtrip(dev):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)).to(dev)
    state = roundtrip(model.state_dict())
    assert all(v.device == dev for v in state.values())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    fresh.load_state_dict(roundtrip(model.state_dict(), map_location="cpu"))
    for name, value in fresh.state_dict().items():
        assert torch.equal(value, model.state_dict()[name].cpu())


def test_views_saved_share_storage_after_load(dev):
    base = torch.arange(6., device=dev)
    a, b = roundtrip([base, base[2:]])
    a.fill_(0)
    assert b.sum().item() == 0


def test_print_item_tolist(dev):
    t = torch.tensor([[1.5, -2.0]], device=dev)
    text = str(t)
    assert "device='privateuseone:0'" in text and "1.5000" in text
    assert t[0, 0].item() == 1.5
    assert t.tolist() == [[1.5, -2.0]]
    assert torch.tensor(3, device=dev).item() == 3


def test_numpy_on_device_tensor_says_to_call_cpu_first(dev):
    with pytest.raises(TypeError, match=r"Use Tensor.cpu\(\) to copy the tensor to host memory first"):
        torch.ones(2, device=dev).numpy()
    assert torch.ones(2, device=dev).cpu().numpy().tolist() == [1.0, 1.0]


def test_deepcopy_of_device_tensor_and_module(dev):
    import copy
    model = torch.nn.Linear(3, 2).to(dev)
    twin = copy.deepcopy(model)
    assert twin.weight.device == dev
    assert twin.weight.data_ptr() != model.weight.data_ptr()
    assert torch.equal(twin.weight.cpu(), model.weight.cpu())
    t = torch.ones(2, device=dev, requires_grad=True)
    assert copy.deepcopy(t).requires_grad
