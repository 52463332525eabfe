#include "device/plan_executor.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/Resize.h>

#include "cache/background_compiles.h"
#include "cache/kernel_cache.h"
#include "device/compile_warnings.h"
#include "device/device.h"
#include "device/interim_launch.h"
#include "device/list_launch.h"
#include "device/plan_replay.h"
#include "device/runtime_ops.h"
#include "fusion/kernel_builder.h"
#include "launcher/kernel_abi.h"
#include "launcher/parallel_launch.h"
#include "target/target.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

std::string kernelMlir(const PlannedLaunch& launch) {
  return launch.kind == KernelKind::kElementwise
             ? fusion::buildElementwiseKernel(launch.elementwise)
             : fusion::buildReductionKernel(launch.reduction);
}

// PyTorch 1.13's CPU lacks some float16 and bfloat16 kernels the device compiles (exp, tanh,
// sigmoid, ...): a call in those dtypes waits for its kernel instead of running interim.
bool cpuRunsEveryDtype(const LaunchPlan& plan, at::ArrayRef<at::Tensor> inputs) {
  auto narrow = [](at::ScalarType dtype) { return dtype == at::kHalf || dtype == at::kBFloat16; };
  for (const at::Tensor& t : inputs)
    if (t.defined() && narrow(t.scalar_type())) return false;
  for (const PlannedOutput& output : plan.outputs)
    if (narrow(output.dtype)) return false;
  return true;
}

// The kernel of a launch the memory tier does not hold (possibly a failed one). With `interim`
// (the call may run interim, interim_launch.h): null while it compiles in the background, or
// loaded here when the persistent store holds it. Otherwise the call compiles it and waits, as
// without interim launches; so does a key whose background compile threw (to raise that error
// here) or that could not be queued.
KernelHandle kernelOf(const PlannedLaunch& launch, bool interim) {
  if (interim && !backgroundCompileThrew(launch.key)) {
    if (compilingInBackground(launch.key)) return nullptr;
    // Its compile may have finished since the caller's lookup: the worker loads a kernel before
    // it lets go of the key, so it is loaded now (not queued a second time).
    if (KernelHandle loaded = loadedKernel(launch.key)) return loaded;
    std::string mlir;
    try {
      mlir = kernelMlir(launch);
    } catch (const std::exception&) {
      mlir.clear(); // building the module failed: kernelFor() below reports it as it does
    }
    if (!mlir.empty()) {
      if (KernelHandle stored = storedKernelIfLoadable(launch.key, mlir)) return stored;
      if (compileInBackground(launch.key, std::move(mlir))) return nullptr;
    }
  }
  return kernelFor(launch.key, [&] { return kernelMlir(launch); });
}

// `unbacked`: a device result gets an address but no memory yet (tracer/unbacked_results.h).
at::Tensor materialize(const PlannedOutput& output, at::ArrayRef<at::Tensor> given_outputs,
                       bool unbacked) {
  if (output.given >= 0) {
    const at::Tensor& tensor = given_outputs[output.given];
    if (output.resize) {
      // resize_output, then the strides ATen's TensorIterator or cat gives a resized output
      // (the inputs' layout); the same storage and offset.
      at::native::resize_output(tensor, output.sizes);
      if (tensor.strides() != at::IntArrayRef(output.strides))
        tensor.as_strided_(output.sizes, output.strides);
    }
    return tensor;
  }
  if (output.device.type() == kNeuronDeviceType && unbacked)
    return newUnbackedDeviceTensor(
        output.sizes,
        output.contiguous ? c10::nullopt : c10::optional<at::IntArrayRef>(output.strides),
        output.dtype);
  if (output.device.type() == kNeuronDeviceType)
    return output.contiguous ? newDeviceTensor(output.sizes, output.dtype)
                             : newDeviceTensor(output.sizes, output.strides, output.dtype);
  const at::TensorOptions options = at::TensorOptions().dtype(output.dtype).device(output.device);
  if (output.contiguous) return at::empty(output.sizes, options);
  return at::empty_strided(output.sizes, output.strides, options);
}

