#include "device/lstm_sequence.h"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sigmoid_backward.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tanh_backward.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <atomic>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cache/background_compiles.h"
#include "cache/kernel_cache.h"
#include "device/direct_gemm.h"
#include "device/interim_launch.h"
#include "device/metrics.h"
#include "fusion/fused_kernel.h"
#include "fusion/op_registry.h"
#include "launcher/kernel_abi.h"
#include "launcher/parallel_launch.h"
#include "support/settings.h"
#include "tracer/tracer.h"

namespace torchneuron {
namespace {

using at::Tensor;
using fusion::FusedElementwiseSignature;
using fusion::FusedSource;
using fusion::InnerStride;

// -1: NEURON_FUSED_LSTM decides; 0 or 1: setFusedLstm() did.
std::atomic<int> fused_lstm_override{-1};

FusedSource fromExternal(int index) { return {FusedSource::kExternal, index}; }
FusedSource fromMember(int index) { return {FusedSource::kMember, index}; }

// A fused cell kernel's signature, written member by member: every operand a [B, H] matrix of
// the cell's dtype whose rows are contiguous.
class CellSignature {
public:
  explicit CellSignature(c10::ScalarType dtype) : dtype_(dtype) { signature_.rank = 2; }

  // A matrix the kernel reads; `read_through`: the stored member that overwrites it in place.
  int external(int read_through = -1) {
    signature_.externals.push_back({dtype_, InnerStride::kContiguous, read_through});
    return static_cast<int>(signature_.externals.size()) - 1;
  }

  int member(const char* op_name, std::initializer_list<FusedSource> sources, bool stored = false) {
    fusion::FusedMember member;
    fusion::ElementwiseSignature& s = member.signature;
    s.op = fusion::findElementwiseOp(op_name);
    TORCH_INTERNAL_ASSERT(s.op != nullptr, "[lstm] the registry has no op ", op_name);
    s.rank = 2;
    s.compute = s.output = dtype_;
    s.inputs.assign(sources.size(), dtype_);
    s.inner.assign(sources.size() + 1, InnerStride::kContiguous);
    s.constants.assign(s.op->constants.size(), -1);
    s.present.assign(s.op->optional_operands.size(), true);
    member.sources.assign(sources.begin(), sources.end());
    member.stored = stored;
    signature_.members.push_back(std::move(member));
    return static_cast<int>(signature_.members.size()) - 1;
  }

