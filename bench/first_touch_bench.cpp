// What memory given back and touched again costs (docs/SIMULATE.md, "Memory given back,
// touched again"): a PageMemory range written while resident (the same-run baseline), and
// written again after discard() gave its pages back, as fsdp's gathers and zero2/fsdp's
// backward passes write units released. With and without the huge-page advice flat_array
// gives every unit. Prints the median microseconds of both writes and the first-touch rate
// bytes / (after - resident), the simulator's DeviceProfile::first_touch_bytes_per_s.
//
//   first_touch_bench [--rounds 50]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/page_array.h"
#include "core/parse.h"
#include "report/machine.h"

using namespace tandem;

namespace {

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double write_us(PageMemory& memory, int value) {
  const std::int64_t t0 = now_ns();
  std::memset(memory.data(), value, memory.bytes());
  const std::int64_t t1 = now_ns();
  return static_cast<double>(t1 - t0) / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("first_touch_bench [--rounds N (1..10000, default 50)]\n");
      return 0;
    }
    if (flag != "--rounds" || i + 1 >= argc) {
      std::fprintf(stderr, "first_touch_bench: %s\n",
                   flag == "--rounds" ? "--rounds: needs a value"
                                      : ("unknown flag " + flag + " (--rounds; --help)").c_str());
      return 2;
    }
    try {
      rounds = static_cast<int>(parse_int_in(argv[++i], "--rounds", 1, 10000));
    } catch (const UsageError& e) {
      std::fprintf(stderr, "first_touch_bench: %s\n", e.what());
      return 2;
    }
  }
  const nlohmann::json machine = machine_json();
  std::printf("first_touch_bench on %s (kernel %s), %d rounds (median)\n",
              machine["cpu"].get<std::string>().c_str(),
              machine["kernel"].get<std::string>().c_str(), rounds);
  std::printf("%8s %6s %12s %12s %17s\n", "MiB", "pages", "resident us", "after us",
              "first touch GB/s");
  for (const std::size_t mib : {2, 4, 16, 64}) {
    for (const bool huge : {true, false}) {
      PageMemory memory(mib << 20);
      if (huge) memory.advise_huge_pages(0, memory.bytes());
      write_us(memory, 1);  // committed once before the rounds
      std::vector<double> resident, after;
      for (int r = 0; r < rounds; ++r) {
        resident.push_back(write_us(memory, 2 + r % 2));
        memory.discard(0, memory.bytes());
        after.push_back(write_us(memory, 3));
      }
      const double extra_us = median(after) - median(resident);
      const double bytes = static_cast<double>(memory.bytes());
      std::printf("%8zu %6s %12.1f %12.1f %17.1f\n", mib, huge ? "2 MiB" : "4 KiB",
                  median(resident), median(after), extra_us > 0 ? bytes / extra_us / 1e3 : 0.0);
    }
  }
  return 0;
}
