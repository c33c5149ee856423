// tandem's error policy, in one place.
//
// - UsageError: the user asked for something impossible (a bad flag, a missing file).
//   Thrown anywhere; the CLI turns it into one line on stderr and exit code 2.
// - RuntimeError: something failed at run time that the caller may handle
//   (a collective timed out, a peer failed). Stored on Work handles and rethrown.
//   TimeoutError and AbortedError say which of the two it was.
// - TANDEM_CHECK: a broken internal invariant. Prints both sides and aborts; never
//   used for user input.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace tandem {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TimeoutError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

// An operation failed only because its communicator was aborted (another rank, or this
// one, failed first): the first failure that is not one of these is the cause.
class AbortedError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

[[noreturn]] inline void check_failed(const char* expr, const char* file, int line,
                                      const std::string& detail) {
  std::fprintf(stderr, "tandem: internal check failed: %s at %s:%d %s\n", expr, file, line,
               detail.c_str());
  std::abort();
}

}  // namespace tandem

#define TANDEM_CHECK(cond)                                           \
  do {                                                               \
    if (!(cond)) ::tandem::check_failed(#cond, __FILE__, __LINE__, ""); \
  } while (0)

#define TANDEM_CHECK_EQ(a, b)                                                          \
  do {                                                                                 \
    const auto& tandem_a_ = (a);                                                       \
    const auto& tandem_b_ = (b);                                                       \
    if (!(tandem_a_ == tandem_b_))                                                     \
      ::tandem::check_failed(#a " == " #b, __FILE__, __LINE__,                         \
                             "(" + std::to_string(tandem_a_) + " vs " +                \
                                 std::to_string(tandem_b_) + ")");                     \
  } while (0)
