#include "device/direct_gemm.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <utility>

#include "device/host_view.h"

// The BLAS ATen's CPU kernels call (libblas.so.3, which libtorch_cpu links).
extern "C" void sgemm_(char* transa, char* transb, int* m, int* n, int* k, float* alpha,
                       const float* a, int* lda, const float* b, int* ldb, float* beta, float* c,
                       int* ldc);
extern "C" void dgemm_(char* transa, char* transb, int* m, int* n, int* k, double* alpha,
                       const double* a, int* lda, const double* b, int* ldb, double* beta,
                       double* c, int* ldc);

namespace torchneuron {
namespace {

// One BLAS call in ATen's column-major terms (its CPUBlas.cpp gemm), after
// normalize_last_dims: c (m x n, leading dimension ldc) = beta * c + alpha * op(a) op(b).
struct GemmCall {
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  const char* a = nullptr;
  const char* b = nullptr;
  char* c = nullptr;

  // ATen's internal::normalize_last_dims: leading dimensions BLAS would reject where a size is 1
  // (and so never read) are replaced by valid ones.
  void normalizeLastDims() {
    if (n == 1) ldc = m;
    if (transpose_a) {
      if (m == 1) lda = k;
    } else if (k == 1) {
      lda = m;
    }
    if (transpose_b) {
      if (k == 1) ldb = n;
    } else if (n == 1) {
      ldb = k;
    }
  }

  // ATen's use_blas_gemm: otherwise it runs its own loop instead, and so does the caller.
  bool blasTakesIt() const {
    const int64_t limit = INT_MAX;
    return m <= limit && n <= limit && k <= limit && lda <= limit && ldb <= limit && ldc <= limit &&
           lda >= std::max<int64_t>(1, transpose_a ? k : m) &&
           ldb >= std::max<int64_t>(1, transpose_b ? n : k) && ldc >= std::max<int64_t>(1, m);
  }

  template <typename T, typename Gemm>
  void run(Gemm gemm, const c10::Scalar& alpha_scalar, const c10::Scalar& beta_scalar) const {
    char transa = transpose_a ? 't' : 'n';
    char transb = transpose_b ? 't' : 'n';
    int m_ = static_cast<int>(m), n_ = static_cast<int>(n), k_ = static_cast<int>(k);
    int lda_ = static_cast<int>(lda), ldb_ = static_cast<int>(ldb), ldc_ = static_cast<int>(ldc);
    T alpha = alpha_scalar.to<T>();
    T beta = beta_scalar.to<T>();
    gemm(&transa, &transb, &m_, &n_, &k_, &alpha, reinterpret_cast<const T*>(a), &lda_,
         reinterpret_cast<const T*>(b), &ldb_, &beta, reinterpret_cast<T*>(c), &ldc_);
  }
};

// How ATen's addmm_impl_cpu_ passes one operand of BLAS's column-major product, whose rows are
// its dimension `c_rows` and which has `rows` rows and `columns` columns: as it is (unit stride
// along its rows, leading dimension at least `rows`) or transposed (unit stride along its
// columns, leading dimension at least `columns`). False where ATen copies it first.
bool operandLayout(at::IntArrayRef strides, int c_rows, int64_t rows, int64_t columns,
                   bool& transpose) {
  const int c_cols = 1 - c_rows;
  if (strides[c_rows] == 1 && strides[c_cols] >= std::max<int64_t>(1, rows)) {
    transpose = false;
    return true;
  }
  if (strides[c_cols] == 1 && strides[c_rows] >= std::max<int64_t>(1, columns)) {
    transpose = true;
    return true;
  }
  return false;
}

// How ATen's addmm_impl_cpu_ passes result = m1 @ m2 to BLAS: as c = result (transposed, with m1
// and m2 swapped, when result is row-major), each operand as it is or transposed. False where it
// would copy the result or an operand first.
bool planLikeAten(const at::Tensor& result, at::Tensor m1, at::Tensor m2, GemmCall& call) {
  const at::IntArrayRef rs = result.strides();
  const at::IntArrayRef rz = result.sizes();
  bool transpose_c = false;
  if (rs[0] == 1 && (rz[1] == 1 || rs[1] >= std::max<int64_t>(1, rz[0]))) {
    transpose_c = false;
  } else if (rs[1] == 1 && (rz[0] == 1 || rs[0] >= std::max<int64_t>(1, rz[1]))) {
    std::swap(m1, m2);
    transpose_c = true;
  } else {
    return false;
  }
  const int c_rows = transpose_c ? 1 : 0; // the result dimension that is BLAS's m
  const int c_cols = 1 - c_rows;
  call.m = rz[c_rows];
  call.n = rz[c_cols];
  call.k = m1.size(c_cols);

  const at::IntArrayRef s1 = m1.strides(), s2 = m2.strides();
  if (!operandLayout(s1, c_rows, call.m, call.k, call.transpose_a) ||
      !operandLayout(s2, c_rows, call.k, call.n, call.transpose_b))
    return false;
  call.lda = s1[call.transpose_a == transpose_c ? 1 : 0];
  call.ldb = s2[call.transpose_b == transpose_c ? 1 : 0];
  call.ldc = rs[transpose_c ? 0 : 1];
  call.normalizeLastDims();
  if (!call.blasTakesIt()) return false;
  call.a = hostAddressOf(m1);
  call.b = hostAddressOf(m2);
  call.c = hostAddressOf(result);
  return true;
}

// Copies addmm's self into `out` (new, contiguous, m x n) as ATen's result.copy_(self expanded):
// a self of out's sizes and layout, or one contiguous row of n ([n], [1, n], or [m, n] expanded
// from one). False for any other self.
bool copySelfRows(const at::Tensor& out, const at::Tensor& self) {
  if (!out.is_contiguous() || self.scalar_type() != out.scalar_type() || self.is_neg() ||
      self.is_conj())
    return false;
  const int64_t rows = out.size(0), cols = out.size(1);
  const size_t row_bytes = static_cast<size_t>(cols) * out.element_size();
  char* target = hostAddressOf(out);
  if (self.dim() == 2 && self.size(0) == rows && self.size(1) == cols && self.is_contiguous()) {
    std::memcpy(target, hostAddressOf(self), row_bytes * rows);
    return true;
  }
  const bool one_row = (self.dim() == 1 && self.size(0) == cols && self.stride(0) == 1) ||
                       (self.dim() == 2 && self.size(1) == cols && self.stride(1) == 1 &&
                        (self.size(0) == 1 || (self.size(0) == rows && self.stride(0) == 0)));
  if (!one_row) return false;
  const char* row = hostAddressOf(self);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(target + i * row_bytes, row, row_bytes);
  return true;
}

} // namespace

bool gemmOnDeviceMemory(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                        const c10::Scalar& beta, const c10::Scalar& alpha, const at::Tensor* self) {
  const at::ScalarType dtype = out.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble) return false;
  if (a.scalar_type() != dtype || b.scalar_type() != dtype) return false;
  if (out.dim() != 2 || a.dim() != 2 || b.dim() != 2) return false;
  if (out.numel() == 0 || a.size(1) == 0) return false;
  if (a.is_conj() || b.is_conj() || a.is_neg() || b.is_neg() || out.is_neg()) return false;
  GemmCall call;
  if (!planLikeAten(out, a, b, call)) return false;
  if (self != nullptr && beta.toComplexDouble() != 0.0 && !copySelfRows(out, *self)) return false;
  if (dtype == at::kFloat)
    call.run<float>(sgemm_, alpha, beta);
  else
    call.run<double>(dgemm_, alpha, beta);
  return true;
}

} // namespace torchneuron
