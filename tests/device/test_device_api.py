import pytest
import torch
import torchneuron


def test_device_is_privateuseone_zero():
    assert torchneuron.device() == torch.device("privateuseone", 0)
    assert torchneuron.device(0).index == 0


def test_availability_and_count():
    assert torchneuron.is_available()
    assert torchneuron.device_count() == 1


def test_bad_device_index_names_index_and_count():
    with pytest.raises(RuntimeError, match=r"invalid neuron device index 3: torchneuron has 1 device"):
        torchneuron.device(3)


@pytest.mark.parametrize("index", [128, 255, 256, 2**32, 2**63, -2**63, -1])
@pytest.mark.parametrize("api", [torchneuron.device, torchneuron.synchronize,
                                 torchneuron.memory_allocated])
def test_an_index_beyond_eight_bits_is_refused_not_wrapped(api, index):
    # torch.device keeps an 8-bit index: 256 became device 0 and 255 no index at all.
    with pytest.raises(RuntimeError, match=rf"invalid neuron device index {index}: torchneuron "):
        api(index)


def test_non_int_index_is_a_type_error():
    with pytest.raises(TypeError, match="device index must be an int, got str"):
        torchneuron.device("0")


def test_tensor_on_bad_device_index_names_it():
    with pytest.raises(RuntimeError, match="invalid neuron device index 2"):
        torch.empty(3, device="privateuseone:2")


def test_synchronize_validates_its_device():
    torchneuron.synchronize()
    torchneuron.synchronize(torchneuron.device())
    with pytest.raises(ValueError, match="expected a privateuseone device, got cpu"):
        torchneuron.synchronize("cpu")


def test_manual_seed_makes_device_random_equal_cpu_random(dev):
    torchneuron.manual_seed(7)
    a = torch.rand(5, device=dev)
    torch.manual_seed(7)
    b = torch.rand(5)
    torch.testing.assert_close(a.cpu(), b)


def test_metrics_has_launch_kinds_and_per_op_counts(dev):
    torchneuron.reset_metrics()
    x = torch.ones(4, device=dev)
    torch.exp(torch.ones(2, dtype=torch.complex64).to(dev))  # complex math: the fallback
    torch.mm(x[None], x[:, None])
    m = torchneuron.metrics()
    assert set(m["launches"]) == {"compiled", "library", "fallback", "interim"}
    assert m["launches"]["interim"] == 0  # the suite waits for compiles (run_isolated.sh)
    assert m["ops"]["fallback"]["aten::exp"] == 1
    assert m["ops"]["library"]["aten::mm"] == 1
    assert m["ops"]["compiled"]["aten::fill_.Scalar"] == 1
    assert m["allocator"]["allocated_bytes"] > 0


def test_tensor_device_and_guard(dev):
    x = torch.zeros(2, device=dev)
    assert x.device == dev
    assert x.is_cuda is False
    with torch.autograd.profiler.record_function("guarded"):
        y = x + 1
    assert y.device == dev
