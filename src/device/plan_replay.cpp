#include "device/plan_replay.h"

#include <ATen/core/Tensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/util/MaybeOwned.h>
#include <c10/util/SmallVector.h>

#include <cstring>
#include <vector>

#include "device/deferred_call_cache.h"
#include "device/eager_call_cache.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

// Where a tensor of a captured plan comes from.
struct TensorSource {
  enum Kind : uint8_t {
    kArgument,
    kListElement,
    kPlanOutput,
    kUndefined,
    kNumber
  } kind = kArgument;
  uint16_t index = 0;   // the argument, the plan, or the number (CapturedCall::numbers)
  uint16_t element = 0; // the list element, or the plan's output
};

struct CapturedPlan {
  LaunchPlan plan;
  c10::SmallVector<KernelHandle, 1> kernels;
  c10::SmallVector<TensorSource, 4> inputs;
  c10::SmallVector<TensorSource, 1> given_outputs;
  LaunchCounter* launches = nullptr;
};

} // namespace

struct CapturedCall {
  CallFingerprint fingerprint;
  size_t arguments = 0;
  std::vector<CapturedPlan> plans;
  c10::SmallVector<TensorSource, 2> returns;
  size_t list_elements = 0; // tensor-list elements the plans and returns name, counted
  // CPU numbers the call's kernel made from its number arguments (captureNumberOperand), whose
  // values the fingerprint holds: every replay reads them as they are.
  std::vector<at::Tensor> numbers;
};

