#include "fusion/compiler.h"

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
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

#include <algorithm>
#include <chrono>
#include <deque>
#include <mutex>
#include <stdexcept>

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

[[noreturn]] void fail(const std::string& what, const std::string& detail) {
  throw std::runtime_error("[fusion] " + what + (detail.empty() ? "" : ": " + detail));
}

// Vector variants glibc's libmvec (2.35+) exports but LLVM 19's LIBMVEC-X86 table omits:
// without them a tanh or erf loop calls libm once per element. Only ISAs the host has.
class VectorMathTable {
 public:
  explicit VectorMathTable(const TargetDescription& target) {
    const bool avx2 = target.features.find("+avx2") != std::string::npos;
    const bool avx512 = target.features.find("+avx512f") != std::string::npos;
    const char* unary[] = {"tanh", "erf", "erfc", "expm1", "log1p", "atanh", "asinh", "acosh",
                           "sinh", "cosh", "tan", "atan", "asin", "acos", "cbrt", "log10", "log2"};
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
    for (const char* name : unary) add(name, "v");
    for (const char* name : binary) add(name, "vv");
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

  std::deque<std::string> scalar_, vector_, prefixes_;  // VecDesc keeps StringRefs to these
  std::vector<unsigned> widths_;
  std::vector<llvm::VecDesc> descriptions_;
};

// One MLIR context for the process; all use of it is under `mutex`.
struct CompilerState {
  std::mutex mutex;
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
    if (llvm_target == nullptr) fail("no LLVM target for " + target.triple, error);
    llvm::TargetOptions options;
    target_machine.reset(llvm_target->createTargetMachine(
        target.triple, target.cpu, target.features, options, llvm::Reloc::PIC_, std::nullopt,
        llvm::CodeGenOptLevel::Aggressive));
    if (!target_machine) fail("cannot create a target machine for " + target.cpu, "");
    vector_math = std::make_unique<VectorMathTable>(target);
  }

  static mlir::DialectRegistry registry() {
    static std::once_flag passes_registered;
    std::call_once(passes_registered, [] { mlir::registerAllPasses(); });
    mlir::DialectRegistry registry;
    mlir::registerAllDialects(registry);
    mlir::registerAllExtensions(registry);
    mlir::registerAllToLLVMIRTranslations(registry);
    return registry;
  }
};

CompilerState& state() {
  static CompilerState* instance = new CompilerState();  // never destroyed: kernels outlive exit
  return *instance;
}

// Parses and lowers under the caller's lock; diagnostics go into the error message.
mlir::OwningOpRef<mlir::ModuleOp> parseAndLower(CompilerState& s, const std::string& text) {
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&s.context, [&](mlir::Diagnostic& diagnostic) {
    diagnostics += diagnostic.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(text, &s.context);
  if (!module) fail("kernel MLIR does not parse", diagnostics);
  mlir::PassManager pm(&s.context);
  std::string pipeline_error;
  llvm::raw_string_ostream pipeline_errors(pipeline_error);
  if (mlir::failed(mlir::parsePassPipeline(kLoweringPipeline, pm, pipeline_errors)))
    fail("bad lowering pipeline", pipeline_error);
  if (mlir::failed(pm.run(*module))) fail("lowering to the LLVM dialect failed", diagnostics);
  return module;
}

// Adds `entry(slots, begin, end)` calling `kernel` with each argument read from its slot.
void addSlotEntryPoint(llvm::Module& module, const std::string& entry) {
  llvm::Function* kernel = module.getFunction("kernel");
  if (kernel == nullptr) fail("the kernel module has no function named kernel", "");
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
  if (count < 2) fail("the kernel takes no [begin, end) range", "");
  for (unsigned i = 0; i + 2 < count; ++i) {
    llvm::Value* slot = b.CreateLoad(i64, b.CreateConstGEP1_64(i64, function->getArg(0), i));
    llvm::Type* wanted = kernel->getArg(i)->getType();
    if (wanted->isPointerTy()) arguments.push_back(b.CreateIntToPtr(slot, wanted));
    else if (wanted->isDoubleTy()) arguments.push_back(b.CreateBitCast(slot, wanted));
    else if (wanted->isIntegerTy(64)) arguments.push_back(slot);
    else fail("kernel argument " + std::to_string(i) + " has no slot encoding", "");
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

}  // namespace

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
  CompilerState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
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
  CompilerState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  llvm::LLVMContext llvm_context;
  std::unique_ptr<llvm::Module> module = optimizedModule(s, llvm_context, mlir_module, entry);
  std::string text;
  llvm::raw_string_ostream out(text);
  module->print(out, nullptr);
  return text;
}

ObjectCode compileKernel(const std::string& mlir_module, const std::string& entry) {
  CompilerState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  llvm::LLVMContext llvm_context;
  std::unique_ptr<llvm::Module> llvm_module = optimizedModule(s, llvm_context, mlir_module, entry);

  ObjectCode object;
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager emit;
  if (s.target_machine->addPassesToEmitFile(emit, stream, nullptr,
                                            llvm::CodeGenFileType::ObjectFile))
    fail("the target cannot emit object code", s.target.triple);
  emit.run(*llvm_module);
  object.bytes.assign(buffer.begin(), buffer.end());
  object.entry = entry;
  return object;
}

}  // namespace torchneuron::fusion
