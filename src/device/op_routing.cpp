// The one routing point: the only file that registers device kernels with the dispatcher. Every
// registration happens in registerDeviceKernels, in the order written there, from one static
// initializer; the kernels live in their own files as plain functions. docs/architecture.md
// ("Routing") describes the routes and the autograd policy.

#include "device/op_routing.h"

#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_warnings.h"
#include "device/compiled_ops.h"
#include "device/eigenvalues.h"
#include "device/integer_division_guard.h"
#include "device/library_ops.h"
#include "device/plan_replay.h"
#include "device/recurrent_layers.h"
#include "device/reduced_precision_calls.h"
#include "device/runtime_ops.h"

namespace torchneuron {
namespace {

using c10::DispatchKey;

c10::OperatorName atenOpName(const std::string& schema_name) {
  const size_t dot = schema_name.find('.');
  return c10::OperatorName("aten::" + schema_name.substr(0, dot),
                           dot == std::string::npos ? "" : schema_name.substr(dot + 1));
}

std::string schemaName(const c10::OperatorName& name) {
  return name.name.substr(6) + (name.overload_name.empty() ? "" : "." + name.overload_name);
}

bool hasAutogradKernel(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(DispatchKey::Autograd) ||
         op.hasKernelForDispatchKey(DispatchKey::AutogradPrivateUse1);
}

// Registers the PrivateUse1 kernel of the ATen op `schema_name` ("add.Tensor"), keeping the two
// rules every device kernel obeys: an op gets one device kernel (a second registration would
// silently replace the first, so the order below would decide), and only an op with an autograd
// kernel of its own gets one (the autograd policy, at the end of this file's steps).
void registerDeviceKernel(torch::Library& aten, const std::string& schema_name,
                          torch::CppFunction kernel) {
  auto op = c10::Dispatcher::singleton().findOp(atenOpName(schema_name));
  TORCH_INTERNAL_ASSERT(op && op->hasSchema(), "[routing] no ATen op ", schema_name);
  TORCH_INTERNAL_ASSERT(!op->hasKernelForDispatchKey(DispatchKey::PrivateUse1), "[routing] ",
                        schema_name, " would get a second device kernel");
  TORCH_INTERNAL_ASSERT(hasAutogradKernel(*op), "[routing] ", schema_name,
                        " has no autograd kernel: a device kernel would skip its composite's "
                        "autograd; it must stay composite");
  aten.impl(schema_name.c_str(), std::move(kernel));
}

template <Route route, auto kernel = nullptr, auto declined = nullptr> torch::CppFunction routed() {
  return torch::CppFunction::makeFromBoxedFunction<&routeOp<route, kernel, declined>>();
}

// A library op that runs as another op (`rewrite` turns its stack into that op's and names it).
template <auto rewrite>
void routeRewrittenLibraryOp(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  routeOp<Route::kLibrary, &runLibraryKernelOnHost>(rewrite(stack), stack);
}

template <auto rewrite> torch::CppFunction routedAs() {
  return torch::CppFunction::makeFromBoxedFunction<&routeRewrittenLibraryOp<rewrite>>();
}

// 1. Runtime ops: allocation, copies, resizing, storage swaps, views and scalar reads. Every
//    device implements these itself; they never fall back. Registered unboxed (no route).
void registerRuntimeOps(torch::Library& aten) {
  registerDeviceKernel(aten, "empty.memory_format", torch::CppFunction(&emptyMemoryFormat));
  registerDeviceKernel(aten, "empty_strided", torch::CppFunction(&emptyStrided));
  registerDeviceKernel(aten, "_efficientzerotensor", torch::CppFunction(&efficientZeroTensor));
  registerDeviceKernel(aten, "_copy_from", torch::CppFunction(&copyFrom));
  registerDeviceKernel(aten, "_copy_from_and_resize", torch::CppFunction(&copyFromAndResize));
  registerDeviceKernel(aten, "resize_", torch::CppFunction(&resize));
  registerDeviceKernel(aten, "set_.source_Storage_storage_offset", torch::CppFunction(&setStorage));
  registerDeviceKernel(aten, "set_.source_Storage", torch::CppFunction(&setWholeStorage));
  registerDeviceKernel(aten, "set_", torch::CppFunction(&setEmpty));
  registerDeviceKernel(aten, "set_.source_Tensor", torch::CppFunction(&at::native::set_tensor_));
  registerDeviceKernel(aten, "view", torch::CppFunction(&at::native::view));
  registerDeviceKernel(aten, "as_strided", torch::CppFunction(&at::native::as_strided_tensorimpl));
  registerDeviceKernel(aten, "_reshape_alias", torch::CppFunction(&at::native::_reshape_alias));
  registerDeviceKernel(aten, "unfold", torch::CppFunction(&at::native::unfold));
  registerDeviceKernel(aten, "view_as_real", torch::CppFunction(&at::native::view_as_real));
  registerDeviceKernel(aten, "view_as_complex", torch::CppFunction(&at::native::view_as_complex));
  registerDeviceKernel(aten, "_local_scalar_dense", torch::CppFunction(&localScalarDense));
}

// 2. Library ops: ATen's optimized CPU kernels run on device memory.

// Random ops draw from PyTorch's default CPU generator, so torch.manual_seed makes device runs
// reproducible and equal to the same code on the CPU. bernoulli_ with a scalar p (dropout) and
// uniform_ (torch.rand, nn.init) have kernels of their own below (library_random.cpp), which
// draw the same numbers in bulk.
constexpr const char* kRandomOps[] = {"normal_",
                                      "random_",
                                      "random_.from",
                                      "random_.to",
                                      "bernoulli_.Tensor",
                                      "bernoulli",
                                      "exponential_",
                                      "geometric_",
                                      "log_normal_",
                                      "cauchy_",
                                      "multinomial",
                                      "normal.Tensor_float",
                                      "normal.float_Tensor",
                                      "normal.Tensor_Tensor",
                                      "randperm.generator_out",
                                      "_standard_gamma",
                                      "poisson",
                                      "binomial",
                                      "_sample_dirichlet",
                                      "rrelu_with_noise",
                                      "rrelu_with_noise.out",
                                      "rrelu_with_noise_",
                                      "multinomial.out",
                                      "bernoulli.out",
                                      "normal.Tensor_Tensor_out",
                                      "normal.Tensor_float_out",
                                      "normal.float_Tensor_out"};

// mm, addmm, bmm, baddbmm, nll_loss_forward and nll_loss_backward have kernels of their own that
// write into device memory directly; their in-place and out= overloads and the other products
// (matrix-vector: mv and matmul of a matrix and a vector reach addmv.out; outer-product updates,
// batch sums) run ATen's CPU kernels. Convolution is registered below, at its overrideable ops.
constexpr const char* kDenseLinearAlgebraOps[] = {
    "addmm_",    "baddbmm_", "mm.out",   "addmm.out", "bmm.out", "baddbmm.out", "addmv", "addmv_",
    "addmv.out", "addr",     "addr.out", "addbmm",    "addbmm_", "addbmm.out",  "vdot"};

constexpr const char* kIndexingOps[] = {"embedding_dense_backward",
                                        "index_select",
                                        "gather",
                                        "scatter.src",
                                        "scatter.value",
                                        "scatter.reduce",
                                        "scatter.value_reduce",
                                        "scatter_.src",
                                        "scatter_.value",
                                        "scatter_add",
                                        "scatter_add_",
                                        "index.Tensor",
                                        "_index_put_impl_"};

// The ops of training steps (losses, batch and group norm, pooling, padding, resampling, the
// backward of activations, top-k, masked_select, dot) with their backward and out= overloads.
// Without a device kernel each would run on the CPU fallback, warn, and end the adaptive tracer's
// window at every step. The functional overloads run the CPU's own functional kernel: structured
// ops otherwise reach the device through ATen's generic functional wrapper (an empty output, then
// .out), whose .out kernel resizes it and warns where the CPU does not (mse_loss, smooth_l1_loss).
constexpr const char* kTrainingOps[] = {
    // losses
    "nll_loss_forward.output", "nll_loss_backward.grad_input", "nll_loss2d_forward",
    "nll_loss2d_forward.output", "nll_loss2d_backward", "nll_loss2d_backward.grad_input",
    "binary_cross_entropy", "binary_cross_entropy.out", "binary_cross_entropy_backward",
    "binary_cross_entropy_backward.grad_input", "mse_loss.out", "mse_loss_backward.grad_input",
    "smooth_l1_loss.out", "huber_loss.out", "_ctc_loss", "_ctc_loss.Tensor", "_ctc_loss_backward",
    "_ctc_loss_backward.Tensor", "multi_margin_loss", "multi_margin_loss.out",
    "multi_margin_loss_backward", "multi_margin_loss_backward.grad_input",
    "multilabel_margin_loss_forward", "multilabel_margin_loss_forward.output",
    "multilabel_margin_loss_backward", "multilabel_margin_loss_backward.grad_input",
    // normalization
    "native_group_norm", "native_group_norm_backward",
    // pooling
    "max_pool2d_with_indices.out", "max_pool2d_with_indices_backward",
    "max_pool2d_with_indices_backward.grad_input", "max_pool3d_with_indices",
    "max_pool3d_with_indices.out", "max_pool3d_with_indices_backward",
    "max_pool3d_with_indices_backward.grad_input", "avg_pool2d", "avg_pool2d.out",
    "avg_pool2d_backward", "avg_pool2d_backward.grad_input", "avg_pool3d", "avg_pool3d.out",
    "avg_pool3d_backward", "avg_pool3d_backward.grad_input", "_adaptive_avg_pool2d",
    "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d", "_adaptive_avg_pool3d_backward",
    "adaptive_max_pool2d", "adaptive_max_pool2d.out", "adaptive_max_pool2d_backward",
    "adaptive_max_pool2d_backward.grad_input", "adaptive_max_pool3d", "adaptive_max_pool3d.out",
    "adaptive_max_pool3d_backward", "adaptive_max_pool3d_backward.grad_input",
    "fractional_max_pool2d", "fractional_max_pool2d.output", "fractional_max_pool2d_backward",
    "fractional_max_pool2d_backward.grad_input", "fractional_max_pool3d",
    "fractional_max_pool3d.output", "fractional_max_pool3d_backward",
    "fractional_max_pool3d_backward.grad_input", "max_unpool2d", "max_unpool2d.out", "max_unpool3d",
    "max_unpool3d.out",
    // padding
    "reflection_pad1d", "reflection_pad1d.out", "reflection_pad1d_backward",
    "reflection_pad1d_backward.grad_input", "reflection_pad2d", "reflection_pad2d.out",
    "reflection_pad2d_backward", "reflection_pad2d_backward.grad_input", "reflection_pad3d",
    "reflection_pad3d.out", "reflection_pad3d_backward", "reflection_pad3d_backward.grad_input",
    "replication_pad1d", "replication_pad1d.out", "replication_pad1d_backward",
    "replication_pad1d_backward.grad_input", "replication_pad2d", "replication_pad2d.out",
    "replication_pad2d_backward", "replication_pad2d_backward.grad_input", "replication_pad3d",
    "replication_pad3d.out", "replication_pad3d_backward", "replication_pad3d_backward.grad_input",
    // resampling
    "upsample_nearest1d", "upsample_nearest1d.out", "upsample_nearest1d_backward",
    "upsample_nearest1d_backward.grad_input", "upsample_nearest2d", "upsample_nearest2d.out",
    "upsample_nearest2d_backward", "upsample_nearest2d_backward.grad_input", "upsample_nearest3d",
    "upsample_nearest3d.vec", "upsample_nearest3d.out", "upsample_nearest3d_backward",
    "upsample_nearest3d_backward.vec", "upsample_nearest3d_backward.grad_input",
    "upsample_linear1d", "upsample_linear1d.out", "upsample_linear1d_backward",
    "upsample_linear1d_backward.grad_input", "upsample_bilinear2d", "upsample_bilinear2d.out",
    "upsample_bilinear2d_backward", "upsample_bilinear2d_backward.grad_input", "upsample_bicubic2d",
    "upsample_bicubic2d.out", "upsample_bicubic2d_backward",
    "upsample_bicubic2d_backward.grad_input", "upsample_trilinear3d", "upsample_trilinear3d.out",
    "upsample_trilinear3d_backward", "upsample_trilinear3d_backward.grad_input", "grid_sampler_2d",
    "grid_sampler_2d_backward", "grid_sampler_3d", "grid_sampler_3d_backward", "im2col",
    "im2col.out", "col2im", "col2im.out",
    // activations
    "prelu", "prelu_backward", "silu_backward", "mish_backward", "glu", "glu.out", "glu_backward",
    "glu_backward.grad_input", "hardshrink", "hardshrink.out", "hardshrink_backward",
    "hardshrink_backward.grad_input", "softshrink", "softshrink.out", "softshrink_backward",
    "softshrink_backward.grad_input", "log_sigmoid_forward", "log_sigmoid_forward.output",
    "log_sigmoid_backward", "log_sigmoid_backward.grad_input",
    // distances, selection, products
    "_pdist_forward", "_pdist_backward", "_cdist_forward", "_cdist_backward", "topk", "topk.values",
    "masked_select", "masked_select.out", "masked_scatter_", "dot",
    // triangular parts (causal attention masks)
    "triu", "triu_", "triu.out", "tril", "tril_", "tril.out"};

// Everyday ops of scripts beyond the training step (position ids, sorting, counting, scans,
// index updates, statistics): ATen's CPU kernels on device memory, as the fallback ran them, but
// without its warning, and under the adaptive tracer without ending the window (a library call
// runs the window's recorded launches first, then its kernel, so an output whose shape depends
// on values, nonzero's, is known when the call returns).
constexpr const char* kEverydayOps[] = {
    // factories writing into a device tensor
    "arange.start_out", "linspace.out", "logspace.out", "eye.out", "eye.m_out", "tril_indices",
    "triu_indices",
    // reordering
    "flip", "roll", "repeat_interleave.Tensor",
    // scans
    "cumsum.out", "cumprod.out", "_cummax_helper", "_cummin_helper", "_logcumsumexp",
    // sorting, selection, searching, counting
    "sort.values_stable", "argsort.stable", "kthvalue.values", "median.dim_values", "mode",
    "mode.values", "searchsorted.Tensor", "searchsorted.Tensor_out", "bucketize.Tensor",
    "bucketize.Tensor_out", "bincount", "histc", "_unique2", "nonzero", "count_nonzero.dim_IntList",
    "isin.Tensor_Tensor_out",
    // index updates
    "index_add.out", "index_copy.out", "index_fill_.int_Scalar", "index_fill_.int_Tensor", "take",
    "put_", "scatter_reduce.two_out", "index_reduce.out", "_embedding_bag_forward_only",
    "_embedding_bag", "_embedding_bag_dense_backward",
    // statistics and cleanup
    "std_mean.correction", "var_mean.correction", "aminmax.out", "nan_to_num.out", "trace"};

// Special functions: ATen's CPU kernels (its own series, continued fractions and polynomial
// recurrences, vectorized where ATen vectorizes them) on device memory. The compiled kernels cover
// the functions libm and libmvec provide; these have no such counterpart to lower to. The
// overloads with a Python-number operand (special_zeta.self_scalar, ...) and the composite ones
// (mvlgamma, polygamma_) decompose into these.
constexpr const char* kSpecialFunctionOps[] = {
    // gamma functions
    "digamma", "digamma.out", "digamma_", "polygamma", "polygamma.out", "lgamma", "lgamma.out",
    "lgamma_", "igamma", "igamma.out", "igamma_", "igammac", "igammac.out", "igammac_",
    // Bessel and Airy functions
    "i0", "i0.out", "i0_", "special_i0e", "special_i0e.out", "special_i1", "special_i1.out",
    "special_i1e", "special_i1e.out", "special_airy_ai", "special_airy_ai.out", "special_bessel_j0",
    "special_bessel_j0.out", "special_bessel_j1", "special_bessel_j1.out", "special_bessel_y0",
    "special_bessel_y0.out", "special_bessel_y1", "special_bessel_y1.out",
    "special_modified_bessel_i0", "special_modified_bessel_i0.out", "special_modified_bessel_i1",
    "special_modified_bessel_i1.out", "special_modified_bessel_k0",
    "special_modified_bessel_k0.out", "special_modified_bessel_k1",
    "special_modified_bessel_k1.out", "special_scaled_modified_bessel_k0",
    "special_scaled_modified_bessel_k0.out", "special_scaled_modified_bessel_k1",
    "special_scaled_modified_bessel_k1.out", "special_spherical_bessel_j0",
    "special_spherical_bessel_j0.out",
    // orthogonal polynomials
    "special_chebyshev_polynomial_t", "special_chebyshev_polynomial_t.out",
    "special_chebyshev_polynomial_u", "special_chebyshev_polynomial_u.out",
    "special_chebyshev_polynomial_v", "special_chebyshev_polynomial_v.out",
    "special_chebyshev_polynomial_w", "special_chebyshev_polynomial_w.out",
    "special_shifted_chebyshev_polynomial_t", "special_shifted_chebyshev_polynomial_t.out",
    "special_shifted_chebyshev_polynomial_u", "special_shifted_chebyshev_polynomial_u.out",
    "special_shifted_chebyshev_polynomial_v", "special_shifted_chebyshev_polynomial_v.out",
    "special_shifted_chebyshev_polynomial_w", "special_shifted_chebyshev_polynomial_w.out",
    "special_hermite_polynomial_h", "special_hermite_polynomial_h.out",
    "special_hermite_polynomial_he", "special_hermite_polynomial_he.out",
    "special_laguerre_polynomial_l", "special_laguerre_polynomial_l.out",
    "special_legendre_polynomial_p", "special_legendre_polynomial_p.out",
    // error, logistic, entropy, zeta and other functions
    "erfinv", "erfinv.out", "erfinv_", "logit", "logit.out", "logit_", "logit_backward",
    "logit_backward.grad_input", "sinc", "sinc.out", "sinc_", "nextafter", "nextafter.out",
    "nextafter_", "heaviside", "heaviside.out", "heaviside_", "frexp.Tensor_out", "isposinf",
    "isposinf.out", "isneginf", "isneginf.out", "logaddexp2", "logaddexp2.out", "round.decimals",
    "round.decimals_out", "round_.decimals", "special_entr", "special_entr.out", "special_erfcx",
    "special_erfcx.out", "special_log_ndtr", "special_log_ndtr.out", "special_ndtri",
    "special_ndtri.out", "special_xlog1py", "special_xlog1py.out", "special_zeta",
    "special_zeta.out"};

// Matrix factorizations and solvers: ATen's CPU kernels, which call LAPACK (the device's linear
// algebra library, as cuSOLVER is CUDA's), on device memory. The torch.linalg functions are
// composites of these; their internal calls see host views, so they stay on the CPU kernels.
constexpr const char* kFactorizationOps[] = {
    // decompositions
    "_linalg_svd", "_linalg_svd.U", "_linalg_eigh", "_linalg_eigh.eigenvalues", "linalg_eig",
    "linalg_eig.out", "_symeig_helper", "linalg_qr", "linalg_qr.out", "geqrf", "geqrf.a", "ormqr",
    "ormqr.out", "linalg_householder_product", "linalg_householder_product.out",
    "linalg_cholesky_ex", "linalg_cholesky_ex.L", "cholesky", "cholesky.out", "cholesky_inverse",
    "cholesky_inverse.out", "linalg_lu", "linalg_lu.out", "linalg_lu_factor_ex",
    "linalg_lu_factor_ex.out", "lu_unpack", "lu_unpack.out", "linalg_ldl_factor_ex",
    "linalg_ldl_factor_ex.out",
    // solvers, inverses, determinants and the rest
    "_cholesky_solve_helper", "linalg_lu_solve", "linalg_lu_solve.out", "linalg_ldl_solve",
    "linalg_ldl_solve.out", "_linalg_solve_ex", "_linalg_solve_ex.result",
    "linalg_solve_triangular", "linalg_solve_triangular.out", "triangular_solve",
    "triangular_solve.X", "linalg_inv_ex", "linalg_inv_ex.inverse", "_linalg_det",
    "_linalg_det.result", "_linalg_slogdet", "_linalg_slogdet.sign", "linalg_lstsq.out",
    "linalg_matrix_exp", "linalg_cross", "linalg_cross.out"};

// Fourier transforms (ATen's pocketfft kernels; torch.fft's functions are composites of these);
// the rest of the ops PyTorch's OpInfos found on the fallback (comparisons of whole tensors,
// NaN-ignoring reductions and medians, histograms, segment reductions, uniqueness over a dim,
// complex construction, renorm, the backward of unfold and of embedding_bag's weights); the other
// ops with a CPU kernel of their own that scripts reach; and the integer-only ops. What is left on
// the fallback: complex math, sparse layouts, quantization, and dtypes a compiled op's kernels do
// not cover (integer pow, bool add, ...).
constexpr const char* kRemainingLibraryOps[] = {
    // Fourier transforms
    "_fft_c2c", "_fft_c2c.out", "_fft_r2c", "_fft_r2c.out", "_fft_c2r", "_fft_c2r.out",
    // found on the fallback by the OpInfos
    "equal", "nansum", "nansum.out", "median", "nanmedian", "nanmedian.dim_values",
    "histogram.bin_ct", "histogram.bin_ct_out", "histogram.bins_tensor",
    "histogram.bins_tensor_out", "_histogramdd_bin_edges", "_histogramdd_from_bin_cts",
    "_histogramdd_from_bin_tensors", "segment_reduce", "_segment_reduce_backward", "unique_dim",
    "unique_consecutive", "diag.out", "angle", "angle.out", "complex.out", "polar.out", "renorm",
    "renorm.out", "renorm_", "unfold_backward", "_embedding_bag_per_sample_weights_backward",
    // the rest of the ops with a CPU kernel of their own that scripts reach: exact nearest and
    // antialiased resampling, channel_shuffle, nn.Embedding's max_norm, isin and searchsorted
    // with a number, out= overloads of library ops, and distributions' gradients
    "channel_shuffle", "_upsample_nearest_exact1d", "_upsample_nearest_exact1d.out",
    "_upsample_nearest_exact1d_backward", "_upsample_nearest_exact1d_backward.grad_input",
    "_upsample_nearest_exact2d", "_upsample_nearest_exact2d.out",
    "_upsample_nearest_exact2d_backward", "_upsample_nearest_exact2d_backward.grad_input",
    "_upsample_nearest_exact3d", "_upsample_nearest_exact3d.out", "_upsample_nearest_exact3d.vec",
    "_upsample_nearest_exact3d_backward", "_upsample_nearest_exact3d_backward.grad_input",
    "_upsample_nearest_exact3d_backward.vec", "_upsample_bilinear2d_aa",
    "_upsample_bilinear2d_aa.out", "_upsample_bilinear2d_aa_backward",
    "_upsample_bilinear2d_aa_backward.grad_input", "_upsample_bicubic2d_aa",
    "_upsample_bicubic2d_aa.out", "_upsample_bicubic2d_aa_backward",
    "_upsample_bicubic2d_aa_backward.grad_input", "embedding_renorm_", "isin.Tensor_Scalar",
    "isin.Tensor_Scalar_out", "isin.Scalar_Tensor", "isin.Scalar_Tensor_out", "bucketize.Scalar",
    "searchsorted.Scalar", "unique_dim_consecutive", "_unique", "_aminmax", "_aminmax.dim",
    "gather.out", "index_select.out", "index.Tensor_out", "scatter.src_out", "scatter.value_out",
    "scatter.reduce_out", "scatter.value_reduce_out", "scatter_.reduce", "scatter_.value_reduce",
    "scatter_add.out", "take.out", "nonzero.out", "histc.out", "range.out", "tensordot.out",
    "_logcumsumexp.out", "mvlgamma.out", "adaptive_avg_pool2d.out", "adaptive_avg_pool3d.out",
    "adaptive_avg_pool3d_backward.grad_input", "batch_norm_update_stats", "_standard_gamma_grad",
    "_dirichlet_grad",
    // integer-only ops: greatest common divisor, least common multiple, shifts
    "gcd", "gcd.out", "gcd_", "lcm", "lcm.out", "lcm_", "bitwise_left_shift.Tensor",
    "bitwise_left_shift.Tensor_out", "bitwise_left_shift_.Tensor", "bitwise_right_shift.Tensor",
    "bitwise_right_shift.Tensor_out", "bitwise_right_shift_.Tensor", "__lshift__.Scalar",
    "__lshift__.Tensor", "__rshift__.Scalar", "__rshift__.Tensor", "__ilshift__.Scalar",
    "__ilshift__.Tensor", "__irshift__.Scalar", "__irshift__.Tensor"};

// The _foreach_* ops (the multi-tensor optimizers' steps): every one with a CPU kernel, read from
// the dispatcher. ATen's CPU kernels loop over the lists' tensors, which travel as host views like
// any tensor argument (in a deferred window, as the device tensors themselves: runLibraryForeach);
// the composite ones (.out overloads, _foreach_zero) keep decomposing.
void routeForeachOpsToLibrary(torch::Library& aten) {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::_foreach_", 0) != 0) continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasKernelForDispatchKey(DispatchKey::CPU)) continue;
    registerDeviceKernel(aten, schemaName(name), routed<Route::kLibrary, &runLibraryForeach>());
  }
}

void registerLibraryOps(torch::Library& aten) {
  for (const auto& names :
       {c10::ArrayRef<const char*>(kRandomOps), c10::ArrayRef<const char*>(kDenseLinearAlgebraOps),
        c10::ArrayRef<const char*>(kIndexingOps), c10::ArrayRef<const char*>(kTrainingOps),
        c10::ArrayRef<const char*>(kEverydayOps), c10::ArrayRef<const char*>(kSpecialFunctionOps),
        c10::ArrayRef<const char*>(kFactorizationOps),
        c10::ArrayRef<const char*>(kRemainingLibraryOps)})
    for (const char* name : names)
      registerDeviceKernel(aten, name, routed<Route::kLibrary, &runLibraryKernelOnHost>());
  routeForeachOpsToLibrary(aten);
  registerDeviceKernel(aten, "mm", routed<Route::kLibrary, &runLibraryMm>());
  registerDeviceKernel(aten, "addmm", routed<Route::kLibrary, &runLibraryAddmm>());
  registerDeviceKernel(aten, "bmm", routed<Route::kLibrary, &runLibraryBmm>());
  registerDeviceKernel(aten, "baddbmm", routed<Route::kLibrary, &runLibraryBaddbmm>());
  registerDeviceKernel(aten, "bernoulli_.float",
                       routed<Route::kLibrary, &runLibraryBernoulliScalar>());
  registerDeviceKernel(aten, "uniform_", routed<Route::kLibrary, &runLibraryUniform>());
  registerDeviceKernel(aten, "nll_loss_forward",
                       routed<Route::kLibrary, &runLibraryNllLossForward>());
  registerDeviceKernel(aten, "nll_loss_backward",
                       routed<Route::kLibrary, &runLibraryNllLossBackward>());
  // Convolution at the ops ATen leaves to out-of-tree devices: convolution and _convolution stay
  // composite, so torch.jit.trace records _convolution as on the CPU (the tracer records neither
  // convolution nor what a device kernel of it runs, so the trace held its output as a constant).
  // The calls run as convolution and convolution_backward (the tracer and metrics see those).
  registerDeviceKernel(aten, "convolution_overrideable",
                       routedAs<&convolutionCallOfOverrideable>());
  registerDeviceKernel(aten, "convolution_backward_overrideable",
                       routedAs<&convolutionBackwardCallOfOverrideable>());
}

// The overloads of div, floor_divide, remainder and fmod. Their kernels compute floats; an integer
// division is ATen's (it raises ZeroDivisionError for a zero divisor, and the host path guards
// its one trapping pair), run as a library call: no fallback warning, and under the adaptive
// tracer no end of the window (integer_division_guard.h decides which calls those are).
bool isDivisionOverload(const std::string& name) {
  for (const char* family : {"div", "floor_divide", "remainder", "fmod"}) {
    const size_t length = std::strlen(family);
    if (name.compare(0, length, family) == 0 &&
        (name.size() == length || name[length] == '.' || name[length] == '_'))
      return true;
  }
  return false;
}

// A declined call of a division overload that ATen computes on purpose: an integer division, or
// a half or bfloat16 one (ATen rounds floor_divide's and remainder's steps to the narrow dtype).
bool isDivisionLeftToAten(const c10::OperatorHandle& op, const torch::jit::Stack& stack) {
  return isIntegerDivisionCall(op, stack) || isReducedPrecisionCall(op, stack);
}

// 3. Compiled ops: every overload the op registry lowers (composite ops excluded by the
//    binders: they keep decomposing), then the row-wise ops built from compiled kernels.
void registerCompiledOps(torch::Library& aten) {
  // The calls their kernels leave to ATen on purpose run ATen's kernel as library calls: integer
  // division (integer_division_guard.h) and half or bfloat16 calls that ATen rounds step by step
  // (reduced_precision_calls.h). Other declined calls (complex) take the fallback.
  for (const std::string& name : bindCompiledElementwiseOverloads())
    registerDeviceKernel(
        aten, name,
        isDivisionOverload(name)
            ? routed<Route::kCompiled, &runCompiledElementwise, &isDivisionLeftToAten>()
            : routed<Route::kCompiled, &runCompiledElementwise, &isReducedPrecisionCall>());
  for (const std::string& name : bindCompiledReductionOverloads())
    registerDeviceKernel(
        aten, name, routed<Route::kCompiled, &runCompiledReduction, &isReducedPrecisionCall>());
  registerDeviceKernel(aten, "cat", routed<Route::kCompiled, &runCompiledCat>());
  registerDeviceKernel(aten, "cat.out", routed<Route::kCompiled, &runCompiledCat>());
  registerDeviceKernel(aten, "native_layer_norm",
                       routed<Route::kCompiled, &runCompiledLayerNorm, &isReducedPrecisionCall>());
  registerDeviceKernel(
      aten, "native_layer_norm_backward",
      routed<Route::kCompiled, &runCompiledLayerNormBackward, &isReducedPrecisionCall>());
  // The calls its kernel declines (other layouts and dtypes, windows with no element inside the
  // input, ATen's errors; compiled_pooling.cpp) keep the library kernel they had before it.
  registerDeviceKernel(aten, "max_pool2d_with_indices",
                       routed<Route::kCompiled, &runCompiledMaxPool2d, &runLibraryKernelOnHost>());
  // Likewise (compiled_batch_norm.cpp, its header lists them: other dtypes and shapes, channels
  // whose elements run contiguously for fewer than 32, aliased running statistics, ...).
  registerDeviceKernel(aten, "native_batch_norm",
                       routed<Route::kCompiled, &runCompiledBatchNorm, &runLibraryKernelOnHost>());
  registerDeviceKernel(
      aten, "native_batch_norm_backward",
      routed<Route::kCompiled, &runCompiledBatchNormBackward, &runLibraryKernelOnHost>());
  // The pointwise losses (compiled_losses.cpp: its header lists what they decline); their out=
  // forward overloads stay library ops.
  registerDeviceKernel(aten, "mse_loss",
                       routed<Route::kCompiled, &runCompiledMseLoss, &runLibraryKernelOnHost>());
  registerDeviceKernel(
      aten, "mse_loss_backward",
      routed<Route::kCompiled, &runCompiledMseLossBackward, &runLibraryKernelOnHost>());
  registerDeviceKernel(
      aten, "smooth_l1_loss",
      routed<Route::kCompiled, &runCompiledSmoothL1Loss, &runLibraryKernelOnHost>());
  registerDeviceKernel(
      aten, "smooth_l1_loss_backward",
      routed<Route::kCompiled, &runCompiledSmoothL1LossBackward, &runLibraryKernelOnHost>());
  registerDeviceKernel(
      aten, "smooth_l1_loss_backward.grad_input",
      routed<Route::kCompiled, &runCompiledSmoothL1LossBackwardOut, &runLibraryKernelOnHost>());
  registerDeviceKernel(aten, "huber_loss",
                       routed<Route::kCompiled, &runCompiledHuberLoss, &runLibraryKernelOnHost>());
  registerDeviceKernel(
      aten, "huber_loss_backward",
      routed<Route::kCompiled, &runCompiledHuberLossBackward, &runLibraryKernelOnHost>());
  registerDeviceKernel(
      aten, "huber_loss_backward.out",
      routed<Route::kCompiled, &runCompiledHuberLossBackwardOut, &runLibraryKernelOnHost>());
}

// 4. Composite ops with a CPU kernel (native_layer_norm's siblings native_group_norm, addr,
//    _stack, ...) would run their composite decomposition on the device, which may differ from
//    the CPU's kernel (math_group_norm). The device mirrors the CPU, so they take the fallback,
//    which runs the CPU kernel. The list is read from the dispatcher, after steps 1-3: an op that
//    already has a device kernel keeps it.
void routeCompositeOpsWithCpuKernelsToFallback(torch::Library& aten) {
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    auto op = c10::Dispatcher::singleton().findOp(name);
    if (!op || !op->hasKernelForDispatchKey(DispatchKey::CPU)) continue;
    if (op->hasKernelForDispatchKey(DispatchKey::PrivateUse1)) continue;
    // hasKernelForAnyDispatchKey ignores alias keys, so ask for each composite alias.
    if (!op->hasKernelForDispatchKey(DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd))
      continue;
    registerDeviceKernel(aten, schemaName(name), routed<Route::kFallback>());
  }
}

