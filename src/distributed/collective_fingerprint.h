#pragma once
// What one rank is about to run in a collective, as a fixed-size record the ranks exchange before
// the transport runs it: gloo aborts the whole process when two ranks disagree on a size, so a
// mismatch must be caught first and raised as an error naming the op and each rank's call.

#include <ATen/Tensor.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace torchneuron {

struct CollectiveFingerprint {
  // Fields as exchanged (int64): op, detail, tensors, dtype, numel, layout hash, ndim, 4 sizes.
  static constexpr int kFields = 11;
  static constexpr int kShownSizes = 4;

  c10d::OpType op = c10d::OpType::UNKNOWN;
  // The reduce op (all_reduce), the root rank (broadcast, gather, scatter), the reduce op plus
  // 256 times the root (reduce), or -1.
  int64_t detail = -1;
  int64_t tensors = 0;                      // tensors the op reads (the inputs)
  int64_t dtype = -1;                       // c10::ScalarType of the first tensor
  int64_t numel = 0;                        // elements of all tensors
  int64_t layout = 0;                       // hash of every tensor's dtype and sizes
  int64_t ndim = 0;                         // of the first tensor
  std::array<int64_t, kShownSizes> sizes{}; // the first tensor's leading sizes

  // The fingerprint of `op` over `tensors`; `detail` as above.
  static CollectiveFingerprint of(c10d::OpType op, int64_t detail,
                                  const std::vector<at::Tensor>& tensors);

  at::Tensor toTensor() const;
  static CollectiveFingerprint fromTensor(const at::Tensor& fields);

  // "all_reduce(sum) on float32[4, 5]", "broadcast(root 0) on 2 tensors, first float32[3], 7
  // elements in all", "barrier".
  std::string describe() const;
  // The tensors alone: "float32[4, 5]".
  std::string describeTensors() const;

  bool operator==(const CollectiveFingerprint& other) const;
  bool operator!=(const CollectiveFingerprint& other) const { return !(*this == other); }
};

// The name Python uses for `op` (all_reduce, broadcast, all_gather, ...).
const char* collectiveName(c10d::OpType op);

// An exception's message without a C++ backtrace.
std::string errorMessage(const std::exception& error);

// Exchanges fingerprints with every rank of `transport` (an all-gather, so it is a barrier too)
// and throws, naming every rank's call, when they differ. A transport failure (a rank died, the
// timeout passed) is rethrown naming `mine`.
void checkCollective(c10d::ProcessGroup& transport, const CollectiveFingerprint& mine);

} // namespace torchneuron
