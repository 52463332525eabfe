#include "fusion/compiler.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <mlir/IR/BuiltinOps.h>
#include <mlir/IR/Diagnostics.h>
#include <mlir/IR/MLIRContext.h>
#include <mlir/InitAllDialects.h>
#include <mlir/InitAllExtensions.h>
#include <mlir/InitAllPasses.h>
#include <mlir/Parser/Parser.h>
#include <mlir/Pass/PassManager.h>
#include <mlir/Pass/PassRegistry.h>
#include <mlir/Target/LLVMIR/Dialect/All.h>
#include <mlir/Target/LLVMIR/Export.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <fstream>
#include <mutex>
#include <new>
#include <stdexcept>

#include "support/errors.h"
#include "support/fork_handlers.h"

namespace torchneuron::fusion {

// Linalg becomes loops, strided views become address arithmetic, math becomes LLVM intrinsics
// where LLVM has one (vectorized through libmvec) and libm calls otherwise; bf16 rounding is
// expanded into integer ops so no compiler runtime is needed.
const char* const kLoweringPipeline =
    "convert-linalg-to-loops, expand-strided-metadata, lower-affine,"
    " arith-expand{include-bf16=true}, convert-scf-to-cf, convert-math-to-llvm,"
    " convert-math-to-libm, convert-arith-to-llvm, finalize-memref-to-llvm,"
    " convert-cf-to-llvm, convert-func-to-llvm, convert-index-to-llvm,"
    " reconcile-unrealized-casts";

namespace {

std::string message(const std::string& what, const std::string& detail) {
  return "[fusion] " + what + (detail.empty() ? "" : ": " + detail);
}

// MLIR or LLVM rejected the module.
[[noreturn]] void fail(const std::string& what, const std::string& detail) {
  throw CompileError(message(what, detail));
}

// The host cannot compile (no target, no address space): another process may.
[[noreturn]] void failHere(const std::string& what, const std::string& detail) {
  throw EnvironmentError(message(what, detail));
}

// LLVM reports failed allocations of its own (buffer growth through safe_malloc) here; its
// default prints and aborts the process. LLVM allows this handler to throw (ErrorHandling.h),
// so the compile fails with std::bad_alloc, which the kernel cache treats as an environment
// failure. Installed with the compiler state, under compiler_mutex.
void throwBadAlloc(void*, const char*, bool) { throw std::bad_alloc(); }

// Address space a compile needs beyond what the process maps already (LLVM's and MLIR's
// working memory, with margin; a compile of one kernel here takes a few MiB).
constexpr uint64_t kCompileHeadroomBytes = uint64_t{64} << 20;

// Under an address-space limit (RLIMIT_AS) a compile that would run out fails cleanly instead
// of reaching an allocation inside LLVM that cannot fail (LLVM's fatal errors abort).
void checkCompileHeadroom() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return;
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  if (!(statm >> pages)) return;
  const uint64_t mapped = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t left = limit.rlim_cur > mapped ? limit.rlim_cur - mapped : 0;
  if (left < kCompileHeadroomBytes)
    failHere("not enough address space to compile",
             std::to_string(left >> 20) + " MiB left under the address-space limit (" +
                 std::to_string(limit.rlim_cur >> 20) + " MiB), " +
                 std::to_string(kCompileHeadroomBytes >> 20) + " MiB needed");
}

// Our own code broke an invariant (a bad pipeline string, a module our builder got wrong).
[[noreturn]] void failInternal(const std::string& what, const std::string& detail) {
  throw std::logic_error(message(what, detail));
}

// Vector variants glibc's libmvec (2.35+) exports but LLVM 19's LIBMVEC-X86 table omits:
// without them a tanh or erf loop calls libm once per element. Only ISAs the host has.
class VectorMathTable {
public:
  explicit VectorMathTable(const TargetDescription& target) {
    const bool avx2 = target.features.find("+avx2") != std::string::npos;
    const bool avx512 = target.features.find("+avx512f") != std::string::npos;
    const char* unary[] = {"tanh",  "erf",   "erfc", "expm1", "log1p", "atanh",
                           "asinh", "acosh", "sinh", "cosh",  "tan",   "atan",
                           "asin",  "acos",  "cbrt", "log10", "log2"};
    const char* binary[] = {"atan2", "hypot"};
    auto add = [&](const std::string& name, const char* params) {
      if (avx2) {
        variant(name + "f", "_ZGVdN8" + std::string(params) + "_" + name + "f", 8, params);
        variant(name, "_ZGVdN4" + std::string(params) + "_" + name, 4, params);
      }
      if (avx512) {
        variant(name + "f", "_ZGVeN16" + std::string(params) + "_" + name + "f", 16, params);
        variant(name, "_ZGVeN8" + std::string(params) + "_" + name, 8, params);
      }
    };
    for (const char* name : unary)
      add(name, "v");
    for (const char* name : binary)
      add(name, "vv");
    for (size_t i = 0; i < scalar_.size(); ++i)
      descriptions_.emplace_back(scalar_[i], vector_[i], llvm::ElementCount::getFixed(widths_[i]),
                                 /*Masked=*/false, prefixes_[i]);
  }

