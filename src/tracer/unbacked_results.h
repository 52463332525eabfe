#pragma once
// Results that have an address but no memory (issue 14: intermediates that do not escape are
// never allocated). A call recorded into a window that will run fused gets outputs whose storage
// points into a reserved, inaccessible address range instead of a block of the device allocator.
// The address is unique to the storage for as long as it lives, so recorded launches, the
// partitioner's overlap analysis and the partition memo treat it like any other. When the window
// runs (result_backing.h), a result that anything will read (a Python tensor, autograd, a launch
// that runs as recorded, a fused kernel that stores it) gets memory from its storage's allocator
// and every recorded slot pointing at it is moved by the displacement; one that nothing reads
// dies with the window's references, never allocated, never written.
//
// The reserved range is PROT_NONE: a host access that reached an unbacked storage without the
// sync point every host access takes first would fault at once rather than read another
// tensor's bytes. Without the reservation (mmap refused, or an address-space limit set, which
// the reservation would count against) results are allocated as usual.
//
// Locking: the range's bump pointer is guarded by its own mutex, held across fork(); making and
// releasing unbacked storages is thread-safe. Backing a storage happens under the tracer's window
// lock.

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/StorageImpl.h>

#include <cstdint>

namespace torchneuron::tracer {

// A new tensor of `sizes` (and `strides`, when given) on `device` whose storage is unbacked, or
// backed by `backing` when no unbacked address is left. The storage's allocator is `backing`:
// that is where its memory comes from when it is backed, and what resizing it uses.
at::Tensor newUnbackedTensor(at::IntArrayRef sizes, c10::optional<at::IntArrayRef> strides,
                             at::ScalarType dtype, c10::DispatchKeySet keys, c10::Device device,
                             c10::Allocator* backing);

// Whether the reserved range exists (else every result is allocated as usual).
bool unbackedResultsAvailable();

// Whether `storage` has an address but no memory.
bool isUnbacked(const c10::StorageImpl* storage);

// Whether `address` lies in the unbacked range (a pointer slot still naming an unbacked result).
bool isUnbackedAddress(int64_t address);

// Gives an unbacked storage memory from its allocator: the displacement (new address - old) by
// which every recorded pointer into it moves.
int64_t backStorage(c10::StorageImpl* storage);

// Counts since the start or the last resetUnbackedCounts() (metrics' reset), and the storages
// unbacked now. With none live at the reset, made - backed - live is the number of results that
// died with no memory ever allocated for them.
struct UnbackedStats {
  int64_t made = 0;   // results made unbacked
  int64_t backed = 0; // unbacked storages given memory (when their window ran, or after)
  int64_t live = 0;   // unbacked now
};
UnbackedStats unbackedStats();
void resetUnbackedCounts();

} // namespace torchneuron::tracer
