#include "distributed/collective_operands.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "device/device.h"

namespace torchneuron {
namespace {

using c10d::OpType;

at::Tensor onDevice(std::vector<int64_t> sizes) {
  return at::empty(sizes, at::TensorOptions().device(kNeuronDeviceType)); // no kernel runs
}

std::string errorOf(const std::function<void()>& call) {
  try {
    call();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(CollectiveOperandsTest, DeviceTensorsBecomeHostViewsOfTheSameBytes) {
  CollectiveOperands operands(OpType::ALLREDUCE);
  at::Tensor device = onDevice({2, 3}).t();
  at::Tensor host = operands.toTransport(device);
  EXPECT_TRUE(host.is_cpu());
  EXPECT_EQ(host.data_ptr(), device.data_ptr());
  EXPECT_EQ(host.strides(), device.strides());
  EXPECT_TRUE(operands.onDevice());
}

TEST(CollectiveOperandsTest, CpuTensorsPassThrough) {
  CollectiveOperands operands(OpType::BROADCAST);
  at::Tensor cpu = at::ones({4});
  EXPECT_TRUE(operands.toTransport(cpu).is_same(cpu));
  EXPECT_FALSE(operands.onDevice());
}

TEST(CollectiveOperandsTest, ResultsMapBackToTheCallersTensors) {
  CollectiveOperands operands(OpType::ALLGATHER);
  std::vector<std::vector<at::Tensor>> outputs{{onDevice({2}), onDevice({2})}};
  std::vector<std::vector<at::Tensor>> host = operands.toTransport(outputs);
  c10::IValue mapped = operands.toCaller(c10::IValue(host[0]));
  ASSERT_TRUE(mapped.isTensorList());
  EXPECT_TRUE(mapped.toTensorList().get(1).is_same(outputs[0][1]));
  c10::IValue nested = operands.toCaller(c10::IValue(host));
  ASSERT_TRUE(nested.isList());
  EXPECT_TRUE(nested.toList().get(0).toTensorList().get(0).is_same(outputs[0][0]));
}

TEST(CollectiveOperandsTest, MixingDeviceAndCpuIsAnErrorNamingTheOp) {
  CollectiveOperands operands(OpType::ALLGATHER);
  operands.toTransport(onDevice({2}));
  EXPECT_EQ(errorOf([&] { operands.toTransport(at::ones({2})); }),
            "[distributed] all_gather mixes devices (privateuseone:0 and cpu): one collective's "
            "tensors must all be on the neuron device or all on the CPU");
}

TEST(CollectiveOperandsTest, SparseTensorsAreRefused) {
  CollectiveOperands operands(OpType::ALLREDUCE);
  const std::string error = errorOf([&] { operands.toTransport(at::ones({2, 2}).to_sparse()); });
  EXPECT_NE(error.find("[distributed] all_reduce: the neuron backend takes dense tensors"),
            std::string::npos)
      << error;
}

} // namespace
} // namespace torchneuron
