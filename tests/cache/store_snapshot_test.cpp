// What the store's snapshot may answer without opening the database (src/cache/store_snapshot.h):
// absence only while the generation is the snapshot's, or while this process's own write that
// started from it is under way; after that write, what it stored is known present, and after a
// failed one nothing is known.

#include "cache/store_snapshot.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/test_directory.h"

namespace torchneuron {
namespace {

StoreGeneration generation(const std::string& manifest, ino_t inode) {
  StoreGeneration g;
  g.current = manifest;
  g.inode = inode;
  g.modified_ns = 1000 + static_cast<int64_t>(inode);
  return g;
}

void fill(StoreSnapshot& snapshot, const StoreGeneration& g, bool complete = true) {
  StoreSnapshot::Contents contents;
  contents.generation = g;
  contents.complete = complete;
  contents.keys.insert("stored");
  contents.failures["failed"] = "v1\nrejected";
  snapshot.replace(contents);
}

TEST(StoreSnapshot, AbsenceIsKnownOnlyAtTheSnapshotsGeneration) {
  const StoreGeneration g1 = generation("MANIFEST-000005\n", 11),
                        g2 = generation("MANIFEST-000013\n", 12);
  StoreSnapshot snapshot;
  fill(snapshot, g1);
  EXPECT_TRUE(snapshot.knownAbsent("other", g1));
  EXPECT_FALSE(snapshot.knownAbsent("stored", g1));
  EXPECT_FALSE(snapshot.knownAbsent("other", g2)); // another process wrote: read the database
  StoreSnapshot partial;
  fill(partial, g1, false);
  EXPECT_FALSE(partial.knownAbsent("other", g1)); // a partial snapshot knows less
  bool known = false;
  EXPECT_EQ(snapshot.failure("failed", g1, &known).value_or(""), "v1\nrejected");
  EXPECT_TRUE(known);
  snapshot.failure("failed", g2, &known);
  EXPECT_FALSE(known);
}

TEST(StoreSnapshot, OwnWritesKeepItCurrentAndOthersMakeItStale) {
  const StoreGeneration g1 = generation("MANIFEST-000005\n", 11),
                        g2 = generation("MANIFEST-000013\n", 12),
                        g3 = generation("MANIFEST-000021\n", 13),
                        g4 = generation("MANIFEST-000029\n", 14);
  StoreSnapshot snapshot;
  fill(snapshot, g1);
  snapshot.beginWrite(g1);
  // Mid-write CURRENT already names the new MANIFEST; no other process can write meanwhile.
  EXPECT_TRUE(snapshot.knownAbsent("other", g2));
  snapshot.endWrite(true, g2, {"written"}, {{"failed-now", "v1\nno"}});
  EXPECT_TRUE(snapshot.knownAbsent("other", g2));
  EXPECT_FALSE(snapshot.knownAbsent("written", g2));
  bool known = false;
  EXPECT_EQ(snapshot.failure("failed-now", g2, &known).value_or(""), "v1\nno");
  // Another process wrote (g2 -> g3) before this process's next write (g3 -> g4): stale.
  snapshot.beginWrite(g3);
  EXPECT_FALSE(snapshot.knownAbsent("other", g4));
  snapshot.endWrite(true, g4, {"mine"}, {});
  EXPECT_FALSE(snapshot.knownAbsent("other", g4));
  snapshot.failure("failed-now", g4, &known);
  EXPECT_FALSE(known);
}

// A failed write may have stored part of its batch (a synced log whose flush failed).
TEST(StoreSnapshot, AFailedWriteLeavesItStale) {
  const StoreGeneration g1 = generation("MANIFEST-000005\n", 11),
                        g2 = generation("MANIFEST-000013\n", 12);
  StoreSnapshot snapshot;
  fill(snapshot, g1);
  snapshot.beginWrite(g1);
  snapshot.endWrite(false, g2, {"perhaps-stored"}, {});
  EXPECT_FALSE(snapshot.knownAbsent("perhaps-stored", g2));
  EXPECT_FALSE(snapshot.knownAbsent("other", g2));
  bool known = true;
  snapshot.failure("failed", g2, &known);
  EXPECT_FALSE(known);
}

TEST(StoreSnapshot, ClearedItKnowsNothing) {
  const StoreGeneration g1 = generation("MANIFEST-000005\n", 11);
  StoreSnapshot snapshot;
  fill(snapshot, g1);
  snapshot.clear();
  EXPECT_FALSE(snapshot.taken());
  EXPECT_FALSE(snapshot.knownAbsent("other", g1));
}

// A database destroyed and created again can repeat CURRENT's content, inode and modification
// time; its IDENTITY makes it another generation.
TEST(StoreGeneration, AnotherDatabaseWithTheSameCurrentIsAnotherGeneration) {
  const std::string db = testing::makeTestDirectory("neuron-generation-test-");
  std::ofstream(db + "/CURRENT") << "MANIFEST-000005\n";
  std::ofstream(db + "/IDENTITY") << "5d1e0c4a-first";
  const StoreGeneration first = readGeneration(db);
  EXPECT_EQ(first.current, "MANIFEST-000005\n");
  EXPECT_TRUE(readGeneration(db) == first);
  std::ofstream(db + "/IDENTITY", std::ios::trunc) << "9b27f310-second";
  const StoreGeneration second = readGeneration(db);
  EXPECT_EQ(second.current, first.current);
  EXPECT_EQ(second.inode, first.inode);
  EXPECT_EQ(second.modified_ns, first.modified_ns);
  EXPECT_FALSE(second == first);
}

} // namespace
} // namespace torchneuron
