// torchneuron._c10d: the c10d backend "neuron" for torch.distributed. Loaded by the backend's
// creator (python/torchneuron/distributed.py) when a process group is made, not at import.
// Unlike torchneuron._C it exchanges PyTorch objects (process groups), so it links
// libtorch_python and passes them as PyTorch's own bindings do (intrusive_ptr holders).

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/utils/pybind.h>

#include "distributed/process_group_neuron.h"

namespace py = pybind11;

PYBIND11_MODULE(_c10d, m) {
  m.doc() = "torchneuron's c10d backend";
  // Returns a torch.distributed.ProcessGroup whose backend name is "neuron".
  m.def(
      "new_process_group",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& transport)
          -> c10::intrusive_ptr<c10d::ProcessGroup> {
        return c10::make_intrusive<torchneuron::ProcessGroupNeuron>(transport);
      },
      py::arg("transport"));
}
