# lit configuration of the FileCheck tests of generated kernels (tests/fusion/filecheck). The
# tool paths come from lit.site.cfg.py, which CMake writes into the build tree.
import lit.formats

config.name = "torchneuron-kernels"
# External shell: RUN lines use $(...) to hand mlir-opt the engine's own pipeline.
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.test_source_root = config.neuron_source_dir
config.test_exec_root = config.neuron_exec_dir
config.substitutions.append(("%neuron_kernel_mlir", config.neuron_kernel_mlir))
# Whole-word tool names in RUN lines resolve to LLVM 19's tools.
config.substitutions.append(("mlir-opt", config.mlir_opt))
config.substitutions.append(("FileCheck", config.filecheck))
