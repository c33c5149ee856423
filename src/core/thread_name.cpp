#include "core/thread_name.h"

#include <pthread.h>

namespace tandem {

void name_this_thread(const std::string& name) {
#if defined(__linux__)
  constexpr std::size_t kLinuxLimit = 15;  // TASK_COMM_LEN 16, with the terminator
  (void)pthread_setname_np(pthread_self(), name.substr(0, kLinuxLimit).c_str());
#else
  (void)name;
#endif
}

std::string this_thread_name() {
#if defined(__linux__)
  char name[16] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) == 0) return name;
#endif
  return "";
}

}  // namespace tandem
