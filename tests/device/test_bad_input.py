import warnings

import pytest
import torch
import torchneuron

from conftest import assert_same


def test_mixing_cpu_and_device_tensors_is_a_clear_error(dev):
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found "
                                           r"at least two devices, privateuseone:0 and cpu"):
        torch.ones(3, device=dev) + torch.ones(3)


def test_mixing_error_names_the_argument_and_op(dev):
    with pytest.raises(RuntimeError, match=r"same device, but found at least two devices, "
                                           r"privateuseone:0 and cpu! \(when checking argument "
                                           r"'tensor' of aten::dot"):
        torch.dot(torch.ones(3, device=dev), torch.ones(3))


def test_matmul_with_cpu_weight_is_a_clear_error(dev):
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device, but found "
                                           r"at least two devices, (privateuseone:0 and cpu|cpu and privateuseone:0)"):
        torch.nn.functional.linear(torch.ones(2, 3, device=dev), torch.ones(4, 3))


def test_cpu_scalar_tensor_is_allowed_like_on_cuda(dev):
    result = torch.ones(3, device=dev) * torch.tensor(2.0)
    assert result.device == dev and result.cpu().tolist() == [2.0, 2.0, 2.0]


def test_bad_device_index_in_to(dev):
    with pytest.raises(RuntimeError, match=r"invalid neuron device index 1: torchneuron has 1 device"):
        torch.ones(2).to("privateuseone:1")


def test_pin_memory_rejected(dev):
    with pytest.raises(RuntimeError, match="pin_memory applies to CPU tensors only"):
        torch.empty(2, device=dev, pin_memory=True)


def test_sparse_compressed_layout_rejected_naming_the_device(dev):
    # PyTorch 1.13 has no sparse-compressed dispatch key for PrivateUse1 (COO works: test_sparse).
    with pytest.raises(RuntimeError, match="Unsupported device type for SparseCsr layout: privateuseone"):
        torch.empty(2, 2, device=dev, layout=torch.sparse_csr)


def test_errors_inside_fallback_are_pytorchs_own(dev):
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 2x3\)"):
        torch.ones(2, 3, device=dev) @ torch.ones(2, 3, device=dev)
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3"):
        torch.ones(3, device=dev)[5]


def test_copy_to_meta_device_rejected_clearly(dev):
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor; no data!"):
        torch.ones(2, device=dev).to("meta").cpu()


# A dim named twice (after wrapping, -1 and 0 of a 1-d tensor are the same) is ATen's error, in
# eager and in adaptive mode, and warns of no fallback: nothing ran. The reductions' kernels
# used to merge the repeated dim and return a result.
@pytest.mark.loud_fallback
@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("shape, dims", [((3, 4), (0, 0)), ((3, 4), (1, -1)), ((5,), (0, -1)),
                                         ((), (0, -1))])
def test_reduction_over_a_dim_named_twice_raises_atens_error(dev, adaptive, shape, dims):
    x = torch.randn(shape)
    d = x.to(dev)
    with torchneuron.adaptive(adaptive):
        for op in (lambda t: t.sum(dims), lambda t: t.mean(dims), lambda t: t.amax(dims),
                   lambda t: t.amin(dims), lambda t: t.var(dims), lambda t: t.logsumexp(dims)):
            with pytest.raises(RuntimeError) as cpu_error:
                op(x)
            with warnings.catch_warnings(record=True) as warned:
                warnings.simplefilter("always")
                with pytest.raises(RuntimeError) as device_error:
                    op(d)
            assert str(device_error.value) == str(cpu_error.value)
            assert not [w for w in warned if "[fallback]" in str(w.message)]
            assert "appears multiple times in the list of dims" in str(device_error.value)


# lerp computes in self's dtype: a Python number as the weight is not promoted with the tensors,
# so integer tensors are ATen's error. The device's kernel used to promote them to float and
# return a float tensor.
def test_lerp_of_integer_tensors_raises_atens_error(dev):
    a, b = torch.arange(4), torch.arange(4) * 2
    with pytest.raises(RuntimeError) as cpu_error:
        torch.lerp(a, b, 0.5)
    with pytest.raises(RuntimeError) as device_error:
        torch.lerp(a.to(dev), b.to(dev), 0.5)
    assert str(device_error.value) == str(cpu_error.value)
    x, y = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(torch.lerp(x.to(dev), y.to(dev), 0.3).cpu(), torch.lerp(x, y, 0.3))


