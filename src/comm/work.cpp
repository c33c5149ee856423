// Work: completion state of one asynchronous operation, guarded by one mutex.
#include "comm/work.h"

#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {

std::string OpInfo::describe() const {
  std::string text(to_string(kind));
  if (tag_kind == TagKind::kTensorUnit) text = "tensor-parallel " + text;
  if (tag >= 0) {
    text += tag_kind == TagKind::kUnit || tag_kind == TagKind::kTensorUnit ? " unit "
            : tag_kind == TagKind::kMicroBatch                             ? " micro-batch "
                                                                           : " bucket ";
    text += std::to_string(tag);
  }
  std::string details;
  if (bytes > 0) details = format_bytes(static_cast<double>(bytes));
  if (step >= 0) details += (details.empty() ? "step " : ", step ") + std::to_string(step);
  if (!details.empty()) text += " (" + details + ")";
  return text;
}

Span OpInfo::comm_span(std::int64_t start_ns, std::int64_t end_ns) const {
  return Span{.lane = Lane::kComm,
              .kind = kind,
              .name = name,
              .step = step,
              .tag = tag,
              .micro = tag_kind == TagKind::kMicroBatch ? tag : -1,
              .start_ns = start_ns,
              .end_ns = end_ns,
              .bytes = bytes};
}

Work::Work(OpInfo info, int rank, std::chrono::nanoseconds timeout)
    : info_(info), rank_(rank), timeout_(timeout) {}

std::exception_ptr Work::timeout_error(std::int64_t elapsed_ns) const {
  return std::make_exception_ptr(TimeoutError("rank " + std::to_string(rank_) + ": " +
                                              info_.describe() + " not complete after " +
                                              format_duration_ns(static_cast<double>(elapsed_ns))));
}

void Work::wait() {
  if (!stream_wait_) {
    synchronize();
    return;
  }
  if (const std::exception_ptr error = exception()) std::rethrow_exception(error);
  stream_wait_();
}

void Work::synchronize() {
  const std::int64_t start = now_ns();
  if (!wait_for(timeout_)) std::rethrow_exception(timeout_error(now_ns() - start));
}

bool Work::wait_for(std::chrono::nanoseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [this] { return done_; })) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool Work::test() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::int64_t Work::start_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return start_ns_;
}

std::int64_t Work::end_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return end_ns_;
}

void Work::mark_started(std::int64_t t_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  TANDEM_CHECK(!done_);
  start_ns_ = t_ns;
}

void Work::finish(std::int64_t t_ns) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TANDEM_CHECK(!done_);
    end_ns_ = t_ns;
    done_ = true;
  }
  done_cv_.notify_all();
}

void Work::fail(std::exception_ptr error, std::int64_t t_ns) {
  TANDEM_CHECK(error != nullptr);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TANDEM_CHECK(!done_);
    // A failure before the start gives an empty interval rather than one from epoch 0.
    if (start_ns_ == 0) start_ns_ = t_ns;
    end_ns_ = t_ns;
    error_ = std::move(error);
    done_ = true;
  }
  done_cv_.notify_all();
}

}  // namespace tandem
