// torchneuron._autograd: `run_backward`, PyTorch 1.13's torch._C._ImperativeEngine.run_backward
// (torch/csrc/autograd/python_engine.cpp, THPEngine_run_backward: the same arguments, checks,
// messages and results) run by the caller's thread's engine (caller_thread_engine.h) instead of
// PythonEngine. python/torchneuron/_backward_engine.py puts it behind
// torch.autograd.Variable._execution_engine, where torch.autograd.backward and
// torch.autograd.grad call it.

#include <ATen/BatchedTensorImpl.h>
#include <ATen/VmapMode.h>
#include <c10/util/irange.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/THP.h>
#include <torch/csrc/autograd/edge.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/utils/pycfunction_helpers.h>

#include "caller_thread_engine.h"

namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Variable;
using torch::autograd::variable_list;

// PyTorch's refusal of a vmapped output or input (`role`: "output" or "input"), in its words.
void checkNotVmapped(const at::Tensor& tensor, const char* role, int64_t index){
    TORCH_CHECK(!at::isBatchedTensor(tensor),
                "torch.autograd.grad(outputs, inputs, grad_outputs) called inside ",
                "torch.vmap. We do not support the case where any ", role, "s are ",
                "vmapped tensors (", role, " ", index,
                " is being vmapped over). Please "
                "call autograd.grad() outside torch.vmap or file a bug report "
                "with your use case.")}