namespace {

int64_t bitsOf(double value) {
  int64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// The value of a CPU 0-dim tensor (a wrapped Python number, or a scalar tensor planning reads).
int64_t cpuScalarBits(const at::Tensor& t) {
  switch (t.scalar_type()) {
  case at::kDouble:
    return bitsOf(*t.data_ptr<double>());
  case at::kFloat:
    return bitsOf(*t.data_ptr<float>());
  case at::kLong:
    return *t.data_ptr<int64_t>();
  case at::kInt:
    return *t.data_ptr<int32_t>();
  case at::kBool:
    return *t.data_ptr<bool>();
  default:
    return bitsOf(t.item<double>());
  }
}

// Writes a call's fingerprint into `Out` (push_back of int64_t words): a CallFingerprint when a
// call is captured, a FingerprintMatch when a replay checks a call against its capture.
template <typename Out> class FingerprintBuilder {
public:
  explicit FingerprintBuilder(Out& out) : out_(out) {
    out_.push_back(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  }

  // False for an argument kind the cache does not describe (the call is then not cached).
  bool add(const c10::IValue& value) {
    if (value.isTensor()) return tensor(value.toTensor()), true;
    if (value.isTensorList()) {
      const c10::List<at::Tensor> list = value.toTensorList();
      out_.push_back(1000 + static_cast<int64_t>(list.size()));
      for (const at::Tensor& t : list)
        tensor(t);
      return true;
    }
    if (value.isDouble()) return push(1, bitsOf(value.toDouble())), true;
    if (value.isInt()) return push(2, value.toInt()), true;
    if (value.isBool()) return push(3, value.toBool()), true;
    if (value.isNone()) return push(4, 0), true;
    if (value.isIntList()) {
      const auto list = value.toIntList();
      push(5, static_cast<int64_t>(list.size()));
      for (int64_t v : list)
        out_.push_back(v);
      return true;
    }
    if (value.isDevice()) {
      const c10::Device device = value.toDevice();
      return push(6, static_cast<int64_t>(device.type()) * 1000 + device.index()), true;
    }
    return false;
  }

private:
  void push(int64_t tag, int64_t value) {
    out_.push_back(tag);
    out_.push_back(value);
  }

  // Reads the TensorImpl's fields directly: no virtual call (has_storage, storage) and no
  // repeated key-set decoding of the device and layout, since every device op's call pays this.
  void tensor(const at::Tensor& t) {
    if (!t.defined()) return push(7, 0);
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    const c10::Device device = impl->device();
    const at::Layout layout = impl->layout();
    out_.push_back(8);
    out_.push_back(
        static_cast<int64_t>(t.scalar_type()) | static_cast<int64_t>(device.type()) << 8 |
        static_cast<int64_t>(device.index() + 1) << 16 | static_cast<int64_t>(layout) << 24 |
        static_cast<int64_t>(impl->is_conj()) << 32 | static_cast<int64_t>(impl->is_neg()) << 33 |
        static_cast<int64_t>(impl->is_wrapped_number()) << 34);
    if (layout != at::kStrided) return;
    const c10::IntArrayRef sizes = impl->sizes();
    const c10::IntArrayRef strides = impl->strides();
    out_.push_back(static_cast<int64_t>(sizes.size()));
    for (int64_t size : sizes)
      out_.push_back(size);
    for (int64_t stride : strides)
      out_.push_back(stride);
    out_.push_back(impl->storage_offset());
    // Which earlier argument's storage it shares (planning decides overlaps from it). A strided
    // tensor's storage field is its storage (null for one without: unsafe_storage).
    const c10::StorageImpl* storage = impl->unsafe_storage().unsafeGetStorageImpl();
    int64_t shared = -1;
    for (size_t i = 0; i < storages_.size() && shared < 0; ++i)
      if (storages_[i] == storage) shared = static_cast<int64_t>(i);
    if (shared < 0) storages_.push_back(storage);
    out_.push_back(shared);
    // Which earlier argument is the same tensor (planning resizes an output read as an input
    // with it).
    int64_t same = -1;
    for (size_t i = 0; i < impls_.size() && same < 0; ++i)
      if (impls_[i] == impl) same = static_cast<int64_t>(i);
    if (same < 0) impls_.push_back(impl);
    out_.push_back(same);
    if (!device.is_cpu() || !sizes.empty()) return;
    if (at::isComplexType(t.scalar_type())) { // `x + 1j`: both parts, exactly
      const c10::complex<double> value = t.item<c10::complex<double>>();
      out_.push_back(bitsOf(value.real()));
      out_.push_back(bitsOf(value.imag()));
    } else {
      out_.push_back(cpuScalarBits(t));
    }
  }

  Out& out_;
  c10::SmallVector<const c10::StorageImpl*, 8> storages_;
  c10::SmallVector<const c10::TensorImpl*, 8> impls_;
};

// Compares words with a captured fingerprint as they are made (no copy of the call's own).
class FingerprintMatch {
public:
  explicit FingerprintMatch(const CallFingerprint& expected) : expected_(expected) {}
  void push_back(int64_t word) {
    matches_ = matches_ && next_ < expected_.size() && expected_[next_] == word;
    ++next_;
  }
  bool matched() const { return matches_ && next_ == expected_.size(); }

private:
  const CallFingerprint& expected_;
  size_t next_ = 0;
  bool matches_ = true;
};

template <typename Out> bool fingerprintOf(c10::ArrayRef<c10::IValue> args, Out& out) {
  FingerprintBuilder<Out> builder(out);
  for (const c10::IValue& value : args)
    if (!builder.add(value)) return false;
  return true;
}

// The capture under way on this thread (between begin and end).
struct Capture {
  std::vector<c10::IValue> args;
  std::vector<TensorList> plan_outputs;
  CapturedCall call;
  bool valid = true;
};
thread_local Capture* active_capture = nullptr;

c10::optional<TensorSource> sourceOf(const Capture& capture, const at::Tensor& t) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  for (size_t n = 0; n < capture.call.numbers.size(); ++n)
    if (capture.call.numbers[n].unsafeGetTensorImpl() == impl)
      return TensorSource{TensorSource::kNumber, static_cast<uint16_t>(n), 0};
  for (size_t p = 0; p < capture.plan_outputs.size(); ++p)
    for (size_t o = 0; o < capture.plan_outputs[p].size(); ++o)
      if (capture.plan_outputs[p][o].unsafeGetTensorImpl() == impl)
        return TensorSource{TensorSource::kPlanOutput, static_cast<uint16_t>(p),
                            static_cast<uint16_t>(o)};
  for (size_t a = 0; a < capture.args.size(); ++a) {
    const c10::IValue& arg = capture.args[a];
    if (arg.isTensor() && arg.toTensor().unsafeGetTensorImpl() == impl)
      return TensorSource{TensorSource::kArgument, static_cast<uint16_t>(a), 0};
    if (arg.isTensorList()) {
      const c10::List<at::Tensor> list = arg.toTensorList();
      for (size_t e = 0; e < list.size(); ++e)
        if (list.get(e).unsafeGetTensorImpl() == impl)
          return TensorSource{TensorSource::kListElement, static_cast<uint16_t>(a),
                              static_cast<uint16_t>(e)};
    }
  }
  return c10::nullopt;
}

bool sourcesOf(Capture& capture, at::ArrayRef<at::Tensor> tensors,
               c10::SmallVectorImpl<TensorSource>& out) {
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) {
      out.push_back(TensorSource{TensorSource::kUndefined, 0, 0}); // an output the plan allocates
      continue;
    }
    c10::optional<TensorSource> source = sourceOf(capture, t);
    if (!source) return false;
    if (source->kind == TensorSource::kListElement) ++capture.call.list_elements;
    out.push_back(*source);
  }
  return true;
}

