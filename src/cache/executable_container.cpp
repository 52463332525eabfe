#include "cache/executable_container.h"

#include <cstring>

#include "support/hash.h"

namespace torchneuron {

const char* const kEngineVersion = "torchneuron-engine-4";

namespace {

constexpr char kMagic[4] = {'N', 'E', 'F', 'F'};
constexpr size_t kChecksumBytes = 16;

class Writer {
 public:
  void u32(uint32_t v) { raw(&v, sizeof v); }
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  void raw(const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    out.insert(out.end(), bytes, bytes + size);
  }
  std::vector<char> out;
};

// Bounds-checked reads: any read past the end marks the reader failed and returns zeros.
class Reader {
 public:
  Reader(const char* data, size_t size) : data_(data), size_(size) {}
  bool ok() const { return ok_; }
  bool done() const { return at_ == size_; }
  uint32_t u32() { uint32_t v = 0; raw(&v, sizeof v); return v; }
  uint64_t u64() { uint64_t v = 0; raw(&v, sizeof v); return v; }
  std::string str() {
    const uint64_t n = u64();
    if (!ok_ || n > size_ - at_) return fail(), std::string();
    std::string s(data_ + at_, n);
    at_ += n;
    return s;
  }
  void raw(void* out, size_t n) {
    if (!ok_ || n > size_ - at_) return fail();
    std::memcpy(out, data_ + at_, n);
    at_ += n;
  }

 private:
  void fail() { ok_ = false; }
  const char* data_;
  size_t size_, at_ = 0;
  bool ok_ = true;
};

}  // namespace

std::vector<char> ExecutableContainer::serialize() const {
  Writer w;
  w.raw(kMagic, sizeof kMagic);
  w.u32(kContainerFormatVersion);
  for (const std::string* field : {&engine_version, &llvm_version, &target_triple, &cpu,
                                   &cpu_features, &compile_options, &key_material})
    w.str(*field);
  w.u32(static_cast<uint32_t>(kernels.size()));
  for (const KernelTableEntry& k : kernels) {
    w.str(k.symbol);
    w.str(k.abi);
  }
  w.u64(object.size());
  w.raw(object.data(), object.size());
  const Hash128 checksum = hashBytes128(w.out.data(), w.out.size());
  w.u64(checksum.low);
  w.u64(checksum.high);
  return std::move(w.out);
}

std::optional<ExecutableContainer> parseContainer(const std::vector<char>& bytes, std::string* why) {
  auto reject = [&](const char* reason) {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (bytes.size() < sizeof kMagic + 4 + kChecksumBytes) return reject("truncated: shorter than a header");
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return reject("bad magic");
  const size_t body = bytes.size() - kChecksumBytes;
  Hash128 stored;
  std::memcpy(&stored.low, bytes.data() + body, 8);
  std::memcpy(&stored.high, bytes.data() + body + 8, 8);
  if (hashBytes128(bytes.data(), body) != stored) return reject("checksum mismatch");
  Reader r(bytes.data() + sizeof kMagic, body - sizeof kMagic);
  if (r.u32() != kContainerFormatVersion) return reject("unknown format version");
  ExecutableContainer c;
  for (std::string* field : {&c.engine_version, &c.llvm_version, &c.target_triple, &c.cpu,
                             &c.cpu_features, &c.compile_options, &c.key_material})
    *field = r.str();
  const uint32_t count = r.u32();
  if (!r.ok() || count > 1024) return reject("bad kernel table");
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    KernelTableEntry k;
    k.symbol = r.str();
    k.abi = r.str();
    c.kernels.push_back(std::move(k));
  }
  const uint64_t object_size = r.u64();
  if (!r.ok() || object_size > body) return reject("bad object size");
  c.object.resize(object_size);
  r.raw(c.object.data(), object_size);
  if (!r.ok() || !r.done()) return reject("fields out of bounds");
  return c;
}

std::string verifyContainer(const ExecutableContainer& c, const LoadRequirements& w) {
  if (c.engine_version != w.engine_version) return "engine version " + c.engine_version;
  if (c.llvm_version != w.llvm_version) return "LLVM version " + c.llvm_version;
  if (c.target_triple != w.target_triple) return "target " + c.target_triple;
  if (c.cpu_features != w.cpu_features) return "CPU features differ";
  if (c.compile_options != w.compile_options) return "compile options differ";
  if (c.key_material != w.key_material) return "key material differs (a hash collision or a forged entry)";
  if (c.kernels.empty() || c.object.empty()) return "no kernel";
  return "";
}

}  // namespace torchneuron
