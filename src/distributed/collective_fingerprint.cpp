#include "distributed/collective_fingerprint.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>

#include "support/hash.h"

namespace torchneuron {
namespace {

const char* reduceOpName(int64_t op) {
  switch (op) {
  case c10d::ReduceOp::SUM:
    return "sum";
  case c10d::ReduceOp::AVG:
    return "avg";
  case c10d::ReduceOp::PRODUCT:
    return "product";
  case c10d::ReduceOp::MIN:
    return "min";
  case c10d::ReduceOp::MAX:
    return "max";
  case c10d::ReduceOp::BAND:
    return "band";
  case c10d::ReduceOp::BOR:
    return "bor";
  case c10d::ReduceOp::BXOR:
    return "bxor";
  default:
    return "premul_sum";
  }
}

// PyTorch's Python name of a dtype (float32, int64, ...), which users read in errors.
std::string dtypeName(int64_t dtype) {
  switch (static_cast<c10::ScalarType>(dtype)) {
  case c10::kFloat:
    return "float32";
  case c10::kDouble:
    return "float64";
  case c10::kHalf:
    return "float16";
  case c10::kBFloat16:
    return "bfloat16";
  case c10::kLong:
    return "int64";
  case c10::kInt:
    return "int32";
  case c10::kShort:
    return "int16";
  case c10::kChar:
    return "int8";
  case c10::kByte:
    return "uint8";
  case c10::kBool:
    return "bool";
  default:
    return c10::toString(static_cast<c10::ScalarType>(dtype));
  }
}

// What the op's detail field means for it.
std::string describeDetail(c10d::OpType op, int64_t detail) {
  switch (op) {
  case c10d::OpType::ALLREDUCE:
    return std::string("(") + reduceOpName(detail) + ")";
  case c10d::OpType::REDUCE:
    return std::string("(") + reduceOpName(detail & 0xff) + ", root " +
           std::to_string(detail >> 8) + ")";
  case c10d::OpType::BROADCAST:
  case c10d::OpType::GATHER:
  case c10d::OpType::SCATTER:
    return "(root " + std::to_string(detail) + ")";
  default:
    return "";
  }
}

} // namespace

std::string errorMessage(const std::exception& error) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error))
    return c10_error->what_without_backtrace();
  return error.what();
}

const char* collectiveName(c10d::OpType op) {
  switch (op) {
  case c10d::OpType::BROADCAST:
    return "broadcast";
  case c10d::OpType::ALLREDUCE:
    return "all_reduce";
  case c10d::OpType::REDUCE:
    return "reduce";
  case c10d::OpType::ALLGATHER:
    return "all_gather";
  case c10d::OpType::GATHER:
    return "gather";
  case c10d::OpType::SCATTER:
    return "scatter";
  case c10d::OpType::BARRIER:
    return "barrier";
  case c10d::OpType::SEND:
    return "send";
  case c10d::OpType::RECV:
  case c10d::OpType::RECVANYSOURCE:
    return "recv";
  default:
    return "collective";
  }
}

CollectiveFingerprint CollectiveFingerprint::of(c10d::OpType op, int64_t detail,
                                                const std::vector<at::Tensor>& tensors) {
  CollectiveFingerprint print;
  print.op = op;
  print.detail = detail;
  print.tensors = static_cast<int64_t>(tensors.size());
  Hasher layout;
  for (const at::Tensor& t : tensors) {
    print.numel += t.numel();
    layout.i64(static_cast<int64_t>(t.scalar_type())).i64(t.dim());
    for (int64_t size : t.sizes())
      layout.i64(size);
  }
  print.layout = static_cast<int64_t>(layout.digest());
  if (!tensors.empty()) {
    const at::Tensor& first = tensors.front();
    print.dtype = static_cast<int64_t>(first.scalar_type());
    print.ndim = first.dim();
    for (int64_t d = 0; d < std::min<int64_t>(first.dim(), kShownSizes); ++d)
      print.sizes[d] = first.size(d);
  }
  return print;
}

at::Tensor CollectiveFingerprint::toTensor() const {
  at::Tensor fields = at::empty({kFields}, at::kLong);
  int64_t* f = fields.data_ptr<int64_t>();
  f[0] = static_cast<int64_t>(op);
  f[1] = detail;
  f[2] = tensors;
  f[3] = dtype;
  f[4] = numel;
  f[5] = layout;
  f[6] = ndim;
  std::copy(sizes.begin(), sizes.end(), f + 7);
  return fields;
}

CollectiveFingerprint CollectiveFingerprint::fromTensor(const at::Tensor& fields) {
  TORCH_INTERNAL_ASSERT(fields.numel() == kFields && fields.scalar_type() == at::kLong);
  const int64_t* f = fields.data_ptr<int64_t>();
  CollectiveFingerprint print;
  print.op = static_cast<c10d::OpType>(f[0]);
  print.detail = f[1];
  print.tensors = f[2];
  print.dtype = f[3];
  print.numel = f[4];
  print.layout = f[5];
  print.ndim = f[6];
  std::copy(f + 7, f + kFields, print.sizes.begin());
  return print;
}

bool CollectiveFingerprint::operator==(const CollectiveFingerprint& other) const {
  return op == other.op && detail == other.detail && tensors == other.tensors &&
         dtype == other.dtype && numel == other.numel && layout == other.layout &&
         ndim == other.ndim && sizes == other.sizes;
}

std::string CollectiveFingerprint::describeTensors() const {
  std::ostringstream shape;
  shape << dtypeName(dtype) << "[";
  for (int64_t d = 0; d < std::min<int64_t>(ndim, kShownSizes); ++d)
    shape << (d ? ", " : "") << sizes[d];
  shape << (ndim > kShownSizes ? ", ...]" : "]");
  if (tensors == 1) return shape.str();
  std::ostringstream text;
  text << tensors << " tensors, first " << shape.str() << ", " << numel << " elements in all";
  return text.str();
}

std::string CollectiveFingerprint::describe() const {
  std::string text = collectiveName(op) + describeDetail(op, detail);
  return tensors == 0 ? text : text + " on " + describeTensors();
}

void checkCollective(c10d::ProcessGroup& transport, const CollectiveFingerprint& mine) {
  const int ranks = transport.getSize();
  std::vector<at::Tensor> input{mine.toTensor()};
  std::vector<std::vector<at::Tensor>> gathered(1);
  for (int r = 0; r < ranks; ++r)
    gathered[0].push_back(at::empty({CollectiveFingerprint::kFields}, at::kLong));
  try {
    transport.allgather(gathered, input)->wait();
  } catch (const std::exception& error) {
    TORCH_CHECK(false, "[distributed] ", mine.describe(), " on rank ", transport.getRank(), " of ",
                ranks, " failed: ", errorMessage(error),
                " (another rank exited, crashed or did not reach this collective within the "
                "process group's timeout)");
  }
  std::vector<CollectiveFingerprint> prints;
  bool same = true;
  for (const at::Tensor& fields : gathered[0]) {
    prints.push_back(CollectiveFingerprint::fromTensor(fields));
    same = same && prints.back() == prints.front();
  }
  if (same) return;
  std::ostringstream calls;
  for (int r = 0; r < ranks; ++r)
    calls << (r ? ", " : "") << "rank " << r << " calls " << prints[r].describe();
  TORCH_CHECK(false, "[distributed] mismatched collective ", collectiveName(mine.op), ": ",
              calls.str(),
              " (every rank must call the same collectives in the same order on "
              "tensors of the same dtypes and sizes)");
}

} // namespace torchneuron
