// The cache's trust boundary: directories checked as OpenSSH checks key paths, key files, the
// per-user key created once under a race, sealed containers (authentic, another key, another
// format, forged), and a forged kernel that is never mapped. Tests run as root: refusals use real
// chown (to nobody) and chmod. Each test runs in its own process (gtest_discover_tests).

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cache/directory_trust.h"
#include "cache/entry_authenticator.h"
#include "cache/entry_verification.h"
#include "cache/executable_container.h"
#include "cache/kernel_cache.h"
#include "cache/persistent_store.h"
#include "common/binary_kernel_cases.h"
#include "fusion/compiler.h"
#include "fusion/kernel_signature.h"

namespace torchneuron {
namespace {

constexpr uid_t kNobody = 65534;

std::vector<std::string>& warnings() {
  static std::vector<std::string> seen;
  return seen;
}

class CacheTrustTest : public ::testing::Test {
protected:
  void SetUp() override {
    char pattern[] = "/tmp/neuron-trust-test-XXXXXX";
    root_ = mkdtemp(pattern);
    unsetenv("NEURON_CACHE_KEY_FILE");
    setCacheWarningHandler([](const std::string& text) { warnings().push_back(text); });
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }

  std::string directory(const std::string& name, mode_t mode = 0700) {
    const std::string path = root_ + "/" + name;
    EXPECT_EQ(mkdir(path.c_str(), 0700), 0) << path;
    chmod(path.c_str(), mode);
    return path;
  }

