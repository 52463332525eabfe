import pytest
import torch

VIEWS = {
    "view": lambda t: t.view(6, 4),
    "reshape": lambda t: t.reshape(4, 6),
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.permute(1, 0),
    "t": lambda t: t.t(),
    "narrow": lambda t: t.narrow(1, 1, 3),
    "slice": lambda t: t[1:3, ::2],
    "select": lambda t: t.select(0, 2),
    "expand": lambda t: t[:1].expand(3, 6),
    "as_strided": lambda t: t.as_strided((3, 3), (7, 1), 1),
    "squeeze": lambda t: t[:1].squeeze(0),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "diagonal": lambda t: t.diagonal(),
    "flatten_contiguous": lambda t: t.flatten(),
    "split": lambda t: t.split(2, dim=1)[1],
    "unbind": lambda t: t.unbind(0)[3],
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_shares_storage_and_writes_through(dev, name):
    base_cpu = torch.arange(24.).reshape(4, 6)
    base = base_cpu.to(dev)
    view = VIEWS[name](base)
    view_cpu = VIEWS[name](base_cpu)
    assert view.device == dev
    assert view.storage().data_ptr() == base.storage().data_ptr()
    assert view.shape == view_cpu.shape and view.stride() == view_cpu.stride()
    assert torch.equal(view.cpu(), view_cpu)
    if name != "expand":  # expand is not writable elementwise
        view.mul_(-1)
        view_cpu.mul_(-1)
        view.add_(0.5)
        view_cpu.add_(0.5)
        assert torch.equal(base.cpu(), base_cpu)


def test_inplace_through_nested_views(dev):
    base = torch.zeros(4, 4, device=dev)
    base.t()[1:3].diagonal().fill_(5)
    expected = torch.zeros(4, 4)
    expected.t()[1:3].diagonal().fill_(5)
    assert torch.equal(base.cpu(), expected)


def test_resize_grows_keeps_prefix_and_shrinks(dev):
    t = torch.arange(4., device=dev)
    t.resize_(2, 5)
    assert t.shape == (2, 5)
    assert torch.equal(t.flatten()[:4].cpu(), torch.arange(4.))
    t.resize_(3)
    assert torch.equal(t.cpu(), torch.arange(3.))


def test_resize_with_memory_format(dev):
    t = torch.empty(0, device=dev).resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert t.is_contiguous(memory_format=torch.channels_last)


def test_set_shares_storage(dev):
    source = torch.arange(10., device=dev)
    t = torch.empty(0, device=dev)
    t.set_(source, 2, (2, 3), (3, 1))
    assert torch.equal(t.cpu(), torch.arange(10.).as_strided((2, 3), (3, 1), 2))
    t.fill_(-1)
    assert source[2:8].eq(-1).all().item()
    u = torch.empty(0, device=dev).set_(source)
    assert u.data_ptr() == source.data_ptr()
    assert torch.empty(3, device=dev).set_().numel() == 0


def test_set_rejects_cpu_storage(dev):
    with pytest.raises(RuntimeError, match="set_ expects a neuron storage, got a storage on cpu"):
        torch.empty(0, device=dev).set_(torch.zeros(3))


def test_copy_across_devices_into_views(dev):
    t = torch.zeros(3, 3, device=dev)
    t[1].copy_(torch.tensor([1., 2., 3.]))
    cpu = torch.zeros(3)
    cpu.copy_(t[1])
    assert cpu.tolist() == [1., 2., 3.]