// 8. Sparse COO ops that replace a sparse tensor's own indices and values (zero_, which the
//    optimizers' zero_grad calls on nn.Embedding(sparse=True)'s gradient) or mark it coalesced:
//    the fallback's host views cannot do that to the device tensor, and ATen's sparse kernels for
//    them only touch the tensor's metadata and allocate on its device.
constexpr const char* kSparseMetadataOps[] = {"zero_", "sparse_resize_and_clear_", "_coalesced_"};

// A library of registrations for one dispatch key, alive for the process.
torch::Library& keyLibrary(const char* ns, DispatchKey key, uint32_t line) {
  return *new torch::Library(torch::Library::IMPL, ns, key, __FILE__, line);
}

// 9. Recurrent layers over padded sequences (recurrent_layers.h): composite ops, given
//    decompositions of the device's own at AutogradPrivateUse1, the key their composite kernel
//    serves for device tensors; the decompositions are made of differentiable ops, so autograd
//    records their parts as it records the composite's. They are not device kernels: under
//    inference mode (no autograd keys) the composite runs, correct but with per-step input
//    projections.
void registerRecurrentLayers() {
  torch::Library& autograd = keyLibrary("aten", DispatchKey::AutogradPrivateUse1, __LINE__);
  for (const char* name : {"lstm.input", "gru.input", "rnn_tanh.input", "rnn_relu.input"}) {
    auto op = c10::Dispatcher::singleton().findOp(atenOpName(name));
    TORCH_INTERNAL_ASSERT(op &&
                              op->hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd) &&
                              !op->hasKernelForDispatchKey(DispatchKey::PrivateUse1),
                          "[routing] ", name, " is no longer a composite op");
  }
  autograd.impl("lstm.input", TORCH_FN(deviceLstm));
  autograd.impl("gru.input", TORCH_FN(deviceGru));
  autograd.impl("rnn_tanh.input", TORCH_FN(deviceRnnTanh));
  autograd.impl("rnn_relu.input", TORCH_FN(deviceRnnRelu));
}

