#include "distributed/neuron_work.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <thread>

#include "distributed/collective_fingerprint.h"

namespace torchneuron {
namespace {

bool isNamedError(const std::string& message) { return message.rfind("[distributed]", 0) == 0; }

std::exception_ptr namedError(const std::string& description, const std::exception_ptr& error) {
  try {
    rethrowNamed(description, error);
  } catch (...) {
    return std::current_exception();
  }
}

} // namespace

void rethrowNamed(const std::string& description, const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    const std::string message = errorMessage(e);
    // Errors this backend raised itself already name the op (a mismatch, a bad tensor).
    TORCH_CHECK(!isNamedError(message), message);
    TORCH_CHECK(false, "[distributed] ", description, " failed: ", message,
                " (another rank exited, crashed or did not reach this op within the process "
                "group's timeout)");
  }
}

c10::intrusive_ptr<c10::ivalue::Future>
callerFuture(const c10::intrusive_ptr<c10::ivalue::Future>& transport, std::string description,
             std::function<void()> finish,
             std::function<c10::IValue(const c10::IValue&)> toCaller) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(transport->elementType());
  transport->addCallback([future, description = std::move(description), finish = std::move(finish),
                          toCaller = std::move(toCaller)](c10::ivalue::Future& done) {
    if (done.hasError()) {
      future->setError(namedError(description, done.exception_ptr()));
      return;
    }
    try {
      if (finish) finish();
      future->markCompleted(toCaller(done.value()));
    } catch (...) {
      future->setError(namedError(description, std::current_exception()));
    }
  });
  return future;
}

NeuronWork::NeuronWork(int rank, c10d::OpType op, std::string description,
                       std::vector<at::Tensor> outputs,
                       std::vector<c10::intrusive_ptr<c10d::Work>> transport,
                       c10::intrusive_ptr<c10::ivalue::Future> future)
    : c10d::Work(rank, op), description_(std::move(description)), outputs_(std::move(outputs)),
      transport_(std::move(transport)), future_(std::move(future)) {}

bool NeuronWork::isCompleted() {
  for (const auto& work : transport_)
    if (!work->isCompleted()) return false;
  return !future_ || future_->completed();
}

bool NeuronWork::isSuccess() const { return exception() == nullptr; }

std::exception_ptr NeuronWork::exception() const {
  for (const auto& work : transport_)
    if (work->exception()) return work->exception();
  if (future_ && future_->completed() && future_->hasError()) return future_->exception_ptr();
  return nullptr;
}

int NeuronWork::sourceRank() const {
  const int source = source_rank_.load();
  TORCH_CHECK(source >= 0, "[distributed] ", description_,
              ": sourceRank() is only known after a recv from any source completes");
  return source;
}

bool NeuronWork::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& work : transport_) {
    try {
      work->wait(timeout);
    } catch (...) {
      rethrowNamed(description_, std::current_exception());
    }
  }
  if (future_) {
    if (timeout == kNoTimeout) {
      future_->wait();
    } else {
      // c10's futures have no timed wait; a caller-given timeout is rare, so poll.
      while (!future_->completed()) {
        TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "[distributed] ", description_,
                    ": wait() timed out after ", timeout.count(), " ms");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    // The future's error already names the op.
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
  }
  return true;
}

void NeuronWork::abort() {
  for (const auto& work : transport_)
    work->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> NeuronWork::getFuture() {
  TORCH_CHECK(future_, "[distributed] ", description_,
              " has no future (as gloo's send); wait() on its work instead");
  return future_;
}

} // namespace torchneuron