const at::Tensor& resolve(const TensorSource& source, const CapturedCall& call,
                          c10::ArrayRef<c10::IValue> args, c10::ArrayRef<TensorList> plan_outputs,
                          std::vector<at::Tensor>& list_elements) {
  static const at::Tensor undefined;
  switch (source.kind) {
  case TensorSource::kUndefined:
    return undefined;
  case TensorSource::kArgument:
    return args[source.index].toTensor();
  case TensorSource::kListElement:
    list_elements.push_back(args[source.index].toTensorList().get(source.element));
    return list_elements.back();
  case TensorSource::kNumber:
    return call.numbers[source.index];
  case TensorSource::kPlanOutput:
    break;
  }
  return plan_outputs[source.index][source.element];
}

// Tensors that borrow their TensorImpl from references that outlive them (the call's arguments
// on the stack, its plans' outputs): making and dropping them changes no reference count, each
// change a locked instruction on the op's path. A callee that keeps one copies it, and a copy
// owns its reference as usual. Released without the decrement they never took
// (c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow).
class BorrowedTensors {
public:
  BorrowedTensors() = default;
  BorrowedTensors(const BorrowedTensors&) = delete;
  BorrowedTensors& operator=(const BorrowedTensors&) = delete;
  ~BorrowedTensors() {
    for (at::Tensor& t : tensors_)
      c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(t);
  }
  void push_back(const at::Tensor& t) {
    tensors_.push_back(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(t));
  }
  at::ArrayRef<at::Tensor> tensors() const { return tensors_; }

private:
  c10::SmallVector<at::Tensor, 4> tensors_;
};

bool namedByLaterReturn(c10::ArrayRef<TensorSource> returns, size_t r) {
  for (size_t later = r + 1; later < returns.size(); ++later)
    if (returns[later].kind == returns[r].kind && returns[later].index == returns[r].index &&
        returns[later].element == returns[r].element)
      return true;
  return false;
}

} // namespace

void replayMatchedCall(const CapturedCall& call, torch::jit::Stack* stack, bool deferred) {
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, call.arguments);
  c10::SmallVector<TensorList, 2> plan_outputs;
  std::vector<at::Tensor> list_elements; // cat's inputs; references into it stay valid:
  list_elements.reserve(call.list_elements);
  for (const CapturedPlan& captured_plan : call.plans) {
    BorrowedTensors inputs, given;
    for (const TensorSource& source : captured_plan.inputs)
      inputs.push_back(resolve(source, call, args, plan_outputs, list_elements));
    for (const TensorSource& source : captured_plan.given_outputs)
      given.push_back(resolve(source, call, args, plan_outputs, list_elements));
    plan_outputs.push_back(runPlanWithKernels(captured_plan.plan, captured_plan.kernels,
                                              inputs.tensors(), given.tensors(),
                                              captured_plan.launches, deferred));
  }
  c10::SmallVector<at::Tensor, 2> results;
  for (size_t r = 0; r < call.returns.size(); ++r) {
    const TensorSource& source = call.returns[r];
    // A plan's output that no later return names is moved out: plan_outputs dies here anyway.
    if (source.kind == TensorSource::kPlanOutput && !namedByLaterReturn(call.returns, r))
      results.push_back(std::move(plan_outputs[source.index][source.element]));
    else
      results.push_back(resolve(source, call, args, plan_outputs, list_elements));
  }
  torch::jit::drop(*stack, call.arguments);
  for (at::Tensor& result : results)
    torch::jit::push(*stack, std::move(result));
}

namespace {

// The tracer's hooks (CallCacheHooks): captures are type-erased there.
std::shared_ptr<const void> endCaptureForTracer(const c10::OperatorHandle& op,
                                                const torch::jit::Stack& stack, bool ran) {
  return endCallCapture(op, stack, ran);
}

bool replayForTracer(const void* captured, const c10::OperatorHandle&, torch::jit::Stack* stack) {
  const auto& call = *static_cast<const CapturedCall*>(captured);
  if (stack->size() < call.arguments) return false;
  FingerprintMatch match(call.fingerprint);
  if (!fingerprintOf(torch::jit::last(*stack, call.arguments), match) || !match.matched())
    return false;
  replayMatchedCall(call, stack, /*deferred=*/true);
  return true;
}

} // namespace

