#pragma once
// How long PyTorch's idle OpenMP workers spin: the rule DESIGN.md decision 8 needs for the pools
// that share the cores (PyTorch's OpenMP team, which also runs compiled kernels, and OpenBLAS's
// threads).
//
// libgomp's workers spin-wait after each parallel region before they sleep: 300000 rounds (about
// 4 ms of a core on this VM) unless OMP_WAIT_POLICY or GOMP_SPINCOUNT says otherwise, and only
// about 100 rounds while libgomp runs more threads than there are CPUs (libgomp's manual,
// GOMP_SPINCOUNT). At 2 threads on 2 CPUs an OpenBLAS call made right after a parallel region
// (an ATen op, a compiled kernel) shared the cores with that spinning worker: whole training
// steps ran 2.5x-4x slower, stock PyTorch's too (docs/benchmarks.md, "OpenMP's idle workers").
// Those variables are read once, when libgomp loads with libtorch, before this project's code
// can set them; so the `short` rule parks one idle OpenMP team on a helper thread of its own, one
// thread more than the CPUs libgomp can have counted when it loaded (libgomp counts a new team's
// threads but its first one). From then on libgomp runs more threads than CPUs, whatever
// PyTorch's own team, and every idle worker, the parked ones included, spins briefly and sleeps.
// The parked threads are never woken again; the helper lives as long as the process (its team
// dies with it). Only where exactly one libgomp is loaded (Debian's libtorch and this project
// share it); measured on a 2-vCPU VM only: on large machines compare NEURON_OPENMP_WAIT=unchanged
// (every region then wakes sleeping workers, the price OMP_WAIT_POLICY=passive pays too).

namespace torchneuron {

enum class OpenMpWaitRule {
  kShortSpin,    // the parked team: idle workers spin briefly (NEURON_OPENMP_WAIT=short)
  kPassive,      // OMP_WAIT_POLICY=passive: idle workers sleep at once; nothing to do
  kUserSet,      // OMP_WAIT_POLICY (not passive) or GOMP_SPINCOUNT set: left to them
  kUnchanged,    // NEURON_OPENMP_WAIT=unchanged: libgomp's default spin
  kOneCpu,       // one CPU online: PyTorch runs one thread, no team, nothing spins
  kOtherRuntime, // not exactly one libgomp loaded (a wheel's own copy, libomp, libiomp5): unknown
  kPartialTeam,  // libgomp gave the parked team fewer threads than asked: not throttled
};

// Applies NEURON_OPENMP_WAIT once per process; later calls return the first call's rule.
// Thread-safe. Called when the Python package is imported.
OpenMpWaitRule applyOpenMpWaitRule();

// How many threads the parked team has (0 where none was parked): one more than the CPUs
// (omp_get_num_procs() or the CPUs online, the larger), or fewer if libgomp gave fewer.
int parkedOpenMpTeamSize();

// The rule's name as the Python package reports it: "short-spin", "passive", "user-set",
// "unchanged", "one-cpu", "other-runtime", "partial-team".
const char* openMpWaitRuleName(OpenMpWaitRule rule);

// Whether, under `rule`, PyTorch's idle OpenMP workers may spin long when PyTorch runs as many
// threads as CPUs: libgomp's default left as it is (unchanged, a team given short), the user's
// own variables (which this project does not second-guess), or a runtime it cannot judge.
bool idleOpenMpWorkersSpinLong(OpenMpWaitRule rule);

} // namespace torchneuron
