// Device memory whose pieces can be given back to the driver while the rest stays: the
// CUDA twin of core/page_array.h, for the flat parameter and gradient arrays of which a
// sharded strategy (ddp/sharded.h) keeps only the units it has gathered.
//
// One reserved range of device addresses, backed piece by piece with physical memory
// through CUDA's virtual memory management (cuMemCreate, cuMemMap). Device memory is not
// committed on first touch as the CPU's pages are: a range given back (discard) must be
// restored before a kernel touches it again, and reads as zero then; host copies
// (download) read zeros where nothing backs the range. Where the device or its driver
// cannot manage virtual memory, one plain allocation stands in and discard zeroes in
// place (gives_back() is false). Note [device pages] in device_pages.cpp says when the
// memory actually goes back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace tandem::cuda {

class DevicePages {
 public:
  DevicePages() = default;
  // `bytes` on the current device, zero once `stream` reaches this point. `cuts` are
  // byte offsets where the backing is split (a model's unit boundaries): what lies
  // between two cuts is backed, and given back, as one piece.
  DevicePages(std::size_t bytes, std::span<const std::size_t> cuts, cudaStream_t stream);
  ~DevicePages();
  DevicePages(DevicePages&& other) noexcept { swap(other); }
  DevicePages& operator=(DevicePages&& other) noexcept {
    DevicePages(std::move(other)).swap(*this);
    return *this;
  }
  DevicePages(const DevicePages&) = delete;
  DevicePages& operator=(const DevicePages&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  bool gives_back() const { return reserved_ > 0; }
  // Bytes backed now: every piece not yet given back (a piece whose release waits for the
  // stream counts until it is released).
  std::size_t backed_bytes() const;

  // Bytes [first, last) are not needed now. The pieces wholly inside go back to the
  // driver once the stream has passed this point; the rest of the range is zeroed in
  // place on the stream.
  void discard(std::size_t first, std::size_t last);
  // Bytes [first, last) may be touched by work enqueued on the stream after this call,
  // and read as zero where they were discarded.
  void restore(std::size_t first, std::size_t last);
  // Zeroes the backed parts of bytes [first, last) on the stream.
  void zero(std::size_t first, std::size_t last);
  // Bytes [first, last) into `host`, zeros where nothing backs them; synchronizes the
  // stream.
  void download(void* host, std::size_t first, std::size_t last) const;
  // Gives back now what discards the stream has passed (without waiting for the rest).
  void settle() { reclaim(/*bound=*/false); }

 private:
  struct Piece {
    std::size_t end = 0;
    unsigned long long handle = 0;  // CUmemGenericAllocationHandle
    std::uint64_t releasing = 0;    // the release batch that gives it back; 0: none
  };
  struct Release {
    std::uint64_t batch = 0;
    cudaEvent_t done = nullptr;  // recorded on the stream after the discard
  };
  // The piece holding byte `offset`, else the first after it.
  std::map<std::size_t, Piece>::iterator first_piece_at(std::size_t offset);
  void back(std::size_t first, std::size_t last);  // maps a piece over a gap
  void unback(std::map<std::size_t, Piece>::iterator piece);
  // Gives back the pieces of every release the stream has passed; with `bound`, first
  // waits for all but the newest (Note [device pages]).
  void reclaim(bool bound);
  void swap(DevicePages& other) noexcept;

  char* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t reserved_ = 0;  // the reserved address range (0: a plain allocation)
  std::size_t granularity_ = 0;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::map<std::size_t, Piece> pieces_;  // by first byte; what no piece covers is unbacked
  std::deque<Release> releases_;         // oldest first
  std::vector<cudaEvent_t> spare_events_;
  std::uint64_t next_batch_ = 1;
};

// A DevicePages array of T, as core/page_array.h's PageArray is over PageMemory; sized
// and indexed in elements.
template <typename T>
class DevicePageArray {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  DevicePageArray() = default;
  DevicePageArray(std::size_t n, std::span<const std::size_t> cuts, cudaStream_t stream)
      : pages_(n * sizeof(T), byte_cuts(cuts), stream), size_(n) {}
  DevicePageArray(DevicePageArray&& other) noexcept
      : pages_(std::move(other.pages_)), size_(std::exchange(other.size_, 0)) {}
  DevicePageArray& operator=(DevicePageArray&& other) noexcept {
    pages_ = std::move(other.pages_);
    size_ = std::exchange(other.size_, 0);
    return *this;
  }

  T* data() { return static_cast<T*>(pages_.data()); }
  const T* data() const { return static_cast<const T*>(pages_.data()); }
  std::size_t size() const { return size_; }
  bool gives_back() const { return pages_.gives_back(); }
  std::size_t backed_bytes() const { return pages_.backed_bytes(); }

  void discard(std::size_t first, std::size_t last) {
    pages_.discard(first * sizeof(T), last * sizeof(T));
  }
  void restore(std::size_t first, std::size_t last) {
    pages_.restore(first * sizeof(T), last * sizeof(T));
  }
  void zero() { pages_.zero(0, size_ * sizeof(T)); }
  void settle() { pages_.settle(); }
  std::vector<T> download() const {
    std::vector<T> out(size_);
    pages_.download(out.data(), 0, size_ * sizeof(T));
    return out;
  }

 private:
  static std::vector<std::size_t> byte_cuts(std::span<const std::size_t> cuts) {
    std::vector<std::size_t> out;
    for (std::size_t c : cuts) out.push_back(c * sizeof(T));
    return out;
  }
  DevicePages pages_;
  std::size_t size_ = 0;
};

// The device's memory in use (total less free, as the driver reports it, every process's
// together), and the most seen on it since reset_device_peak (which starts from nothing):
// tandem reads the driver whenever it backs memory, and at the end of every step once
// what the step gave back went back.
std::int64_t device_memory_in_use(int device);
void note_device_memory(int device);
void reset_device_peak(int device);
std::int64_t device_peak(int device);

}  // namespace tandem::cuda
