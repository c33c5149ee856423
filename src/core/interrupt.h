// SIGINT, SIGTERM and SIGHUP end a tandem command the same way everywhere: one line on
// stderr ("tandem: interrupted by SIGINT"), what the run registered cleaned up (a results
// directory's DIR.partial and its lock: nothing of the interrupted run stays behind), and
// exit 128 + the signal's number. A second signal while that runs ends the process at once.
// A signal handler only passes the signal to a thread of its own
// (install_interrupt_handling(), called by main), so no cleanup runs inside a handler. A
// signal the process was started ignoring (nohup's SIGHUP, a background job's SIGINT)
// stays ignored. install_interrupt_handling() leaves the calling thread with the three
// signals blocked, so every thread it starts afterwards (and they theirs) never takes one:
// call it first in main, before any other thread starts.
#pragma once

#include <cstdint>
#include <functional>

namespace tandem {

void install_interrupt_handling();

// A cleanup that runs if a signal ends the process while this object lives (cleanups run
// newest first, on the signal's thread: `cleanup` may read only what stays valid and is
// safe to read concurrently, such as paths fixed at construction and atomics).
class InterruptCleanup {
 public:
  explicit InterruptCleanup(std::function<void()> cleanup);
  ~InterruptCleanup();
  InterruptCleanup(const InterruptCleanup&) = delete;
  InterruptCleanup& operator=(const InterruptCleanup&) = delete;

 private:
  std::uint64_t id_;
};

}  // namespace tandem
