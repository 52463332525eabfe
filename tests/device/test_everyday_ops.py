"""Everyday ops beyond the training step (position ids, sorting, counting, scans, index updates,
statistics) run ATen's CPU kernels on device memory as library ops (op_routing.cpp,
kEverydayOps): the CPU's results, no fallback launch and so no fallback warning, in eager and in
adaptive mode, where their inputs may be pending results of the window (x * 1 below)."""
import pytest
import torch
import torch.nn.functional as F
import torchneuron

from conftest import assert_same


def assert_all_same(actual, expected):
    if isinstance(expected, tuple):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_all_same(a, e)
    else:
        assert_same(actual, expected, equal_nan=True)


def cases(dev):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g)
    i = torch.randint(0, 64, (16,), generator=g)
    it = torch.randint(0, 64, (64, 32), generator=g)
    ones = torch.ones(16, 32)
    return {
        "arange": (lambda d: torch.arange(3, 40, 2, device=d), ()),
        "linspace": (lambda d: torch.linspace(0, 1, 11, device=d), ()),
        "eye": (lambda d: torch.eye(5, 7, device=d), ()),
        "tril_indices": (lambda d: torch.tril_indices(5, 4, device=d), ()),
        "flip": (lambda d, x: (x * 1).flip(0, 1), (x,)),
        "roll": (lambda d, x: (x * 1).roll((3, -1), (0, 1)), (x,)),
        "repeat_interleave": (lambda d, x, r: (x * 1).repeat_interleave(r, 0),
                              (x[:4], torch.tensor([1, 0, 3, 2]))),
        "cumsum": (lambda d, x: (x * 1).cumsum(1), (x,)),
        "cumprod": (lambda d, x: (x * 1).cumprod(0), (x[:8],)),
        "cummax": (lambda d, x: (x * 1).cummax(1), (x,)),
        "logcumsumexp": (lambda d, x: (x * 1).logcumsumexp(1), (x,)),
        "sort": (lambda d, x: (x * 1).sort(1, descending=True), (x,)),
        "argsort stable": (lambda d, x: torch.argsort((x * 1).round(), stable=True, dim=1), (x,)),
        "kthvalue": (lambda d, x: (x * 1).kthvalue(5, 1), (x,)),
        "median": (lambda d, x: (x * 1).median(1), (x,)),
        "mode": (lambda d, t: (t * 1).mode(1), (it,)),
        "mode out=": (lambda d, t: torch.mode(t * 1, 1, out=(
            torch.empty(0, dtype=t.dtype, device=d), torch.empty(0, dtype=torch.long, device=d))),
            (it,)),
        "searchsorted": (lambda d, s, x: torch.searchsorted(s, x * 1), (x[0].sort().values, x[1])),
        "bucketize": (lambda d, x, s: torch.bucketize(x * 1, s), (x, x[0].sort().values)),
        "bincount": (lambda d, i: torch.bincount(i * 1, minlength=70), (i,)),
        "histc": (lambda d, x: torch.histc(x * 1, bins=7), (x,)),
        "unique": (lambda d, t: torch.unique(t * 1, return_inverse=True, return_counts=True),
                   (it,)),
        "nonzero": (lambda d, x: ((x * 1) > 0.5).nonzero(), (x,)),
        "count_nonzero": (lambda d, x: torch.count_nonzero((x * 1) > 0, 1), (x,)),
        "isin": (lambda d, t, i: torch.isin(t * 1, i), (it, i)),
        "index_add_": (lambda d, x, i, o: (x * 1).index_add_(0, i, o, alpha=2), (x, i, ones)),
        "index_copy_": (lambda d, x, o: (x * 1).index_copy_(0, torch.arange(16, device=d) * 3, o),
                        (x, ones)),
        "index_fill_": (lambda d, x, i: (x * 1).index_fill_(1, i, -2.0), (x, i % 32)),
        "take": (lambda d, x, t: (x * 1).take(t[:4, :4]), (x, it)),
        "put_": (lambda d, x, t, o: (x * 1).put_(t[0, :4], o[0, :4], accumulate=True),
                 (x, it, ones)),
        "scatter_reduce": (lambda d, x, t: (x * 1).scatter_reduce(0, t, x, "amax"), (x, it)),
        "index_reduce_": (lambda d, x, i, o: (x * 1).index_reduce_(0, i, o * 2, "prod"),
                          (x, i, ones)),
        "embedding_bag": (lambda d, w, i: F.embedding_bag(i, w * 1, torch.tensor([0, 5], device=d),
                                                           mode="max"), (x, i)),
        "std_mean": (lambda d, x: torch.std_mean(x * 1, 1), (x,)),
        "var_mean": (lambda d, x: torch.var_mean(x * 1, 0, unbiased=False), (x,)),
        "aminmax": (lambda d, x: torch.aminmax(x * 1, dim=1), (x,)),
        "nan_to_num": (lambda d, x: (x * 1).log().nan_to_num(nan=0.5, neginf=-9.0), (x,)),
        "trace": (lambda d, x: (x * 1).trace(), (x,)),
    }


@pytest.mark.parametrize("adaptive", [False, True])
def test_everyday_ops_run_atens_kernels_as_library_ops(adaptive):
    dev = torchneuron.device()
    with torchneuron.adaptive(adaptive):
        for name, (op, args) in cases(dev).items():
            expected = op(torch.device("cpu"), *args)
            torchneuron.reset_metrics()
            actual = op(dev, *[a.to(dev) for a in args])
            torchneuron.synchronize()
            launches = torchneuron.metrics()["launches"]
            assert launches["fallback"] == 0, (name, torchneuron.metrics()["ops"]["fallback"])
            assert launches["library"] >= 1, name
            assert_all_same(actual, expected)