  llvm::ArrayRef<llvm::VecDesc> descriptions() const { return descriptions_; }

private:
  void variant(const std::string& scalar, const std::string& vector, unsigned width,
               const char* params) {
    scalar_.push_back(scalar);
    vector_.push_back(vector);
    widths_.push_back(width);
    prefixes_.push_back("_ZGV_LLVM_N" + std::to_string(width) + params);
  }

  std::deque<std::string> scalar_, vector_, prefixes_; // VecDesc keeps StringRefs to these
  std::vector<unsigned> widths_;
  std::vector<llvm::VecDesc> descriptions_;
};

// One MLIR context for the process. Its threading is off, so it owns no thread pool: a forked
// child compiles with it as the parent did.
struct CompilerState {
  mlir::MLIRContext context;
  std::unique_ptr<llvm::TargetMachine> target_machine;
  TargetDescription target;
  std::unique_ptr<VectorMathTable> vector_math;

  CompilerState() : context(registry(), mlir::MLIRContext::Threading::DISABLED) {
    context.loadAllAvailableDialects();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    target = hostTarget();
    std::string error;
    const llvm::Target* llvm_target = llvm::TargetRegistry::lookupTarget(target.triple, error);
    if (llvm_target == nullptr) failHere("no LLVM target for " + target.triple, error);
    llvm::TargetOptions options;
    target_machine.reset(llvm_target->createTargetMachine(
        target.triple, target.cpu, target.features, options, llvm::Reloc::PIC_, std::nullopt,
        llvm::CodeGenOptLevel::Aggressive));
    if (!target_machine) failHere("cannot create a target machine for " + target.cpu, "");
    vector_math = std::make_unique<VectorMathTable>(target);
  }

