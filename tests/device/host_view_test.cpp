#include "device/host_view.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>

#include "device/caching_allocator.h"
#include "device/device.h"

namespace torchneuron {
namespace {

at::Tensor deviceRange(int64_t n) {
  at::Tensor t = at::empty({n}, at::TensorOptions().device(kNeuronDeviceType).dtype(at::kFloat));
  float* data = static_cast<float*>(t.data_ptr());
  for (int64_t i = 0; i < n; ++i)
    data[i] = static_cast<float>(i);
  return t;
}

TEST(HostViewTest, AliasesDeviceMemoryWithSameLayout) {
  at::Tensor device = deviceRange(12).view({3, 4}).t();
  at::Tensor host = hostView(device);
  EXPECT_TRUE(host.is_cpu());
  EXPECT_EQ(host.data_ptr(), device.data_ptr());
  EXPECT_EQ(host.sizes(), device.sizes());
  EXPECT_EQ(host.strides(), device.strides());
  host.fill_(7.0f);
  EXPECT_EQ(static_cast<float*>(device.data_ptr())[5], 7.0f);
}

TEST(HostViewTest, ViewsOfOneStorageShareOneHostStorage) {
  at::Tensor base = deviceRange(8);
  HostAliasSet aliases;
  at::Tensor a = aliases.toHost(base.narrow(0, 0, 4));
  at::Tensor b = aliases.toHost(base.narrow(0, 2, 4));
  EXPECT_TRUE(a.storage().is_alias_of(b.storage()));
}

TEST(HostViewTest, HostResultAliasingAnArgumentComesBackAsADeviceView) {
  at::Tensor base = deviceRange(8);
  HostAliasSet aliases;
  at::Tensor host = aliases.toHost(base);
  at::Tensor back = aliases.toDevice(host.narrow(0, 3, 2), base.device());
  EXPECT_EQ(back.device().type(), kNeuronDeviceType);
  EXPECT_EQ(back.data_ptr(), static_cast<float*>(base.data_ptr()) + 3);
}

TEST(HostViewTest, FreshHostResultIsCopiedToTheDeviceKeepingStrides) {
  at::Tensor host = at::arange(6, at::kFloat).view({2, 3}).t().contiguous().t();
  at::Tensor device = copyHostToNewDeviceTensor(host, c10::Device(kNeuronDeviceType, 0));
  EXPECT_EQ(device.strides(), host.strides());
  EXPECT_TRUE(at::equal(hostView(device), host));
}

class RecordingProducer final : public PendingContents {
public:
  explicit RecordingProducer(float* target) : target_(target) {}
  void materialize() override {
    *target_ = 42.0f;
    ++calls;
  }
  int calls = 0;

private:
  float* target_;
};

TEST(HostViewTest, HostAccessMaterializesPendingContentsOnce) {
  at::Tensor device = deviceRange(4);
  auto producer = std::make_shared<RecordingProducer>(static_cast<float*>(device.data_ptr()));
  deviceBlockOf(device.storage())->pending = producer;
  at::Tensor host = hostView(device);
  EXPECT_EQ(host[0].item<float>(), 42.0f);
  hostView(device);
  EXPECT_EQ(producer->calls, 1);
  EXPECT_EQ(deviceBlockOf(device.storage())->pending, nullptr);
}

TEST(ScopedHostViewTest, AliasesDeviceMemoryWithSameLayout) {
  at::Tensor device = deviceRange(12).view({3, 4}).t();
  ScopedHostView scoped(device);
  at::Tensor& host = scoped.tensor();
  EXPECT_TRUE(host.is_cpu());
  EXPECT_EQ(host.data_ptr(), device.data_ptr());
  EXPECT_EQ(host.sizes(), device.sizes());
  EXPECT_EQ(host.strides(), device.strides());
  EXPECT_EQ(host.scalar_type(), at::kFloat);
  host.fill_(7.0f);
  EXPECT_EQ(static_cast<float*>(device.data_ptr())[5], 7.0f);
}

TEST(ScopedHostViewTest, ReusesItsTensorForTheNextViewWithTheNewLayoutAndDtype) {
  at::Tensor floats = deviceRange(6);
  const c10::TensorImpl* first = nullptr;
  {
    first = ScopedHostView(floats).tensor().unsafeGetTensorImpl();
  }
  at::Tensor longs =
      at::empty({2, 3}, at::TensorOptions().device(kNeuronDeviceType).dtype(at::kLong));
  ScopedHostView scoped(longs.t());
  EXPECT_EQ(scoped.tensor().unsafeGetTensorImpl(), first); // the pooled shell, not a new one
  EXPECT_EQ(scoped.tensor().scalar_type(), at::kLong);
  EXPECT_EQ(scoped.tensor().sizes(), at::IntArrayRef({3, 2}));
  EXPECT_EQ(scoped.tensor().strides(), at::IntArrayRef({1, 3}));
  EXPECT_EQ(scoped.tensor().data_ptr(), longs.data_ptr());
  EXPECT_FALSE(scoped.tensor().is_conj());
}

TEST(ScopedHostViewTest, AShellMadeInInferenceModeServesOnlyThatMode) {
  at::Tensor device = deviceRange(4);
  const c10::TensorImpl* inference_shell = nullptr;
  {
    c10::InferenceMode inference;
    ScopedHostView scoped(device);
    EXPECT_TRUE(scoped.tensor().is_inference());
    inference_shell = scoped.tensor().unsafeGetTensorImpl();
  }
  ScopedHostView scoped(device);
  EXPECT_NE(scoped.tensor().unsafeGetTensorImpl(), inference_shell);
  EXPECT_FALSE(scoped.tensor().is_inference());
  scoped.tensor().add_(1.0f); // an inference tensor would refuse this outside inference mode
  EXPECT_EQ(static_cast<float*>(device.data_ptr())[3], 4.0f);
}

TEST(ScopedHostViewTest, HoldsNoReferenceToTheDeviceStorageOnceTheScopeEnds) {
  at::Tensor device = deviceRange(4);
  const size_t before = device.storage().use_count();
  {
    ScopedHostView scoped(device);
  }
  EXPECT_EQ(device.storage().use_count(), before);
}

TEST(ScopedHostViewTest, AViewKeptPastItsScopeKeepsTheDeviceMemoryAlive) {
  at::Tensor kept;
  c10::Storage kept_storage;
  {
    at::Tensor device = deviceRange(4);
    kept = ScopedHostView(device).tensor(); // a kernel that keeps its argument
    at::Tensor also_kept = ScopedHostView(device).tensor().view({2, 2});
    kept_storage = also_kept.storage();
  } // the device tensor dies here
  const int64_t allocated = allocatorStats().allocated_bytes;
  EXPECT_TRUE(at::equal(kept, at::arange(4, at::kFloat)));
  EXPECT_EQ(static_cast<float*>(kept_storage.data())[3], 3.0f);
  kept.reset();
  kept_storage = c10::Storage();
  EXPECT_LT(allocatorStats().allocated_bytes, allocated); // released with the last view
  // The next scoped views are new shells, not the kept ones.
  at::Tensor other = deviceRange(2);
  ScopedHostView scoped(other);
  EXPECT_TRUE(at::equal(scoped.tensor(), at::arange(2, at::kFloat)));
}

} // namespace
} // namespace torchneuron
