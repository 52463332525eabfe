#include "launcher/object_loader.h"

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

// One JIT for the process; kernels are never unloaded. Locking: `mutex` guards all use.
struct Jit {
  std::mutex mutex;
  std::unique_ptr<llvm::orc::LLJIT> lljit;

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
  }
};

Jit& jit() {
  static Jit* instance = new Jit();  // never destroyed: loaded kernels stay callable at exit
  return *instance;
}

}  // namespace

KernelFunction loadKernelObject(const std::vector<char>& object, const std::string& entry) {
  Jit& j = jit();
  std::lock_guard<std::mutex> lock(j.mutex);
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()),
                                                     entry);
  if (llvm::Error error = j.lljit->addObjectFile(std::move(buffer)))
    fail("cannot link the object of " + entry, std::move(error));
  auto address = j.lljit->lookup(entry);
  if (!address) fail("no symbol " + entry + " in its object", address.takeError());
  return address->toPtr<KernelFunction>();
}

}  // namespace torchneuron
