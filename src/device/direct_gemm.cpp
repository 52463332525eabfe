#include "device/direct_gemm.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/graph_task.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <utility>

#include "device/host_view.h"
#include "device/metrics.h"
#include "launcher/parallel_launch.h"
#include "support/fork_handlers.h"

// The BLAS ATen's CPU kernels call (libblas.so.3, which libtorch_cpu links).
extern "C" void sgemm_(char* transa, char* transb, int* m, int* n, int* k, float* alpha,
                       const float* a, int* lda, const float* b, int* ldb, float* beta, float* c,
                       int* ldc);
extern "C" void dgemm_(char* transa, char* transb, int* m, int* n, int* k, double* alpha,
                       const double* a, int* lda, const double* b, int* ldb, double* beta,
                       double* c, int* ldc);

namespace torchneuron {
namespace {

// Products of at least this many multiply-adds (m * n * k) are split over the device's threads
// when there are several: OpenBLAS's own threshold for using its threads (0.3.21's gemm.c,
// SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD).
constexpr int64_t kSplitLeastProduct = 64 * 64 * 64;
// Parts are whole multiples of this many rows or columns (OpenBLAS's widest float tile).
constexpr int64_t kPartQuantum = 16;

// OpenBLAS's thread count (Debian's libopenblas0-pthread: its own pool of pthreads), looked up at
// run time: libblas.so.3 may be another BLAS, without them.
struct OpenBlasThreads {
  int (*get)() = nullptr;
  void (*set)(int) = nullptr;
  static const OpenBlasThreads& find() {
    static const OpenBlasThreads found = [] {
      OpenBlasThreads f;
      f.get = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
      f.set = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
      if (!f.get || !f.set) f = OpenBlasThreads();
      return f;
    }();
    return found;
  }
  bool present() const { return get != nullptr; }
};

// While a split product runs, OpenBLAS runs each part on its calling thread: OpenBLAS's pool is
// told 1 thread (its thread count is global), and told its old count again when the last split
// product in flight ends. Any other product that runs meanwhile on another thread, on the CPU or
// on the device, runs on one thread too: slower, and no longer with the bits of ATen's 2-thread
// call (never wrong). A count set by other code while a split product runs is overwritten by the
// restore. A child forked while one is in flight gets the old count back at its first device
// product (not in the fork handler, where OpenBLAS would start its threads; the child's launches
// run inline, and it never splits a product itself).
class OneBlasThreadScope {
public:
  explicit OneBlasThreadScope(const OpenBlasThreads& blas) : blas_(blas) {
    registerForkHandlersOnce();
    std::lock_guard<std::mutex> lock(mutex_);
    if (users_++ == 0) {
      saved_ = blas_.get();
      if (saved_ != 1) blas_.set(1);
    }
  }
  ~OneBlasThreadScope() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--users_ == 0 && saved_ != 1) blas_.set(saved_);
  }
  OneBlasThreadScope(const OneBlasThreadScope&) = delete;
  OneBlasThreadScope& operator=(const OneBlasThreadScope&) = delete;

  // In a child forked while a split product ran: puts OpenBLAS's count back (once). Called on
  // every device product: a plain load where nothing is pending, the exchange only where it is.
  static void restoreAfterFork(const OpenBlasThreads& blas) {
    if (restore_in_child_.load(std::memory_order_relaxed) == 0) return;
    const int count = restore_in_child_.exchange(0, std::memory_order_relaxed);
    if (count > 1) blas.set(count);
  }

private:
  static void registerForkHandlersOnce() {
    static std::once_flag registered;
    std::call_once(registered, [] {
      registerForkHandlers(ForkRank::kBlasThreads,
                           {[] { mutex_.lock(); }, [] { mutex_.unlock(); },
                            [] {
                              if (users_ > 0 && saved_ != 1)
                                restore_in_child_.store(saved_, std::memory_order_relaxed);
                              users_ = 0;
                              mutex_.unlock();
                            }});
    });
  }

  const OpenBlasThreads& blas_;
  static inline std::mutex mutex_;
  static inline int users_ = 0;
  static inline int saved_ = 1;
  static inline std::atomic<int> restore_in_child_{0};
};

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
  bool operands_swapped = false; // a is the product's right operand, b its left (row-major c)

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

  // The part of this product that writes c's columns [begin, end) (`columns`) or rows: the
  // same k, so each element is summed as the whole call sums it.
  GemmCall part(bool columns, int64_t begin, int64_t end, size_t element) const {
    GemmCall p = *this;
    if (columns) {
      p.n = end - begin;
      p.c += begin * ldc * element;
      p.b += begin * (transpose_b ? 1 : ldb) * element;
    } else {
      p.m = end - begin;
      p.c += begin * element;
      p.a += begin * (transpose_a ? lda : 1) * element;
    }
    return p;
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
    call.operands_swapped = true;
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

// Whether runParts would give a product's parts threads now: not in a forked child, not inside
// a parallel region (both run parts inline), and more than one thread.
bool partsGetThreads() {
  return at::get_num_threads() > 1 && !launchesRunInline() && !at::in_parallel_region();
}

// Runs `call`: with ProductThreads::kBlas, or where splitting does not pay, as one BLAS call on
// the calling thread (OpenBLAS's own threads, as ATen's call); with kDevice, split along c's
// larger dimension over the device's threads (the launch pool's, runParts: PyTorch's OpenMP
// team by default), each part an OpenBLAS call on its own thread.
template <typename T, typename Gemm>
void runOnThreads(const GemmCall& call, Gemm gemm, const c10::Scalar& alpha,
                  const c10::Scalar& beta, ProductThreads product_threads) {
  const int threads = at::get_num_threads();
  const OpenBlasThreads& blas = OpenBlasThreads::find();
  const bool columns = call.n >= call.m;
  const int64_t extent = columns ? call.n : call.m;
  if (product_threads != ProductThreads::kDevice || !blas.present() || !partsGetThreads() ||
      call.m * call.n * call.k < kSplitLeastProduct || extent < 2 * kPartQuantum) {
    call.run<T>(gemm, alpha, beta);
    return;
  }
  const int64_t quanta = (extent + kPartQuantum - 1) / kPartQuantum;
  const int64_t parts = std::min<int64_t>(threads, quanta);
  const int64_t quanta_per_part = (quanta + parts - 1) / parts;
  OneBlasThreadScope one_thread_each(blas);
  recordLaunch(&splitProductCounter());
  runParts(threads, parts, [&](int64_t p) {
    const int64_t begin = std::min(extent, p * quanta_per_part * kPartQuantum);
    const int64_t end = std::min(extent, (p + 1) * quanta_per_part * kPartQuantum);
    if (begin < end) call.part(columns, begin, end, sizeof(T)).template run<T>(gemm, alpha, beta);
  });
}

} // namespace

