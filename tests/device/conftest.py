import warnings

import pytest
import torch
import torchneuron


@pytest.fixture
def dev():
    return torchneuron.device()


@pytest.fixture(autouse=True)
def quiet_fallback(monkeypatch, request):
    """Fallback warnings are tested in test_fallback.py; elsewhere they are noise."""
    if "loud_fallback" not in request.keywords:
        monkeypatch.setenv("NEURON_FALLBACK", "silent")


def assert_same(device_tensor, cpu_tensor, **kwargs):
    assert device_tensor.device.type == torchneuron.DEVICE_TYPE
    torch.testing.assert_close(device_tensor.cpu(), cpu_tensor, **kwargs)
