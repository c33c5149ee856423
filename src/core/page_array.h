// An array in its own anonymous memory mapping whose whole pages can be given back to the
// operating system while the rest of the array stays: the flat parameter and gradient
// arrays of a model, of which a sharded strategy (ddp/sharded.h) keeps only the units it
// has gathered. Memory is committed page by page as it is first written, and reads as
// zero until then (the mapping is anonymous).
#pragma once

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

namespace tandem {

// The untyped part: one mapping of `bytes`, rounded up to whole pages.
class PageMemory {
 public:
  PageMemory() = default;
  explicit PageMemory(std::size_t bytes);  // throws std::bad_alloc when it cannot map
  ~PageMemory();
  PageMemory(PageMemory&& other) noexcept { swap(other); }
  PageMemory& operator=(PageMemory&& other) noexcept {
    PageMemory(std::move(other)).swap(*this);
    return *this;
  }
  PageMemory(const PageMemory&) = delete;
  PageMemory& operator=(const PageMemory&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  // Bytes [first, last) read as zero afterwards; the whole pages among them go back to the
  // operating system (and count no more in the process's resident set), the partial pages
  // at either end are zeroed in place, and so is a range of less than kMinGiveBack.
  void discard(std::size_t first, std::size_t last);
  // Note [huge pages]: the whole 2 MiB pages among bytes [first, last) are to be backed by
  // transparent huge pages where the kernel allows, so that memory given back and touched
  // again costs one fault per 2 MiB instead of one per 4 KiB. On a virtual machine each
  // fault is an exit to the host: at 4 KiB, the faults of a gradient array given back
  // every step cost more than the backward pass that writes it. Only whole huge pages
  // inside the range are advised, so that a range that ends mid-page commits no memory
  // beyond its end. Arrays of at least kHugePage bytes start on a huge-page boundary.
  void advise_huge_pages(std::size_t first, std::size_t last);
  static std::size_t page_size();
  static constexpr std::size_t kHugePage = 2u << 20;
  // discard() zeroes smaller ranges in place instead of giving them back.
  static constexpr std::size_t kMinGiveBack = 1u << 20;

 private:
  void swap(PageMemory& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    std::swap(mapped_, other.mapped_);
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t mapped_ = 0;
};

template <typename T>
class PageArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>);

 public:
  PageArray() = default;
  // n elements, all zero.
  explicit PageArray(std::size_t n) : memory_(n * sizeof(T)), size_(n) {}

  T* data() { return static_cast<T*>(memory_.data()); }
  const T* data() const { return static_cast<const T*>(memory_.data()); }
  std::size_t size() const { return size_; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  operator std::span<T>() { return {data(), size_}; }
  operator std::span<const T>() const { return {data(), size_}; }

  // Elements [first, last) read as zero afterwards; whole pages among them are returned
  // to the operating system (PageMemory::discard).
  void discard(std::size_t first, std::size_t last) {
    memory_.discard(first * sizeof(T), last * sizeof(T));
  }
  // PageMemory::advise_huge_pages over elements [first, last).
  void advise_huge_pages(std::size_t first, std::size_t last) {
    memory_.advise_huge_pages(first * sizeof(T), last * sizeof(T));
  }

 private:
  PageMemory memory_;
  std::size_t size_ = 0;
};

}  // namespace tandem
