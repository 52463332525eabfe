#include "device/device.h"

#include <c10/util/Exception.h>

namespace torchneuron {

c10::DeviceIndex neuronDeviceCount() { return 1; }

void checkNeuronDeviceIndex(c10::DeviceIndex index) {
  TORCH_CHECK(index >= -1 && index < neuronDeviceCount(), "[device] invalid neuron device index ",
              static_cast<int>(index), ": torchneuron has ", static_cast<int>(neuronDeviceCount()),
              " device(s), valid indices are 0..", static_cast<int>(neuronDeviceCount()) - 1);
}

c10::Device resolveNeuronDevice(c10::optional<c10::Device> requested) {
  if (!requested.has_value()) return c10::Device(kNeuronDeviceType, 0);
  TORCH_CHECK(requested->type() == kNeuronDeviceType, "[device] expected a neuron device, got ",
              requested->str());
  checkNeuronDeviceIndex(requested->index());
  return c10::Device(kNeuronDeviceType, requested->has_index() ? requested->index() : 0);
}

} // namespace torchneuron
