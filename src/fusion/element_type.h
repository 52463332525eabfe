#pragma once
// How a PyTorch dtype is stored in device memory and computed on in a kernel (MLIR types).

#include <c10/core/ScalarType.h>

#include <string>

namespace torchneuron::fusion {

// The arithmetic class of a value inside a kernel.
enum class NumberKind { kFloat, kSigned, kUnsigned, kBool };

struct ElementType {
  NumberKind kind;
  int bits;         // width of the MLIR value (1 for bool values)
  std::string mlir; // MLIR type of a value: f32, f64, bf16, i64, i1, ...
  bool isFloat() const { return kind == NumberKind::kFloat; }
  // A bfloat16 in memory: kernels load and store its 16 bits as i16 and convert with integer
  // operations (exact widening, c10's round-to-nearest-even narrowing), so no bf16 value ever
  // reaches LLVM, whose x86 backend would call __truncsfbf2 (missing from GCC 12's libgcc) for
  // bf16 values it keeps in registers.
  bool isBFloat16Bits() const { return kind == NumberKind::kFloat && mlir == "i16"; }
  bool isHalf() const { return kind == NumberKind::kFloat && mlir == "f16"; }
  bool isInteger() const { return kind == NumberKind::kSigned || kind == NumberKind::kUnsigned; }
};

// Whether kernels support this dtype at all (complex, quantized and bits types are not).
bool isKernelDtype(c10::ScalarType dtype);

// The type of an element in memory: bool is one byte (i8) there.
ElementType storageType(c10::ScalarType dtype);

// The type a kernel computes in for this dtype: half and bfloat16 compute in f32 (ATen's
// "opmath"), bool in i1, everything else in itself.
ElementType computeType(c10::ScalarType dtype);

} // namespace torchneuron::fusion