  static mlir::DialectRegistry registry() {
    mlir::registerAllPasses(); // once: the state is made once, under compiler_mutex
    mlir::DialectRegistry registry;
    mlir::registerAllDialects(registry);
    mlir::registerAllExtensions(registry);
    mlir::registerAllToLLVMIRTranslations(registry);
    return registry;
  }
};

// Locking: `compiler_mutex` guards the state's creation and all use of it (compiles are
// serialized), and is held across fork() (ForkRank::kCompiler): fork() waits for a compile in
// progress, and a child never inherits the MLIR context half-used. A plain global (constant
// initialization), not a function-local static: a child forked while another thread made the
// state would otherwise wait forever on the static's initialization guard.
std::mutex compiler_mutex;
CompilerState* compiler_state = nullptr; // never destroyed: kernels outlive exit

// The state, made at first use, with `compiler_mutex` held by `lock`.
CompilerState& lockedState(std::unique_lock<std::mutex>& lock) {
  static std::once_flag fork_handlers;
  std::call_once(fork_handlers, [] {
    registerForkHandlers(ForkRank::kCompiler,
                         {[] {
                            hostTarget(); // its static is made before the fork, not during it
                            compiler_mutex.lock();
                          },
                          [] { compiler_mutex.unlock(); }, [] { compiler_mutex.unlock(); }});
  });
  lock = std::unique_lock<std::mutex>(compiler_mutex);
  if (compiler_state == nullptr) {
    llvm::remove_bad_alloc_error_handler(); // the launcher installs the same one
    llvm::install_bad_alloc_error_handler(throwBadAlloc);
    compiler_state = new CompilerState();
  }
  return *compiler_state;
}

// Parses and lowers under the caller's lock; diagnostics go into the error message.
mlir::OwningOpRef<mlir::ModuleOp> parseAndLower(CompilerState& s, const std::string& text) {
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&s.context, [&](mlir::Diagnostic& diagnostic) {
    diagnostics += diagnostic.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &s.context);
  if (!module) fail("kernel MLIR does not parse", diagnostics);
  mlir::PassManager pm(&s.context);
  std::string pipeline_error;
  llvm::raw_string_ostream pipeline_errors(pipeline_error);
  if (mlir::failed(mlir::parsePassPipeline(kLoweringPipeline, pm, pipeline_errors)))
    failInternal("bad lowering pipeline", pipeline_error);
  if (mlir::failed(pm.run(*module))) fail("lowering to the LLVM dialect failed", diagnostics);
  return module;
}

// Adds `entry(slots, begin, end)` calling `kernel` with each argument read from its slot.
void addSlotEntryPoint(llvm::Module& module, const std::string& entry) {
  llvm::Function* kernel = module.getFunction("kernel");
  if (kernel == nullptr) failInternal("the kernel module has no function named kernel", "");
  kernel->setLinkage(llvm::GlobalValue::InternalLinkage);
  kernel->addFnAttr(llvm::Attribute::AlwaysInline);
  llvm::LLVMContext& context = module.getContext();
  llvm::Type* i64 = llvm::Type::getInt64Ty(context);
  llvm::Type* ptr = llvm::PointerType::get(context, 0);
  auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(context), {ptr, i64, i64}, false);
  llvm::Function* function =
      llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, entry, module);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(context, "entry", function));
  std::vector<llvm::Value*> arguments;
  const unsigned count = kernel->arg_size();
  if (count < 2) failInternal("the kernel takes no [begin, end) range", "");
  for (unsigned i = 0; i + 2 < count; ++i) {
    llvm::Value* slot = b.CreateLoad(i64, b.CreateConstGEP1_64(i64, function->getArg(0), i));
    llvm::Type* wanted = kernel->getArg(i)->getType();
    if (wanted->isPointerTy())
      arguments.push_back(b.CreateIntToPtr(slot, wanted));
    else if (wanted->isDoubleTy())
      arguments.push_back(b.CreateBitCast(slot, wanted));
    else if (wanted->isIntegerTy(64))
      arguments.push_back(slot);
    else
      failInternal("kernel argument " + std::to_string(i) + " has no slot encoding", "");
  }
  arguments.push_back(function->getArg(1));
  arguments.push_back(function->getArg(2));
  b.CreateCall(kernel, arguments);
  b.CreateRetVoid();
}

void optimize(llvm::Module& module, llvm::TargetMachine& machine,
              const VectorMathTable& vector_math) {
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager cgscc;
  llvm::ModuleAnalysisManager modules;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder builder(&machine, tuning);
  llvm::Triple triple(module.getTargetTriple());
  llvm::TargetLibraryInfoImpl library_info(triple);
  library_info.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86, triple);
  library_info.addVectorizableFunctions(vector_math.descriptions());
  functions.registerPass([&] { return llvm::TargetLibraryAnalysis(library_info); });
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(cgscc);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, cgscc, modules);
  builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(module, modules);
}

} // namespace

