#include "fusion/compiler.h"
#include "fusion/non_temporal_stores.h"
#include "fusion/streaming_vector_width.h"
#include "fusion/unmasked_selects.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
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
#include <utility>

#include "support/errors.h"
#include "support/fork_handlers.h"
#include "support/made_once.h"

namespace torchneuron::fusion {

// Linalg becomes loops, strided views become address arithmetic, math becomes LLVM intrinsics
// where LLVM has one (vectorized through libmvec) and libm calls otherwise; bf16 rounding is
// expanded into integer ops so no compiler runtime is needed.
const char* const kLoweringPipeline =
    "convert-linalg-to-loops, expand-strided-metadata, lower-affine,"
    " arith-expand{include-bf16=true}, convert-scf-to-cf, convert-math-to-llvm,"
    " convert-math-to-libm, convert-vector-to-llvm, convert-arith-to-llvm, finalize-memref-to-llvm,"
    " convert-cf-to-llvm, convert-func-to-llvm, convert-index-to-llvm,"
    " reconcile-unrealized-casts";

namespace {

// Every kernel function realigns its stack frame to the vectors' size in its prologue. Its
// spills of 64-byte vectors (a vector math call clobbers every vector register, so a GELU chain
// spills its live values around each tanh) were otherwise placed wherever the caller's stack
// pointer fell, straddling cache lines in some processes and not in others: the same fused GELU
// ran at 1.53x-1.59x the hand-fused loop's time on 4M elements in some processes and 1.19x in
// another, and at 1.26x-1.27x in every process once realigned (scratch, alternating processes).
constexpr const char* kRealignedStack = "stackrealign";

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
  explicit VectorMathTable(const HostCpu& host) {
    const bool avx2 = host.features.find("+avx2") != std::string::npos;
    const bool avx512 = host.features.find("+avx512f") != std::string::npos;
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
    // LLVM's table has exp, log, sin, cos and pow only up to AVX2 (8 floats): with AVX-512 a
    // float loop calling them would vectorize at 8 lanes where every other op has 16, as a
    // softmax row's exp did. Their AVX-512 variants, under the libm names and the intrinsics'
    // (math.exp lowers to llvm.exp.f32).
    if (avx512) {
      for (const auto& [name, params] : {std::pair<std::string, const char*>{"exp", "v"},
                                         {"log", "v"},
                                         {"sin", "v"},
                                         {"cos", "v"},
                                         {"pow", "vv"}}) {
        for (const std::string& f32 : {name + "f", "llvm." + name + ".f32"})
          variant(f32, "_ZGVeN16" + std::string(params) + "_" + name + "f", 16, params);
        for (const std::string& f64 : {name, "llvm." + name + ".f64"})
          variant(f64, "_ZGVeN8" + std::string(params) + "_" + name, 8, params);
      }
    }
    for (size_t i = 0; i < scalar_.size(); ++i)
      descriptions_.emplace_back(scalar_[i], vector_[i], llvm::ElementCount::getFixed(widths_[i]),
                                 /*Masked=*/false, prefixes_[i]);
  }

  llvm::ArrayRef<llvm::VecDesc> descriptions() const { return descriptions_; }

  // LLVM's own table, then every entry of this one: "LIBMVEC-X86; tanhf _ZGVdN8v_tanhf 8 ...".
  std::string describe() const {
    std::string text = "LIBMVEC-X86";
    for (const llvm::VecDesc& d : descriptions_)
      text += "; " + d.getScalarFnName().str() + " " + d.getVectorFnName().str() + " " +
              std::to_string(d.getVectorizationFactor().getFixedValue()) + " " +
              d.getVABIPrefix().str();
    return text;
  }

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

void checkLevel(int level) {
  if (level < 0 || level > 3)
    failInternal("optimization level out of range", std::to_string(level) + " (0-3)");
}

llvm::CodeGenOptLevel codeGenLevel(int level) {
  const llvm::CodeGenOptLevel levels[] = {llvm::CodeGenOptLevel::None, llvm::CodeGenOptLevel::Less,
                                          llvm::CodeGenOptLevel::Default,
                                          llvm::CodeGenOptLevel::Aggressive};
  return levels[level];
}

// The compiler's state for the process. The MLIR context is made at the first lowering (a
// description or a cached kernel's load needs none); its threading is off, so it owns no thread
// pool: a forked child compiles with it as the parent did.
struct CompilerState {
  HostCpu host;
  VectorMathTable vector_math;
  std::unique_ptr<mlir::MLIRContext> context;
  std::unique_ptr<llvm::TargetMachine> machines[4]; // by optimization level, made at first use

