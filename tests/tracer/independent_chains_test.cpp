// Regrouping a batch into independent chains (tracer/independent_chains.h): steps sharing a
// storage keep their order, chains run in order of their first step, library steps are barriers.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tracer/independent_chains.h"
#include "tracer/op_window.h"

namespace torchneuron::tracer {
namespace {

// Storages are only compared by address here: any distinct addresses will do.
const void* storage(int id) {
  static char places[16];
  return &places[id];
}

// A kernel launch touching `storages`, named by its first slot; or a library step.
DeferredLaunch step(int name, std::vector<int> storages, bool library = false) {
  DeferredLaunch launch;
  launch.slots.push_back(name);
  for (int id : storages)
    launch.storages.push_back(storage(id));
  if (library) launch.host_step = [] {};
  return launch;
}

std::vector<int> names(const std::vector<DeferredLaunch>& launches) {
  std::vector<int> out;
  for (const DeferredLaunch& launch : launches)
    out.push_back(static_cast<int>(launch.slots[0]));
  return out;
}

TEST(IndependentChains, ListOrderBecomesOneRunPerParameter) {
  // Three list calls over parameters 1, 2, 3 (storages p = id, its moment = id + 4).
  std::vector<DeferredLaunch> launches;
  for (int call = 0; call < 3; ++call)
    for (int p = 1; p <= 3; ++p)
      launches.push_back(step(10 * call + p, {p, p + 4}));
  EXPECT_TRUE(regroupIndependentChains(launches));
  EXPECT_EQ(names(launches), (std::vector<int>{1, 11, 21, 2, 12, 22, 3, 13, 23}));
}

TEST(IndependentChains, AStepSharingStoragesWithTwoChainsJoinsThemInOrder) {
  std::vector<DeferredLaunch> launches{step(1, {1}),    step(2, {2}), step(3, {3}),
                                       step(4, {1, 3}), step(5, {2}), step(6, {3})};
  EXPECT_TRUE(regroupIndependentChains(launches));
  // 1, 3, 4 and 6 are one chain (4 joins 1 and 3); 2 and 5 another, after it.
  EXPECT_EQ(names(launches), (std::vector<int>{1, 3, 4, 6, 2, 5}));
}

TEST(IndependentChains, NothingMovesAcrossALibraryStep) {
  std::vector<DeferredLaunch> launches{step(1, {1}), step(2, {2}), step(3, {1}), step(4, {9}, true),
                                       step(5, {1}), step(6, {2}), step(7, {1})};
  EXPECT_TRUE(regroupIndependentChains(launches));
  EXPECT_EQ(names(launches), (std::vector<int>{1, 3, 2, 4, 5, 7, 6}));
}

TEST(IndependentChains, ABatchAlreadyInChainsIsLeftAsItIs) {
  std::vector<DeferredLaunch> launches{step(1, {1}), step(2, {1}), step(3, {2}), step(4, {2}),
                                       step(5, {3})};
  EXPECT_FALSE(regroupIndependentChains(launches));
  EXPECT_EQ(names(launches), (std::vector<int>{1, 2, 3, 4, 5}));
}

} // namespace
} // namespace torchneuron::tracer
