#include "fusion/non_temporal_stores.h"

#include <llvm/IR/DataLayout.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Triple.h>
#include <mlir/Dialect/Arith/IR/Arith.h>
#include <mlir/Dialect/Func/IR/FuncOps.h>
#include <mlir/Dialect/Linalg/IR/Linalg.h>
#include <mlir/Dialect/Math/IR/Math.h>
#include <mlir/Dialect/MemRef/IR/MemRef.h>
#include <mlir/Dialect/SCF/IR/SCF.h>
#include <mlir/Dialect/Vector/IR/VectorOps.h>
#include <mlir/IR/BuiltinOps.h>
#include <mlir/IR/IRMapping.h>

#include <vector>

#include "fusion/streaming_vector_width.h"

namespace torchneuron::fusion {
namespace {

using mlir::Value;

bool markedElementwise(mlir::func::FuncOp function) {
  auto passthrough = function->getAttrOfType<mlir::ArrayAttr>("passthrough");
  if (!passthrough) return false;
  for (mlir::Attribute entry : passthrough)
    if (auto name = mlir::dyn_cast<mlir::StringAttr>(entry);
        name && name.getValue() == kElementwiseKernel)
      return true;
  return false;
}

// Scalars the body may compute on: integers and f32/f64. No f16 type (bfloat16 tensors are
// stored as i16 bits and computed in f32 through integer operations, which qualify).
bool scalarOnVectors(mlir::Type type) {
  return type.isF32() || type.isF64() ||
         (type.isSignlessInteger() && type.getIntOrFloatBitWidth() <= 64);
}

// Elements of a byte or more: a vector of i1 in memory would be bit-packed (bools are stored as
// i8 bytes).
bool byteElements(mlir::MemRefType memref) {
  return scalarOnVectors(memref.getElementType()) && memref.getElementTypeBitWidth() >= 8;
}

bool unitStrideVector(mlir::Type type) {
  auto memref = mlir::dyn_cast<mlir::MemRefType>(type);
  if (!memref || memref.getRank() != 1 || !byteElements(memref)) return false;
  llvm::SmallVector<int64_t, 1> strides;
  int64_t offset = 0;
  return mlir::succeeded(mlir::getStridesAndOffset(memref, strides, offset)) && strides[0] == 1;
}

// An input read at one element for all (a 0-dim tensor operand): loaded once, broadcast.
bool scalarInput(mlir::Type type, mlir::AffineMap map) {
  auto memref = mlir::dyn_cast<mlir::MemRefType>(type);
  return memref && memref.getRank() == 0 && map.getNumResults() == 0 && byteElements(memref);
}

// An op of the body that becomes vector instructions when its operands are vectors: no library
// call (remainders, math functions) and no integer division (scalarized on x86).
bool vectorInstructions(mlir::Operation& op) {
  if (op.getNumRegions() != 0) return false;
  for (mlir::Type type : op.getResultTypes())
    if (!scalarOnVectors(type)) return false;
  if (mlir::isa<mlir::arith::ConstantOp>(op)) return true;
  for (mlir::Type type : op.getOperandTypes())
    if (!scalarOnVectors(type)) return false;
  if (mlir::isa<mlir::arith::RemFOp, mlir::arith::DivSIOp, mlir::arith::DivUIOp,
                mlir::arith::RemSIOp, mlir::arith::RemUIOp, mlir::arith::CeilDivSIOp,
                mlir::arith::CeilDivUIOp, mlir::arith::FloorDivSIOp>(op))
    return false;
  const bool arith = op.getDialect() != nullptr && op.getDialect()->getNamespace() == "arith";
  const bool inline_math =
      mlir::isa<mlir::math::FmaOp, mlir::math::AbsFOp, mlir::math::AbsIOp, mlir::math::CopySignOp,
                mlir::math::SqrtOp, mlir::math::FloorOp, mlir::math::CeilOp,
                mlir::math::RoundEvenOp, mlir::math::TruncOp>(op);
  return (arith || inline_math) && mlir::OpTrait::hasElementwiseMappableTraits(&op);
}

// The kernel's one generic, when it qualifies (non_temporal_stores.h).
mlir::linalg::GenericOp streamingGeneric(mlir::func::FuncOp function) {
  mlir::linalg::GenericOp found;
  int generics = 0;
  function.walk([&](mlir::linalg::GenericOp generic) {
    found = generic;
    ++generics;
  });
  if (generics != 1 || found.getNumLoops() != 1 || found.getNumDpsInits() != 1 ||
      !found.hasPureBufferSemantics())
    return {};
  const llvm::SmallVector<mlir::AffineMap> maps = found.getIndexingMapsArray();
  for (unsigned k = 0; k < found->getNumOperands(); ++k) {
    const mlir::Type type = found->getOperand(k).getType();
    const bool vector = maps[k].isIdentity() && unitStrideVector(type);
    if (!vector && !(k < found.getNumDpsInputs() && scalarInput(type, maps[k]))) return {};
  }
  const unsigned bits =
      mlir::cast<mlir::MemRefType>(found.getDpsInits()[0].getType()).getElementTypeBitWidth();
  if (bits < 8 || kNonTemporalStoreBytes * 8 % bits != 0) return {};
  for (mlir::Operation& op : found.getBody()->without_terminator())
    if (!vectorInstructions(op)) return {};
  for (Value value : found.getBody()->getTerminator()->getOperands())
    if (!scalarOnVectors(value.getType())) return {};
  return found;
}

class StreamingRewrite {
public:
  StreamingRewrite(mlir::linalg::GenericOp generic)
      : generic_(generic), loc_(generic.getLoc()), output_(generic.getDpsInits()[0]) {
    const unsigned bits = mlir::cast<mlir::MemRefType>(output_.getType()).getElementTypeBitWidth();
    element_bytes_ = bits / 8;
    lanes_ = kNonTemporalStoreBytes / element_bytes_;
  }

