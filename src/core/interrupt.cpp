#include "core/interrupt.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "core/thread_name.h"

namespace tandem {
namespace {

struct Registry {
  std::mutex mutex;
  std::uint64_t next = 0;
  std::map<std::uint64_t, std::function<void()>> cleanups;  // by registration order
};

Registry& registry() {
  static Registry instance;
  return instance;
}

// The handler only hands the signal to the cleanup thread through a pipe (write(2) is
// async-signal-safe). A handler, not a blocked mask and sigwait: libraries start threads
// before main (OpenBLAS's pool), and those would not inherit a mask.
int g_pipe[2] = {-1, -1};
std::atomic<int> g_first{0};

void on_signal(int signal) {
  if (g_first.exchange(signal) != 0) {
    // The second: the default action, at once.
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  const int saved = errno;
  (void)!::write(g_pipe[1], &signal, sizeof signal);
  errno = saved;
}

[[noreturn]] void interrupted(int signal) {
  const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "SIGHUP";
  std::fprintf(stderr,
               "tandem: interrupted by %s; the run's partial results are removed (the finished "
               "points of a sweep or a tune are kept for --resume)\n",
               name);
  std::fflush(stderr);
  {
    std::lock_guard lock(registry().mutex);
    for (auto it = registry().cleanups.rbegin(); it != registry().cleanups.rend(); ++it) {
      try {
        it->second();
      } catch (...) {
        // Cleaning up is best effort: the exit below must happen.
      }
    }
  }
  ::_exit(128 + signal);
}

}  // namespace

void install_interrupt_handling() {
  if (::pipe2(g_pipe, O_CLOEXEC) != 0) return;  // no handling; the default actions stay
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    // A signal the process was started ignoring stays ignored (nohup, background jobs).
    if (sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    // No SA_RESTART: the cleanup thread's read() must return (EINTR) when the signal lands
    // on it. ThreadSanitizer runs a handler only when the thread next leaves one of its
    // interceptors, and a restarted read() never returned: the run went on, signalled.
    // The only threads that can take the signal are this cleanup thread and libraries'
    // threads started before main, whose waits retry on EINTR.
    action.sa_flags = 0;
    sigaction(signal, &action, nullptr);
  }
  std::thread([] {
    name_this_thread("tandem signals");
    int signal = 0;
    for (;;) {
      const ssize_t n = ::read(g_pipe[0], &signal, sizeof signal);
      if (n == static_cast<ssize_t>(sizeof signal)) interrupted(signal);
      if (n < 0 && errno != EINTR) return;
    }
  }).detach();
  // The threads started from here on (the ranks, the communication threads, MPI's and
  // the GEMM libraries' own) inherit a mask without these signals, so the kernel hands
  // them to a thread that waits for them (the one above, or a library thread that
  // existed before): a signal never interrupts a rank's compute or a system call inside
  // MPI (seen: heap corruption in a rank SIGTERMed mid-step under mpirun, about one run
  // in ten, MpiFault.AnInterruptedProcessEndsTheJobLeavingNothingBehind).
  sigset_t interrupts;
  sigemptyset(&interrupts);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&interrupts, signal);
  pthread_sigmask(SIG_BLOCK, &interrupts, nullptr);
}

InterruptCleanup::InterruptCleanup(std::function<void()> cleanup) {
  std::lock_guard lock(registry().mutex);
  id_ = registry().next++;
  registry().cleanups.emplace(id_, std::move(cleanup));
}

InterruptCleanup::~InterruptCleanup() {
  std::lock_guard lock(registry().mutex);
  registry().cleanups.erase(id_);
}

}  // namespace tandem
