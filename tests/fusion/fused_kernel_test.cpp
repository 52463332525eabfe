// Fused elementwise kernels (fusion/fused_kernel.h) and the window partitioner
// (fusion/window_partition.h) on hand-written launches: keys follow the dataflow, malformed
// signatures are refused, and dataflow between launches is read from their memrefs.

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "fusion/fused_kernel.h"
#include "fusion/op_registry.h"
#include "fusion/window_partition.h"
#include "partition_launches.h"
#include "signatures.h"

namespace torchneuron::fusion {
namespace {

// exp(x) then tanh of it, the tanh stored.
FusedElementwiseSignature expThenTanh() {
  FusedElementwiseSignature f;
  f.externals.push_back({c10::kFloat, InnerStride::kContiguous, -1});
  f.members.push_back({contiguous("exp", 1), {{FusedSource::kExternal, 0}}, false});
  f.members.push_back({contiguous("tanh", 1), {{FusedSource::kMember, 0}}, true});
  return f;
}

TEST(FusedKernel, KeyFollowsTheDataflowAndTheStores) {
  EXPECT_EQ(expThenTanh().key(), expThenTanh().key());
  FusedElementwiseSignature from_input = expThenTanh();
  from_input.members[1].sources[0] = {FusedSource::kExternal, 0}; // tanh(x), not tanh(exp(x))
  EXPECT_NE(from_input.key(), expThenTanh().key());
  FusedElementwiseSignature both_stored = expThenTanh();
  both_stored.members[0].stored = true;
  EXPECT_NE(both_stored.key(), expThenTanh().key());
}

TEST(FusedKernel, OneLoopNestStoringOnlyTheEscapingOutput) {
  const std::string mlir = buildFusedElementwiseKernel(expThenTanh());
  EXPECT_EQ(mlir.find("linalg.generic"), mlir.rfind("linalg.generic"));
  EXPECT_NE(mlir.find("outs(%s0 :"), std::string::npos);
  EXPECT_EQ(mlir.find("%a2"), std::string::npos); // one output and one input memref only
  EXPECT_EQ(expThenTanh().argumentSlots(), 2 * (3 + 2));
}

TEST(FusedKernel, MalformedSignaturesAreRefusedWithTheReason) {
  FusedElementwiseSignature forward = expThenTanh();
  forward.members[0].sources[0] = {FusedSource::kMember, 1};
  EXPECT_THROW(
      {
        try {
          buildFusedElementwiseKernel(forward);
        } catch (const std::logic_error& e) {
          EXPECT_NE(std::string(e.what()).find("member 0 reads member 1, not an earlier one"),
                    std::string::npos);
          throw;
        }
      },
      std::logic_error);
  FusedElementwiseSignature nothing_stored = expThenTanh();
  nothing_stored.members[1].stored = false;
  EXPECT_THROW(buildFusedElementwiseKernel(nothing_stored), std::logic_error);
}

// Slots of a rank-1 memref over `data` with `size` elements and `stride`.
void memref(std::vector<int64_t>& slots, const float* data, int64_t size, int64_t stride = 1) {
  const auto address = reinterpret_cast<int64_t>(data);
  slots.insert(slots.end(), {address, address, 0, size, stride});
}

TEST(WindowPartition, ChainsThroughIdenticalMemoryAndCutsAtAShiftedRead) {
  std::vector<float> x(101), a(101), b(101), c(101);
  const ElementwiseSignature exp_sig = contiguous("exp", 1), tanh_sig = contiguous("tanh", 1);
  std::vector<int64_t> s0, s1, s2;
  memref(s0, a.data(), 100), memref(s0, x.data(), 100);     // a = exp(x)
  memref(s1, b.data(), 100), memref(s1, a.data(), 100);     // b = tanh(a): fused with it
  memref(s2, c.data(), 100), memref(s2, a.data() + 1, 100); // c = tanh(a[1:]): another geometry
  const void* touched[3][2] = {{a.data(), x.data()}, {b.data(), a.data()}, {c.data(), a.data()}};
  std::vector<PartitionLaunch> launches(3);
  launches[0] = elementwiseLaunch(exp_sig, s0.data(), a.data(), false, touched[0]);
  launches[1] = elementwiseLaunch(tanh_sig, s1.data(), b.data(), true, touched[1]);
  launches[2] = elementwiseLaunch(tanh_sig, s2.data(), c.data(), true, touched[2]);
  const PartitionResult result = partitionWindow(launches);
  ASSERT_EQ(result.groups.size(), 1u);
  const FusedGroup& group = result.groups[0];
  EXPECT_EQ(group.first, 0u);
  EXPECT_EQ(group.count, 2u);
  ASSERT_EQ(group.signature.members.size(), 2u);
  EXPECT_EQ(group.signature.members[1].sources[0].kind, FusedSource::kMember);
  // a is dead outside the window, but the launch after the group reads its storage: stored.
  EXPECT_TRUE(group.signature.members[0].stored);
  EXPECT_TRUE(group.signature.members[1].stored);
  EXPECT_TRUE(result.dead_launches.empty());
}

TEST(WindowPartition, AnIntermediateNobodyReadsIsNotStoredAndADeadLoneLaunchIsSkipped) {
  std::vector<float> x(64), a(64), b(64), d(64);
  const ElementwiseSignature exp_sig = contiguous("exp", 1), tanh_sig = contiguous("tanh", 1);
  std::vector<int64_t> s0, s1, s2;
  memref(s0, a.data(), 64), memref(s0, x.data(), 64);    // a = exp(x), dead
  memref(s1, b.data(), 64), memref(s1, a.data(), 64);    // b = tanh(a), escapes
  memref(s2, d.data(), 32, 2), memref(s2, x.data(), 32); // other sizes: alone, and dead
  const void* touched[3][2] = {{a.data(), x.data()}, {b.data(), a.data()}, {d.data(), x.data()}};
  std::vector<PartitionLaunch> launches(3);
  launches[0] = elementwiseLaunch(exp_sig, s0.data(), a.data(), false, touched[0]);
  launches[1] = elementwiseLaunch(tanh_sig, s1.data(), b.data(), true, touched[1]);
  launches[2] = elementwiseLaunch(exp_sig, s2.data(), d.data(), false, touched[2]);
  const PartitionResult result = partitionWindow(launches);
  ASSERT_EQ(result.groups.size(), 1u);
  EXPECT_FALSE(result.groups[0].signature.members[0].stored);
  EXPECT_TRUE(result.groups[0].signature.members[1].stored);
  // The fused kernel's slots: b's memref, then x's (a has none).
  c10::SmallVector<int64_t, 16> slots;
  result.groups[0].gatherSlots([&](size_t i) { return launches[i].slots; }, slots);
  ASSERT_EQ(slots.size(), 10u);
  EXPECT_EQ(slots[1], reinterpret_cast<int64_t>(b.data()));
  EXPECT_EQ(slots[6], reinterpret_cast<int64_t>(x.data()));
  ASSERT_EQ(result.dead_launches.size(), 1u);
  EXPECT_EQ(result.dead_launches[0], 2u);
}

} // namespace
} // namespace torchneuron::fusion