ProductThreads productThreadsFor(std::initializer_list<const at::Tensor*> operands) {
  const OpenBlasThreads& blas = OpenBlasThreads::find();
  if (!blas.present()) return ProductThreads::kBlas;
  OneBlasThreadScope::restoreAfterFork(blas);
  if (!partsGetThreads()) return ProductThreads::kBlas;
  if (torch::autograd::get_current_graph_task_nodes_in_graph() != nullptr)
    return ProductThreads::kBlas; // a backward pass
  if (at::GradMode::is_enabled())
    for (const at::Tensor* t : operands)
      if (t->requires_grad()) return ProductThreads::kBlas; // a training step's forward
  return ProductThreads::kDevice;
}

bool gemmOnDeviceMemory(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                        const c10::Scalar& beta, const c10::Scalar& alpha, const at::Tensor* self,
                        ProductThreads product_threads) {
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
    runOnThreads<float>(call, sgemm_, alpha, beta, product_threads);
  else
    runOnThreads<double>(call, dgemm_, alpha, beta, product_threads);
  return true;
}

namespace {

// bmm's products as planned for its first matrix, an equal share of the batch on each of the
// device's threads (OpenBLAS on its calling thread), the rest split one by one.
template <typename T, typename Gemm>
void runBatchOnDeviceThreads(const GemmCall& first, int64_t batches, int64_t step_a, int64_t step_b,
                             int64_t step_c, Gemm gemm) {
  const c10::Scalar one(1.0), zero(0.0);
  auto product = [&](int64_t i) {
    GemmCall call = first;
    call.a += i * step_a;
    call.b += i * step_b;
    call.c += i * step_c;
    return call;
  };
  const int threads = at::get_num_threads();
  // Whole rounds of one product per thread are shared out evenly; the products left over (fewer
  // than the threads) are each split over all of them: 3 products on 2 threads shared as 2 + 1
  // ran 1.37x slower than OpenBLAS's own threads (scratch, 768^3 each).
  const int64_t shared = partsGetThreads() ? batches - batches % threads : 0;
  if (shared > 0) {
    OneBlasThreadScope one_thread_each(OpenBlasThreads::find());
    recordLaunch(&splitProductCounter());
    runParts(threads, threads, [&](int64_t p) {
      for (int64_t i = p * shared / threads; i < (p + 1) * shared / threads; ++i)
        product(i).template run<T>(gemm, one, zero);
    });
  }
  for (int64_t i = shared; i < batches; ++i)
    runOnThreads<T>(product(i), gemm, one, zero, ProductThreads::kDevice);
}

} // namespace

bool bmmOnDeviceMemory(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                       ProductThreads product_threads) {
  if (product_threads != ProductThreads::kDevice) return false;
  const at::ScalarType dtype = out.scalar_type();
  if (dtype != at::kFloat && dtype != at::kDouble) return false;
  if (a.scalar_type() != dtype || b.scalar_type() != dtype) return false;
  if (out.dim() != 3 || a.dim() != 3 || b.dim() != 3 || out.numel() == 0 || a.size(2) == 0)
    return false;
  if (a.is_conj() || b.is_conj() || a.is_neg() || b.is_neg() || out.is_neg()) return false;
  // ATen's own loops take products this small (bmm_out_or_baddbmm_), and keep their bits.
  if (a.size(1) * a.size(2) * b.size(2) < 400) return false;
  // Every matrix of the batch has the first one's layout; only the base addresses move.
  GemmCall first;
  if (!planLikeAten(out.select(0, 0), a.select(0, 0), b.select(0, 0), first)) return false;
  const int64_t element = static_cast<int64_t>(out.element_size());
  const int64_t step_a = (first.operands_swapped ? b.stride(0) : a.stride(0)) * element;
  const int64_t step_b = (first.operands_swapped ? a.stride(0) : b.stride(0)) * element;
  const int64_t step_c = out.stride(0) * element;
  if (dtype == at::kFloat)
    runBatchOnDeviceThreads<float>(first, out.size(0), step_a, step_b, step_c, sgemm_);
  else
    runBatchOnDeviceThreads<double>(first, out.size(0), step_a, step_b, step_c, dgemm_);
  return true;
}

} // namespace torchneuron
