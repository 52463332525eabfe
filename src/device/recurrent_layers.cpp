#include "device/recurrent_layers.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/gru_native.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/rnn_relu_native.h>
#include <ATen/ops/rnn_tanh_native.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tanh.h>

#include <algorithm>
#include <type_traits>
#include <utility>
#include <vector>

#include "device/lstm_sequence.h"

namespace torchneuron {
namespace {

using at::Tensor;

// One direction of one layer, taken from the op's flat parameter list in ATen's order: w_ih, w_hh,
// then b_ih, b_hh when the layers have biases, then w_hr when an LSTM has projections. Absent
// tensors are undefined.
struct DirectionWeights {
  Tensor w_ih, w_hh, b_ih, b_hh, w_hr;

  Tensor inputProjection(const Tensor& sequence) const { return at::linear(sequence, w_ih, b_ih); }
  Tensor hiddenProjection(const Tensor& hidden) const { return at::linear(hidden, w_hh, b_hh); }
};

size_t tensorsPerDirection(bool has_biases, bool has_projections) {
  return 2 + (has_biases ? 2 : 0) + (has_projections ? 1 : 0);
}

std::vector<DirectionWeights> gatherWeights(at::TensorList params, bool has_biases,
                                            bool has_projections) {
  const size_t stride = tensorsPerDirection(has_biases, has_projections);
  std::vector<DirectionWeights> weights;
  for (size_t i = 0; i + stride <= params.size(); i += stride) {
    DirectionWeights w{params[i], params[i + 1], {}, {}, {}};
    if (has_biases) {
      w.b_ih = params[i + 2];
      w.b_hh = params[i + 3];
    }
    if (has_projections) w.w_hr = params[i + stride - 1];
    weights.push_back(std::move(w));
  }
  return weights;
}

// The cells, each one time step given that step's input projection `xw` (bias b_ih included):
// ATen's CPU cells with pre_compute_input, op for op, so results round as the CPU's do.
struct LstmCell {
  using State = std::pair<Tensor, Tensor>; // (h, c)
  static State step(const Tensor& xw, const State& state, const DirectionWeights& w) {
    const Tensor gates = w.hiddenProjection(state.first).add_(xw);
    std::vector<Tensor> chunks = gates.unsafe_chunk(4, 1);
    Tensor in_gate = chunks[0].sigmoid_();
    Tensor forget_gate = chunks[1].sigmoid_();
    Tensor cell_gate = chunks[2].tanh_();
    Tensor out_gate = chunks[3].sigmoid_();
    Tensor cy = (forget_gate * state.second).add_(in_gate * cell_gate);
    Tensor hy = out_gate * cy.tanh();
    if (w.w_hr.defined()) hy = at::matmul(hy, w.w_hr.t());
    return {std::move(hy), std::move(cy)};
  }
  static const Tensor& output(const State& state) { return state.first; }
};

struct GruCell {
  using State = Tensor;
  static State step(const Tensor& xw, const State& hidden, const DirectionWeights& w) {
    const std::vector<Tensor> input_gates = xw.unsafe_chunk(3, 1);
    std::vector<Tensor> hidden_gates = w.hiddenProjection(hidden).unsafe_chunk(3, 1);
    const Tensor reset_gate = hidden_gates[0].add_(input_gates[0]).sigmoid_();
    const Tensor update_gate = hidden_gates[1].add_(input_gates[1]).sigmoid_();
    const Tensor new_gate = input_gates[2].add(hidden_gates[2].mul_(reset_gate)).tanh_();
    return (hidden - new_gate).mul_(update_gate).add_(new_gate);
  }
  static const Tensor& output(const State& hidden) { return hidden; }
};

struct TanhCell {
  using State = Tensor;
  static State step(const Tensor& xw, const State& hidden, const DirectionWeights& w) {
    return at::tanh(w.hiddenProjection(hidden).add_(xw));
  }
  static const Tensor& output(const State& hidden) { return hidden; }
};

struct ReluCell {
  using State = Tensor;
  static State step(const Tensor& xw, const State& hidden, const DirectionWeights& w) {
    return at::relu(w.hiddenProjection(hidden).add_(xw));
  }
  static const Tensor& output(const State& hidden) { return hidden; }
};

// One direction over the sequence (time first): the input projection of every step in one linear,
// then the cell step by step, last step first when `reversed`; the outputs in time order. An LSTM
// without projections runs its steps as one node with fused cells where lstm_sequence.h covers
// the call.
template <class Cell>
std::pair<Tensor, typename Cell::State> runDirection(const Tensor& sequence,
                                                     typename Cell::State state,
                                                     const DirectionWeights& w, bool reversed) {
  const Tensor projected = w.inputProjection(sequence);
  if constexpr (std::is_same_v<Cell, LstmCell>) {
    if (!w.w_hr.defined())
      if (auto fused =
              fusedLstmDirection(projected, state.first, state.second, w.w_hh, w.b_hh, reversed))
        return {std::get<0>(*fused), {std::get<1>(*fused), std::get<2>(*fused)}};
  }
  std::vector<Tensor> steps = projected.unbind(0);
  if (reversed) std::reverse(steps.begin(), steps.end());
  std::vector<Tensor> outputs;
  outputs.reserve(steps.size());
  for (const Tensor& xw : steps) {
    state = Cell::step(xw, state, w);
    outputs.push_back(Cell::output(state));
  }
  if (reversed) std::reverse(outputs.begin(), outputs.end());
  return {at::stack(outputs, 0), std::move(state)};
}

// The layer stack, as ATen's apply_layer_stack: a bidirectional layer's output is both
// directions' outputs side by side, and dropout applies between layers when training. The final
// states come in the hidden state's order (layer, then direction).
template <class Cell>
std::pair<Tensor, std::vector<typename Cell::State>>
runLayers(const Tensor& sequence, const std::vector<typename Cell::State>& initial,
          const std::vector<DirectionWeights>& weights, int64_t num_layers, double dropout,
          bool train, bool bidirectional) {
  const size_t directions = bidirectional ? 2 : 1;
  std::vector<typename Cell::State> finals;
  finals.reserve(initial.size());
  Tensor layer_input = sequence;
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const size_t first = static_cast<size_t>(layer) * directions;
    auto forward = runDirection<Cell>(layer_input, initial[first], weights[first], false);
    finals.push_back(std::move(forward.second));
    Tensor output = std::move(forward.first);
    if (bidirectional) {
      auto backward = runDirection<Cell>(layer_input, initial[first + 1], weights[first + 1], true);
      finals.push_back(std::move(backward.second));
      output = at::cat({output, backward.first}, output.dim() - 1);
    }
    layer_input = std::move(output);
    if (dropout != 0 && train && layer < num_layers - 1)
      layer_input = at::dropout(layer_input, dropout, /*train=*/true);
  }
  return {std::move(layer_input), std::move(finals)};
}

// What a call must look like for this file to run it; anything else runs ATen's composite.
struct LayerShape {
  int64_t num_layers;
  bool bidirectional;
  bool has_biases;
  bool has_projections;
};

bool onDeviceDense(const Tensor& t, const Tensor& input) {
  return t.defined() && t.layout() == at::kStrided && t.device() == input.device();
}

// Dense tensors on the input's device (ATen checks that first, with its own message), a
// time-first 3-D input with at least one step, hidden states with a row per layer and direction,
// and as many parameters as the layers take. Other shapes are left to the ops, which fail on them
// as they do on the CPU: the CPU runs the same ops in the same order.
bool coveredCall(const Tensor& sequence, at::TensorList hidden, at::TensorList params,
                 const LayerShape& shape) {
  if (sequence.device().type() != c10::DeviceType::PrivateUse1 ||
      sequence.layout() != at::kStrided || sequence.dim() != 3 || sequence.size(0) == 0 ||
      shape.num_layers < 1)
    return false;
  const int64_t rows = shape.num_layers * (shape.bidirectional ? 2 : 1);
  for (const Tensor& h : hidden)
    if (!onDeviceDense(h, sequence) || h.dim() != 3 || h.size(0) != rows) return false;
  for (const Tensor& p : params)
    if (!onDeviceDense(p, sequence)) return false;
  return params.size() ==
         tensorsPerDirection(shape.has_biases, shape.has_projections) * static_cast<size_t>(rows);
}

Tensor timeFirst(const Tensor& input, bool batch_first) {
  return batch_first ? input.transpose(0, 1) : input;
}

template <class Cell>
std::tuple<Tensor, Tensor> runOneHiddenLayers(const Tensor& input, const Tensor& hx,
                                              at::TensorList params, bool has_biases,
                                              int64_t num_layers, double dropout, bool train,
                                              bool bidirectional, bool batch_first) {
  const Tensor sequence = timeFirst(input, batch_first);
  std::vector<Tensor> initial = hx.unbind(0);
  auto [output, finals] =
      runLayers<Cell>(sequence, initial, gatherWeights(params, has_biases, false), num_layers,
                      dropout, train, bidirectional);
  if (batch_first) output.transpose_(0, 1);
  return {std::move(output), at::stack(finals, 0)};
}

using OneHiddenComposite = std::tuple<Tensor, Tensor> (*)(const Tensor&, const Tensor&,
                                                          at::TensorList, bool, int64_t, double,
                                                          bool, bool, bool);

// GRU and the plain RNNs: one hidden state. `composite` is ATen's own kernel of the op.
template <class Cell, OneHiddenComposite composite>
std::tuple<Tensor, Tensor> oneHiddenLayers(const Tensor& input, const Tensor& hx,
                                           at::TensorList params, bool has_biases,
                                           int64_t num_layers, double dropout, bool train,
                                           bool bidirectional, bool batch_first) {
  const bool covered = coveredCall(timeFirst(input, batch_first), {hx}, params,
                                   {num_layers, bidirectional, has_biases, false});
  if (!covered)
    return composite(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                     batch_first);
  return runOneHiddenLayers<Cell>(input, hx, params, has_biases, num_layers, dropout, train,
                                  bidirectional, batch_first);
}

} // namespace