  const FusedElementwiseSignature& get() const { return signature_; }

private:
  c10::ScalarType dtype_;
  FusedElementwiseSignature signature_;
};

// Forward, one step. Stored, in member order: the gate pre-activations a_k = gh_k + xw_k written
// over gh_k (the hidden projection's four chunks), c, h. Read: xw's four chunks, c_prev.
FusedElementwiseSignature forwardCell(c10::ScalarType dtype) {
  CellSignature cell(dtype);
  std::array<int, 4> gh{}, xw{};
  for (int k = 0; k < 4; ++k)
    gh[k] = cell.external(/*read_through=*/k);
  for (int k = 0; k < 4; ++k)
    xw[k] = cell.external();
  const int c_prev = cell.external();
  std::array<int, 4> a{};
  for (int k = 0; k < 4; ++k)
    a[k] = cell.member("add", {fromExternal(gh[k]), fromExternal(xw[k])}, /*stored=*/true);
  const int i = cell.member("sigmoid", {fromMember(a[0])});
  const int f = cell.member("sigmoid", {fromMember(a[1])});
  const int g = cell.member("tanh", {fromMember(a[2])});
  const int o = cell.member("sigmoid", {fromMember(a[3])});
  const int fc = cell.member("mul", {fromMember(f), fromExternal(c_prev)});
  const int ig = cell.member("mul", {fromMember(i), fromMember(g)});
  const int c = cell.member("add", {fromMember(fc), fromMember(ig)}, /*stored=*/true);
  const int tanh_c = cell.member("tanh", {fromMember(c)});
  cell.member("mul", {fromMember(o), fromMember(tanh_c)}, /*stored=*/true);
  return cell.get();
}

// Backward, one step, as autograd differentiates the op-by-op cell. Read: a's four chunks,
// c_prev, c, the output's gradient dy, the next step's dh and dc. Stored, in member order:
// dc_prev, then the gradient of a's four chunks.
FusedElementwiseSignature backwardCell(c10::ScalarType dtype) {
  CellSignature cell(dtype);
  std::array<int, 4> a{};
  for (int k = 0; k < 4; ++k)
    a[k] = cell.external();
  const int c_prev = cell.external(), c = cell.external(), dy = cell.external(),
            dh_next = cell.external(), dc_next = cell.external();
  const int i = cell.member("sigmoid", {fromExternal(a[0])});
  const int f = cell.member("sigmoid", {fromExternal(a[1])});
  const int g = cell.member("tanh", {fromExternal(a[2])});
  const int o = cell.member("sigmoid", {fromExternal(a[3])});
  const int tanh_c = cell.member("tanh", {fromExternal(c)});
  const int dh = cell.member("add", {fromExternal(dy), fromExternal(dh_next)});
  const int d_o = cell.member("mul", {fromMember(dh), fromMember(tanh_c)});
  const int dh_o = cell.member("mul", {fromMember(dh), fromMember(o)});
  const int dc_here = cell.member("tanh_backward", {fromMember(dh_o), fromMember(tanh_c)});
  const int dc = cell.member("add", {fromExternal(dc_next), fromMember(dc_here)});
  const int d_i = cell.member("mul", {fromMember(dc), fromMember(g)});
  const int d_f = cell.member("mul", {fromMember(dc), fromExternal(c_prev)});
  const int d_g = cell.member("mul", {fromMember(dc), fromMember(i)});
  cell.member("mul", {fromMember(dc), fromMember(f)}, /*stored=*/true);
  cell.member("sigmoid_backward", {fromMember(d_i), fromMember(i)}, /*stored=*/true);
  cell.member("sigmoid_backward", {fromMember(d_f), fromMember(f)}, /*stored=*/true);
  cell.member("tanh_backward", {fromMember(d_g), fromMember(g)}, /*stored=*/true);
  cell.member("sigmoid_backward", {fromMember(d_o), fromMember(o)}, /*stored=*/true);
  return cell.get();
}

// A cell kernel, compiled once per process and dtype (the kernel cache keeps it on disk).
struct CellKernel {
  FusedElementwiseSignature signature;
  Hash64 key = 0;
  std::vector<int64_t> scalars; // every member's params at their defaults (add's alpha 1)
  LaunchCounter* launches = nullptr;

  CellKernel(FusedElementwiseSignature s, const char* name)
      : signature(std::move(s)), key(signature.key()),
        launches(launchCounter(LaunchKind::kCompiled, name)) {
    for (const fusion::FusedMember& member : signature.members)
      for (const fusion::ParamSpec& param : member.signature.op->params)
        scalars.push_back(floatSlot(param.fallback));
  }

  // The loaded kernel (loaded or compiled now if it is not), or null: it failed to compile, or,
  // `may_queue`, it is compiling in the background while interim launches are on (queued by the
  // first such call).
  KernelHandle ready(bool may_queue = true) const {
    KernelHandle kernel = loadedKernel(key);
    if (kernel == nullptr) {
      const auto build = [this] { return fusion::buildFusedElementwiseKernel(signature); };
      if (may_queue && interimLaunchesEnabled() && !backgroundCompileThrew(key)) {
        if (!compilingInBackground(key) && compileInBackground(key, build())) return nullptr;
        if (compilingInBackground(key)) return nullptr;
      }
      kernel = kernelFor(key, build);
    }
    return kernel->function != nullptr ? kernel : nullptr;
  }

