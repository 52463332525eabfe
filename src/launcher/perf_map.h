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

// Appends `name`'s code, `size` bytes at `start`, to this process's map, which the first call
// of the process empties (a map an earlier process of the same pid left). A forked child writes
// the map of its own pid, naming the kernels it links itself (code it inherited stays unnamed
// there). A kernel the memory tier evicts keeps its line, and a later kernel may be linked at the
// same address: perf then cannot tell which one a sample hit (NEURON_CACHE_MEMORY_MAX_BYTES
// bounds the tier; metrics()["kernel_cache_evictions"] counts evictions). The file is used only
// when it is a regular file owned by this user with no other name, opened without following links
// or blocking; otherwise one line on stderr names the path and the problem, and nothing more is
// written. Never throws. Callers serialize calls (the linker's lock).
void notePerfMapSymbol(const void* start, uint64_t size, const std::string& name);

} // namespace torchneuron
