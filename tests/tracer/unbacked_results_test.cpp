// Unbacked results and their backing before a batch runs (tracer/unbacked_results.h,
// tracer/result_backing.h), on CPU-keyed tensors backed by the CPU allocator: the tracer's part
// does not depend on the device's allocator, only on the storage's own.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <vector>

#include "tracer/op_window.h"
#include "tracer/result_backing.h"
#include "tracer/unbacked_results.h"
#include "tracer/window_fusion.h"

namespace torchneuron::tracer {
namespace {

at::Tensor unbacked(int64_t elements) {
  return newUnbackedTensor({elements}, c10::nullopt, at::kFloat,
                           c10::DispatchKeySet(c10::DispatchKey::CPU), c10::Device(c10::kCPU),
                           c10::GetCPUAllocator());
}

// Under an address-space limit (ulimit -v) there is no reserved range: results are allocated.
constexpr const char* kNoReservation = "no unbacked range under an address-space limit";

int64_t addressOf(const at::Tensor& t) { return reinterpret_cast<int64_t>(t.data_ptr()); }

// A recorded launch with one memref: `address` in its pointer slots, then offset, size, stride.
DeferredLaunch launchOver(int64_t address, int64_t elements) {
  DeferredLaunch launch;
  launch.slots = {address, address, 0, elements, 1};
  launch.pointer_slots = {0};
  return launch;
}

TEST(UnbackedResults, AResultHasAUniqueAddressButNoMemoryUntilBacked) {
  if (!unbackedResultsAvailable()) GTEST_SKIP() << kNoReservation;
  const UnbackedStats before = unbackedStats();
  at::Tensor a = unbacked(1000);
  at::Tensor b = unbacked(1000);
  EXPECT_TRUE(isUnbacked(a.storage().unsafeGetStorageImpl()));
  EXPECT_TRUE(isUnbackedAddress(addressOf(a)));
  EXPECT_GE(addressOf(b), addressOf(a) + 4000); // disjoint ranges
  EXPECT_EQ(unbackedStats().live, before.live + 2);
  EXPECT_EQ(unbackedStats().made, before.made + 2);

  const int64_t old_address = addressOf(a);
  const int64_t displacement = backStorage(a.storage().unsafeGetStorageImpl());
  EXPECT_FALSE(isUnbacked(a.storage().unsafeGetStorageImpl()));
  EXPECT_EQ(addressOf(a), old_address + displacement);
  EXPECT_FALSE(isUnbackedAddress(addressOf(a)));
  a.fill_(2.5f); // real memory now
  EXPECT_EQ(a.sum().item<float>(), 2500.0f);
  EXPECT_EQ(unbackedStats().backed, before.backed + 1);
  EXPECT_EQ(unbackedStats().live, before.live + 1);
  b.reset();
  EXPECT_EQ(unbackedStats().live, before.live);
}

TEST(UnbackedResults, AStridedResultSpansItsStridesAndAnEmptyOneIsBacked) {
  if (!unbackedResultsAvailable()) GTEST_SKIP() << kNoReservation;
  at::Tensor strided = newUnbackedTensor({4, 3}, c10::IntArrayRef({1, 8}), at::kFloat,
                                         c10::DispatchKeySet(c10::DispatchKey::CPU),
                                         c10::Device(c10::kCPU), c10::GetCPUAllocator());
  EXPECT_EQ(strided.stride(1), 8);
  EXPECT_EQ(strided.storage().nbytes(), (3 + 2 * 8 + 1) * sizeof(float));
  EXPECT_TRUE(isUnbacked(strided.storage().unsafeGetStorageImpl()));
  at::Tensor empty = unbacked(0);
  EXPECT_FALSE(isUnbacked(empty.storage().unsafeGetStorageImpl()));
}

TEST(ResultBacking, ResultsALaunchUsesOrTheProgramHoldsGetMemoryAndTheDeadOnesDoNot) {
  if (!unbackedResultsAvailable()) GTEST_SKIP() << kNoReservation;
  at::Tensor held_by_program = unbacked(256);
  at::Tensor read_by_launch = unbacked(256);
  at::Tensor dead = unbacked(256);
  std::vector<c10::Storage> held = {held_by_program.storage(), read_by_launch.storage(),
                                    dead.storage(), read_by_launch.storage()};
  const int64_t read_at = addressOf(read_by_launch) + 64; // a view 16 elements in
  std::vector<DeferredLaunch> launches;
  launches.push_back(launchOver(read_at, 16));
  launches.push_back(launchOver(0x1000, 16)); // host memory: left alone
  const c10::StorageImpl* read_storage = read_by_launch.storage().unsafeGetStorageImpl();
  read_by_launch.reset(); // only the window and the launch's pointer name it now
  dead.reset();

  const int64_t old_read = reinterpret_cast<int64_t>(read_storage->data());
  BatchSchedule every_launch_as_recorded;
  EXPECT_EQ(backResultsTheBatchUses(launches, every_launch_as_recorded, held), 2);
  EXPECT_FALSE(isUnbacked(held_by_program.storage().unsafeGetStorageImpl()));
  EXPECT_FALSE(isUnbacked(read_storage));
  EXPECT_TRUE(isUnbacked(held[2].unsafeGetStorageImpl()));
  const int64_t new_read = reinterpret_cast<int64_t>(read_storage->data());
  EXPECT_EQ(launches[0].slots[0], new_read + (read_at - old_read));
  EXPECT_EQ(launches[0].slots[1], new_read + (read_at - old_read));
  EXPECT_EQ(launches[0].slots[3], 16); // sizes untouched
  EXPECT_EQ(launches[1].slots[0], 0x1000);
}

TEST(ResultBacking, AfterAFailureOnlyResultsTheProgramHoldsGetMemory) {
  if (!unbackedResultsAvailable()) GTEST_SKIP() << kNoReservation;
  at::Tensor kept = unbacked(64);
  at::Tensor dropped = unbacked(64);
  std::vector<c10::Storage> held = {kept.storage(), dropped.storage(), kept.storage()};
  dropped.reset();
  const UnbackedStats before = unbackedStats();
  backEscapingResults(held);
  EXPECT_TRUE(held.empty());
  EXPECT_FALSE(isUnbacked(kept.storage().unsafeGetStorageImpl()));
  kept.fill_(1.0f);
  const UnbackedStats after = unbackedStats();
  EXPECT_EQ(after.backed, before.backed + 1); // the dropped one died unbacked
  EXPECT_EQ(after.live, before.live - 2);
}

} // namespace
} // namespace torchneuron::tracer
