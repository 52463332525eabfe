import copy
import io
import pickle

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


@pytest.mark.parametrize("map_location", [None, "cpu", "device"])
def test_a_view_saved_before_its_base_or_alone_loads_its_own_elements(dev, map_location):
    # The storage's copy is made from the first tensor of it pickled: from a view with an offset
    # it started at the view's offset (past the storage's end) and the load added the offset
    # again ([20, 21, ...] for x[10:20]; garbage for a chunk).
    base = torch.arange(100.0)
    location = {"map_location": dev if map_location == "device" else map_location}
    assert torch.equal(roundtrip(base.to(dev)[10:20], **location).cpu(), base[10:20])
    view, whole = roundtrip([base.to(dev)[2:], base.to(dev)], **location)
    assert torch.equal(view.cpu(), base[2:]) and torch.equal(whole.cpu(), base)
    q, k = (base.to(dev) * 1).chunk(2)
    assert torch.equal(roundtrip({"k": k}, **location)["k"].cpu(), base[50:])


def test_views_of_one_storage_as_two_dtypes_are_refused_as_on_the_cpu(dev):
    for d in ("cpu", dev):
        x = torch.arange(6.0, device=d)
        with pytest.raises(RuntimeError, match="view the same data as different types"):
            roundtrip([x[2:], x.view(torch.int32)])
        alone = roundtrip(x.view(torch.int32)[1:])
        assert alone.dtype == torch.int32
        assert torch.equal(alone.cpu(), torch.arange(6.0).view(torch.int32)[1:])


def test_a_shallow_copy_stays_on_the_device_and_shares_its_storage(dev):
    # copy.copy goes through __reduce_ex__ as pickling does; it rebuilt a CPU tensor.
    base = torch.arange(8.0, device=dev)
    for view in (base, base[2:6], base.view(2, 4).t(), base.view(torch.int32)[1:]):
        shallow = copy.copy(view)
        assert shallow.device == dev and shallow.dtype == view.dtype
        assert (shallow.size(), shallow.stride(), shallow.storage_offset()) == \
            (view.size(), view.stride(), view.storage_offset())
        assert torch.equal(shallow.cpu(), view.cpu())
    shallow = copy.copy(base[1:])
    base.add_(100)
    assert shallow.cpu().tolist() == [101.0 + i for i in range(7)]
    leaf = torch.ones(3, device=dev).requires_grad_()
    assert copy.copy(leaf).requires_grad
    assert pickle.loads(pickle.dumps(base)).data_ptr() != base.data_ptr()  # a pickle copies


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
