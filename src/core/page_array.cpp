#include "core/page_array.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <new>

#include "core/error.h"

namespace tandem {

std::size_t PageMemory::page_size() {
  static const std::size_t size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

PageMemory::PageMemory(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const std::size_t page = page_size();
  mapped_ = (bytes + page - 1) / page * page;
  if (bytes < kHugePage) {
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = p;
    return;
  }
  // Large arrays start on a huge-page boundary, so that advise_huge_pages can apply.
  mapped_ = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  const std::size_t reserve = mapped_ + kHugePage;
  void* p = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* raw = static_cast<unsigned char*>(p);
  const auto addr = reinterpret_cast<std::uintptr_t>(raw);
  const std::size_t head = (kHugePage - addr % kHugePage) % kHugePage;
  if (head > 0) ::munmap(raw, head);
  if (kHugePage - head > 0) ::munmap(raw + head + mapped_, kHugePage - head);
  data_ = raw + head;
}

void PageMemory::advise_huge_pages(std::size_t first, std::size_t last) {
  TANDEM_CHECK(first <= last && last <= bytes_);
  if (bytes_ < kHugePage) return;
  const std::size_t lo = (first + kHugePage - 1) / kHugePage * kHugePage;
  const std::size_t hi = (last == bytes_ ? mapped_ : last) / kHugePage * kHugePage;
  // Where the kernel has transparent huge pages off, the advice is ignored.
  if (lo < hi) (void)::madvise(static_cast<unsigned char*>(data_) + lo, hi - lo, MADV_HUGEPAGE);
}

PageMemory::~PageMemory() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
}

void PageMemory::discard(std::size_t first, std::size_t last) {
  TANDEM_CHECK(first <= last && last <= bytes_);
  if (first == last) return;
  auto* base = static_cast<unsigned char*>(data_);
  const std::size_t page = page_size();
  const std::size_t lo = (first + page - 1) / page * page;  // whole pages: [lo, hi)
  std::size_t hi = last / page * page;
  if (last == bytes_) hi = mapped_;  // the array's last page is all ours
  // Giving pages back is a system call that, in a process of several threads, makes every
  // core flush its TLB: below kMinGiveBack bytes rewriting them costs less.
  if (lo >= hi || hi - lo < kMinGiveBack) {
    std::memset(base + first, 0, last - first);
    return;
  }
  std::memset(base + first, 0, lo - first);
  if (last > hi) std::memset(base + hi, 0, last - hi);
  // An anonymous private mapping reads as zero after MADV_DONTNEED.
  TANDEM_CHECK_EQ(::madvise(base + lo, hi - lo, MADV_DONTNEED), 0);
}

}  // namespace tandem
