#include "report/machine.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "compute/cpu/blas.h"

namespace tandem {

namespace {

std::string cpuinfo_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

double memory_gib() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * page / (1 << 30) : 0;
}

// What the CPU's products run on, field by field (compute/cpu/blas.h GemmReport).
nlohmann::json gemm_json() {
  const GemmReport r = gemm_report();
  return {{"library", r.library},
          {"kernel", r.kernel},
          {"isa", r.isa},
          {"cpu_isa", r.cpu_isa},
          {"loops", r.loops},
          {"threading", r.threading},
          {"threads", r.threads},
          {"precision", std::string(to_string(r.precision))},
          {"warning", r.warning.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.warning)}};
}

}  // namespace

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json machine_json() {
  utsname u{};
  ::uname(&u);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return {{"cpu", cpuinfo_model()},
          {"cores", std::thread::hardware_concurrency()},
          {"memory_gib", memory_gib()},
          {"kernel", std::string(u.sysname) + " " + u.release},
          {"hostname", host},
          {"blas", blas_description()},
          {"gemm", gemm_json()},
          {"compiler", std::string("GCC ") + __VERSION__},
          {"gpu", nullptr},
          {"date", utc_timestamp()}};
}

}  // namespace tandem