// Host queries only: loading a cached kernel needs the target, not an MLIR context. Features
// are sorted, so the description (part of every persistent key) is canonical.
const TargetDescription& hostTarget() {
  static const TargetDescription target = [] {
    TargetDescription t;
    t.triple = llvm::sys::getProcessTriple();
    t.cpu = llvm::sys::getHostCPUName().str();
    std::vector<std::string> features;
    for (const auto& feature : llvm::sys::getHostCPUFeatures())
      features.push_back((feature.getValue() ? "+" : "-") + feature.getKey().str());
    std::sort(features.begin(), features.end());
    for (const std::string& feature : features)
      t.features += (t.features.empty() ? "" : ",") + feature;
    t.llvm_version = LLVM_VERSION_STRING;
    return t;
  }();
  return target;
}

std::string lowerToLLVMDialect(const std::string& mlir_module) {
  std::unique_lock<std::mutex> lock;
  CompilerState& s = lockedState(lock);
  mlir::OwningOpRef<mlir::ModuleOp> module = parseAndLower(s, mlir_module);
  std::string text;
  llvm::raw_string_ostream out(text);
  module->print(out);
  return text;
}

// The kernel module as optimized LLVM IR, with its entry point; under the caller's lock.
std::unique_ptr<llvm::Module> optimizedModule(CompilerState& s, llvm::LLVMContext& llvm_context,
                                              const std::string& text, const std::string& entry) {
  mlir::OwningOpRef<mlir::ModuleOp> module = parseAndLower(s, text);
  std::unique_ptr<llvm::Module> llvm_module =
      mlir::translateModuleToLLVMIR(*module, llvm_context, entry);
  if (!llvm_module) fail("translation to LLVM IR failed", "");
  llvm_module->setTargetTriple(s.target.triple);
  llvm_module->setDataLayout(s.target_machine->createDataLayout());
  for (llvm::Function& function : *llvm_module) {
    if (function.isDeclaration()) continue;
    function.addFnAttr("target-cpu", s.target.cpu);
    function.addFnAttr("target-features", s.target.features);
  }
  addSlotEntryPoint(*llvm_module, entry);
  std::string verify_errors;
  llvm::raw_string_ostream verify_stream(verify_errors);
  if (llvm::verifyModule(*llvm_module, &verify_stream)) fail("invalid LLVM IR", verify_errors);
  optimize(*llvm_module, *s.target_machine, *s.vector_math);
  return llvm_module;
}

std::string optimizedLLVMIR(const std::string& mlir_module, const std::string& entry) {
  std::unique_lock<std::mutex> lock;
  CompilerState& s = lockedState(lock);
  llvm::LLVMContext llvm_context;
  std::unique_ptr<llvm::Module> module = optimizedModule(s, llvm_context, mlir_module, entry);
  std::string text;
  llvm::raw_string_ostream out(text);
  module->print(out, nullptr);
  return text;
}

ObjectCode compileKernel(const std::string& mlir_module, const std::string& entry) {
  checkCompileHeadroom();
  std::unique_lock<std::mutex> lock;
  CompilerState& s = lockedState(lock);
  llvm::LLVMContext llvm_context;
  std::unique_ptr<llvm::Module> llvm_module = optimizedModule(s, llvm_context, mlir_module, entry);

  ObjectCode object;
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager emit;
  if (s.target_machine->addPassesToEmitFile(emit, stream, nullptr,
                                            llvm::CodeGenFileType::ObjectFile))
    failHere("the target cannot emit object code", s.target.triple);
  emit.run(*llvm_module);
  object.bytes.assign(buffer.begin(), buffer.end());
  object.entry = entry;
  return object;
}

} // namespace torchneuron::fusion
