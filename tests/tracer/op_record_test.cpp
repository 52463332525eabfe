// Op records: what changes a window signature and what does not (tracer/op_record.h).

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "device/caching_allocator.h"
#include "device/device.h"
#include "tracer/op_record.h"

namespace torchneuron::tracer {
namespace {

c10::OperatorHandle aten(const char* name, const char* overload) {
  auto op = c10::Dispatcher::singleton().findSchema({name, overload});
  EXPECT_TRUE(op.has_value()) << name << "." << overload;
  return *op;
}

at::Tensor onDevice(at::IntArrayRef sizes, at::ScalarType dtype = at::kFloat) {
  return at::empty(sizes, at::TensorOptions().dtype(dtype).device(kNeuronDeviceType, 0));
}

// The key of add.Tensor(a, b, alpha) as the first op of a fresh window.
Hash64 addKey(const at::Tensor& a, const at::Tensor& b, double alpha = 1.0) {
  SourceTable sources;
  const std::vector<c10::IValue> args{a, b, c10::Scalar(alpha)};
  return opRecordKey(aten("aten::add", "Tensor"), args, sources);
}

TEST(OpRecord, SizesStridesAndScalarsAreRunTimeArgumentsNotKeyMaterial) {
  const Hash64 key = addKey(onDevice({4, 8}), onDevice({4, 8}), 1.0);
  EXPECT_EQ(addKey(onDevice({16, 3}), onDevice({16, 3}), 1.0), key);
  EXPECT_EQ(addKey(onDevice({4, 8}), onDevice({4, 8}), 0.25), key);
}

TEST(OpRecord, DtypeRankLayoutAndOpChangeTheKey) {
  const Hash64 key = addKey(onDevice({4, 8}), onDevice({4, 8}));
  EXPECT_NE(addKey(onDevice({4, 8}, at::kDouble), onDevice({4, 8}, at::kDouble)), key);
  EXPECT_NE(addKey(onDevice({32}), onDevice({32})), key);
  EXPECT_NE(addKey(onDevice({8, 4}).t(), onDevice({4, 8})), key);            // strided
  EXPECT_NE(addKey(onDevice({1, 8}).expand({4, 8}), onDevice({4, 8})), key); // broadcast
  SourceTable sources;
  const std::vector<c10::IValue> args{onDevice({4, 8}), onDevice({4, 8}), c10::Scalar(1.0)};
  EXPECT_NE(opRecordKey(aten("aten::sub", "Tensor"), args, sources), key);
}

TEST(OpRecord, IntegerArgumentsAreKeyMaterial) {
  SourceTable sources;
  const at::Tensor x = onDevice({4, 8});
  const c10::OperatorHandle sum = aten("aten::sum", "dim_IntList");
  const std::vector<c10::IValue> dim0{x, std::vector<int64_t>{0}, false, c10::IValue()};
  const std::vector<c10::IValue> dim1{x, std::vector<int64_t>{1}, false, c10::IValue()};
  const std::vector<c10::IValue> keep{x, std::vector<int64_t>{0}, true, c10::IValue()};
  const Hash64 key = opRecordKey(sum, dim0, sources);
  EXPECT_NE(opRecordKey(sum, dim1, sources), key);
  EXPECT_NE(opRecordKey(sum, keep, sources), key);
}

TEST(OpRecord, OperandsAreNamedBySourceNotAddress) {
  const at::Tensor a = onDevice({8});
  const at::Tensor b = onDevice({8});
  // Two distinct inputs, whichever tensors they are, in order of first use.
  EXPECT_EQ(addKey(a, b), addKey(b, a));
  // One input used twice is another program.
  EXPECT_NE(addKey(a, a), addKey(a, b));
  // A view of an input shares its source.
  EXPECT_EQ(addKey(a, a.view({8})), addKey(a, a));

  // An operand produced by an earlier step of the window differs from a window input.
  SourceTable sources;
  const c10::OperatorHandle add = aten("aten::add", "Tensor");
  const std::vector<c10::IValue> first{a, b, c10::Scalar(1.0)};
  opRecordKey(add, first, sources);
  const at::Tensor produced = onDevice({8});
  sources.noteOutput(produced.storage(), 0, 0);
  const std::vector<c10::IValue> from_step{produced, b, c10::Scalar(1.0)};
  const std::vector<c10::IValue> from_input{onDevice({8}), b, c10::Scalar(1.0)};
  EXPECT_NE(opRecordKey(add, from_step, sources), opRecordKey(add, from_input, sources));
}

TEST(OpRecord, TheSourceTableReservesAddressesButNotMemory) {
  SourceTable sources;
  const c10::StorageImpl* impl = nullptr;
  const int64_t allocated = allocatorStats().allocated_bytes;
  {
    at::Tensor t = onDevice({1024});
    impl = t.storage().unsafeGetStorageImpl();
    sources.sourceOf(t.storage());
  }
  // The tensor is gone and its memory is free again; its storage object's address stays
  // reserved, so no new storage can take it while the table names it.
  EXPECT_EQ(allocatorStats().allocated_bytes, allocated);
  at::Tensor next = onDevice({1024});
  EXPECT_NE(next.storage().unsafeGetStorageImpl(), impl);
  EXPECT_EQ(sources.size(), 1u);
  sources.clear();
  EXPECT_EQ(sources.size(), 0u);
}

} // namespace
} // namespace torchneuron::tracer
