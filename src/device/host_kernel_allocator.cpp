#include "device/host_kernel_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "device/caching_allocator.h"
#include "device/device.h"
#include "support/fork_handlers.h"
#include "support/made_once.h"

namespace torchneuron {
namespace {

thread_local int scope_depth = 0;

// The device blocks lent to CPU allocations, by data pointer. ATen's raw_allocate (oneDNN's
// buffers) needs a DataPtr whose context is its data pointer and a raw deleter that frees by data
// pointer alone, so a lent block's DataPtr is (data, data, releaseLentBlock) and the block's own
// owner (its device DataPtr's context) waits here until the memory is freed or adopted.
struct LentBlocks {
  std::mutex mutex;
  std::unordered_map<void*, std::unique_ptr<void, c10::DeleterFnPtr>> owner_of;
};

// Locking: `mutex` is a leaf (nothing else is taken under it), and every thread that frees a
// raw CPU buffer takes it, whatever it holds: so it ranks above every other lock held across
// fork() (ForkRank::kLentBlocks), and a child never inherits it locked.
LentBlocks& lentBlocks() {
  // Never destroyed: memory may be freed during exit. Fork-safe (made_once.h).
  static MadeOnce<LentBlocks> blocks;
  return blocks.get([] {
    registerForkHandlers(ForkRank::kLentBlocks,
                         {[] { lentBlocks().mutex.lock(); }, [] { lentBlocks().mutex.unlock(); },
                          [] { lentBlocks().mutex.unlock(); }});
    return new LentBlocks();
  });
}

c10::DeleterFnPtr replaced_raw_deleter = nullptr;

std::unique_ptr<void, c10::DeleterFnPtr> takeLentBlock(void* data) {
  LentBlocks& blocks = lentBlocks();
  std::lock_guard<std::mutex> lock(blocks.mutex);
  auto found = blocks.owner_of.find(data);
  if (found == blocks.owner_of.end()) return {nullptr, nullptr};
  std::unique_ptr<void, c10::DeleterFnPtr> owner = std::move(found->second);
  blocks.owner_of.erase(found);
  return owner;
}

// The deleter of lent blocks and the raw deleter of every CPU allocation: memory the replaced
// allocator made goes back to it.
void releaseLentBlock(void* data) {
  std::unique_ptr<void, c10::DeleterFnPtr> owner = takeLentBlock(data);
  if (owner == nullptr && data != nullptr) replaced_raw_deleter(data);
  // `owner` returns the block to the caching allocator here, outside the lock.
}

// The process's CPU allocator while this library is loaded: the one it replaced, except on a
// thread inside a HostKernelAllocationScope, where it lends device blocks.
class HostKernelAllocator final : public c10::Allocator {
public:
  explicit HostKernelAllocator(c10::Allocator* cpu) : cpu_(cpu) {}

  c10::DataPtr allocate(size_t nbytes) const override {
    if (scope_depth == 0 || nbytes == 0) return cpu_->allocate(nbytes);
    c10::DataPtr block = neuronAllocator()->allocate(nbytes);
    void* data = block.get();
    std::unique_ptr<void, c10::DeleterFnPtr> owner = std::move(block.move_context());
    {
      LentBlocks& blocks = lentBlocks();
      std::lock_guard<std::mutex> lock(blocks.mutex);
      blocks.owner_of.emplace(data, std::move(owner));
    }
    return c10::DataPtr(data, data, &releaseLentBlock, c10::Device(c10::kCPU));
  }

  c10::DeleterFnPtr raw_deleter() const override { return &releaseLentBlock; }

private:
  c10::Allocator* cpu_;
};

// Installed when the library loads, above the default CPU allocator's priority (0).
[[maybe_unused]] const bool installed = [] {
  c10::Allocator* replaced = c10::GetCPUAllocator();
  replaced_raw_deleter = replaced->raw_deleter();
  TORCH_INTERNAL_ASSERT(replaced_raw_deleter != nullptr,
                        "[allocator] the CPU allocator has no raw deleter");
  static HostKernelAllocator allocator(replaced);
  c10::SetAllocator(c10::kCPU, &allocator, /*priority=*/1);
  return true;
}();

} // namespace

HostKernelAllocationScope::HostKernelAllocationScope() { ++scope_depth; }
HostKernelAllocationScope::~HostKernelAllocationScope() { --scope_depth; }

at::Tensor adoptHostResult(const at::Tensor& host, c10::Device device) {
  if (!host.has_storage() || host.is_conj() || host.is_neg() || host._is_zerotensor() ||
      host.use_count() != 1)
    return at::Tensor();
  const c10::Storage& storage = host.storage();
  if (storage.use_count() != 1 || storage.data_ptr().get_deleter() != &releaseLentBlock)
    return at::Tensor();
  void* data = storage.data_ptr().get();
  std::unique_ptr<void, c10::DeleterFnPtr> owner = takeLentBlock(data);
  if (owner == nullptr) return at::Tensor();
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  const size_t nbytes = impl->nbytes();
  // The host storage lets go of the memory without freeing it: `owner` owns it now.
  impl->set_data_ptr(c10::DataPtr(nullptr, c10::Device(c10::kCPU))).release_context();
  impl->set_nbytes(0);
  const c10::DeleterFnPtr deleter = owner.get_deleter();
  c10::Storage device_storage(c10::Storage::use_byte_size_t(), nbytes,
                              c10::DataPtr(data, owner.release(), deleter, device),
                              neuronAllocator(), /*resizable=*/true);
  at::Tensor result = at::detail::make_tensor<c10::TensorImpl>(
      std::move(device_storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), host.dtype());
  result.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(),
                                                      host.storage_offset());
  return result;
}

} // namespace torchneuron