PyObject* runBackward(PyObject* /*self*/, PyObject* args, PyObject* kwargs) {
  HANDLE_TH_ERRORS
  PyObject* tensors = nullptr;
  PyObject* grad_tensors = nullptr;
  unsigned char keep_graph = 0;
  unsigned char create_graph = 0;
  PyObject* inputs = nullptr;
  unsigned char allow_unreachable = 0;
  unsigned char accumulate_grad = 0; // into leaves (backward) or captured (grad)
  const char* accepted_kwargs[] = {"tensors",         "grad_tensors", "keep_graph",
                                   "create_graph",    "inputs",       "allow_unreachable",
                                   "accumulate_grad", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OObb|Obb", const_cast<char**>(accepted_kwargs),
                                   &tensors, &grad_tensors, &keep_graph, &create_graph, &inputs,
                                   &allow_unreachable, &accumulate_grad))
    return nullptr;
  THPUtils_assert(PyTuple_Check(tensors), "tensors argument is expected to be a tuple, but got %s",
                  THPUtils_typename(tensors));
  THPUtils_assert(PyTuple_Check(grad_tensors),
                  "grad_tensors argument is expected to be a tuple, but got %s",
                  THPUtils_typename(grad_tensors));
  const Py_ssize_t num_tensors = PyTuple_GET_SIZE(tensors);
  const Py_ssize_t num_gradients = PyTuple_GET_SIZE(grad_tensors);
  THPUtils_assert(num_tensors == num_gradients, "got %ld tensors and %ld gradients", num_tensors,
                  num_gradients);

  // torch.autograd.backward(...) passes accumulate_grad, torch.autograd.grad(...) does not.
  const bool backward_api_called = accumulate_grad;
  TORCH_CHECK(!backward_api_called || at::impl::VmapMode::current_vmap_level() == 0,
              "backward() called inside torch.vmap. This is not supported, "
              "please call backward() outside torch.vmap or instead use "
              "torch.autograd.grad inside torch.vmap");

  edge_list roots;
  roots.reserve(num_tensors);
  variable_list grads;
  grads.reserve(num_tensors);
  for (const auto i : c10::irange(num_tensors)) {
    PyObject* tensor_object = PyTuple_GET_ITEM(tensors, i);
    THPUtils_assert(THPVariable_Check(tensor_object), "element %d of tensors tuple is not a Tensor",
                    static_cast<int>(i));
    const auto& variable = THPVariable_Unpack(tensor_object);
    checkNotVmapped(variable, "output", i);
    auto gradient_edge = torch::autograd::impl::gradient_edge(variable);
    THPUtils_assert(gradient_edge.function,
                    "element %d of tensors does not require grad and does not have a grad_fn",
                    static_cast<int>(i));
    roots.push_back(std::move(gradient_edge));

    PyObject* grad = PyTuple_GET_ITEM(grad_tensors, i);
    if (THPVariable_Check(grad)) {
      const Variable& grad_var = THPVariable_Unpack(grad);
      if (grad_var.has_names()) {
        TORCH_WARN("Autograd was passed a named grad tensor with dims ", grad_var.names(),
                   ". Autograd does not yet support named tensor semantics, so all names ",
                   "will be ignored. In practice all computed gradients will still be correct ",
                   "according to regular tensor semantics.");
      }
      grads.push_back(grad_var);
    } else {
      THPUtils_assert(grad == Py_None, "element %d of gradients tuple is not a Tensor or None",
                      static_cast<int>(i));
      THPUtils_assert(!variable.requires_grad(),
                      "element %d of gradients tuple is None, but the corresponding Tensor "
                      "requires grad",
                      static_cast<int>(i));
    }
  }

  std::vector<Edge> output_edges;
  if (inputs != nullptr) {
    const Py_ssize_t num_inputs = PyTuple_GET_SIZE(inputs);
    output_edges.reserve(num_inputs);
    for (const auto i : c10::irange(num_inputs)) {
      PyObject* input = PyTuple_GET_ITEM(inputs, i);
      THPUtils_assert(THPVariable_Check(input), "all inputs have to be Tensors, but got %s",
                      THPUtils_typename(input));
      const auto& tensor = THPVariable_Unpack(input);
      checkNotVmapped(tensor, "input", i);
      const auto output_nr = tensor.output_nr();
      auto grad_fn = tensor.grad_fn();
      if (!grad_fn) grad_fn = torch::autograd::impl::try_get_grad_accumulator(tensor);
      if (accumulate_grad) tensor.retain_grad();
      THPUtils_assert(tensor.requires_grad(),
                      "One of the differentiated Tensors does not require grad");
      if (!grad_fn) {
        // An input without a grad accumulator is unreachable; its edge points at a node of its
        // own so that no edge to nullptr in the graph is taken for it (PyTorch's NOTE
        // [ Autograd Unreachable Input ]).
        output_edges.emplace_back(std::make_shared<torch::autograd::Identity>(), 0);
      } else {
        output_edges.emplace_back(grad_fn, output_nr);
      }
    }
  }

  variable_list outputs;
  {
    pybind11::gil_scoped_release no_gil;
    outputs = torchneuron::callerThreadEngine().execute(roots, grads, keep_graph, create_graph,
                                                        accumulate_grad, output_edges);
  }

  if (!backward_api_called && inputs != nullptr) {
    const Py_ssize_t num_inputs = PyTuple_GET_SIZE(inputs);
    THPObjectPtr py_outputs{PyTuple_New(num_inputs)};
    if (!py_outputs) return nullptr;
    for (const auto i : c10::irange(num_inputs)) {
      THPUtils_assert(allow_unreachable || outputs[i].defined(),
                      "One of the differentiated Tensors appears to not have been used in the "
                      "graph. Set allow_unused=True if this is the desired behavior.");
      PyTuple_SET_ITEM(py_outputs.get(), i, THPVariable_Wrap(outputs[i]));
    }
    return py_outputs.release();
  }
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef run_backward_method = {
    "run_backward", castPyCFunctionWithKeywords(runBackward), METH_VARARGS | METH_KEYWORDS,
    "run_backward(tensors, grad_tensors, keep_graph, create_graph, inputs=None, "
    "allow_unreachable=False, accumulate_grad=False): torch._C._ImperativeEngine.run_backward, "
    "run on the calling thread, device ops included"};

} // namespace

PYBIND11_MODULE(_autograd, m) {
  m.doc() = "torchneuron's backward passes on the calling thread (bindings/caller_thread_engine.h)";
  m.add_object("run_backward", pybind11::reinterpret_steal<pybind11::object>(
                                   PyCFunction_NewEx(&run_backward_method, nullptr, nullptr)));
  m.def("engines_made", &torchneuron::callerThreadEnginesMade,
        "how many caller-thread engines this process has made");
}
