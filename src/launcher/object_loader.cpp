#include "launcher/object_loader.h"

#include "launcher/compiler_runtime.h"
#include "launcher/perf_map.h"

#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>

#include <mutex>
#include <new>
#include <stdexcept>

#include "support/errors.h"
#include "support/fork_handlers.h"

namespace torchneuron {
namespace {

// A link failure depends on this process (its symbols, its memory), not on the kernel alone.
[[noreturn]] void fail(const std::string& what, llvm::Error error) {
  throw EnvironmentError("[launcher] " + what + ": " + llvm::toString(std::move(error)));
}

// LLVM reports failed allocations of its own here (its default aborts); LLVM allows the
// handler to throw, so a link fails with std::bad_alloc instead (fusion/compiler.cpp installs
// the same handler).
void throwBadAlloc(void*, const char*, bool) { throw std::bad_alloc(); }

// One JIT for the process. Each object is linked into a JITDylib of its own, which links to the
// main one (process symbols): it can be unlinked alone, and an entry name can be linked again
// while an older copy is still in use. ORC runs everything on the calling thread (no compile
// threads), so a forked child links and unlinks as the parent did.
struct Jit {
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  uint64_t next_dylib = 0;

  Jit() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    // Vectorized math (_ZGVdN8v_expf, ...) lives in libmvec, which nothing else loads.
    llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1");
    auto created = llvm::orc::LLJITBuilder().create();
    if (!created) fail("cannot create the ORC JIT", created.takeError());
    lljit = std::move(*created);
    // Link errors come back from lookup() and are reported there, with the kernel's name;
    // ORC's default reporter would also print them to stderr.
    lljit->getExecutionSession().setErrorReporter(
        [](llvm::Error error) { llvm::consumeError(std::move(error)); });
    auto generator = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        lljit->getDataLayout().getGlobalPrefix());
    if (!generator) fail("cannot search the process for symbols", generator.takeError());
    lljit->getMainJITDylib().addGenerator(std::move(*generator));
    llvm::orc::SymbolMap runtime;
    for (const auto& [name, address] : compilerRuntimeSymbols()) {
      runtime[lljit->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(address),
                                               llvm::JITSymbolFlags::Exported};
    }
    if (llvm::Error error = lljit->getMainJITDylib().define(llvm::orc::absoluteSymbols(runtime)))
      fail("cannot define the compiler-runtime routines", std::move(error));
  }
};

// Locking: `jit_mutex` guards the JIT's creation and all use of it, and is held across fork()
// (ForkRank::kLinker), so a child never inherits ORC's session mid-link. A constant-initialized
// global, so a child forked while another thread creates the JIT cannot inherit a half-done
// static initialization.
std::mutex jit_mutex;
Jit* jit_instance = nullptr; // never destroyed: loaded kernels stay callable at exit

// The JIT, created at first use, with `jit_mutex` held by `lock`.
Jit& lockedJit(std::unique_lock<std::mutex>& lock) {
  holdAcrossFork<jit_mutex>(ForkRank::kLinker);
  lock = std::unique_lock<std::mutex>(jit_mutex);
  if (jit_instance == nullptr) {
    llvm::remove_bad_alloc_error_handler();
    llvm::install_bad_alloc_error_handler(throwBadAlloc);
    jit_instance = new Jit();
  }
  return *jit_instance;
}

// The size in bytes of `entry`'s code in `object` (an ELF symbol's size), 0 when the object does
// not say: only for profilers (perf_map.h), so a parse failure is not an error.
uint64_t entryCodeSize(const std::vector<char>& object, const std::string& entry) {
  auto parsed = llvm::object::ObjectFile::createObjectFile(
      llvm::MemoryBufferRef(llvm::StringRef(object.data(), object.size()), entry));
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return 0;
  }
  const auto* elf = llvm::dyn_cast<llvm::object::ELFObjectFileBase>(parsed->get());
  if (elf == nullptr) return 0;
  for (const llvm::object::ELFSymbolRef symbol : elf->symbols()) {
    auto name = symbol.getName();
    if (!name) {
      llvm::consumeError(name.takeError());
      continue;
    }
    // The object's FILE symbol carries the module's name, which is the entry's too.
    if (*name == entry && symbol.getELFType() == llvm::ELF::STT_FUNC) return symbol.getSize();
  }
  return 0;
}

} // namespace

LoadedCode::LoadedCode(KernelFunction function, size_t bytes, void* dylib)
    : function_(function), bytes_(bytes), dylib_(dylib) {}

LoadedCode::~LoadedCode() {
  std::unique_lock<std::mutex> lock;
  Jit& j = lockedJit(lock);
  // An error here only leaks the code; there is nobody to report it to in a destructor.
  llvm::consumeError(
      j.lljit->getExecutionSession().removeJITDylib(*static_cast<llvm::orc::JITDylib*>(dylib_)));
}

std::shared_ptr<LoadedCode> loadKernelObject(const std::vector<char>& object,
                                             const std::string& entry) {
  std::unique_lock<std::mutex> lock;
  Jit& j = lockedJit(lock);
  llvm::orc::ExecutionSession& session = j.lljit->getExecutionSession();
  auto dylib = j.lljit->createJITDylib("kernel." + std::to_string(j.next_dylib++));
  if (!dylib) fail("cannot make a JITDylib for " + entry, dylib.takeError());
  dylib->addToLinkOrder(j.lljit->getMainJITDylib());
  auto buffer =
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), entry);
  if (llvm::Error error = j.lljit->addObjectFile(*dylib, std::move(buffer))) {
    llvm::consumeError(session.removeJITDylib(*dylib));
    fail("cannot link the object of " + entry, std::move(error));
  }
  auto address = j.lljit->lookup(*dylib, entry);
  if (!address) {
    llvm::consumeError(session.removeJITDylib(*dylib));
    fail("no symbol " + entry + " in its object", address.takeError());
  }
  if (perfMapEnabled())
    notePerfMapSymbol(address->toPtr<void*>(), entryCodeSize(object, entry), entry);
  return std::make_shared<LoadedCode>(address->toPtr<KernelFunction>(), object.size(), &*dylib);
}

} // namespace torchneuron