# An in-place op whose operand does not broadcast to its target names the sizes as ATen does:
# the target's as tensor a's.
@pytest.mark.parametrize("op", [lambda t, u: t.copy_(u), lambda t, u: t.add_(u),
                                lambda t, u: t.mul_(u)])
def test_in_place_broadcast_error_names_the_sizes_as_aten_does(dev, op):
    target, operand = torch.randn(3, 4), torch.randn(5)
    with pytest.raises(RuntimeError) as cpu_error:
        op(target, operand)
    with pytest.raises(RuntimeError) as device_error:
        op(target.to(dev), operand.to(dev))
    assert str(device_error.value) == str(cpu_error.value)
    assert "The size of tensor a (4) must match the size of tensor b (5)" in str(device_error.value)


# ATen checks an out= tensor for overlap with the inputs as given, before it resizes it: a
# transposed view of the input as out= is a partial overlap even though, resized, it would be
# the input itself. The device used to check the resized geometry and compute in place.
@pytest.mark.parametrize("adaptive", [False, True])
def test_out_overlapping_an_input_before_its_resize_raises_atens_error(dev, adaptive):
    def op(t):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # resize_output's deprecation warning
            return torch.mul(t, 2, out=t.t())

    x = torch.randn(4, 6)
    d = x.to(dev)
    with torchneuron.adaptive(adaptive):
        with pytest.raises(RuntimeError) as cpu_error:
            op(x)
        with pytest.raises(RuntimeError) as device_error:
            op(d)
        torchneuron.synchronize()
    assert "refer to a single memory location" in str(device_error.value)
    assert str(device_error.value) == str(cpu_error.value)
    assert torch.equal(d.cpu(), x)  # nothing written


# An out= view that its resize grows into an input's memory is not checked by ATen; the CPU
# runs it, so the result is ATen's for the same memory.
def test_out_grown_into_an_input_by_its_resize_gives_the_cpus_result(dev):
    def op(buffer):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.add(buffer[4:], 1, out=buffer[:2])
        return buffer

    buffer = torch.arange(12, dtype=torch.float32)
    assert torch.equal(op(buffer.to(dev)).cpu(), op(buffer.clone()))


