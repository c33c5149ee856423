// Names the calling thread for the tools that show threads (top -H, perf, gdb, /proc):
// "tandem r3" for rank 3's training thread (and the BLAS threads it starts, which inherit
// the name), "tandem r3 comm" for its communication thread, "tandem power" for the power
// sampler and "tandem signals" for the thread that handles Ctrl-C, so a profile of a run
// says which rank and which lane each thread is.
#pragma once

#include <string>

namespace tandem {

// Linux keeps 15 characters of a thread's name: a longer one is cut there. Elsewhere,
// and where the call fails, the thread keeps its name (a name is a convenience, never
// a reason to fail a run).
void name_this_thread(const std::string& name);
// The calling thread's name; "" where it cannot be read.
std::string this_thread_name();

}  // namespace tandem