bool fingerprintCall(c10::ArrayRef<c10::IValue> args, CallFingerprint& out) {
  return fingerprintOf(args, out);
}

const CallFingerprint& fingerprintOf(const CapturedCall& call) { return call.fingerprint; }

Hash64 fingerprintHash(const CallFingerprint& fingerprint) {
  return hashBytes(fingerprint.data(), fingerprint.size() * sizeof(int64_t));
}

size_t captureTableIndex(const c10::FunctionSchema* schema, Hash64 hash, size_t size) {
  const uint64_t mixed = hash ^ (reinterpret_cast<uintptr_t>(schema) * 0x9E3779B97F4A7C15ull);
  return (mixed ^ (mixed >> 29)) & (size - 1);
}

void beginCallCapture(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  auto* capture = new Capture();
  const size_t count = op.schema().arguments().size();
  for (const c10::IValue& value : torch::jit::last(stack, count))
    capture->args.push_back(value);
  capture->call.arguments = count;
  capture->valid = fingerprintOf(capture->args, capture->call.fingerprint);
  delete active_capture;
  active_capture = capture;
}

std::shared_ptr<const CapturedCall> endCallCapture(const c10::OperatorHandle& op,
                                                   const torch::jit::Stack& stack, bool ran) {
  std::unique_ptr<Capture> capture(active_capture);
  active_capture = nullptr;
  if (!capture || !ran || !capture->valid) return nullptr;
  const size_t returns = op.schema().returns().size();
  if (stack.size() < returns) return nullptr;
  for (size_t i = stack.size() - returns; i < stack.size(); ++i) {
    if (!stack[i].isTensor()) return nullptr;
    c10::optional<TensorSource> source = sourceOf(*capture, stack[i].toTensor());
    if (!source) return nullptr;
    if (source->kind == TensorSource::kListElement) ++capture->call.list_elements;
    capture->call.returns.push_back(*source);
  }
  return std::make_shared<const CapturedCall>(std::move(capture->call));
}

bool callCaptureActive() { return active_capture != nullptr; }

void captureNumberOperand(const at::Tensor& wrapped) {
  Capture* capture = active_capture;
  if (capture == nullptr || !capture->valid) return;
  if (capture->call.numbers.size() >= 0xffff) {
    capture->valid = false;
    return;
  }
  capture->call.numbers.push_back(wrapped);
}

void invalidateCallCapture() {
  if (active_capture != nullptr) active_capture->valid = false;
}

void installPlanReplay() {
  tracer::CallCacheHooks hooks;
  hooks.begin_capture = &beginCallCapture;
  hooks.end_capture = &endCaptureForTracer;
  hooks.replay = &replayForTracer;
  hooks.replay_kept = &replayKeptDeferredCall;
  hooks.keep = &keepDeferredCall;
  hooks.run_eager = &runWithEagerCallCache;
  tracer::setCallCacheHooks(hooks);
}

void capturePlan(const LaunchPlan& plan, c10::ArrayRef<KernelHandle> kernels,
                 at::ArrayRef<at::Tensor> inputs, at::ArrayRef<at::Tensor> given_outputs,
                 at::ArrayRef<at::Tensor> outputs, LaunchCounter* launches) {
  Capture* capture = active_capture;
  if (capture == nullptr || !capture->valid) return;
  CapturedPlan captured;
  if (capture->plan_outputs.size() >= 0xffff || !sourcesOf(*capture, inputs, captured.inputs) ||
      !sourcesOf(*capture, given_outputs, captured.given_outputs)) {
    capture->valid = false;
    return;
  }
  captured.plan = plan;
  for (PlannedLaunch& launch : captured.plan.launches)
    if (launch.kind == KernelKind::kElementwise)
      launch.interned = fusion::internSignature(launch.elementwise, launch.key);
    else
      launch.interned_reduction = fusion::internSignature(launch.reduction, launch.key);
  captured.kernels.assign(kernels.begin(), kernels.end());
  captured.launches = launches;
  capture->call.plans.push_back(std::move(captured));
  capture->plan_outputs.emplace_back(outputs.begin(), outputs.end());
}

} // namespace torchneuron
