#include "tracer/unbacked_results.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>
#include <sys/resource.h>

#include <atomic>
#include <mutex>

#include "support/fork_handlers.h"
#include "support/made_once.h"

namespace torchneuron::tracer {
namespace {

// 1 TiB of address space, never accessible. A window holds far less pending (its memory bound,
// tracer.cpp); the bump pointer starts over whenever no unbacked storage is alive.
constexpr size_t kReservedBytes = size_t{1} << 40;
constexpr size_t kAlignment = 64;

// Guards Reservation::next and live. A leaf (nothing is locked under it), taken under the window
// lock when a batch lets go of results, and held across fork(): a result made or released on
// another thread at that moment must not leave the child's copy locked.
std::mutex reservation_mutex;

struct Reservation {
  char* base = nullptr; // null: mmap refused, no result is made unbacked
  size_t next = 0;
  int64_t live = 0;
};

Reservation& reservation() {
  holdAcrossFork<reservation_mutex>(ForkRank::kUnbackedRange);
  static MadeOnce<Reservation> made; // fork-safe (made_once.h)
  return made.get([] {
    auto* r = new Reservation(); // never destroyed: storages may die during exit
    // Under an address-space limit (ulimit -v) the reservation would count against it and leave
    // less for real memory: results are then allocated as usual.
    rlimit limit{};
    if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) return r;
    void* range = mmap(nullptr, kReservedBytes, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range != MAP_FAILED) r->base = static_cast<char*>(range);
    return r;
  });
}

std::atomic<int64_t> made_count{0};
std::atomic<int64_t> backed_count{0};

// The deleter of an unbacked storage's DataPtr; its context is its address.
void releaseUnbacked(void* /*address*/) {
  Reservation& r = reservation();
  std::lock_guard<std::mutex> lock(reservation_mutex);
  if (--r.live == 0) r.next = 0;
}

// An address range of `nbytes` in the reservation, or null when none is left.
char* reserveRange(size_t nbytes) {
  Reservation& r = reservation();
  if (r.base == nullptr) return nullptr;
  const size_t rounded = (std::max<size_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  std::lock_guard<std::mutex> lock(reservation_mutex);
  if (rounded > kReservedBytes - r.next) return nullptr;
  char* address = r.base + r.next;
  r.next += rounded;
  ++r.live;
  return address;
}

// Hands out unbacked ranges to ATen's empty_generic; `backing` serves what the range cannot
// (a zero-byte storage, an exhausted reservation).
class UnbackedAllocator final : public c10::Allocator {
public:
  UnbackedAllocator(c10::Allocator* backing, c10::Device device)
      : backing_(backing), device_(device) {}
  c10::DataPtr allocate(size_t nbytes) const override {
    if (nbytes == 0) return backing_->allocate(0);
    char* address = reserveRange(nbytes);
    if (address == nullptr) return backing_->allocate(nbytes);
    made_count.fetch_add(1, std::memory_order_relaxed);
    return c10::DataPtr(address, address, &releaseUnbacked, device_);
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

private:
  c10::Allocator* backing_;
  c10::Device device_;
};

} // namespace

at::Tensor newUnbackedTensor(at::IntArrayRef sizes, c10::optional<at::IntArrayRef> strides,
                             at::ScalarType dtype, c10::DispatchKeySet keys, c10::Device device,
                             c10::Allocator* backing) {
  UnbackedAllocator allocator(backing, device);
  at::Tensor tensor =
      strides ? at::detail::empty_strided_generic(sizes, *strides, &allocator, keys, dtype)
              : at::detail::empty_generic(sizes, &allocator, keys, dtype, c10::nullopt);
  tensor.storage().unsafeGetStorageImpl()->set_allocator(backing);
  return tensor;
}

bool unbackedResultsAvailable() { return reservation().base != nullptr; }

bool isUnbacked(const c10::StorageImpl* storage) {
  return storage->data_ptr().get_deleter() == &releaseUnbacked;
}

bool isUnbackedAddress(int64_t address) {
  const char* base = reservation().base;
  const auto at = static_cast<uintptr_t>(address);
  return base != nullptr && at >= reinterpret_cast<uintptr_t>(base) &&
         at < reinterpret_cast<uintptr_t>(base) + kReservedBytes;
}

int64_t backStorage(c10::StorageImpl* storage) {
  TORCH_INTERNAL_ASSERT(isUnbacked(storage));
  const auto old_address = reinterpret_cast<intptr_t>(storage->data());
  c10::Allocator* allocator = storage->allocator();
  TORCH_INTERNAL_ASSERT(allocator != nullptr, "[adaptive] an unbacked storage without allocator");
  // The old DataPtr is released here (its range goes back to the reservation).
  storage->set_data_ptr_noswap(allocator->allocate(storage->nbytes()));
  backed_count.fetch_add(1, std::memory_order_relaxed);
  return reinterpret_cast<intptr_t>(storage->data()) - old_address;
}

void resetUnbackedCounts() {
  made_count.store(0, std::memory_order_relaxed);
  backed_count.store(0, std::memory_order_relaxed);
}

UnbackedStats unbackedStats() {
  UnbackedStats stats;
  stats.made = made_count.load(std::memory_order_relaxed);
  stats.backed = backed_count.load(std::memory_order_relaxed);
  Reservation& r = reservation();
  std::lock_guard<std::mutex> lock(reservation_mutex);
  stats.live = r.live;
  return stats;
}

} // namespace torchneuron::tracer
