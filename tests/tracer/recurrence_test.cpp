// Recurrence: thresholds, the hot-window trie and pinned sites (tracer/recurrence.h).

#include <gtest/gtest.h>

#include <vector>

#include "tracer/recurrence.h"

namespace torchneuron::tracer {
namespace {

Hash128 signatureOf(const std::vector<Hash64>& records) {
  return hashBytes128(records.data(), records.size() * sizeof(Hash64));
}

const SignatureStats* count(Recurrence& recurrence, const std::vector<Hash64>& records) {
  return recurrence.countWindow(signatureOf(records), records, SyncCause::kItem, "aten::x", "op");
}

TEST(Recurrence, AWindowTurnsHotAtTheThresholdAndEntersTheTrie) {
  Recurrence recurrence(3);
  const std::vector<Hash64> window{11, 12, 13};
  EXPECT_FALSE(count(recurrence, window)->hot);
  EXPECT_FALSE(count(recurrence, window)->hot);
  EXPECT_EQ(recurrence.root().child(11), nullptr);
  const SignatureStats* stats = count(recurrence, window);
  ASSERT_NE(stats, nullptr);
  EXPECT_TRUE(stats->hot);
  EXPECT_EQ(stats->occurrences, 3);
  const TrieNode* node = recurrence.root().child(11);
  ASSERT_NE(node, nullptr);
  EXPECT_FALSE(node->ends_hot_window);
  node = node->child(12)->child(13);
  ASSERT_NE(node, nullptr);
  EXPECT_TRUE(node->ends_hot_window);
  EXPECT_EQ(recurrence.counts().hot, 1);
}

TEST(Recurrence, HotWindowsShareTheirCommonPrefix) {
  Recurrence recurrence(1);
  count(recurrence, {1, 2});
  count(recurrence, {1, 2, 3});
  const TrieNode* prefix = recurrence.root().child(1)->child(2);
  EXPECT_TRUE(prefix->ends_hot_window);
  EXPECT_TRUE(prefix->child(3)->ends_hot_window);
  EXPECT_EQ(recurrence.root().children.size(), 1u);
}

TEST(Recurrence, ASiteThatKeepsMakingNewSignaturesIsPinned) {
  Recurrence recurrence(2);
  for (Hash64 i = 0; i < Recurrence::kSignaturesPerSite; ++i)
    EXPECT_NE(count(recurrence, {7, 100 + i}), nullptr);
  EXPECT_FALSE(recurrence.pinned(7));
  EXPECT_EQ(count(recurrence, {7, 999}), nullptr);
  EXPECT_TRUE(recurrence.pinned(7));
  EXPECT_EQ(recurrence.counts().pinned_sites, 1);
  // Other sites are unaffected.
  EXPECT_NE(count(recurrence, {8, 1}), nullptr);
}

TEST(Recurrence, ASiteWithAHotWindowIsNeverPinned) {
  Recurrence recurrence(2);
  count(recurrence, {7, 1});
  count(recurrence, {7, 1}); // hot
  for (Hash64 i = 0; i < 2 * Recurrence::kSignaturesPerSite; ++i)
    count(recurrence, {7, 100 + i});
  EXPECT_FALSE(recurrence.pinned(7));
}

TEST(Recurrence, MostFrequentOrdersByOccurrences) {
  Recurrence recurrence(10);
  for (int i = 0; i < 3; ++i)
    count(recurrence, {1});
  count(recurrence, {2});
  for (int i = 0; i < 5; ++i)
    count(recurrence, {3});
  const auto top = recurrence.mostFrequent(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].second.occurrences, 5);
  EXPECT_EQ(top[1].second.occurrences, 3);
  EXPECT_EQ(top[0].second.ending_op, "aten::x");
}

TEST(Recurrence, EmptyWindowsAreNotCounted) {
  Recurrence recurrence(1);
  EXPECT_EQ(count(recurrence, {}), nullptr);
  EXPECT_EQ(recurrence.counts().cold + recurrence.counts().hot, 0);
}

} // namespace
} // namespace torchneuron::tracer
