#include "cache/executable_container.h"

#include <cstring>

#include "fusion/codegen_fingerprint.h"
#include "support/hash.h"

namespace torchneuron {

const char* const kEngineVersion = fusion::kCodegenFingerprint; // constant-initialized

namespace {

constexpr char kMagic[4] = {'N', 'E', 'F', 'F'};
constexpr size_t kChecksumBytes = 16;
constexpr size_t kKeyIdBytes = EntryAuthenticator::kKeyIdBytes;
constexpr size_t kMacBytes = EntryAuthenticator::kMacBytes;
// The trailer: key id, MAC, checksum. The MAC covers every byte before it (the key id included).
constexpr size_t kTrailerBytes = kKeyIdBytes + kMacBytes + kChecksumBytes;
constexpr size_t kMinimumBytes = sizeof kMagic + 4 + kTrailerBytes;

// Bounds of the program section (a fused window is far smaller).
constexpr uint32_t kMaxKernels = 1024, kMaxBuffers = 4096, kMaxSteps = 4096;
constexpr uint32_t kMaxOperands = 256, kMaxSizeSlots = 16, kMaxSlotId = 65535;
constexpr size_t kMaxLibraryOpBytes = 128;

class Writer {
public:
  void u8(uint8_t v) { raw(&v, sizeof v); }
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
  uint8_t u8() {
    uint8_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  uint32_t u32() {
    uint32_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  uint64_t u64() {
    uint64_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
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
  // A count in [0, limit]; a larger one fails the reader.
  uint32_t count(uint32_t limit) {
    const uint32_t n = u32();
    if (n > limit) fail();
    return ok_ ? n : 0;
  }
  void fail() { ok_ = false; }

private:
  const char* data_;
  size_t size_, at_ = 0;
  bool ok_ = true;
};

bool isLibraryOpName(const std::string& name) {
  if (name.empty() || name.size() > kMaxLibraryOpBytes) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == ':' || c == '.'))
      return false;
  return true;
}

void writeProgram(Writer& w, const Program& program) {
  w.u32(kProgramEncodingVersion);
  w.u32(static_cast<uint32_t>(program.buffers.size()));
  for (const ProgramBuffer& b : program.buffers) {
    w.u8(static_cast<uint8_t>(b.kind));
    if (b.kind == ProgramBuffer::Kind::kSlot) {
      w.u32(b.slot);
    } else {
      w.u64(b.element_bytes);
      w.u32(static_cast<uint32_t>(b.size_slots.size()));
      for (uint32_t slot : b.size_slots)
        w.u32(slot);
    }
  }
  w.u32(static_cast<uint32_t>(program.steps.size()));
  for (const ProgramStep& s : program.steps) {
    w.u8(static_cast<uint8_t>(s.kind));
    if (s.kind == ProgramStep::Kind::kKernel)
      w.u32(s.kernel);
    else
      w.str(s.library_op);
    w.u32(static_cast<uint32_t>(s.operands.size()));
    for (uint32_t operand : s.operands)
      w.u32(operand);
  }
}

// Reads a program section; "" or what is wrong with it. Every reference is checked against the
// tables it points into.
std::string readProgram(Reader& r, size_t kernel_count, Program* program) {
  if (r.u32() != kProgramEncodingVersion) return "unknown program encoding version";
  const uint32_t buffers = r.count(kMaxBuffers);
  program->buffers.clear();
  for (uint32_t i = 0; i < buffers && r.ok(); ++i) {
    ProgramBuffer b;
    const uint8_t kind = r.u8();
    if (kind == static_cast<uint8_t>(ProgramBuffer::Kind::kSlot)) {
      b.kind = ProgramBuffer::Kind::kSlot;
      b.slot = r.u32();
      if (b.slot > kMaxSlotId) return "buffer " + std::to_string(i) + ": slot id out of range";
    } else if (kind == static_cast<uint8_t>(ProgramBuffer::Kind::kScratch)) {
      b.kind = ProgramBuffer::Kind::kScratch;
      b.element_bytes = r.u64();
      const uint32_t n = r.count(kMaxSizeSlots);
      for (uint32_t k = 0; k < n && r.ok(); ++k) {
        b.size_slots.push_back(r.u32());
        if (b.size_slots.back() > kMaxSlotId)
          return "buffer " + std::to_string(i) + ": size slot out of range";
      }
    } else {
      return "buffer " + std::to_string(i) + ": unknown kind " + std::to_string(kind);
    }
    program->buffers.push_back(std::move(b));
  }
  const uint32_t steps = r.count(kMaxSteps);
  if (r.ok() && steps == 0) return "a program without steps";
  program->steps.clear();
  for (uint32_t i = 0; i < steps && r.ok(); ++i) {
    ProgramStep s;
    const uint8_t kind = r.u8();
    if (kind == static_cast<uint8_t>(ProgramStep::Kind::kKernel)) {
      s.kind = ProgramStep::Kind::kKernel;
      s.kernel = r.u32();
      if (r.ok() && s.kernel >= kernel_count)
        return "step " + std::to_string(i) + ": kernel " + std::to_string(s.kernel) +
               " is not in the kernel table";
    } else if (kind == static_cast<uint8_t>(ProgramStep::Kind::kLibrary)) {
      s.kind = ProgramStep::Kind::kLibrary;
      s.library_op = r.str();
      if (r.ok() && !isLibraryOpName(s.library_op))
        return "step " + std::to_string(i) + ": bad op name";
    } else {
      return "step " + std::to_string(i) + ": unknown kind " + std::to_string(kind);
    }
    const uint32_t n = r.count(kMaxOperands);
    for (uint32_t k = 0; k < n && r.ok(); ++k) {
      s.operands.push_back(r.u32());
      if (s.operands.back() >= program->buffers.size())
        return "step " + std::to_string(i) + ": operand outside the buffer plan";
    }
    program->steps.push_back(std::move(s));
  }
  return r.ok() ? "" : "program section out of bounds";
}

Hash128 storedChecksum(const std::vector<char>& bytes) {
  Hash128 stored;
  const size_t at = bytes.size() - kChecksumBytes;
  std::memcpy(&stored.low, bytes.data() + at, 8);
  std::memcpy(&stored.high, bytes.data() + at + 8, 8);
  return stored;
}

void writeChecksum(std::vector<char>& bytes) {
  const size_t at = bytes.size() - kChecksumBytes;
  const Hash128 checksum = hashBytes128(bytes.data(), at);
  std::memcpy(bytes.data() + at, &checksum.low, 8);
  std::memcpy(bytes.data() + at + 8, &checksum.high, 8);
}

// "" when `bytes` are a container of this version whose checksum holds, else the problem.
std::string integrityProblem(const std::vector<char>& bytes) {
  if (bytes.size() < kMinimumBytes) return "truncated: shorter than a header";
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return "bad magic";
  if (containerFormatVersion(bytes) != kContainerFormatVersion) return "another format version";
  if (hashBytes128(bytes.data(), bytes.size() - kChecksumBytes) != storedChecksum(bytes))
    return "checksum mismatch";
  return "";
}

size_t macOffset(const std::vector<char>& bytes) {
  return bytes.size() - kMacBytes - kChecksumBytes;
}
size_t keyIdOffset(const std::vector<char>& bytes) { return macOffset(bytes) - kKeyIdBytes; }

} // namespace

std::string describeProgram(const Program& program) {
  std::string text =
      std::to_string(program.steps.size()) + (program.steps.size() == 1 ? " step:" : " steps:");
  for (size_t i = 0; i < program.steps.size(); ++i) {
    const ProgramStep& s = program.steps[i];
    text += (i ? ", " : " ") + (s.kind == ProgramStep::Kind::kKernel
                                    ? "kernel " + std::to_string(s.kernel)
                                    : s.library_op);
  }
  if (!program.buffers.empty()) text += "; " + std::to_string(program.buffers.size()) + " buffers";
  return text;
}

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
  writeProgram(w, program);
  w.u64(object.size());
  w.raw(object.data(), object.size());
  w.raw(key_id.data(), key_id.size());
  w.raw(mac.data(), mac.size());
  w.out.resize(w.out.size() + kChecksumBytes);
  writeChecksum(w.out);
  return std::move(w.out);
}

std::optional<uint32_t> containerFormatVersion(const std::vector<char>& bytes) {
  if (bytes.size() < sizeof kMagic + 4 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
    return std::nullopt;
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof kMagic, sizeof version);
  return version;
}

std::optional<ExecutableContainer> parseContainer(const std::vector<char>& bytes,
                                                  std::string* why) {
  auto reject = [&](const std::string& reason) {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (std::optional<uint32_t> version = containerFormatVersion(bytes);
      version && *version != kContainerFormatVersion)
    return reject("format version " + std::to_string(*version) + " (this engine reads " +
                  std::to_string(kContainerFormatVersion) + ")");
  if (std::string problem = integrityProblem(bytes); !problem.empty()) return reject(problem);
  const size_t body = keyIdOffset(bytes);
  Reader r(bytes.data() + sizeof kMagic + 4, body - sizeof kMagic - 4);
  ExecutableContainer c;
  for (std::string* field : {&c.engine_version, &c.llvm_version, &c.target_triple, &c.cpu,
                             &c.cpu_features, &c.compile_options, &c.key_material})
    *field = r.str();
  const uint32_t count = r.count(kMaxKernels);
  if (!r.ok()) return reject("bad kernel table");
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    KernelTableEntry k;
    k.symbol = r.str();
    k.abi = r.str();
    c.kernels.push_back(std::move(k));
  }
  if (std::string problem = readProgram(r, c.kernels.size(), &c.program); !problem.empty())
    return reject(problem);
  const uint64_t object_size = r.u64();
  if (!r.ok() || object_size > body) return reject("bad object size");
  c.object.resize(object_size);
  r.raw(c.object.data(), object_size);
  if (!r.ok() || !r.done()) return reject("fields out of bounds");
  std::memcpy(c.key_id.data(), bytes.data() + keyIdOffset(bytes), c.key_id.size());
  std::memcpy(c.mac.data(), bytes.data() + macOffset(bytes), c.mac.size());
  return c;
}

std::optional<EntryAuthenticator::KeyId> sealKeyId(const std::vector<char>& bytes) {
  if (!integrityProblem(bytes).empty()) return std::nullopt;
  EntryAuthenticator::KeyId id;
  std::memcpy(id.data(), bytes.data() + keyIdOffset(bytes), id.size());
  return id;
}

SealStatus checkSeal(const std::vector<char>& bytes, const EntryAuthenticator& key,
                     std::string* why) {
  auto status = [&](SealStatus s, const std::string& reason) {
    if (why) *why = reason;
    return s;
  };
  if (std::optional<uint32_t> version = containerFormatVersion(bytes);
      version && *version != kContainerFormatVersion)
    return status(SealStatus::kOtherFormat, "format version " + std::to_string(*version));
  if (std::string problem = integrityProblem(bytes); !problem.empty())
    return status(SealStatus::kDamaged, problem);
  const std::optional<EntryAuthenticator::KeyId> id = sealKeyId(bytes);
  if (*id != key.keyId()) return status(SealStatus::kOtherKey, "signed under key " + keyIdHex(*id));
  if (!key.verify(bytes.data(), macOffset(bytes),
                  reinterpret_cast<const unsigned char*>(bytes.data() + macOffset(bytes))))
    return status(SealStatus::kForged, "its MAC does not verify under key " + keyIdHex(*id));
  return status(SealStatus::kAuthentic, "");
}

bool sealContainer(std::vector<char>& bytes, const EntryAuthenticator& key) {
  if (!integrityProblem(bytes).empty()) return false;
  std::memcpy(bytes.data() + keyIdOffset(bytes), key.keyId().data(), kKeyIdBytes);
  const EntryAuthenticator::Mac mac = key.mac(bytes.data(), macOffset(bytes));
  std::memcpy(bytes.data() + macOffset(bytes), mac.data(), mac.size());
  writeChecksum(bytes);
  return true;
}

std::string verifyContainer(const ExecutableContainer& c, const LoadRequirements& w) {
  if (c.engine_version != w.engine_version) return "engine version " + c.engine_version;
  if (c.llvm_version != w.llvm_version) return "LLVM version " + c.llvm_version;
  if (c.target_triple != w.target_triple) return "target " + c.target_triple;
  if (c.cpu_features != w.cpu_features) return "CPU features differ";
  if (c.compile_options != w.compile_options) return "compile options differ";
  if (c.key_material != w.key_material)
    return "key material differs (a hash collision or a forged entry)";
  if (c.kernels.empty() || c.object.empty()) return "no kernel";
  const Program& p = c.program;
  if (p.steps.size() != 1 || p.steps[0].kind != ProgramStep::Kind::kKernel ||
      p.steps[0].kernel != 0 || !p.steps[0].operands.empty())
    return "a program this engine cannot run (" + describeProgram(p) + ")";
  return "";
}

} // namespace torchneuron