  // Runs the kernel over [B, H] operands: `stored` then `read`, in the signature's ABI order.
  void launch(const KernelHandle& kernel, std::initializer_list<const Tensor*> stored,
              std::initializer_list<const Tensor*> read) const {
    KernelArguments arguments;
    for (const auto* group : {&stored, &read})
      for (const Tensor* t : *group)
        arguments.memref(t->data_ptr(), t->sizes().data(), t->strides().data(), 2);
    for (int64_t slot : scalars)
      arguments.word(slot);
    TORCH_INTERNAL_ASSERT(arguments.size() == signature.argumentSlots(), "[lstm] ",
                          arguments.size(), " argument slots for ", signature.describe());
    const Tensor& first = **stored.begin();
    LaunchShape shape;
    shape.range = first.size(0);
    shape.work_per_index = first.size(1);
    shape.threads = at::get_num_threads();
    launchKernel(kernel->function, arguments.slots(), shape);
    recordLaunch(launches);
  }
};

const CellKernel& cellKernel(c10::ScalarType dtype, bool backward) {
  static const CellKernel kernels[2][2] = {
      {{forwardCell(c10::kFloat), "neuron::lstm_cell"},
       {backwardCell(c10::kFloat), "neuron::lstm_cell_backward"}},
      {{forwardCell(c10::kDouble), "neuron::lstm_cell"},
       {backwardCell(c10::kDouble), "neuron::lstm_cell_backward"}}};
  return kernels[dtype == c10::kDouble ? 1 : 0][backward ? 1 : 0];
}

// out = self + a @ b (self broadcast over the rows; undefined: none), as ATen's addmm or mm:
// one BLAS call on device memory, or ATen's kernel where direct_gemm.h declines.
void product(const Tensor& out, const Tensor& self, const Tensor& a, const Tensor& b) {
  static SiteLaunchCounter addmm_site, mm_site;
  const ProductThreads threads = productThreadsFor({&a, &b});
  if (self.defined()) {
    if (!gemmOnDeviceMemory(out, a, b, /*beta=*/1, /*alpha=*/1, &self, threads))
      at::addmm_out(const_cast<Tensor&>(out), self, a, b);
    recordLaunch(addmm_site.get(LaunchKind::kLibrary, "aten::addmm"));
    return;
  }
  if (!gemmOnDeviceMemory(out, a, b, /*beta=*/0, /*alpha=*/1, nullptr, threads))
    at::mm_out(const_cast<Tensor&>(out), a, b);
  recordLaunch(mm_site.get(LaunchKind::kLibrary, "aten::mm"));
}

// The four gate chunks of a [B, 4H] matrix.
std::array<Tensor, 4> chunks(const Tensor& gates) {
  const int64_t h = gates.size(1) / 4;
  return {gates.narrow(1, 0, h), gates.narrow(1, h, h), gates.narrow(1, 2 * h, h),
          gates.narrow(1, 3 * h, h)};
}

// The k-th step a direction takes: its time t, and where its states live in the [T + 1, B, H]
// buffers (the state before the step and after).
struct Step {
  int64_t t, before, after;
};
Step stepAt(int64_t k, int64_t steps, bool reversed) {
  return reversed ? Step{steps - 1 - k, steps - k, steps - 1 - k} : Step{k, k, k + 1};
}

// The backward with ATen ops, for gradients that have no storage a kernel could read (batched
// gradients: autograd.grad(is_grads_batched=True), jacobian(vectorize=True), whose batching
// rules keep the batch out of sight): the same formulas as backwardCell, step by step. Returns
// d_gates [T, B, 4H], dh0, dc0.
std::tuple<Tensor, Tensor, Tensor> backwardWithOps(const Tensor& gates, const Tensor& cs,
                                                   const Tensor& w_hh, bool reversed, Tensor dy,
                                                   Tensor dh, Tensor dc) {
  const int64_t steps = gates.size(0);
  std::vector<Tensor> d_gates(static_cast<size_t>(steps));
  for (int64_t k = steps - 1; k >= 0; --k) {
    const Step rows = stepAt(k, steps, reversed);
    const int64_t t = rows.t;
    const std::array<Tensor, 4> a = chunks(gates.select(0, t));
    const Tensor i = a[0].sigmoid(), f = a[1].sigmoid(), g = a[2].tanh(), o = a[3].sigmoid();
    const Tensor tanh_c = cs.select(0, rows.after).tanh();
    const Tensor dh_total = dy.select(0, t) + dh;
    const Tensor d_c = dc + at::tanh_backward(dh_total * o, tanh_c);
    const Tensor step = at::cat(
        {at::sigmoid_backward(d_c * g, i), at::sigmoid_backward(d_c * cs.select(0, rows.before), f),
         at::tanh_backward(d_c * i, g), at::sigmoid_backward(dh_total * tanh_c, o)},
        -1);
    dc = d_c * f;
    dh = at::matmul(step, w_hh);
    d_gates[static_cast<size_t>(t)] = step;
  }
  return {at::stack(d_gates, 0), dh, dc};
}

struct LstmDirection : public torch::autograd::Function<LstmDirection> {
  // Inputs: projected [T, B, 4H], h0, c0 [B, H], w_hh [4H, H], b_hh [4H] (or, without biases,
  // an empty tensor: PyTorch 1.13's C++ functions take no undefined input).
  // Outputs: hidden states in time order [T, B, H], final h and c.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const Tensor& projected, const Tensor& h0,
                                                const Tensor& c0, const Tensor& w_hh,
                                                const Tensor& b_hh, bool has_bias, bool reversed,
                                                const KernelHandle& kernel) {
    const int64_t steps = projected.size(0), batch = projected.size(1),
                  hidden = projected.size(2) / 4;
    const auto options = projected.options();
    Tensor gates = at::empty({steps, batch, 4 * hidden}, options);
    Tensor hs = at::empty({steps + 1, batch, hidden}, options);
    Tensor cs = at::empty({steps + 1, batch, hidden}, options);
    const int64_t start = reversed ? steps : 0;
    hs.select(0, start).copy_(h0);
    cs.select(0, start).copy_(c0);
    const Tensor w_hh_t = w_hh.t();
    const CellKernel& cell = cellKernel(projected.scalar_type(), false);
    for (int64_t k = 0; k < steps; ++k) {
      const Step rows = stepAt(k, steps, reversed);
      const int64_t t = rows.t;
      const Tensor step_gates = gates.select(0, t);
      const Tensor h_before = hs.select(0, rows.before);
      product(step_gates, has_bias ? b_hh : Tensor(), h_before, w_hh_t);
      const std::array<Tensor, 4> a = chunks(step_gates);
      const std::array<Tensor, 4> xw = chunks(projected.select(0, t));
      const Tensor c_before = cs.select(0, rows.before), c_after = cs.select(0, rows.after),
                   h_after = hs.select(0, rows.after);
      cell.launch(kernel, {&a[0], &a[1], &a[2], &a[3], &c_after, &h_after},
                  {&xw[0], &xw[1], &xw[2], &xw[3], &c_before});
    }
    // h0 and c0 are saved only for their version counters: changed in place before backward,
    // they raise autograd's error as the op-by-op cell's saved states do.
    ctx->save_for_backward({gates, hs, cs, w_hh, h0, c0});
    ctx->saved_data["reversed"] = reversed;
    ctx->saved_data["has_bias"] = has_bias;
    const int64_t end = reversed ? 0 : steps;
    return {hs.narrow(0, reversed ? 0 : 1, steps).clone(), hs.select(0, end).clone(),
            cs.select(0, end).clone()};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    TORCH_CHECK(!c10::GradMode::is_enabled(),
                "[lstm] the device's fused LSTM layer has no double backward (a backward pass "
                "with create_graph=True); set NEURON_FUSED_LSTM=0 (or "
                "torchneuron.set_fused_lstm(False)) to run LSTM cells op by op, which has one");
    const tracer::EagerRegion eager; // the gradients may be pending in a window
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const Tensor &gates = saved[0], &hs = saved[1], &cs = saved[2], &w_hh = saved[3];
    const bool reversed = ctx->saved_data["reversed"].toBool();
    const int64_t steps = gates.size(0), batch = gates.size(1), hidden = gates.size(2) / 4;
    const auto options = gates.options();
    const Tensor dy = grads[0].defined() ? grads[0] : at::zeros({steps, batch, hidden}, options);
    Tensor dh = grads[1].defined() ? grads[1] : at::zeros({batch, hidden}, options);
    Tensor dc = grads[2].defined() ? grads[2] : at::zeros({batch, hidden}, options);
    const bool stored = dy.has_storage() && dh.has_storage() && dc.has_storage();
    Tensor d_gates;
    if (!stored) {
      std::tie(d_gates, dh, dc) = backwardWithOps(gates, cs, w_hh, reversed, dy, dh, dc);
    } else {
      // Loaded when the forward ran (fusedLstmDirection), unless the memory tier evicted it.
      const CellKernel& cell = cellKernel(gates.scalar_type(), true);
      const KernelHandle kernel = cell.ready(/*may_queue=*/false);
      TORCH_CHECK(kernel != nullptr,
                  "[lstm] the fused LSTM cell's backward kernel is not available; set "
                  "NEURON_FUSED_LSTM=0 to run LSTM cells op by op");
      const Tensor dy_rows = dy.contiguous();
      dh = dh.contiguous();
      dc = dc.contiguous();
      d_gates = at::empty({steps, batch, 4 * hidden}, options);
      // Each step's dh and dc into the other of two buffers.
      const Tensor dh_buffers = at::empty({2, batch, hidden}, options);
      const Tensor dc_buffers = at::empty({2, batch, hidden}, options);
      for (int64_t k = steps - 1; k >= 0; --k) {
        const Step rows = stepAt(k, steps, reversed);
        const int64_t t = rows.t;
        const std::array<Tensor, 4> a = chunks(gates.select(0, t));
        const Tensor step_d_gates = d_gates.select(0, t);
        const std::array<Tensor, 4> da = chunks(step_d_gates);
        const Tensor c_before = cs.select(0, rows.before), c_after = cs.select(0, rows.after);
        const Tensor dy_t = dy_rows.select(0, t);
        const Tensor dc_before = dc_buffers.select(0, k % 2),
                     dh_before = dh_buffers.select(0, k % 2);
        cell.launch(kernel, {&dc_before, &da[0], &da[1], &da[2], &da[3]},
                    {&a[0], &a[1], &a[2], &a[3], &c_before, &c_after, &dy_t, &dh, &dc});
        product(dh_before, Tensor(), step_d_gates, w_hh);
        dh = dh_before;
        dc = dc_before;
      }
    }
    const Tensor h_before_each = hs.narrow(0, reversed ? 1 : 0, steps);
    Tensor d_w_hh, d_b_hh;
    if (stored) {
      d_w_hh = at::empty({4 * hidden, hidden}, options);
      product(d_w_hh, Tensor(), d_gates.view({steps * batch, 4 * hidden}).t(),
              h_before_each.reshape({steps * batch, hidden}));
    } else { // batched gradients: ATen's batching rules see them as [T, B, 4H]
      d_w_hh = at::matmul(d_gates.reshape({steps * batch, 4 * hidden}).t(),
                          h_before_each.reshape({steps * batch, hidden}));
    }
    if (ctx->saved_data["has_bias"].toBool()) d_b_hh = d_gates.sum(at::IntArrayRef{0, 1});
    return {d_gates, dh.clone(), dc.clone(), d_w_hh, d_b_hh, Tensor(), Tensor(), Tensor()};
  }
};

bool sameKind(const Tensor& t, const Tensor& like) {
  return t.scalar_type() == like.scalar_type() && t.device() == like.device() &&
         t.layout() == at::kStrided;
}

} // namespace