  std::string root_;
};

TEST_F(CacheTrustTest, PrivateDirectoriesUnderTmpAreAcceptedAndCreatedPrivate) {
  std::string resolved;
  EXPECT_EQ(preparePrivateDirectory(root_, &resolved), ""); // mkdtemp: 0700 under sticky /tmp
  EXPECT_EQ(preparePrivateDirectory(root_ + "/new/cache", &resolved), "");
  struct stat info;
  ASSERT_EQ(stat((root_ + "/new/cache").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0700u);
}

TEST_F(CacheTrustTest, ForeignOwnedGroupOrWorldWritableDirectoriesAreRefused) {
  std::string resolved;
  const std::string world = directory("world", 0777);
  EXPECT_NE(
      preparePrivateDirectory(world, &resolved).find(world + " is writable by others (mode 0777)"),
      std::string::npos);
  const std::string group = directory("group", 0775);
  EXPECT_NE(preparePrivateDirectory(group, &resolved).find("writable by its group (mode 0775)"),
            std::string::npos);
  const std::string foreign = directory("foreign");
  ASSERT_EQ(chown(foreign.c_str(), kNobody, kNobody), 0);
  EXPECT_NE(preparePrivateDirectory(foreign, &resolved).find("is owned by uid 65534"),
            std::string::npos);
  // Inside a world-writable parent that is not sticky, even the user's own directory is refused:
  // anyone could rename it and put their own in its place.
  const std::string inside = directory("world/mine");
  EXPECT_NE(preparePrivateDirectory(inside, &resolved).find(world + " is writable by others"),
            std::string::npos);
  // A sticky world-writable parent is accepted only when root owns it.
  const std::string sticky = directory("sticky", 01777);
  ASSERT_EQ(chown(sticky.c_str(), kNobody, kNobody), 0);
  const std::string under_sticky = directory("sticky/mine");
  EXPECT_NE(preparePrivateDirectory(under_sticky, &resolved).find("owned by uid 65534"),
            std::string::npos);
}

TEST_F(CacheTrustTest, SymbolicLinksAreCheckedAtTheirTarget) {
  const std::string world = directory("world", 0777);
  const std::string link = root_ + "/link";
  ASSERT_EQ(symlink(world.c_str(), link.c_str()), 0);
  std::string resolved;
  const std::string problem = preparePrivateDirectory(link, &resolved);
  EXPECT_NE(problem.find(link + " resolves to " + world), std::string::npos) << problem;
  // A link to a private directory is accepted, and the store then uses the resolved path only.
  const std::string mine = directory("mine");
  const std::string good_link = root_ + "/good-link";
  ASSERT_EQ(symlink(mine.c_str(), good_link.c_str()), 0);
  PersistentStore store(good_link, 0);
  EXPECT_EQ(store.problem(), "");
  EXPECT_EQ(store.directory(), mine);
  // A subdirectory of the cache that is a link (to anywhere) is refused.
  const std::string other = directory("other");
  ASSERT_EQ(symlink(other.c_str(), (other + "-cache-locks").c_str()), 0);
  const std::string cache = directory("cache");
  ASSERT_EQ(symlink(other.c_str(), (cache + "/locks").c_str()), 0);
  EXPECT_NE(PersistentStore(cache, 0).problem().find(cache + "/locks is a symbolic link"),
            std::string::npos);
}

TEST_F(CacheTrustTest, TheDefaultDirectoryComesFromThePasswdEntryWithoutHome) {
  unsetenv("NEURON_CACHE_DIR");
  unsetenv("HOME");
  const std::string home = getpwuid(getuid())->pw_dir;
  EXPECT_EQ(defaultCacheDirectory(), home + "/.cache/torchneuron");
  setenv("HOME", "", 1);
  EXPECT_EQ(defaultCacheDirectory(), home + "/.cache/torchneuron");
  setenv("NEURON_CACHE_DIR", "/somewhere", 1);
  EXPECT_EQ(defaultCacheDirectory(), "/somewhere");
}

TEST_F(CacheTrustTest, KeyFilesMustBePrivateRegularFilesOfThisUser) {
  const std::string keys = directory("keys");
  const std::string key = keys + "/cluster.key";
  ASSERT_EQ(writeNewKeyFile(key), "");
  EXPECT_NE(writeNewKeyFile(key).find("exists already"), std::string::npos);
  struct stat info;
  ASSERT_EQ(stat(key.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  std::string why;
  auto loaded = EntryAuthenticator::fromKeyFile(key, &why);
  ASSERT_TRUE(loaded) << why;
  EXPECT_TRUE(EntryAuthenticator::fromKeyFile(key, &why)); // same key, same id
  EXPECT_EQ(EntryAuthenticator::fromKeyFile(key, &why)->keyId(), loaded->keyId());
  chmod(key.c_str(), 0400);
  EXPECT_TRUE(EntryAuthenticator::fromKeyFile(key, &why)) << why;
  chmod(key.c_str(), 0644);
  EXPECT_FALSE(EntryAuthenticator::fromKeyFile(key, &why));
  EXPECT_NE(why.find(key + " has mode 0644"), std::string::npos) << why;
  chmod(key.c_str(), 0600);
  ASSERT_EQ(chown(key.c_str(), kNobody, kNobody), 0);
  EXPECT_FALSE(EntryAuthenticator::fromKeyFile(key, &why));
  EXPECT_NE(why.find("owned by uid 65534"), std::string::npos) << why;
  // A key in a directory others can write: anyone could replace it.
  const std::string open_dir = directory("open", 0777);
  ASSERT_EQ(writeNewKeyFile(open_dir + "/k"), "");
  EXPECT_FALSE(EntryAuthenticator::fromKeyFile(open_dir + "/k", &why));
  EXPECT_NE(why.find("writable by others"), std::string::npos) << why;
  std::ofstream(keys + "/garbage") << "not a key\n";
  chmod((keys + "/garbage").c_str(), 0600);
  EXPECT_FALSE(EntryAuthenticator::fromKeyFile(keys + "/garbage", &why));
  EXPECT_NE(why.find("does not hold a key"), std::string::npos) << why;
}

TEST_F(CacheTrustTest, AKeyFileWithAnOpenModeTurnsTheStoreOff) {
  const std::string key = directory("keys") + "/k";
  ASSERT_EQ(writeNewKeyFile(key), "");
  chmod(key.c_str(), 0644);
  setenv("NEURON_CACHE_KEY_FILE", key.c_str(), 1);
  PersistentStore store(directory("cache"), 0);
  EXPECT_NE(store.problem().find("NEURON_CACHE_KEY_FILE: " + key + " has mode 0644"),
            std::string::npos)
      << store.problem();
  ExecutableContainer c;
  c.kernels = {{"k", "slots-v1"}};
  c.object.assign(64, 'o');
  EXPECT_FALSE(store.put(std::string(32, 'a'), c.serialize()));
  EXPECT_EQ(store.stats().entries, 0);
}

TEST_F(CacheTrustTest, ThePerUserKeyIsCreatedOnceWhenProcessesRace) {
  const std::string cache = directory("cache");
  std::vector<pid_t> children;
  int pipes[8][2];
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(pipe(pipes[i]), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      std::string why;
      auto key = EntryAuthenticator::forCacheDirectory(cache, &why);
      const std::string id = key ? keyIdHex(key->keyId()) : "error: " + why;
      _exit(write(pipes[i][1], id.data(), id.size()) == static_cast<ssize_t>(id.size()) ? 0 : 1);
    }
    children.push_back(pid);
  }
  std::vector<std::string> ids;
  for (int i = 0; i < 8; ++i) {
    int status = 0;
    waitpid(children[i], &status, 0);
    char buffer[256] = {};
    close(pipes[i][1]);
    ASSERT_GT(read(pipes[i][0], buffer, sizeof buffer - 1), 0);
    close(pipes[i][0]);
    ids.push_back(buffer);
  }
  for (const std::string& id : ids)
    EXPECT_EQ(id, ids[0]);
  struct stat info;
  ASSERT_EQ(lstat((cache + "/" + kUserKeyFileName).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
  // No temporary file is left behind.
  EXPECT_EQ(std::system(("test $(ls -A " + cache + " | wc -l) -eq 1").c_str()), 0);
}

ExecutableContainer sampleContainer() {
  ExecutableContainer c;
  c.engine_version = kEngineVersion;
  c.key_material = "module {}";
  c.kernels = {{"kernel_a", "slots-v1"}, {"kernel_b", "slots-v1"}};
  c.object.assign(512, 'o');
  return c;
}

EntryAuthenticator::Key keyOf(unsigned char fill) {
  EntryAuthenticator::Key key;
  key.fill(fill);
  return key;
}

TEST_F(CacheTrustTest, ProgramsRoundTripAndBadReferencesAreRejected) {
  ExecutableContainer c = sampleContainer();
  ProgramBuffer scratch;
  scratch.kind = ProgramBuffer::Kind::kScratch;
  scratch.element_bytes = 4;
  scratch.size_slots = {3, 4};
  ProgramBuffer input;
  input.slot = 0;
  ProgramStep mm;
  mm.kind = ProgramStep::Kind::kLibrary;
  mm.library_op = "aten::mm";
  mm.operands = {0, 1};
  ProgramStep second;
  second.kernel = 1;
  second.operands = {1};
  c.program.buffers = {input, scratch};
  c.program.steps = {ProgramStep{}, mm, second};
  std::string why;
  const auto parsed = parseContainer(c.serialize(), &why);
  ASSERT_TRUE(parsed) << why;
  EXPECT_EQ(describeProgram(parsed->program), "3 steps: kernel 0, aten::mm, kernel 1; 2 buffers");
  EXPECT_EQ(parsed->program.buffers[1].size_slots, (std::vector<uint32_t>{3, 4}));
  // Not something this engine runs yet: verification says so.
  LoadRequirements wanted{kEngineVersion, "", "", "", "", "module {}"};
  EXPECT_NE(verifyContainer(*parsed, wanted).find("a program this engine cannot run"),
            std::string::npos);

  ExecutableContainer bad_kernel = c;
  bad_kernel.program.steps[2].kernel = 2;
  EXPECT_FALSE(parseContainer(bad_kernel.serialize(), &why));
  EXPECT_NE(why.find("kernel 2 is not in the kernel table"), std::string::npos) << why;
  ExecutableContainer bad_operand = c;
  bad_operand.program.steps[1].operands = {7};
  EXPECT_FALSE(parseContainer(bad_operand.serialize(), &why));
  EXPECT_NE(why.find("operand outside the buffer plan"), std::string::npos) << why;
  ExecutableContainer bad_name = c;
  bad_name.program.steps[1].library_op = "aten::mm\n; rm -rf";
  EXPECT_FALSE(parseContainer(bad_name.serialize(), &why));
  EXPECT_NE(why.find("bad op name"), std::string::npos) << why;
  ExecutableContainer empty = c;
  empty.program.steps.clear();
  EXPECT_FALSE(parseContainer(empty.serialize(), &why));
  EXPECT_NE(why.find("without steps"), std::string::npos) << why;
}

TEST_F(CacheTrustTest, SealsTellAuthenticForeignOldAndForgedEntriesApart) {
  const EntryAuthenticator mine(keyOf(1)), theirs(keyOf(2));
  EXPECT_NE(mine.keyId(), theirs.keyId());
  std::vector<char> bytes = sampleContainer().serialize();
  EXPECT_EQ(checkSeal(bytes, mine), SealStatus::kOtherKey); // unsigned
  ASSERT_TRUE(sealContainer(bytes, mine));
  EXPECT_EQ(checkSeal(bytes, mine), SealStatus::kAuthentic);
  EXPECT_EQ(checkSeal(bytes, theirs), SealStatus::kOtherKey);
  EXPECT_EQ(parseContainer(bytes, nullptr)->key_id, mine.keyId());

  // Replaced object code under the old seal, checksum recomputed: the MAC catches it.
  ExecutableContainer forged = *parseContainer(bytes, nullptr);
  forged.object.assign(512, 'X');
  std::string why;
  EXPECT_EQ(checkSeal(forged.serialize(), mine, &why), SealStatus::kForged);
  EXPECT_NE(why.find("does not verify"), std::string::npos);
  // A flipped bit without a new checksum is damage, not forgery.
  std::vector<char> flipped = bytes;
  flipped[40] ^= 1;
  EXPECT_EQ(checkSeal(flipped, mine), SealStatus::kDamaged);
  EXPECT_FALSE(sealContainer(flipped, mine));
  // A version 1 container (as this engine used to write it) is another format.
  std::vector<char> old = bytes;
  old[4] = 1;
  EXPECT_EQ(checkSeal(old, mine), SealStatus::kOtherFormat);
  EXPECT_FALSE(parseContainer(old, &why));
  EXPECT_EQ(why, "format version 1 (this engine reads 2)");
}

TEST_F(CacheTrustTest, StoreMissesForeignEntriesQuietlyAndRejectsForgedOnesLoudly) {
  const std::string cache = directory("cache");
  PersistentStore store(cache, 0);
  ASSERT_EQ(store.problem(), "");
  // Each entry under its own key (ownStoreKey: its compile inputs hashed), as the cache files
  // them; the old-format one cannot be parsed, so any key does.
  ExecutableContainer sample = sampleContainer();
  const std::string good = ownStoreKey(sample), old(32, 'b');
  ASSERT_TRUE(store.put(good, sample.serialize()));
  std::vector<char> v1 = *store.get(good);
  v1[4] = 1;
  ASSERT_TRUE(store.putVerbatim(old, v1));
  sample.key_material += " // compiled elsewhere";
  const std::string foreign = ownStoreKey(sample);
  std::vector<char> signed_elsewhere = sample.serialize();
  ASSERT_TRUE(sealContainer(signed_elsewhere, EntryAuthenticator(keyOf(9))));
  ASSERT_TRUE(store.putVerbatim(foreign, signed_elsewhere));
  ExecutableContainer tampered = *parseContainer(*store.get(good), nullptr);
  tampered.object.assign(512, 'X');
  tampered.key_material += " // tampered";
  const std::string forged = ownStoreKey(tampered);
  ASSERT_TRUE(store.putVerbatim(forged, tampered.serialize()));
  warnings().clear();

  StoreRead read;
  EXPECT_TRUE(store.get(good, &read));
  EXPECT_EQ(read, StoreRead::kFound);
  EXPECT_FALSE(store.get(old, &read));
  EXPECT_EQ(read, StoreRead::kForeign);
  EXPECT_FALSE(store.get(foreign, &read));
  EXPECT_EQ(read, StoreRead::kForeign);
  EXPECT_TRUE(warnings().empty()) << warnings()[0];
  EXPECT_FALSE(store.get(forged, &read));
  EXPECT_EQ(read, StoreRead::kRejected);
  EXPECT_FALSE(store.get(forged, &read));
  ASSERT_EQ(warnings().size(), 1u);
  EXPECT_NE(warnings()[0].find("failed authentication"), std::string::npos) << warnings()[0];
  const PersistentStoreStats stats = store.stats();
  EXPECT_EQ(stats.foreign, 2);
  EXPECT_EQ(stats.forged, 2);
  std::string problem;
  std::map<std::string, std::string> seals;
  for (const StoredEntryInfo& e : store.list(&problem)) {
    seals[e.key] = e.seal;
    EXPECT_EQ(e.problem.empty(), e.key != forged) << e.key << ": " << e.problem;
  }
  EXPECT_EQ(
      seals,
      (std::map<std::string, std::string>{
          {good, "authentic"}, {old, "other format"}, {foreign, "other key"}, {forged, "FORGED"}}));
  EXPECT_EQ(problem, "");
}

// The kernel cache over a forged entry: the real entry of `add`, its object code replaced by
// code that subtracts (compiled under add's own symbol), the checksum recomputed. `sign`: sealed
// with the store's key too, as only a holder of the key can.
class ForgedKernelTest : public CacheTrustTest {
protected:
  void plantForgedAdd(bool sign) {
    setenv("NEURON_CACHE_DIR", directory("cache").c_str(), 1);
    unsetenv("NEURON_CACHE");
    const fusion::ElementwiseSignature add = test::signatureOf("add");
    const fusion::ElementwiseSignature sub = test::signatureOf("sub");
    // Compiled in a child, which writes the real entry: this process's memory tier stays empty.
    const pid_t pid = fork();
    if (pid == 0) {
      const bool compiled = test::kernelOf(add)->function != nullptr;
      flushPersistentWrites(); // _exit() skips the exit handler that would write it
      _exit(compiled ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    PersistentStore* store = PersistentStore::fromEnvironment();
    ASSERT_NE(store, nullptr);
    const std::string key = persistentKeyFor(add.key(), fusion::buildElementwiseKernel(add));
    // Present when this process's store is the child's (each case runs in its own process, as
    // ctest runs them; the process's store is made once, from the first NEURON_CACHE_DIR).
    const std::optional<std::vector<char>> stored = store->get(key);
    ASSERT_TRUE(stored) << "the child's entry is not in this process's store";
    std::optional<ExecutableContainer> parsed = parseContainer(*stored, nullptr);
    ASSERT_TRUE(parsed);
    ExecutableContainer entry = *parsed;
    entry.object = fusion::compileKernel(fusion::buildElementwiseKernel(sub),
                                         fusion::kernelEntryName(add.key()))
                       .bytes;
    ASSERT_TRUE(sign ? store->put(key, entry.serialize())
                     : store->putVerbatim(key, entry.serialize()));
    resetKernelCacheCounters();
    warnings().clear();
  }
  const test::BinaryCase& caseOf(const char* op) {
    for (const test::BinaryCase& c : test::cases())
      if (std::string(c.op) == op) return c;
    std::abort();
  }
};

TEST_F(ForgedKernelTest, AForgedEntryIsNeverMapped) {
  plantForgedAdd(/*sign=*/false);
  const fusion::ElementwiseSignature add = test::signatureOf("add");
  const KernelHandle kernel = test::kernelOf(add);
  ASSERT_NE(kernel->function, nullptr);
  EXPECT_TRUE(test::computesCorrectly(kernel, caseOf("add"), add));
  const KernelCacheStats stats = kernelCacheStats();
  EXPECT_EQ(stats.persistent_rejected, 1);
  EXPECT_EQ(stats.persistent_hits, 0);
  EXPECT_EQ(stats.compiles, 1);
  ASSERT_EQ(warnings().size(), 1u);
  EXPECT_NE(warnings()[0].find("failed authentication"), std::string::npos) << warnings()[0];
}

// The control: the same forgery, sealed with the key, is mapped and subtracts. The MAC is what
// keeps the planted code out above.
TEST_F(ForgedKernelTest, TheSameForgerySignedWithTheKeyWouldRun) {
  plantForgedAdd(/*sign=*/true);
  const fusion::ElementwiseSignature add = test::signatureOf("add");
  const KernelHandle kernel = test::kernelOf(add);
  ASSERT_NE(kernel->function, nullptr);
  EXPECT_EQ(kernelCacheStats().persistent_hits, 1);
  EXPECT_FALSE(test::computesCorrectly(kernel, caseOf("add"), add));
  EXPECT_TRUE(test::computesCorrectly(kernel, caseOf("sub"), add));
}

} // namespace
} // namespace torchneuron
