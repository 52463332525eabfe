#pragma once
// Names the device's kernels for Linux `perf` (NEURON_PERF_MAP=1): each linked kernel's entry
// gets a line "<start> <size> <name>" in /tmp/perf-<pid>.map, perf's file for code it cannot
// find in a mapped object file, so `perf report` shows `neuron_kernel_<key>` where it would
// show an address in an anonymous mapping ("[JIT] tid ..."), apart from other JIT code in the
// process (oneDNN's convolutions, for one). Off by default: it costs a write per linked kernel.

#include <cstdint>
#include <string>

namespace torchneuron {

// Whether NEURON_PERF_MAP is on (support/settings.h).
bool perfMapEnabled();

// Appends `name`'s code, `size` bytes at `start`, to this process's map. A forked child writes
// the map of its own pid, naming the kernels it links itself. The file is opened without
// following links and used only when it is a regular file owned by this user (perf refuses
// others); otherwise one line on stderr names the path and the problem, and nothing more is
// written. Never throws. Callers serialize calls (the linker's lock).
void notePerfMapSymbol(const void* start, uint64_t size, const std::string& name);

} // namespace torchneuron