  CompilerState() : host(hostCpu()), vector_math(host) {
    mlir::registerAllPasses(); // once: the state is made once, under compiler_mutex
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    keepConditionalMoves();
  }

  // x86's cmov converter turns a select whose value is cheaper than its condition into a branch
  // when it expects the branch to predict well (its own example is a running arg-max). A
  // kernel's selects depend on tensor data: in a max pool's scalar remainder the branches
  // mispredicted about half the time and made the kernel 4x slower than its vectorized part.
  // The option is LLVM's, process-wide; no other LLVM user runs in this process's compiles.
  static void keepConditionalMoves() {
    llvm::StringMap<llvm::cl::Option*>& options = llvm::cl::getRegisteredOptions();
    const auto found = options.find("x86-cmov-converter");
    if (found != options.end()) found->second->addOccurrence(0, "x86-cmov-converter", "false");
  }

  mlir::MLIRContext& mlirContext() {
    if (!context) {
      mlir::DialectRegistry registry;
      mlir::registerAllDialects(registry);
      mlir::registerAllExtensions(registry);
      mlir::registerAllToLLVMIRTranslations(registry);
      context =
          std::make_unique<mlir::MLIRContext>(registry, mlir::MLIRContext::Threading::DISABLED);
      context->loadAllAvailableDialects();
    }
    return *context;
  }

