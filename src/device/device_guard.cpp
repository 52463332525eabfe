// DeviceGuardImplInterface for the neuron device. Execution is synchronous on the calling
// thread, so there is one default stream per device and events are trivially complete.

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "device/device.h"

namespace torchneuron {
namespace {

// Locking: the current device is per thread, like CUDA's, so no lock is needed.
thread_local c10::DeviceIndex current_device_index = 0;

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuronDeviceType; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device previous = getDevice();
    setDevice(device);
    return previous;
  }

  c10::Device getDevice() const override {
    return c10::Device(kNeuronDeviceType, current_device_index);
  }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kNeuronDeviceType, "[device] guard expected a neuron device, got ",
                device.str());
    checkNeuronDeviceIndex(device.index());
    if (device.has_index()) current_device_index = device.index();
  }

  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.has_index()) current_device_index = device.index();
  }

  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }

  c10::DeviceIndex deviceCount() const noexcept override { return neuronDeviceCount(); }

  // Work is complete when a kernel returns, so recording and waiting are no-ops.
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NeuronGuardImpl);

} // namespace
} // namespace torchneuron
