import pytest
import torch


def test_sparse_coo_roundtrip_and_ops_match_cpu(dev):
    dense = torch.tensor([[0., 2, 0], [3, 0, 4]])
    on_device = dense.to(dev).to_sparse()
    assert on_device.device == dev and on_device.layout == torch.sparse_coo
    moved = dense.to_sparse().to(dev)
    assert torch.equal((on_device + moved).to_dense().cpu(), (dense * 2))
    product = torch.sparse.mm(on_device, torch.ones(3, 2, device=dev))
    assert torch.equal(product.cpu(), dense @ torch.ones(3, 2))
    assert torch.equal(on_device.cpu().to_dense(), dense)


def test_sparse_inplace_writes_back_to_device(dev):
    s = torch.tensor([[1., 0], [0, 2]]).to_sparse().to(dev)
    s.mul_(3)
    assert torch.equal(s.to_dense().cpu(), torch.tensor([[3., 0], [0, 6]]))


def test_sparse_compressed_layouts_are_a_clear_error(dev):
    with pytest.raises(RuntimeError, match="layout SparseCsr, which cannot live on the neuron "
                                           "device: PyTorch 1.13 has no sparse-compressed"):
        torch.eye(3, device=dev).to_sparse_csr()