  // The target machine a compile at `level` generates code with.
  llvm::TargetMachine& machine(int level) {
    checkLevel(level);
    std::unique_ptr<llvm::TargetMachine>& made = machines[level];
    if (made) return *made;
    std::string error;
    const llvm::Target* llvm_target = llvm::TargetRegistry::lookupTarget(host.triple, error);
    if (llvm_target == nullptr) failHere("no LLVM target for " + host.triple, error);
    llvm::TargetOptions options;
    made.reset(llvm_target->createTargetMachine(host.triple, host.cpu, host.features, options,
                                                llvm::Reloc::PIC_, std::nullopt,
                                                codeGenLevel(level)));
    if (!made) failHere("cannot create a target machine for " + host.cpu, "");
    return *made;
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
                            hostCpu(); // its static is made before the fork, not during it
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

// Parses the lowering pipeline into `pm` (anchored on builtin.module): what a compile runs and
// what its description prints come from this one parse.
void addLoweringPasses(mlir::OpPassManager& pm, const std::string& pipeline) {
  std::string error;
  llvm::raw_string_ostream errors(error);
  if (mlir::failed(mlir::parsePassPipeline(pipeline, pm, errors)))
    failInternal("bad lowering pipeline", error);
}

// Parses and lowers under the caller's lock; diagnostics go into the error message.
mlir::OwningOpRef<mlir::ModuleOp> parseAndLower(CompilerState& s, const std::string& text,
                                                const CodegenOptions& options) {
  mlir::MLIRContext& context = s.mlirContext();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic& diagnostic) {
    diagnostics += diagnostic.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  if (!module) fail("kernel MLIR does not parse", diagnostics);
  addNonTemporalStreamingLoops(*module);
  mlir::PassManager pm(&context);
  addLoweringPasses(pm, options.lowering_pipeline);
  if (mlir::failed(pm.run(*module))) fail("lowering to the LLVM dialect failed", diagnostics);
  return module;
}

// Adds `entry(slots, begin, end)` calling `kernel` with each argument read from its slot.
void addSlotEntryPoint(llvm::Module& module, const std::string& entry) {
  llvm::Function* kernel = module.getFunction("kernel");
  if (kernel == nullptr) failInternal("the kernel module has no function named kernel", "");
  kernel->setLinkage(llvm::GlobalValue::InternalLinkage);
  kernel->addFnAttr(llvm::Attribute::AlwaysInline);
  // Inlined into the entry point, these become alias scopes the vectorizer trusts.
  if (kernel->hasFnAttribute(kNoAliasMemrefs))
    for (llvm::Argument& argument : kernel->args())
      if (argument.getType()->isPointerTy()) argument.addAttr(llvm::Attribute::NoAlias);
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

// The LLVM optimization of a compile, set up the same way for running it and for printing it.
class OptimizationPipeline {
public:
  OptimizationPipeline(CompilerState& s, const CodegenOptions& options)
      : builder_(&s.machine(options.optimization_level), tuning(options), std::nullopt,
                 &instrumentation_),
        library_info_(llvm::Triple(s.host.triple)) {
    if (options.vector_math) {
      const llvm::Triple triple(s.host.triple);
      library_info_.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                                       triple);
      library_info_.addVectorizableFunctions(s.vector_math.descriptions());
    }
    functions_.registerPass([this] { return llvm::TargetLibraryAnalysis(library_info_); });
    builder_.registerModuleAnalyses(modules_);
    builder_.registerCGSCCAnalyses(cgscc_);
    builder_.registerFunctionAnalyses(functions_);
    builder_.registerLoopAnalyses(loops_);
    builder_.crossRegisterProxies(loops_, functions_, cgscc_, modules_);
    const int level = options.optimization_level;
    passes_ = level == 0 ? builder_.buildO0DefaultPipeline(llvm::OptimizationLevel::O0)
                         : builder_.buildPerModuleDefaultPipeline(optimizationLevel(level));
  }

  void run(llvm::Module& module) { passes_.run(module, modules_); }

  // The pipeline in `opt -passes=` syntax, as LLVM prints it.
  std::string print() {
    std::string text;
    llvm::raw_string_ostream out(text);
    passes_.printPipeline(out, [this](llvm::StringRef class_name) {
      const llvm::StringRef name = instrumentation_.getPassNameForClassName(class_name);
      return name.empty() ? class_name : name;
    });
    return text;
  }

private:
  static llvm::PipelineTuningOptions tuning(const CodegenOptions& options) {
    llvm::PipelineTuningOptions tuning;
    tuning.LoopVectorization = options.vectorize;
    tuning.SLPVectorization = options.vectorize;
    return tuning;
  }

  static llvm::OptimizationLevel optimizationLevel(int level) {
    return level == 1   ? llvm::OptimizationLevel::O1
           : level == 2 ? llvm::OptimizationLevel::O2
                        : llvm::OptimizationLevel::O3;
  }

  llvm::PassInstrumentationCallbacks instrumentation_; // maps pass classes to their names
  llvm::PassBuilder builder_;
  llvm::TargetLibraryInfoImpl library_info_;
  llvm::LoopAnalysisManager loops_;
  llvm::FunctionAnalysisManager functions_;
  llvm::CGSCCAnalysisManager cgscc_;
  llvm::ModuleAnalysisManager modules_;
  llvm::ModulePassManager passes_;
};

} // namespace

struct LoweredModule::State {
  std::string entry;
  int optimization_level = 3;
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module; // declared after its context: destroyed before it
};

LoweredModule::LoweredModule(std::unique_ptr<State> state) : state_(std::move(state)) {}
LoweredModule::LoweredModule(LoweredModule&&) noexcept = default;
LoweredModule& LoweredModule::operator=(LoweredModule&&) noexcept = default;
LoweredModule::~LoweredModule() = default;

const std::string& LoweredModule::entry() const { return state_->entry; }

std::string LoweredModule::llvmIR() const {
  std::string text;
  llvm::raw_string_ostream out(text);
  state_->module->print(out, nullptr);
  return text;
}

// Host queries only: loading a cached kernel needs the host, not an MLIR context. Features are
// sorted, so the description (part of every persistent key) is canonical.
const HostCpu& hostCpu() {
  static MadeOnce<const HostCpu> host; // fork-safe (made_once.h): the queries take time
  return host.get([] {
    auto* made = new HostCpu();
    HostCpu& h = *made;
    h.triple = llvm::sys::getProcessTriple();
    h.cpu = llvm::sys::getHostCPUName().str();
    std::vector<std::string> features;
    for (const auto& feature : llvm::sys::getHostCPUFeatures())
      features.push_back((feature.getValue() ? "+" : "-") + feature.getKey().str());
    std::sort(features.begin(), features.end());
    for (const std::string& feature : features)
      h.features += (h.features.empty() ? "" : ",") + feature;
    h.llvm_version = LLVM_VERSION_STRING;
    return made;
  });
}

CodegenDescription describeCodegen(const CodegenOptions& options) {
  std::unique_lock<std::mutex> lock;
  CompilerState& s = lockedState(lock);
  CodegenDescription description;
  mlir::OpPassManager lowering(mlir::ModuleOp::getOperationName());
  addLoweringPasses(lowering, options.lowering_pipeline);
  llvm::raw_string_ostream lowering_text(description.lowering_pipeline);
  lowering.printAsTextualPipeline(lowering_text);
  description.optimization_pipeline =
      OptimizationPipeline(s, options).print() +
      "; non-temporal streaming stores; unmasked selected loads; realigned stack; codegen O" +
      std::to_string(options.optimization_level);
  description.vector_math = options.vector_math ? s.vector_math.describe() : "none";
  return description;
}

std::string lowerToLLVMDialect(const std::string& mlir_module, const CodegenOptions& options) {
  std::unique_lock<std::mutex> lock;
  CompilerState& s = lockedState(lock);
  mlir::OwningOpRef<mlir::ModuleOp> module = parseAndLower(s, mlir_module, options);
  std::string text;
  llvm::raw_string_ostream out(text);
  module->print(out);
  return text;
}

LoweredModule lowerKernel(const std::string& mlir_module, const std::string& entry,
                          const CodegenOptions& options) {
  checkCompileHeadroom();
  std::unique_lock<std::mutex> lock;
  CompilerState& s = lockedState(lock);
  llvm::TargetMachine& machine = s.machine(options.optimization_level);
  auto lowered = std::make_unique<LoweredModule::State>();
  lowered->entry = entry;
  lowered->optimization_level = options.optimization_level;
  mlir::OwningOpRef<mlir::ModuleOp> module = parseAndLower(s, mlir_module, options);
  lowered->module = mlir::translateModuleToLLVMIR(*module, lowered->context, entry);
  if (!lowered->module) fail("translation to LLVM IR failed", "");
  llvm::Module& llvm_module = *lowered->module;
  llvm_module.setTargetTriple(s.host.triple);
  llvm_module.setDataLayout(machine.createDataLayout());
  alignNonTemporalStores(llvm_module);
  for (llvm::Function& function : llvm_module) {
    if (function.isDeclaration()) continue;
    function.addFnAttr("target-cpu", s.host.cpu);
    function.addFnAttr("target-features", s.host.features);
    function.addFnAttr(kRealignedStack);
  }
  addSlotEntryPoint(llvm_module, entry);
  llvm_module.getFunction(entry)->addFnAttr(kRealignedStack);
  preferHalfWidthVectorsForStreaming(llvm_module, entry);
  std::string verify_errors;
  llvm::raw_string_ostream verify_stream(verify_errors);
  if (llvm::verifyModule(llvm_module, &verify_stream)) fail("invalid LLVM IR", verify_errors);
  OptimizationPipeline(s, options).run(llvm_module);
  keepSelectedLoadsUnmasked(llvm_module);
  return LoweredModule(std::move(lowered));
}

ObjectCode emitObjectCode(LoweredModule module) {
  checkCompileHeadroom();
  std::unique_lock<std::mutex> lock;
  CompilerState& s = lockedState(lock);
  LoweredModule::State& lowered = *module.state_;
  ObjectCode object;
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager emit;
  if (s.machine(lowered.optimization_level)
          .addPassesToEmitFile(emit, stream, nullptr, llvm::CodeGenFileType::ObjectFile))
    failHere("the target cannot emit object code", s.host.triple);
  emit.run(*lowered.module);
  object.bytes.assign(buffer.begin(), buffer.end());
  object.entry = lowered.entry;
  return object;
}

ObjectCode compileKernel(const std::string& mlir_module, const std::string& entry,
                         const CodegenOptions& options) {
  return emitObjectCode(lowerKernel(mlir_module, entry, options));
}

std::string optimizedLLVMIR(const std::string& mlir_module, const std::string& entry,
                            const CodegenOptions& options) {
  return lowerKernel(mlir_module, entry, options).llvmIR();
}

} // namespace torchneuron::fusion
