#include "device/device_blas.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "launcher/parallel_launch.h"
#include "support/made_once.h"

// The BLAS ATen's CPU kernels call (libblas.so.3, which libtorch_cpu links): 32-bit integers.
extern "C" void sgemm_(char* transa, char* transb, int* m, int* n, int* k, float* alpha,
                       const float* a, int* lda, const float* b, int* ldb, float* beta, float* c,
                       int* ldc);
extern "C" void dgemm_(char* transa, char* transb, int* m, int* n, int* k, double* alpha,
                       const double* a, int* lda, const double* b, int* ldb, double* beta,
                       double* c, int* ldc);

#ifndef NEURON_DEVICE_BLAS_LIBRARY
#define NEURON_DEVICE_BLAS_LIBRARY ""
#endif

namespace torchneuron {
namespace {

// The OpenBLAS kernels that already use AVX-512: ATen's BLAS running one of them is kept.
bool isAvx512Core(const std::string& core) {
  return core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
}

bool cpuHasAvx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}

// The kernels of the OpenBLAS already in the process (ATen's), if it is one.
std::optional<std::string> atensOpenBlasCore() {
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (core_name == nullptr) return std::nullopt;
  const char* name = core_name();
  return std::string(name != nullptr ? name : "");
}

// The 64-bit-integer OpenBLAS's Fortran entries and thread control.
using Sgemm64 = void (*)(const char*, const char*, const int64_t*, const int64_t*, const int64_t*,
                         const float*, const float*, const int64_t*, const float*, const int64_t*,
                         const float*, float*, const int64_t*);
using Dgemm64 = void (*)(const char*, const char*, const int64_t*, const int64_t*, const int64_t*,
                         const double*, const double*, const int64_t*, const double*,
                         const int64_t*, const double*, double*, const int64_t*);
using SetThreads = void (*)(int);

struct OwnBlas {
  Sgemm64 sgemm = nullptr;
  Dgemm64 dgemm = nullptr;
  SetThreads set_threads = nullptr;
  std::string library;
  std::string core;
  std::string reason;          // why it is used, or why not (then sgemm is null)
  std::atomic<int> threads{0}; // what set_threads was last given
};

// Sets OPENBLAS_CORETYPE for the lifetime of the object, then restores what it was.
class CoreTypeForLoad {
public:
  explicit CoreTypeForLoad(const char* core) {
    if (const char* old = std::getenv("OPENBLAS_CORETYPE")) previous_ = old;
    setenv("OPENBLAS_CORETYPE", core, 1);
  }
  ~CoreTypeForLoad() {
    if (previous_)
      setenv("OPENBLAS_CORETYPE", previous_->c_str(), 1);
    else
      unsetenv("OPENBLAS_CORETYPE");
  }
  CoreTypeForLoad(const CoreTypeForLoad&) = delete;
  CoreTypeForLoad& operator=(const CoreTypeForLoad&) = delete;

private:
  std::optional<std::string> previous_;
};

OwnBlas* loadOwnBlas() {
  auto* blas = new OwnBlas;
  blas->library = NEURON_DEVICE_BLAS_LIBRARY;
  if (!cpuHasAvx512()) {
    blas->reason = "the host CPU has no AVX-512 (F, CD, BW, DQ and VL), so ATen's BLAS is used";
    return blas;
  }
  if (std::optional<std::string> core = atensOpenBlasCore(); core && isAvx512Core(*core)) {
    blas->reason = "ATen's OpenBLAS already runs its AVX-512 kernels (" + *core + ")";
    return blas;
  }
  if (blas->library.empty() || access(blas->library.c_str(), R_OK) != 0) {
    blas->reason = "the host CPU has AVX-512 but Debian's libopenblas64-0-openmp is not "
                   "installed (" +
                   (blas->library.empty() ? std::string("not found when torchneuron was built")
                                          : blas->library + " is missing") +
                   "), so ATen's BLAS is used";
    return blas;
  }
  void* handle = nullptr;
  {
    CoreTypeForLoad core("SkylakeX");
    handle = dlopen(blas->library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  }
  if (handle == nullptr) {
    const char* error = dlerror();
    blas->reason = "loading " + blas->library + " failed (" + (error ? error : "no message") +
                   "), so ATen's BLAS is used";
    return blas;
  }
  using CoreName = char* (*)();
  auto core_name = reinterpret_cast<CoreName>(dlsym(handle, "openblas_get_corename"));
  auto sgemm = reinterpret_cast<Sgemm64>(dlsym(handle, "sgemm_"));
  auto dgemm = reinterpret_cast<Dgemm64>(dlsym(handle, "dgemm_"));
  auto set_threads = reinterpret_cast<SetThreads>(dlsym(handle, "openblas_set_num_threads"));
  const char* core = core_name != nullptr ? core_name() : nullptr;
  blas->core = core != nullptr ? core : "";
  if (sgemm == nullptr || dgemm == nullptr || set_threads == nullptr || blas->core != "SkylakeX") {
    // Left loaded: unloading a library whose OpenMP and TLS state may be live is not safe.
    blas->reason = blas->library + " did not load as expected (kernels '" + blas->core +
                   "', not SkylakeX, or entries missing), so ATen's BLAS is used";
    blas->core.clear();
    return blas;
  }
  blas->sgemm = sgemm;
  blas->dgemm = dgemm;
  blas->set_threads = set_threads;
  const std::optional<std::string> atens = atensOpenBlasCore();
  blas->reason = "the host CPU has AVX-512 and ATen's BLAS runs " +
                 (atens ? "OpenBLAS's " + *atens + " kernels" : std::string("no OpenBLAS")) +
                 ": the device's own OpenBLAS runs its SkylakeX (AVX-512) kernels";
  return blas;
}

OwnBlas& ownBlas() {
  static MadeOnce<OwnBlas> made;
  return made.get(loadOwnBlas);
}

// -1: NEURON_DEVICE_BLAS decides; otherwise a DeviceBlas that setDeviceBlas() chose.
std::atomic<int> chosen{-1};

DeviceBlas choice() {
  const int set = chosen.load(std::memory_order_relaxed);
  return set < 0 ? settings().device_blas : static_cast<DeviceBlas>(set);
}

// The device's own BLAS when it is chosen and usable, else null.
OwnBlas* usableOwnBlas() {
  if (choice() == DeviceBlas::kAten) return nullptr;
  OwnBlas& blas = ownBlas();
  return blas.sgemm != nullptr ? &blas : nullptr;
}

// Each call runs on torch.get_num_threads() threads, one in a forked child. OpenBLAS's own
// count (its OpenMP build ignores omp_get_max_threads() once it is 1) is set when it differs.
void matchThreads(OwnBlas& blas) {
  const int threads = launchesRunInline() ? 1 : at::get_num_threads();
  if (blas.threads.exchange(threads, std::memory_order_relaxed) != threads)
    blas.set_threads(threads);
}

int asInt(int64_t value) { return static_cast<int>(value); }

} // namespace

DeviceBlasInfo deviceBlasInfo() {
  if (choice() == DeviceBlas::kAten)
    return {"aten", "", "NEURON_DEVICE_BLAS=aten or set_device_blas('aten') chose ATen's BLAS"};
  const OwnBlas& blas = ownBlas();
  if (blas.sgemm == nullptr) return {"aten", "", blas.reason};
  return {blas.library, blas.core, blas.reason};
}

bool deviceBlasIsAtens() { return usableOwnBlas() == nullptr; }

void setDeviceBlas(DeviceBlas blas) {
  chosen.store(static_cast<int>(blas), std::memory_order_relaxed);
}

void deviceGemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  if (OwnBlas* blas = usableOwnBlas()) {
    matchThreads(*blas);
    blas->sgemm(&transa, &transb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
    return;
  }
  int m_ = asInt(m), n_ = asInt(n), k_ = asInt(k);
  int lda_ = asInt(lda), ldb_ = asInt(ldb), ldc_ = asInt(ldc);
  sgemm_(&transa, &transb, &m_, &n_, &k_, &alpha, a, &lda_, b, &ldb_, &beta, c, &ldc_);
}

void deviceGemm(char transa, char transb, int64_t m, int64_t n, int64_t k, double alpha,
                const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
                int64_t ldc) {
  if (OwnBlas* blas = usableOwnBlas()) {
    matchThreads(*blas);
    blas->dgemm(&transa, &transb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc);
    return;
  }
  int m_ = asInt(m), n_ = asInt(n), k_ = asInt(k);
  int lda_ = asInt(lda), ldb_ = asInt(ldb), ldc_ = asInt(ldc);
  dgemm_(&transa, &transb, &m_, &n_, &k_, &alpha, a, &lda_, b, &ldb_, &beta, c, &ldc_);
}

} // namespace torchneuron