// 10. torch.linalg.eigvals (eigenvalues.h): ATen's composite mixes CPU temporaries into the device
//     output for a real matrix with complex eigenvalues, and fails. Its device decomposition
//     (linalg_eig) is registered at AutogradPrivateUse1, as the recurrent layers' are, and also
//     at PrivateUse1, which serves inference mode (no autograd keys), where the composite would
//     run and fail; outside inference mode the autograd-key kernel answers first.
void registerEigenvalues() {
  for (const char* name : {"linalg_eigvals", "linalg_eigvals.out"}) {
    auto op = c10::Dispatcher::singleton().findOp(atenOpName(name));
    TORCH_INTERNAL_ASSERT(op &&
                              op->hasKernelForDispatchKey(DispatchKey::CompositeImplicitAutograd) &&
                              !op->hasKernelForDispatchKey(DispatchKey::PrivateUse1),
                          "[routing] ", name, " is no longer a composite op");
  }
  for (DispatchKey key : {DispatchKey::AutogradPrivateUse1, DispatchKey::PrivateUse1}) {
    torch::Library& library = keyLibrary("aten", key, __LINE__);
    library.impl("linalg_eigvals", TORCH_FN(deviceLinalgEigvals));
    library.impl("linalg_eigvals.out", TORCH_FN(deviceLinalgEigvalsOut));
  }
}

