// Linking object code with ORC: one entry name linked twice, each copy unlinked with its last
// reference while the other keeps working.

#include <gtest/gtest.h>

#include <memory>

#include "common/binary_kernel_cases.h"
#include "fusion/compiler.h"
#include "fusion/kernel_builder.h"
#include "launcher/object_loader.h"

namespace torchneuron {
namespace {

TEST(ObjectLoader, OneEntryLinksTwiceAndUnlinksWithItsLastReference) {
  const test::BinaryCase& add = test::cases()[0];
  const fusion::ElementwiseSignature s = test::signatureOf(add.op);
  const fusion::ObjectCode object =
      fusion::compileKernel(fusion::buildElementwiseKernel(s), "twice_linked_add");
  std::shared_ptr<LoadedCode> first = loadKernelObject(object.bytes, object.entry);
  // A second copy of the same symbol (an evicted kernel still running while it is reloaded).
  std::shared_ptr<LoadedCode> second = loadKernelObject(object.bytes, object.entry);
  EXPECT_NE(first->function(), second->function());
  EXPECT_EQ(first->bytes(), object.bytes.size());
  EXPECT_TRUE(test::computesCorrectly(first->function(), add, s));
  first.reset(); // unlinks the first copy; the second keeps working
  EXPECT_TRUE(test::computesCorrectly(second->function(), add, s));
  second.reset();
  EXPECT_TRUE(
      test::computesCorrectly(loadKernelObject(object.bytes, object.entry)->function(), add, s));
}

TEST(ObjectLoader, AnObjectWithoutItsEntryIsAnErrorNamingTheEntry) {
  const fusion::ElementwiseSignature s = test::signatureOf("mul");
  const fusion::ObjectCode object =
      fusion::compileKernel(fusion::buildElementwiseKernel(s), "present_entry");
  try {
    loadKernelObject(object.bytes, "absent_entry");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("absent_entry"), std::string::npos) << error.what();
  }
}

} // namespace
} // namespace torchneuron
