// The hashing API: deterministic, streaming equals the algorithm's one-shot value, and
// length-prefixed strings keep field boundaries.

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "support/hash.h"

namespace torchneuron {
namespace {

TEST(Hash, KnownXxh3Values) {
  // XXH3_64bits of the empty input and of "abc" (from xxHash's reference implementation).
  EXPECT_EQ(hashBytes("", 0), 0x2d06800538d394c2ULL);
  EXPECT_EQ(hashBytes("abc", 3), 0x78af5f94892f3950ULL);
}

TEST(Hash, StreamingMatchesOneShot) {
  const std::string text = "the quick brown fox";
  Hasher h;
  h.bytes(text.data(), 4).bytes(text.data() + 4, text.size() - 4);
  EXPECT_EQ(h.digest(), hashBytes(text.data(), text.size()));
}

// A key longer than the inline buffer (256 bytes), fed in pieces that cross its end, still
// hashes as the whole input does.
TEST(Hash, StreamingPastTheInlineBufferMatchesOneShot) {
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text.push_back(static_cast<char>('a' + i * 7 % 26));
  for (size_t first : {size_t{100}, size_t{255}, size_t{256}, size_t{257}, size_t{600}}) {
    Hasher h;
    h.bytes(text.data(), first);
    for (size_t at = first; at < text.size(); at += 90)
      h.bytes(text.data() + at, std::min<size_t>(90, text.size() - at));
    EXPECT_EQ(h.digest(), hashBytes(text.data(), text.size())) << "first piece " << first;
  }
  Hasher whole;
  whole.bytes(text.data(), text.size());
  EXPECT_EQ(whole.digest(), hashBytes(text.data(), text.size()));
}

TEST(Hash, StringsAreLengthPrefixed) {
  Hasher a, b;
  a.str("ab").str("c");
  b.str("a").str("bc");
  EXPECT_NE(a.digest(), b.digest());
}

TEST(Hash, Hash128HexIs32Digits) {
  const Hash128 value = hashBytes128("abc", 3);
  EXPECT_EQ(value.hex().size(), 32u);
  EXPECT_EQ(value, hashBytes128("abc", 3));
  EXPECT_NE(value, hashBytes128("abd", 3));
}

} // namespace
} // namespace torchneuron