void registerDeviceKernels(torch::Library& aten) {
  // Cache faults (at most one warning per kind) reach Python as UserWarnings, like fallback
  // warnings; set before any kernel can compile.
  setCacheWarningHandler([](const std::string& text) { TORCH_WARN(text); });
  // The adaptive tracer replays hot calls from captured plans (device/plan_replay.h).
  installPlanReplay();

  // Steps 1-4 give ops PrivateUse1 kernels; 4 must follow 1-3 (it routes only ops left without
  // one), and registerDeviceKernel refuses a second kernel for an op, so no step can silently
  // override another.
  registerRuntimeOps(aten);
  registerLibraryOps(aten);
  registerCompiledOps(aten);
  routeCompositeOpsWithCpuKernelsToFallback(aten);

  // 5. Copies of conjugated or negated views must reach the device's _copy_from, which copies
  //    the math bits through ATen's CPU copy; the math-bit fallbacks would otherwise materialize
  //    the source with clone(), which copies, which recurses.
  for (DispatchKey math_bit : {DispatchKey::Conjugate, DispatchKey::Negative}) {
    torch::Library& library = keyLibrary("aten", math_bit, __LINE__);
    library.impl("_copy_from", torch::CppFunction::makeFallthrough());
    library.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
  }

  // 6. The autograd policy. PyTorch 1.13 falls through AutogradCPU, AutogradCUDA, ... for ops
  //    without an autograd kernel, but has no fallback for AutogradPrivateUse1, so such an op
  //    fails on device tensors ("Could not run ... AutogradPrivateUse1"): c10d's collectives
  //    under DDP, custom ops. The device falls through as the CPU does. This is safe because a
  //    fallthrough can only skip a derivative that does not exist: every ATen op with a device
  //    kernel has an autograd kernel of its own (registerDeviceKernel checks it), and composite
  //    ops without one (gru_cell, linear, ...) get no device kernel, so the dispatcher keeps
  //    using their decomposition, whose parts record autograd.
  keyLibrary("_", DispatchKey::AutogradPrivateUse1, __LINE__)
      .fallback(torch::CppFunction::makeFallthrough());

  // 7. Everything else runs on the CPU fallback: dense ops without a device kernel, and every
  //    sparse COO op (on host views of the indices and values).
  keyLibrary("_", DispatchKey::PrivateUse1, __LINE__).fallback(routed<Route::kFallback>());
  keyLibrary("_", DispatchKey::SparsePrivateUse1, __LINE__).fallback(routed<Route::kFallback>());

  // 8. The sparse COO ops that change the sparse tensor itself (kSparseMetadataOps).
  torch::Library& sparse = keyLibrary("aten", DispatchKey::SparsePrivateUse1, __LINE__);
  for (const char* name : kSparseMetadataOps) {
    auto op = c10::Dispatcher::singleton().findOp(atenOpName(name));
    TORCH_INTERNAL_ASSERT(op && !op->hasKernelForDispatchKey(DispatchKey::SparsePrivateUse1) &&
                              hasAutogradKernel(*op),
                          "[routing] ", name, " cannot get a sparse device kernel");
  }
  sparse.impl("zero_", torch::CppFunction(&zeroSparse));
  sparse.impl("sparse_resize_and_clear_",
              torch::CppFunction(&at::native::sparse_resize_and_clear_));
  sparse.impl("_coalesced_", torch::CppFunction(&at::native::_coalesced_sparse_));

  registerRecurrentLayers();
  registerEigenvalues();
}

} // namespace

void warnAutocastDoesNotApply() {
  TORCH_WARN_ONCE("[autocast] autocast does not apply to the neuron device (PyTorch 1.13 has no "
                  "autocast for PrivateUse1): ops on device tensors run in the tensors' own dtype "
                  "(float32 stays float32). Cast the model or inputs (model.to(torch.bfloat16)) "
                  "for lower precision.");
}

// The device's one static initializer: it runs when libneuron_device.so loads.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) { registerDeviceKernels(m); }

} // namespace torchneuron