  void run() {
    mlir::OpBuilder b(generic_);
    // The whole output: the memref the kernel's range is a view of.
    Value whole = output_;
    if (auto view = output_.getDefiningOp<mlir::memref::SubViewOp>()) whole = view.getSource();
    Value total_bytes = b.create<mlir::arith::MulIOp>(
        loc_, b.create<mlir::memref::DimOp>(loc_, whole, 0), index(b, element_bytes_));
    Value large = b.create<mlir::arith::CmpIOp>(loc_, mlir::arith::CmpIPredicate::uge, total_bytes,
                                                index(b, kNonTemporalOutputBytes));
    // The address of the range's first output element, and whether elements are aligned to
    // their size (a tensor's always are; the vector stores rely on it).
    auto metadata = b.create<mlir::memref::ExtractStridedMetadataOp>(loc_, output_);
    Value address = b.create<mlir::arith::AddIOp>(
        loc_, b.create<mlir::memref::ExtractAlignedPointerAsIndexOp>(loc_, output_),
        b.create<mlir::arith::MulIOp>(loc_, metadata.getOffset(), index(b, element_bytes_)));
    Value natural = b.create<mlir::arith::CmpIOp>(
        loc_, mlir::arith::CmpIPredicate::eq,
        b.create<mlir::arith::RemUIOp>(loc_, address, index(b, element_bytes_)), index(b, 0));
    Value take = b.create<mlir::arith::AndIOp>(loc_, large, natural);
    auto branch = b.create<mlir::scf::IfOp>(loc_, take, /*withElseRegion=*/true);

    mlir::OpBuilder then(branch.thenBlock()->getTerminator());
    Value count = then.create<mlir::memref::DimOp>(loc_, output_, 0);
    Value line = index(then, kNonTemporalStoreBytes);
    Value to_boundary = then.create<mlir::arith::RemUIOp>(
        loc_,
        then.create<mlir::arith::SubIOp>(loc_, line,
                                         then.create<mlir::arith::RemUIOp>(loc_, address, line)),
        line);
    Value head = then.create<mlir::arith::MinUIOp>(
        loc_, then.create<mlir::arith::DivUIOp>(loc_, to_boundary, index(then, element_bytes_)),
        count);
    Value lanes = index(then, lanes_);
    Value aligned_end = then.create<mlir::arith::AddIOp>(
        loc_, head,
        then.create<mlir::arith::MulIOp>(
            loc_,
            then.create<mlir::arith::DivUIOp>(
                loc_, then.create<mlir::arith::SubIOp>(loc_, count, head), lanes),
            lanes));
    cloneOver(then, index(then, 0), head);
    emitVectorLoop(then, head, aligned_end);
    cloneOver(then, aligned_end, then.create<mlir::arith::SubIOp>(loc_, count, aligned_end));

    generic_->moveBefore(branch.elseBlock()->getTerminator());
  }

private:
  Value index(mlir::OpBuilder& b, int64_t value) {
    return b.create<mlir::arith::ConstantIndexOp>(loc_, value);
  }

  // The original generic over elements [start, start + length) of every operand.
  void cloneOver(mlir::OpBuilder& b, Value start, Value length) {
    mlir::IRMapping views;
    for (Value operand : generic_->getOperands()) {
      if (views.contains(operand) || mlir::cast<mlir::MemRefType>(operand.getType()).getRank() == 0)
        continue;
      const llvm::SmallVector<mlir::OpFoldResult, 1> offsets{start}, sizes{length},
          strides{b.getIndexAttr(1)};
      views.map(
          operand,
          b.create<mlir::memref::SubViewOp>(loc_, operand, offsets, sizes, strides).getResult());
    }
    b.clone(*generic_.getOperation(), views);
  }

  mlir::VectorType vectorOf(mlir::Type scalar) const {
    return mlir::VectorType::get({lanes_}, scalar);
  }