bool fusedLstmEnabled() {
  const int set = fused_lstm_override.load(std::memory_order_relaxed);
  return set < 0 ? settings().fused_lstm : set == 1;
}

void setFusedLstm(bool enabled) { fused_lstm_override.store(enabled ? 1 : 0); }

c10::optional<std::tuple<Tensor, Tensor, Tensor>>
fusedLstmDirection(const Tensor& projected, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                   const Tensor& b_hh, bool reversed) {
  const c10::ScalarType dtype = projected.scalar_type();
  if (!fusedLstmEnabled() || (dtype != c10::kFloat && dtype != c10::kDouble) ||
      projected.dim() != 3 || projected.size(0) == 0 || projected.size(2) % 4 != 0)
    return c10::nullopt;
  const int64_t batch = projected.size(1), hidden = projected.size(2) / 4;
  for (const Tensor* state : {&h0, &c0})
    if (!sameKind(*state, projected) || state->dim() != 2 || state->size(0) != batch ||
        state->size(1) != hidden)
      return c10::nullopt;
  if (!sameKind(w_hh, projected) || w_hh.dim() != 2 || w_hh.size(0) != 4 * hidden ||
      w_hh.size(1) != hidden)
    return c10::nullopt;
  if (b_hh.defined() &&
      (!sameKind(b_hh, projected) || b_hh.dim() != 1 || b_hh.size(0) != 4 * hidden))
    return c10::nullopt;
  // Forward-mode AD (dual tensors) needs a jvp, which 1.13's C++ functions cannot have.
  bool needs_backward = false;
  for (const Tensor* t : {&projected, &h0, &c0, &w_hh, &b_hh}) {
    if (!t->defined()) continue;
    if (t->_fw_grad(/*level=*/0).defined()) return c10::nullopt;
    needs_backward = needs_backward || t->requires_grad();
  }
  needs_backward = needs_backward && c10::GradMode::is_enabled();
  // The kernels this call needs, before anything runs: a call whose kernel is not ready runs
  // op by op (a failed compile; or a cold start, the kernel queued on the background compiler).
  const KernelHandle forward_kernel = cellKernel(dtype, false).ready();
  const bool backward_ready = !needs_backward || cellKernel(dtype, true).ready() != nullptr;
  if (forward_kernel == nullptr || !backward_ready) return c10::nullopt;
  const tracer::EagerRegion eager; // the projection may be pending in a window
  const bool has_bias = b_hh.defined();
  const torch::autograd::variable_list outputs = LstmDirection::apply(
      projected.contiguous(), h0, c0, w_hh, has_bias ? b_hh : at::empty({0}, projected.options()),
      has_bias, reversed, forward_kernel);
  return std::make_tuple(outputs[0], outputs[1], outputs[2]);
}

} // namespace torchneuron