# The minimum of int64 or int32 divided by -1 has no result in its dtype, and ATen's CPU kernels
# stop the process with SIGFPE on it (stock PyTorch does too). On the device it is a clear error
# that changes nothing; the same division of other values, and of int8, computes as on the CPU.
@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_division_of_the_minimum_by_minus_one_is_a_clear_error(dev, adaptive, dtype):
    minimum = torch.iinfo(dtype).min
    dividend = torch.tensor([minimum, 7, -9, 11], dtype=dtype)
    divisor = torch.tensor([-1, -1, 2, 3], dtype=dtype)
    d, v = dividend.to(dev), divisor.to(dev)
    with torchneuron.adaptive(adaptive):
        for op in (lambda a, b: a // b, lambda a, b: a % b, lambda a, b: torch.fmod(a, b),
                   lambda a, b: torch.div(a, b, rounding_mode="trunc"),
                   lambda a, b: torch.div(a, b, rounding_mode="floor"), lambda a, b: a // -1,
                   lambda a, b: a.floor_divide_(b)):
            with pytest.raises(RuntimeError, match=rf"integer division overflow in aten::\w+: "
                                                   rf"the \w+ minimum {minimum} divided by -1"):
                op(d, v)
            torchneuron.synchronize()
            assert torch.equal(d.cpu(), dividend)
            # Without the minimum where the divisor is -1: the CPU's result.
            expected = op(dividend[1:].clone(), divisor[1:])
            assert torch.equal(op(d[1:].clone(), v[1:]).cpu(), expected)
    small = torch.tensor([-128, 5], dtype=torch.int8)
    assert torch.equal((small.to(dev) // -1).cpu(), small // -1)


# An out= argument that the CPU kernel must grow, while other tensors share its storage (it is a
# slice of a larger tensor, or has slices of its own): ATen grows the shared storage in place, so
# those tensors see the result. The host path (library and fallback kernels) grows the device
# storage in place too; it used to give the out= tensor a storage of its own.
@pytest.mark.parametrize("adaptive", [False, True])
def test_a_grown_out_argument_keeps_sharing_its_storage(dev, adaptive):
    def run(d):
        whole = torch.zeros(3, 4, device=d)
        torch.lgamma(torch.full((3, 4), 3.0, device=d), out=whole[1:])  # library op
        grown = torch.zeros(4, device=d)
        head = grown[:2]
        torch.lgamma(torch.full((6,), 3.0, device=d), out=grown)
        values = torch.zeros(2, device=d)
        torch.sort(torch.arange(5.0, device=d).flip(0),
                   out=(values, torch.empty(0, dtype=torch.long, device=d)))
        return [whole, grown, head, values]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's "resized a non-empty tensor" warning
        expected = run("cpu")
        with torchneuron.adaptive(adaptive):
            got = run(dev)
    for g, e in zip(got, expected):
        assert_same(g, e)


# An out= argument that is also an input is read and written: ATen requires it to have the
# broadcast shape already (it resizes only outputs that are not inputs). The host path gives a
# tensor passed twice one host view, so ATen's identity check sees it; before, the output was
# resized and its new elements read uninitialized.
def test_an_out_argument_that_is_also_an_input_is_not_resized(dev):
    for op in (torch.igamma, torch.nextafter, torch.add, torch.xlogy):
        for d in ("cpu", dev):
            p = torch.tensor([[0.0, 0.5, 1.0, 2.0, -1.0, 3.0]], device=d)
            q = torch.rand(2, 6).to(d)
            with pytest.raises(RuntimeError,
                               match=r"output with shape \[1, 6\] doesn't match the broadcast "
                                     r"shape \[2, 6\]"):
                op(p, q, out=p)
            assert p.shape == (1, 6)


# TensorIterator checks shapes before dtypes: an in-place op whose target has the wrong shape and
# whose result type cannot be cast to it raises the shape error, on the device as on the CPU.
def test_an_in_place_op_with_a_wrong_shape_and_dtype_names_the_shape_first(dev):
    for d in ("cpu", dev):
        target = torch.tensor([5, 6, 7], device=d)
        with pytest.raises(RuntimeError,
                           match=r"output with shape \[1\] doesn't match the broadcast shape \[3\]"):
            target[:1].div_(torch.tensor([1, 2, 3], device=d))
        with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                               "output type Long"):
            target.div_(torch.tensor([1, 2, 3], device=d))


# A complex Python number with a real device tensor (`x + 1j`): the eager call cache read the
# 0-dim CPU operand as a double to fingerprint the call and raised "value cannot be converted to
# type double without overflow"; the result is the CPU's complex tensor (complex math then runs on
# the fallback).
@pytest.mark.loud_fallback
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.complex64])
def test_a_complex_number_operand_gives_the_cpus_complex_result(dev, dtype, monkeypatch):
    monkeypatch.setenv("NEURON_FALLBACK", "silent")
    x = torch.arange(3.0).to(dtype)
    for op in (lambda t: t + 1j, lambda t: t - (2 + 3j), lambda t: t * 1j,
               lambda t: t + torch.tensor(0.5j)):
        for _ in range(3):  # captured by the call cache, then replayed
            got = op(x.to(dev))
        expected = op(x)
        assert got.dtype == expected.dtype and torch.equal(got.cpu(), expected)


# ATen refuses a bool operand of sub and rsub before any other check, even where the result
# type is an integer (`t - (t > 2)`); the compiled kernel computed a result.
def test_subtracting_a_bool_tensor_raises_atens_error(dev):
    for op in (lambda t: t.sub_(t > 2), lambda t: torch.sub(t, t[:1] > 2),
               lambda t: torch.rsub(t, t > 2), lambda t: t[:1].sub_(t > 2), lambda t: t - True):
        for d in ("cpu", dev):
            t = torch.arange(1, 7).view(2, 3).to(d)
            with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool "
                                                   "tensor is not supported"):
                op(t)
            assert torch.equal(t.cpu(), torch.arange(1, 7).view(2, 3))