  // for i in [begin, end) step lanes: the body on vectors, stored non-temporally.
  void emitVectorLoop(mlir::OpBuilder& b, Value begin, Value end) {
    mlir::Block& body = *generic_.getBody();
    mlir::IRMapping values;
    // Values the body or its yield reads from outside it (the kernel's scalars), broadcast once.
    for (mlir::Operation& op : body)
      for (Value operand : op.getOperands())
        if (operand.getParentBlock() != &body && !values.contains(operand))
          values.map(operand,
                     b.create<mlir::vector::BroadcastOp>(loc_, vectorOf(operand.getType()), operand)
                         .getResult());
    mlir::Operation* yield = body.getTerminator();

    // 0-dim inputs, read once and broadcast.
    for (unsigned k = 0; k < generic_.getNumDpsInputs(); ++k) {
      const Value memref = generic_.getDpsInputOperand(k)->get();
      mlir::BlockArgument argument = body.getArgument(k);
      if (argument.use_empty() || mlir::cast<mlir::MemRefType>(memref.getType()).getRank() != 0)
        continue;
      values.map(argument, b.create<mlir::vector::BroadcastOp>(
                                loc_, vectorOf(argument.getType()),
                                b.create<mlir::memref::LoadOp>(loc_, memref).getResult())
                               .getResult());
    }

    auto loop = b.create<mlir::scf::ForOp>(loc_, begin, end, index(b, lanes_));
    mlir::OpBuilder in(loop.getBody()->getTerminator());
    const Value element = loop.getInductionVar();
    const unsigned inputs = generic_.getNumDpsInputs();
    for (unsigned k = 0; k < body.getNumArguments(); ++k) {
      mlir::BlockArgument argument = body.getArgument(k);
      if (argument.use_empty()) continue;
      const Value memref = k < inputs ? generic_.getDpsInputOperand(k)->get() : output_;
      if (values.contains(argument)) continue; // a 0-dim input, loaded before the loop
      values.map(argument, in.create<mlir::vector::LoadOp>(loc_, vectorOf(argument.getType()),
                                                           memref, mlir::ValueRange{element})
                               .getResult());
    }
    for (mlir::Operation& op : body.without_terminator()) {
      if (auto constant = mlir::dyn_cast<mlir::arith::ConstantOp>(op)) {
        auto splat =
            mlir::DenseElementsAttr::get(vectorOf(constant.getType()), constant.getValue());
        values.map(constant.getResult(),
                   in.create<mlir::arith::ConstantOp>(loc_, splat).getResult());
        continue;
      }
      mlir::Operation* vector_op = in.clone(op, values);
      for (mlir::OpResult result : vector_op->getResults())
        result.setType(vectorOf(result.getType()));
    }
    in.create<mlir::vector::StoreOp>(loc_, values.lookup(yield->getOperand(0)), output_,
                                     mlir::ValueRange{element}, /*nontemporal=*/true);
  }

  mlir::linalg::GenericOp generic_;
  mlir::Location loc_;
  Value output_;
  int64_t element_bytes_ = 4;
  int64_t lanes_ = 16;
};

} // namespace

int addNonTemporalStreamingLoops(mlir::ModuleOp module) {
  std::vector<mlir::linalg::GenericOp> generics;
  module.walk([&](mlir::func::FuncOp function) {
    if (!markedElementwise(function)) return;
    if (mlir::linalg::GenericOp generic = streamingGeneric(function)) generics.push_back(generic);
  });
  for (mlir::linalg::GenericOp generic : generics)
    StreamingRewrite(generic).run();
  return static_cast<int>(generics.size());
}

int alignNonTemporalStores(llvm::Module& module) {
  const bool x86 = llvm::Triple(module.getTargetTriple()).isX86();
  const llvm::DataLayout& layout = module.getDataLayout();
  int stores = 0;
  for (llvm::Function& function : module) {
    bool streams = false;
    for (llvm::BasicBlock& block : function)
      for (llvm::Instruction& instruction : block) {
        auto* store = llvm::dyn_cast<llvm::StoreInst>(&instruction);
        if (store == nullptr || store->getMetadata(llvm::LLVMContext::MD_nontemporal) == nullptr)
          continue;
        ++stores;
        streams = true;
        if (x86)
          store->setAlignment(
              llvm::Align(layout.getTypeStoreSize(store->getValueOperand()->getType())));
        else
          store->setMetadata(llvm::LLVMContext::MD_nontemporal, nullptr);
      }
    if (!streams || !x86) continue;
    for (llvm::BasicBlock& block : function)
      if (auto* ret = llvm::dyn_cast<llvm::ReturnInst>(block.getTerminator())) {
        llvm::IRBuilder<> b(ret);
        b.CreateIntrinsic(llvm::Intrinsic::x86_sse_sfence, {}, {});
      }
  }
  return stores;
}

} // namespace torchneuron::fusion
