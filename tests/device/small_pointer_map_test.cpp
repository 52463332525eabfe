#include "device/small_pointer_map.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace torchneuron {
namespace {

TEST(SmallPointerMap, FindsWhatWasEmplacedAndKeepsTheFirstValue) {
  int a = 0, b = 0;
  SmallPointerMap<int, std::string> map;
  EXPECT_EQ(map.find(&a), nullptr);
  EXPECT_EQ(map.emplace(&a, "first"), "first");
  EXPECT_EQ(map.emplace(&a, "second"), "first");
  ASSERT_NE(map.find(&a), nullptr);
  EXPECT_EQ(*map.find(&a), "first");
  EXPECT_EQ(map.find(&b), nullptr);
}

// Past 16 entries lookups go through the hash index: every entry, those from before the index
// existed and those after it, is found with its own value, and absent keys are not.
TEST(SmallPointerMap, EveryEntryIsFoundBeforeAndAfterTheIndexIsBuilt) {
  std::vector<int> keys(100);
  SmallPointerMap<int, size_t> map;
  for (size_t i = 0; i < keys.size(); ++i) {
    map.emplace(&keys[i], i);
    for (size_t j = 0; j <= i; ++j) {
      const size_t* found = map.find(&keys[j]);
      ASSERT_NE(found, nullptr) << "entry " << j << " of " << i + 1;
      EXPECT_EQ(*found, j);
    }
    if (i + 1 < keys.size()) {
      EXPECT_EQ(map.find(&keys[i + 1]), nullptr);
    }
  }
  EXPECT_EQ(map.emplace(&keys[40], 7), 40u);
  const SmallPointerMap<int, size_t>& constant = map;
  EXPECT_EQ(*constant.find(&keys[99]), 99u);
}

} // namespace
} // namespace torchneuron
