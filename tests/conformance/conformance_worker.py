"""One conformance worker: runs the samples of a list of (OpInfo, dtype) pairs and appends one
JSON line per pair to a results file (read by run_conformance.py while it runs). With adaptive
on, the device side runs under the adaptive eager tracer and each sample runs several times."""
import itertools
import json
import random
import time
import warnings

import numpy

import torch
import torchneuron

from torch.testing._comparison import default_tolerances

from conformance_ops import dtype_named, opinfos_by_name

# Ops whose outputs are uninitialized memory by contract: only metadata can be compared.
UNDEFINED_VALUE_OPS = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided"}

SEED = 1234
GRAD_SEED = 4321


def seed(value):
    """torch.manual_seed without its CUDA part: CPU and device ops both draw from the default
    CPU generator, and torch.manual_seed also queues a CUDA seeding closure with a formatted
    stack trace on every call (CUDA never initializes here), a few seconds per run."""
    torch.default_generator.manual_seed(value)


def map_tensors(value, fn):
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, list):
        return [map_tensors(v, fn) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(map_tensors(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    return value


def leaves(value):
    found = []
    map_tensors(value, lambda t: found.append(t) or t)
    return found


def flatten(value):
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flatten(v)]
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in flatten(value[k])]
    return [value]


def first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def special_values_difference(cpu, device):
    """Where assert_close is blind: NaN positions (it only checks NaN against NaN when both
    sides have one) and the sign of zeros (it treats -0 == +0). None when they agree."""
    if not (cpu.dtype.is_floating_point or cpu.dtype.is_complex):
        return None
    if cpu.dtype.is_complex:
        cpu, device = (torch.view_as_real(t.resolve_conj().resolve_neg()) for t in (cpu, device))
    cpu_nan, device_nan = cpu.isnan(), device.isnan()
    if not torch.equal(cpu_nan, device_nan):
        where = (cpu_nan != device_nan).nonzero()[0].tolist()
        return (f"NaN positions differ at {int((cpu_nan != device_nan).sum())} element(s), "
                f"first at {where}: cpu {cpu[tuple(where)].item()!r}, "
                f"device {device[tuple(where)].item()!r}")
    both_zero = (cpu == 0) & (device == 0)
    cpu_sign = torch.signbit(cpu.float()) & both_zero
    device_sign = torch.signbit(device.float()) & both_zero
    if not torch.equal(cpu_sign, device_sign):
        where = (cpu_sign != device_sign).nonzero()[0].tolist()
        return (f"sign of zero differs at {int((cpu_sign != device_sign).sum())} element(s), "
                f"first at {where}: cpu {cpu[tuple(where)].item()!r}, "
                f"device {device[tuple(where)].item()!r}")
    return None


def compare_outputs(cpu_out, dev_out, dev, values=True, check_device=True):
    """None when equal (within the dtype's assert_close tolerances, with NaNs and signed zeros
    where the CPU has them), else a description of the difference."""
    cpu_flat, dev_flat = flatten(cpu_out), flatten(dev_out)
    if len(cpu_flat) != len(dev_flat):
        return f"output count differs: cpu {len(cpu_flat)}, device {len(dev_flat)}"
    for i, (c, d) in enumerate(zip(cpu_flat, dev_flat)):
        if isinstance(c, torch.Tensor):
            if not isinstance(d, torch.Tensor):
                return f"output {i}: cpu gave a tensor, device gave {type(d).__name__}"
            if check_device and c.device.type == "cpu" and d.device != dev:
                return f"output {i}: on {d.device}, expected {dev}"
            if c.shape != d.shape or c.dtype != d.dtype:
                return f"output {i}: cpu {c.dtype}{list(c.shape)}, device {d.dtype}{list(d.shape)}"
            if not values or c.layout != torch.strided:
                if c.layout != d.layout:
                    return f"output {i}: cpu layout {c.layout}, device layout {d.layout}"
                continue
            device_values = d.detach().cpu()
            try:
                torch.testing.assert_close(device_values, c.detach(), equal_nan=True,
                                           check_stride=False)
            except AssertionError as e:
                return f"output {i}: " + " ".join(str(e).split())[:300]
            special = special_values_difference(c.detach(), device_values)
            if special:
                return f"output {i}: {special}"
        elif not check_device and (isinstance(c, torch.device) or c == "cpu"):
            continue  # the device argument of a factory sample
        elif type(c) is type(d) and not isinstance(c, (int, float, complex, bool, str, type(None))):
            continue  # opaque objects (modules, callables): no value to compare
        elif c != d and not (c != c and d != d):  # NaN == NaN for this purpose
            return f"output {i}: cpu {c!r}, device {d!r}"
    return None


def gradients(op, sample_fn_out, inputs, grad_seed_outputs):
    outputs = [t for t in flatten(sample_fn_out)
               if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outputs or not inputs:
        return None, outputs
    grads = torch.autograd.grad(outputs, inputs, grad_seed_outputs(outputs), allow_unused=True)
    return grads, outputs


def to_cpu_same_layout(tensor):
    """A CPU copy of a device tensor with the same values, sizes, strides and storage offset
    (the whole storage is copied, so as_strided-style ops see the same memory), and the same
    grad requirement."""
    if tensor._base is not None and tensor.is_leaf and tensor.requires_grad:
        # A leaf view made under no_grad from a base that requires grad (istft's `window[:8]`):
        # autograd gives it no gradient of its own, unlike a plain leaf, so rebuild it the same
        # way over a copy of its base.
        base = to_cpu_same_layout(tensor._base)
        with torch.no_grad():
            return base.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset())
    source = tensor.detach()
    if source.layout != torch.strided or source.is_conj() or source.is_neg():
        copy = source.cpu()
    else:
        whole = source.as_strided((source.storage().size(),), (1,), 0)
        copy = whole.cpu().as_strided(source.size(), source.stride(), source.storage_offset())
    return copy.requires_grad_(tensor.requires_grad)


def is_cpu_device(value):
    return (isinstance(value, torch.device) and value.type == "cpu") or value == "cpu"


def warning_texts(records):
    """PyTorch's own warnings (the fallback's notices are the device's business)."""
    return {str(w.message).split(" (Triggered internally")[0] for w in records
            if not str(w.message).startswith("[fallback]")}


def cpu_copy_of(dev_sample):
    """(input, args, kwargs) of the sample as CPU copies; device arguments become "cpu"."""
    sample_input, args, kwargs = map_tensors(
        (dev_sample.input, dev_sample.args, dev_sample.kwargs), to_cpu_same_layout)
    kwargs = {k: ("cpu" if k == "device" else v) for k, v in kwargs.items()}
    args = tuple("cpu" if isinstance(a, torch.device) and a.type != "cpu" else a for a in args)
    return sample_input, args, kwargs


def seeded_output_gradients(device):
    """Random output gradients, the same numbers on every side."""
    def make(outputs):
        seed(GRAD_SEED)
        return [torch.randn(o.shape, dtype=o.dtype).to(device) for o in outputs]
    return make


def call_recording_warnings(fn):
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        result = fn()
    return result, records


def reference(op, dev_sample, side, args=None):
    """Forward outputs and input gradients of the sample run on `side` ("cpu": on a CPU copy,
    or on `args` when given; otherwise on the device sample itself); gradients None when not
    computable. Raises what the op raises."""
    if args is None:
        args = cpu_copy_of(dev_sample) if side == "cpu" else (
            dev_sample.input, dev_sample.args, dev_sample.kwargs)
    sample_input, sample_args, sample_kwargs = args
    seed(SEED)
    out = op(sample_input, *sample_args, **sample_kwargs)
    grads = None
    inputs = [t for t in leaves(args) if t.requires_grad]
    if op.supports_autograd and op.name not in UNDEFINED_VALUE_OPS:
        try:
            grads, _ = gradients(op, dev_sample.output_process_fn_grad(out), inputs,
                                 seeded_output_gradients(side))
        except Exception:
            grads = None
    return map_tensors(out, lambda t: t.detach().cpu()), \
        map_tensors(grads, lambda t: t.detach().cpu()) if grads is not None else None


def poison_freed_memory(value, device):
    """Leaves freed blocks of many sizes filled with `value` (in glibc's heap for the CPU, in
    the caching allocator for the device), so that a kernel that reads memory it never wrote
    sees different garbage in two runs."""
    sizes = list(range(1, 1025)) + list(range(1025, 1 << 16, 61))
    blocks = [torch.full((n,), value, device=device) for n in sizes]
    del blocks


def disagrees_with_itself(op, dev_sample, side):
    """True when runs of the sample on `side` differ from each other: the op reads
    uninitialized memory (e.g. as_strided_scatter's backward in PyTorch 1.13), so its values
    are undefined and there is nothing to referee."""
    results = []
    try:
        for poison in (1.0e30, -7.0e29, float("nan")):
            poison_freed_memory(poison, side)
            results.append(reference(op, dev_sample, side))
    except Exception:
        return False
    cpu = torch.device("cpu")
    return any(compare_outputs(results[0], other, cpu, check_device=False) is not None
               for other in results[1:])


def nudged(tensor, generator):
    """A copy of a floating-point tensor with every element moved by at most one ulp of its
    dtype (same grad requirement); other tensors unchanged."""
    if not tensor.dtype.is_floating_point:
        return tensor
    steps = torch.randint(-1, 2, tensor.shape, generator=generator).to(torch.float64)
    scale = 1 + steps * torch.finfo(tensor.dtype).eps
    copy = (tensor.detach().to(torch.float64) * scale).to(tensor.dtype)
    return copy.requires_grad_() if tensor.requires_grad else copy


def cpu_spread(op, dev_sample, runs=3):
    """How far the CPU's own result moves when the sample's float32 inputs move by one ulp:
    per output (and gradient), the largest absolute change over a few nudged runs."""
    base = reference(op, dev_sample, "cpu")
    generator = torch.Generator().manual_seed(SEED)
    spreads = None
    for _ in range(runs):
        nudged_args = map_tensors(cpu_copy_of(dev_sample), lambda t: nudged(t, generator))
        other = reference(op, dev_sample, "cpu", args=nudged_args)
        changes = [float((a.double() - b.double()).abs().nan_to_num(0).max()) if a.numel() else 0.0
                   for a, b in zip(float_tensors(base), float_tensors(other))]
        spreads = changes if spreads is None else [max(x, y) for x, y in zip(spreads, changes)]
    return base, spreads


def float_tensors(result):
    out, grads = result
    return [t for t in flatten(out) + flatten(grads if grads is not None else [])
            if isinstance(t, torch.Tensor) and t.dtype.is_floating_point]


def within_cpu_spread(op, dev_sample, dev):
    """A floating-point mismatch where the device differs from the CPU by no more than the CPU
    differs from itself when its inputs move by one ulp (plus the dtype's comparison
    tolerance): the sample is ill-conditioned (cov, householder_product) and any change of
    rounding, such as a sum accumulated in float64, shows up at this size on both sides. NaN
    positions and signed zeros must still agree."""
    try:
        base, spreads = cpu_spread(op, dev_sample)
        device = reference(op, dev_sample, dev)
    except Exception:
        return False
    cpu_values, dev_values = float_tensors(base), float_tensors(device)
    if len(cpu_values) != len(dev_values) or spreads is None:
        return False
    for c, d, spread in zip(cpu_values, dev_values, spreads):
        if c.shape != d.shape or special_values_difference(c, d) is not None:
            return False
        rtol, atol = default_tolerances(c.dtype)
        allowed = spread + atol + rtol * c.double().abs()
        if not bool(((d.double() - c.double()).abs().nan_to_num(0) <= allowed).all()):
            return False
    return True


# The replay and fused-kernel counters as reset_metrics() leaves them: counted before each reset.
# Replays are the tracer's (windows replayed) under the tracer, else the eager call cache's (calls
# replayed).
replays_before_reset = 0
fused_before_reset = 0


def replay_counter():
    metrics = torchneuron.metrics()
    if torchneuron.adaptive_enabled():
        return metrics["adaptive"]["replays"]
    return metrics["eager_call_cache"]["replays"]


def reset_metrics():
    """torchneuron.reset_metrics(), keeping the replays and fused kernel runs counted so far
    (replays_so_far() and fused_so_far() keep counting across it)."""
    global replays_before_reset, fused_before_reset
    replays_before_reset += replay_counter()
    fused_before_reset += torchneuron.metrics()["adaptive"]["fused_kernel_runs"]
    torchneuron.reset_metrics()


def replays_so_far():
    """Windows the tracer replayed (wholly from recorded launches), or calls the eager call cache
    replayed, in this process."""
    return replays_before_reset + replay_counter()


def fused_so_far():
    """Fused kernels the tracer ran in this process."""
    return fused_before_reset + torchneuron.metrics()["adaptive"]["fused_kernel_runs"]


def run_sample(op, dev_sample, dev, used, dtype, replays=None, fused=None):
    """The sample's outcome. With `replays` and `fused` (lists), appends the windows the tracer
    replayed and the fused kernels it ran while the device ran the sample and its result was
    compared (not while a mismatch is re-examined)."""
    before = (replays_so_far(), fused_so_far()) if replays is not None else (0, 0)
    result = compare_sample(op, dev_sample, dev, used)
    if replays is not None:
        replays.append(replays_so_far() - before[0])
        fused.append(fused_so_far() - before[1])
    return judge_mismatch(op, dev_sample, dev, dtype, result)


def run_sample_adaptive(op, dev_sample, dev, used, dtype, runs):
    """The sample run `runs` times under the tracer (the first cold, the last replayed once its
    windows recurred often enough), each run judged on its own. The outcome is the first run's
    that mismatched or raised, else the first skip, naming the run; else a pass (with an
    ill-conditioned run's detail if there was one). `replays` lists the windows each run
    replayed; the sample is `replayed` when its last run replayed any, and `fused` when its last
    run ran a fused kernel."""
    replays, fused = [], []
    results = [run_sample(op, dev_sample, dev, used, dtype, replays, fused) for _ in range(runs)]
    for outcomes in (("mismatch", "device_error"), ("skipped",)):
        index = next((i for i, r in enumerate(results) if r["outcome"] in outcomes), None)
        if index is not None:
            detail = (f"run {index + 1} of {runs} ({replays[index]} windows replayed): "
                      f"{results[index]['detail']}")
            return {**results[index], "detail": detail, "replayed": replays[-1] > 0,
                    "replays": replays, "fused": fused[-1] > 0}
    passed = next((r for r in results if r.get("ill_conditioned")), results[-1])
    return {**passed, "replayed": replays[-1] > 0, "replays": replays, "fused": fused[-1] > 0}


def judge_mismatch(op, dev_sample, dev, dtype, result):
    """A mismatch re-examined: skipped when the op reads uninitialized memory, passed when the
    sample is ill-conditioned (docs/conformance.md); any other result as it is."""
    if result["outcome"] != "mismatch" or result["detail"].startswith("device warned"):
        return result  # an extra warning is a mismatch whatever the values
    for side in ("cpu", dev):
        if disagrees_with_itself(op, dev_sample, side):
            return {"outcome": "skipped",
                    "detail": f"op reads uninitialized memory: runs on {side} differ from "
                              "each other; device vs cpu: " + result["detail"][:150]}
    if dtype.is_floating_point and within_cpu_spread(op, dev_sample, dev):
        return {"outcome": "pass", "ill_conditioned": True,
                "detail": "within the CPU's own one-ulp spread: " + result["detail"][:150]}
    return result


def compare_sample(op, dev_sample, dev, used):
    """The sample is generated on the device, as PyTorch's own device tests do (tensors a
    sample deliberately keeps on the CPU stay there); the CPU reference is a copy of it."""
    dev_input, dev_args, dev_kwargs = dev_sample.input, dev_sample.args, dev_sample.kwargs
    cpu_input, cpu_args, cpu_kwargs = cpu_copy_of(dev_sample)

    seed(SEED)
    try:
        cpu_out, cpu_warnings = call_recording_warnings(lambda: op(cpu_input, *cpu_args, **cpu_kwargs))
    except Exception as e:
        return {"outcome": "skipped", "detail": "CPU raised " + first_line(e)}

    reset_metrics()
    seed(SEED)
    try:
        dev_out, dev_warnings = call_recording_warnings(lambda: op(dev_input, *dev_args, **dev_kwargs))
    except Exception as e:
        return {"outcome": "device_error", "detail": first_line(e)}
    finally:
        record_kinds(used)

    # Results belong on the device when a device tensor or the device itself went in; factory
    # samples without a device, or with device="cpu", produce CPU tensors on purpose.
    inputs_on_device = any(t.device == dev for t in leaves((dev_input, dev_args, dev_kwargs)))
    named_devices = [v for v in list(dev_args) + list(dev_kwargs.values())
                     if isinstance(v, (torch.device, str))]
    explicit_cpu = any(is_cpu_device(v) for v in named_devices)
    names_device = any(torch.device(v) == dev for v in named_devices if not is_cpu_device(v)
                       and (isinstance(v, torch.device) or v.startswith(dev.type)))
    expect_device = (inputs_on_device or names_device) and not explicit_cpu
    difference = compare_outputs(cpu_out, dev_out, dev, values=op.name not in UNDEFINED_VALUE_OPS,
                                 check_device=expect_device)
    if difference:
        return {"outcome": "mismatch", "detail": difference}
    extra = warning_texts(dev_warnings) - warning_texts(cpu_warnings)
    if extra:
        return {"outcome": "mismatch", "detail": "device warned where the CPU did not: " + sorted(extra)[0][:200]}
    if not op.supports_autograd or op.name in UNDEFINED_VALUE_OPS:
        return {"outcome": "pass"}

    process = dev_sample.output_process_fn_grad
    cpu_inputs = [t for t in leaves((cpu_input, cpu_args, cpu_kwargs)) if t.requires_grad]
    dev_inputs = [t for t in leaves((dev_input, dev_args, dev_kwargs)) if t.requires_grad]

    try:
        cpu_grads, _ = gradients(op, process(cpu_out), cpu_inputs, seeded_output_gradients("cpu"))
    except Exception as e:
        return {"outcome": "pass", "detail": "gradients not compared: CPU backward raised " + first_line(e)}
    if cpu_grads is None:
        return {"outcome": "pass"}
    try:
        dev_grads, _ = gradients(op, process(dev_out), dev_inputs, seeded_output_gradients(dev))
    except Exception as e:
        return {"outcome": "device_error", "detail": "backward: " + first_line(e)}
    finally:
        record_kinds(used)
    if dev_grads is None:
        return {"outcome": "mismatch", "detail": "device produced no gradient graph"}
    for i, (c, d) in enumerate(zip(cpu_grads, dev_grads)):
        if (c is None) != (d is None):
            return {"outcome": "mismatch", "detail": f"gradient {i}: defined on one side only"}
        if c is not None:
            difference = compare_outputs(c, d, dev)
            if difference:
                return {"outcome": "mismatch", "detail": f"gradient {i}: {difference}"}
    return {"outcome": "pass"}


def record_kinds(used):
    metrics = torchneuron.metrics()
    for kind, count in metrics["launches"].items():
        if count:
            used["kinds"].add(kind)
    used["fallback_ops"].update(metrics["ops"]["fallback"])


def op_kind(kinds):
    for kind in ("fallback", "library", "compiled"):
        if kind in kinds:
            return kind
    return "runtime"  # views, copies and allocation only: no kernel at all


def seed_everything():
    """Sample generators draw from torch, numpy and Python's random module."""
    seed(0)
    random.seed(0)
    numpy.random.seed(0)


def sample_count(dtype, quick, adaptive):
    """Samples per OpInfo: in --quick two in float32 (the dtype most code runs in) and one in
    the others, so that `make test` covers every dtype and stays short; in --adaptive every
    float32 sample and --quick's one in the others; otherwise all (None)."""
    if quick:
        return 2 if dtype == torch.float32 else 1
    if adaptive and dtype != torch.float32:
        return 1
    return None


def run_opinfo(op, name, dtype_text, dev, quick, adaptive_runs):
    started = time.monotonic()
    record = run_samples(op, name, dtype_text, dev, quick, adaptive_runs)
    record["seconds"] = round(time.monotonic() - started, 3)
    return record


def run_samples(op, name, dtype_text, dev, quick, adaptive_runs):
    """Every sample's outcome; with `adaptive_runs`, each sample runs that many times under the
    tracer."""
    dtype = dtype_named(dtype_text)
    used = {"kinds": set(), "fallback_ops": set()}
    # Gradients only where the OpInfo supports backward in this dtype (never for integers).
    requires_grad = dtype in op.supported_backward_dtypes("cpu")
    try:
        seed_everything()
        samples = op.sample_inputs(dev, dtype, requires_grad=requires_grad)
        samples = list(itertools.islice(samples, sample_count(dtype, quick, adaptive_runs)))
        if adaptive_runs:
            # The generating ops' window runs now, not inside the first sample's first run.
            torchneuron.synchronize()
    except Exception as e:
        return {"name": name, "dtype": dtype_text, "kind": "unknown", "fallback_ops": [],
                "samples": [{"outcome": "device_error", "detail": "device sample generation raised " + first_line(e)}]}
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sample in samples:
            if adaptive_runs:
                results.append(run_sample_adaptive(op, sample, dev, used, dtype, adaptive_runs))
            else:
                results.append(run_sample(op, sample, dev, used, dtype))
    return {"name": name, "dtype": dtype_text, "kind": op_kind(used["kinds"]),
            "fallback_ops": sorted(used["fallback_ops"]), "samples": results}


def run_worker(items_file, results_file, quick, adaptive=False, eager_replay=False):
    torch.set_num_threads(1)
    with open(items_file) as f:
        items = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    ops = opinfos_by_name()
    dev = torchneuron.device()
    adaptive_runs = None
    if adaptive:
        # A window is hot after `threshold` occurrences and replays from the next one on: with
        # the default threshold (2) the three runs are cold, hot and replayed.
        torchneuron.set_adaptive(True)
        # Fused kernels compiled before the window runs, so the replayed run runs them.
        torchneuron.set_adaptive_fusion(True, wait_for_compiles=True)
        threshold = torchneuron.metrics()["adaptive"]["threshold"]
        adaptive_runs = max(3, threshold + 1)
    elif eager_replay:
        # The eager call cache captures a call the second time it recurs and replays it from the
        # third.
        threshold = None
        adaptive_runs = 3
    # In --quick (and in --adaptive's other dtypes), an OpInfo whose float32 samples all ran on
    # ATen's CPU kernel through the fallback runs no other dtype: the fallback is ATen's own
    # kernel whatever the dtype, and the quick subset spends its time where the device's own
    # kernels run (the full run does all).
    cpu_only = set()
    with open(results_file, "a") as out:
        for name, dtype in items:
            if (quick or adaptive_runs) and name in cpu_only:
                record = {"name": name, "dtype": dtype, "kind": "fallback", "fallback_ops": [],
                          "samples": [], "quick_skipped": True}
            else:
                record = run_opinfo(ops[name], name, dtype, dev, quick, adaptive_runs)
                if dtype == "float32" and record["kind"] == "fallback":
                    cpu_only.add(name)
            if adaptive_runs:
                record.update(adaptive_runs=adaptive_runs, adaptive_threshold=threshold)
            out.write(json.dumps(record) + "\n")
            out.flush()
    return 0