const void* addressOf(const PlannedOperand& operand, at::ArrayRef<at::Tensor> inputs,
                      at::ArrayRef<at::Tensor> outputs) {
  const at::Tensor& tensor =
      operand.role == OperandRole::kOutput ? outputs[operand.index] : inputs[operand.index];
  // Read from the storage field: data_ptr() checks, through a virtual call, what planning has
  // checked (a strided tensor with storage). One without storage still gets data_ptr()'s error.
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  const c10::Storage& storage = impl->unsafe_storage();
  if (!storage) return tensor.data_ptr();
  return static_cast<const char*>(storage.data()) +
         (impl->storage_offset() + operand.offset) * static_cast<int64_t>(impl->itemsize());
}

// The storages of `launch`'s operands of `role`: inputs read, outputs written. CPU ones too: a
// launch that waits must keep the CPU numbers it reads alive (a wrapped Python scalar dies with
// its element op's call; another CPU number is the copy inputsForWindow made).
c10::SmallVector<c10::StorageImpl*, 4> operandStorages(const PlannedLaunch& launch,
                                                       OperandRole role,
                                                       at::ArrayRef<at::Tensor> inputs,
                                                       at::ArrayRef<at::Tensor> outputs) {
  c10::SmallVector<c10::StorageImpl*, 4> storages;
  for (const PlannedOperand& operand : launch.operands) {
    if (operand.role != role) continue;
    const at::Tensor& t =
        role == OperandRole::kOutput ? outputs[operand.index] : inputs[operand.index];
    storages.push_back(t.storage().unsafeGetStorageImpl());
  }
  return storages;
}

// The window (or a list launch) runs later: a CPU number a kernel reads is copied, since the host
// may change it before then without a sync point (a wrapped Python number cannot change: it is
// kept as is).
TensorList inputsForWindow(at::ArrayRef<at::Tensor> inputs) {
  TensorList copies;
  for (const at::Tensor& t : inputs)
    copies.push_back(t.defined() && t.device().is_cpu() &&
                             !t.unsafeGetTensorImpl()->is_wrapped_number()
                         ? t.clone()
                         : t);
  return copies;
}

} // namespace

