#pragma once
// The neuron device as PyTorch sees it: PrivateUse1 ("privateuseone" on PyTorch 1.13).

#include <c10/core/Device.h>
#include <c10/util/Optional.h>

namespace torchneuron {

constexpr c10::DeviceType kNeuronDeviceType = c10::DeviceType::PrivateUse1;

// Number of neuron devices in this process. The device target is the host CPU, so one.
c10::DeviceIndex neuronDeviceCount();

// Throws a clear error naming `index` and the device count when the index is out of range.
void checkNeuronDeviceIndex(c10::DeviceIndex index);

// The device a tensor factory should use: `requested` if given (index checked), else device 0.
c10::Device resolveNeuronDevice(c10::optional<c10::Device> requested);

} // namespace torchneuron
