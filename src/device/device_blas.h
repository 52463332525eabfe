#pragma once
// The BLAS the device's matrix products call (direct_gemm.cpp: mm, addmm, bmm, baddbmm and the
// tracer's accumulating products).
//
// ATen's CPU kernels call the process's libblas.so.3, on Debian OpenBLAS 0.3.21, which picks its
// kernels by CPU model at load. A CPU it does not know (this project's machines: AMD family 26)
// gets its AVX2 "Haswell" kernels even where the CPU has AVX-512, whose OpenBLAS kernels
// ("SkylakeX") run a float32 product 1.5x-1.9x faster here (bench/device_blas.py). The device
// target is the host CPU, so where the CPU has AVX-512 (F, CD, BW, DQ, VL) and ATen's BLAS does
// not run AVX-512 kernels, the device loads a second OpenBLAS of its own with those kernels:
// Debian's libopenblas64-0-openmp (the 64-bit-integer build; OpenMP threads, so it shares
// libgomp's team with ATen and the device's launches instead of adding a pool that spins),
// loaded with RTLD_LOCAL | RTLD_DEEPBIND so that its symbols (the same names as ATen's
// OpenBLAS's) neither replace nor are replaced by ATen's, and OPENBLAS_CORETYPE=SkylakeX set
// around the load (restored at once) as OpenBLAS reads it when it initializes.
//
// Its results are not ATen's bit for bit (other kernels, other blocking): NEURON_DEVICE_BLAS=aten
// or set_device_blas(kAten) keeps ATen's BLAS, and with it the CPU's results exactly. Where the
// second BLAS cannot be used (no AVX-512, ATen's BLAS already runs AVX-512 kernels, the library
// is not installed or does not load as expected) the device calls ATen's, and deviceBlasInfo()
// says why.
//
// Threads: each call runs on torch.get_num_threads() threads (OpenMP), one in a forked child
// (libgomp's team does not survive fork(); parallel_launch.h).

#include <cstdint>
#include <string>

#include "support/settings.h"

namespace torchneuron {

struct DeviceBlasInfo {
  std::string library; // "aten" or the path of the device's own OpenBLAS
  std::string core;    // the OpenBLAS kernels it runs ("SkylakeX"), or "" when unknown
  std::string reason;  // why this one: a sentence naming what decided it
};

// What the device's products call now (loads the device's own BLAS at the first call that
// needs it; thread-safe).
DeviceBlasInfo deviceBlasInfo();

// Whether products call ATen's BLAS (and so give the CPU's results bit for bit).
bool deviceBlasIsAtens();

// Overrides NEURON_DEVICE_BLAS for the process from now on (tests, torchneuron.set_device_blas).
void setDeviceBlas(DeviceBlas choice);

// c (column-major, m x n, leading dimension ldc) = beta * c + alpha * op(a) op(b), with op
// 't' or 'n', through the BLAS deviceBlasInfo() names. Sizes and leading dimensions are BLAS's
// valid ones and fit an int (direct_gemm.cpp checks, as ATen does).
void deviceGemm(char transa, char transb, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc);
void deviceGemm(char transa, char transb, int64_t m, int64_t n, int64_t k, double alpha,
                const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
                int64_t ldc);

} // namespace torchneuron