TensorList runPlanWithKernels(const LaunchPlan& plan, c10::ArrayRef<KernelHandle> kernels,
                              at::ArrayRef<at::Tensor> inputs,
                              at::ArrayRef<at::Tensor> given_outputs, LaunchCounter* launches,
                              bool deferred) {
  TensorList outputs;
  const bool unbacked = deferred && tracer::unbackedResults();
  for (const PlannedOutput& output : plan.outputs)
    outputs.push_back(materialize(output, given_outputs, unbacked));
  // In a list launch scope an element op's one launch waits to run with the others; any other
  // launch runs after them (list_launch.h).
  const bool collect = !deferred && collectingListLaunches() && plan.launches.size() == 1;
  if (!deferred && !collect) runPendingListLaunches();
  TensorList window_inputs;
  if (deferred || collect) { // runs later, after the host may have changed a CPU number
    window_inputs = inputsForWindow(inputs);
    inputs = window_inputs;
  }
  if (deferred) {
    c10::SmallVector<bool, 4> allocated;
    for (const PlannedOutput& output : plan.outputs)
      allocated.push_back(output.given < 0);
    tracer::recordPlanOperands(inputs, outputs, allocated);
  }
  for (size_t k = 0; k < plan.launches.size(); ++k) {
    const PlannedLaunch& launch = plan.launches[k];
    KernelArguments arguments;
    c10::SmallVector<uint32_t, 4> pointer_slots; // the memrefs' first slots, for a deferred launch
    for (const PlannedOperand& operand : launch.operands) {
      if (deferred) pointer_slots.push_back(static_cast<uint32_t>(arguments.size()));
      arguments.memref(addressOf(operand, inputs, outputs), operand.sizes.data(),
                       operand.strides.data(), static_cast<int64_t>(operand.sizes.size()));
    }
    for (int64_t word : launch.words)
      arguments.word(word);
    // Work that runs inline in any case is not worth asking OpenMP for its thread count.
    const bool inline_work =
        !deferred && !collect &&
        launch.range * std::max<int64_t>(launch.work_per_index, 1) < kInlineWorkLimit;
    const LaunchShape shape{launch.range, launch.work_per_index,
                            inline_work ? 1 : at::get_num_threads()};
    if (deferred) {
      tracer::RecordedOperands recorded;
      recorded.pointer_slots = pointer_slots;
      if (launch.kind == KernelKind::kElementwise)
        recorded.elementwise = launch.interned != nullptr
                                   ? launch.interned
                                   : fusion::internSignature(launch.elementwise, launch.key);
      else
        recorded.reduction = launch.interned_reduction != nullptr
                                 ? launch.interned_reduction
                                 : fusion::internSignature(launch.reduction, launch.key);
      bool places_fit = true;
      for (const PlannedOperand& operand : launch.operands) {
        const at::Tensor& t =
            operand.role == OperandRole::kOutput ? outputs[operand.index] : inputs[operand.index];
        if (t.device().is_cpu()) {
          recorded.memref_places.push_back(0);
          continue;
        }
        const c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
        recorded.storages.push_back(storage);
        const int64_t bytes =
            (t.storage_offset() + operand.offset) * static_cast<int64_t>(t.itemsize());
        // Past 255 storages a place cannot say which: the launch gets no places at all, and
        // the partition memo partitions its batch as is (partition_memo.h).
        const int64_t index = static_cast<int64_t>(recorded.storages.size());
        if (index > 0xff) places_fit = false;
        recorded.memref_places.push_back(bytes << 8 | (index & 0xff));
        if (&operand == &launch.operands.front()) recorded.output_storage = storage;
      }
      if (!places_fit) recorded.memref_places.clear();
      tracer::recordLaunch(kernels[k], arguments.slots(), arguments.size(), shape, launches,
                           recorded);
      continue;
    }
    if (collect) {
      collectListLaunch(kernels[k], arguments.slots(), arguments.size(), shape,
                        operandStorages(launch, OperandRole::kInput, inputs, outputs),
                        operandStorages(launch, OperandRole::kOutput, inputs, outputs));
      continue; // the scope's owner counts the table launch
    }
    deviceTarget().launch(kernels[k]->function, arguments.slots(), shape);
    recordLaunch(launches);
  }
  return outputs;
}

c10::optional<TensorList> executePlan(const LaunchPlan& plan, at::ArrayRef<at::Tensor> inputs,
                                      at::ArrayRef<at::Tensor> given_outputs,
                                      LaunchCounter* launches) {
  const bool deferred = tracer::deferringLaunches();
  // An eager launch may read or overwrite what recorded launches use: they run first.
  if (!deferred) tracer::runRecordedLaunches();
  c10::SmallVector<KernelHandle, 1> kernels;
  c10::optional<bool> interim; // whether the call may run interim; decided at the first miss
  bool compiling = false;
  for (const PlannedLaunch& launch : plan.launches) {
    KernelHandle kernel = loadedKernel(launch.key);
    if (kernel == nullptr) {
      if (!interim) interim = interimLaunchAllowedHere() && cpuRunsEveryDtype(plan, inputs);
      kernel = kernelOf(launch, *interim);
    }
    if (kernel == nullptr) { // compiling: every missing kernel of the plan is queued first
      compiling = true;
      continue;
    }
    if (kernel->function == nullptr) {
      warnCompileFailureOnce(launch.key, launch.describe(), kernel->failure);
      return c10::nullopt;
    }
    kernels.push_back(std::move(kernel));
  }
  if (compiling) { // the call runs on the CPU meanwhile
    requestInterimLaunch();
    return c10::nullopt;
  }
  TensorList outputs = runPlanWithKernels(plan, kernels, inputs, given_outputs, launches, deferred);
  capturePlan(plan, kernels, inputs, given_outputs, outputs, launches);
  return outputs;
}

} // namespace torchneuron
