#include "launcher/object_loader.h"

#include "launcher/compiler_runtime.h"

#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>

#include <mutex>
#include <stdexcept>

namespace torchneuron {
namespace {

[[noreturn]] void fail(const std::string& what, llvm::Error error) {
  throw std::runtime_error("[launcher] " + what + ": " + llvm::toString(std::move(error)));
}

// One JIT for the process. Each object is linked into a JITDylib of its own, which links to the
// main one (process symbols): it can be unlinked alone, and an entry name can be linked again
// while an older copy is still in use. Locking: `mutex` guards all use.
struct Jit {
  std::mutex mutex;
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
    lljit->getExecutionSession().setErrorReporter([](llvm::Error error) {
      llvm::consumeError(std::move(error));
    });
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

Jit& jit() {
  static Jit* instance = new Jit();  // never destroyed: loaded kernels stay callable at exit
  return *instance;
}

}  // namespace

LoadedCode::LoadedCode(KernelFunction function, size_t bytes, void* dylib)
    : function_(function), bytes_(bytes), dylib_(dylib) {}

LoadedCode::~LoadedCode() {
  Jit& j = jit();
  std::lock_guard<std::mutex> lock(j.mutex);
  // An error here only leaks the code; there is nobody to report it to in a destructor.
  llvm::consumeError(
      j.lljit->getExecutionSession().removeJITDylib(*static_cast<llvm::orc::JITDylib*>(dylib_)));
}

std::shared_ptr<LoadedCode> loadKernelObject(const std::vector<char>& object,
                                             const std::string& entry) {
  Jit& j = jit();
  std::lock_guard<std::mutex> lock(j.mutex);
  llvm::orc::ExecutionSession& session = j.lljit->getExecutionSession();
  auto dylib = j.lljit->createJITDylib("kernel." + std::to_string(j.next_dylib++));
  if (!dylib) fail("cannot make a JITDylib for " + entry, dylib.takeError());
  dylib->addToLinkOrder(j.lljit->getMainJITDylib());
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()),
                                                     entry);
  if (llvm::Error error = j.lljit->addObjectFile(*dylib, std::move(buffer))) {
    llvm::consumeError(session.removeJITDylib(*dylib));
    fail("cannot link the object of " + entry, std::move(error));
  }
  auto address = j.lljit->lookup(*dylib, entry);
  if (!address) {
    llvm::consumeError(session.removeJITDylib(*dylib));
    fail("no symbol " + entry + " in its object", address.takeError());
  }
  return std::make_shared<LoadedCode>(address->toPtr<KernelFunction>(), object.size(), &*dylib);
}

}  // namespace torchneuron