std::tuple<Tensor, Tensor, Tensor> deviceLstm(const Tensor& input, at::TensorList hx,
                                              at::TensorList params, bool has_biases,
                                              int64_t num_layers, double dropout, bool train,
                                              bool bidirectional, bool batch_first) {
  const bool shaped =
      hx.size() == 2 && hx[0].defined() && hx[1].defined() && hx[0].dim() == 3 && hx[1].dim() == 3;
  // ATen's rule: an LSTM has projections when h and c differ in size.
  const bool has_projections = shaped && hx[0].size(2) != hx[1].size(2);
  const Tensor sequence = timeFirst(input, batch_first);
  if (!shaped ||
      !coveredCall(sequence, hx, params, {num_layers, bidirectional, has_biases, has_projections}))
    return at::native::lstm(input, hx, params, has_biases, num_layers, dropout, train,
                            bidirectional, batch_first);

  const std::vector<Tensor> h0 = hx[0].unbind(0);
  const std::vector<Tensor> c0 = hx[1].unbind(0);
  std::vector<LstmCell::State> initial;
  initial.reserve(h0.size());
  for (size_t i = 0; i < h0.size(); ++i)
    initial.emplace_back(h0[i], c0[i]);
  auto [output, finals] =
      runLayers<LstmCell>(sequence, initial, gatherWeights(params, has_biases, has_projections),
                          num_layers, dropout, train, bidirectional);
  std::vector<Tensor> hy, cy;
  hy.reserve(finals.size());
  cy.reserve(finals.size());
  for (auto& [h, c] : finals) {
    hy.push_back(std::move(h));
    cy.push_back(std::move(c));
  }
  if (batch_first) output.transpose_(0, 1);
  return {std::move(output), at::stack(hy, 0), at::stack(cy, 0)};
}

std::tuple<Tensor, Tensor> deviceGru(const Tensor& input, const Tensor& hx, at::TensorList params,
                                     bool has_biases, int64_t num_layers, double dropout,
                                     bool train, bool bidirectional, bool batch_first) {
  return oneHiddenLayers<GruCell, &at::native::gru>(input, hx, params, has_biases, num_layers,
                                                    dropout, train, bidirectional, batch_first);
}

std::tuple<Tensor, Tensor> deviceRnnTanh(const Tensor& input, const Tensor& hx,
                                         at::TensorList params, bool has_biases, int64_t num_layers,
                                         double dropout, bool train, bool bidirectional,
                                         bool batch_first) {
  return oneHiddenLayers<TanhCell, &at::native::rnn_tanh>(
      input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
}

std::tuple<Tensor, Tensor> deviceRnnRelu(const Tensor& input, const Tensor& hx,
                                         at::TensorList params, bool has_biases, int64_t num_layers,
                                         double dropout, bool train, bool bidirectional,
                                         bool batch_first) {
  return oneHiddenLayers<ReluCell, &at::native::rnn_relu>(
      input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first);
}

} // namespace torchneuron
