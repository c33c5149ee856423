#include "cuda/device_pages.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "cuda/check.h"

namespace tandem::cuda {

// Note [device pages]: when device memory goes back.
// A discard cannot unmap at once: kernels enqueued before it may still read or write the
// range. So discard records an event on the stream, and the pieces go back (cuMemUnmap,
// cuMemRelease) once the host sees that event complete: at the next discard or restore.
// A host that runs ahead of the device would then map the next units before the device
// let go of the last ones, and hold the whole model after all; so before restore maps
// anything it waits for every release but the newest (PyTorch's FSDP limits its
// all-gathers in flight the same way). In a sharded forward that is the discard of the
// unit two back, which the device has passed while it computes the one before: the host
// stays ahead and the device never waits on it.
// A piece restored before its release went through is kept, and zeroed on the stream.
// Newly backed memory is zeroed on the stream too: a unit's gradient is accumulated into.
//
// The driver API is reached through the runtime's entry points, so that tandem links no
// libcuda and still loads where there is no driver.

namespace {

struct Driver {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuGetErrorName_v6000 error_name = nullptr;
};

template <typename F>
bool entry(const char* name, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

// Null where the runtime cannot reach one of the calls.
const Driver* driver() {
  static const Driver* const loaded = []() -> const Driver* {
    static Driver d;
    const bool ok =
        entry("cuDeviceGet", d.device_get) && entry("cuDeviceGetAttribute", d.attribute) &&
        entry("cuMemGetAllocationGranularity", d.granularity) &&
        entry("cuMemAddressReserve", d.reserve) && entry("cuMemAddressFree", d.address_free) &&
        entry("cuMemCreate", d.create) && entry("cuMemRelease", d.release) &&
        entry("cuMemMap", d.map) && entry("cuMemUnmap", d.unmap) &&
        entry("cuMemSetAccess", d.set_access) && entry("cuGetErrorName", d.error_name);
    return ok ? &d : nullptr;
  }();
  return loaded;
}

void check(CUresult status, const char* call) {
  if (status == CUDA_SUCCESS) return;
  const char* name = "unknown error";
  if (const Driver* d = driver()) d->error_name(status, &name);
  throw RuntimeError(std::string(call) + " failed: " + name);
}

CUmemAllocationProp properties(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// The allocation granularity where `device` manages virtual memory, else 0.
std::size_t vmm_granularity(int device) {
  const Driver* d = driver();
  if (d == nullptr) return 0;
  CUdevice dev = 0;
  int supported = 0;
  if (d->device_get(&dev, device) != CUDA_SUCCESS ||
      d->attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
          CUDA_SUCCESS ||
      supported == 0) {
    return 0;
  }
  const CUmemAllocationProp prop = properties(device);
  std::size_t granularity = 0;
  if (d->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS)
    return 0;
  return granularity;
}

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
std::size_t round_down(std::size_t n, std::size_t to) { return n / to * to; }

constexpr int kMaxDevices = 64;
std::array<std::atomic<std::int64_t>, kMaxDevices> peaks{};

}  // namespace

DevicePages::DevicePages(std::size_t bytes, std::span<const std::size_t> cuts, cudaStream_t stream)
    : bytes_(bytes), stream_(stream) {
  TANDEM_CUDA_CHECK(cudaGetDevice(&device_));
  if (bytes == 0) return;
  granularity_ = vmm_granularity(device_);
  if (granularity_ == 0) {
    TANDEM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes));
    pieces_[0] = Piece{.end = bytes};
    if (const cudaError_t status = cudaMemsetAsync(data_, 0, bytes, stream_);
        status != cudaSuccess) {
      cudaFree(std::exchange(data_, nullptr));
      check_cuda_status(status, "cudaMemsetAsync (device pages)");
    }
    return;
  }
  const std::size_t reserved = round_up(bytes, granularity_);
  CUdeviceptr base = 0;
  check(driver()->reserve(&base, reserved, 0, 0, 0), "cuMemAddressReserve");
  data_ = reinterpret_cast<char*>(base);
  reserved_ = reserved;
  std::vector<std::size_t> bounds = {0, reserved};
  for (std::size_t c : cuts) {
    if (c > 0 && c < bytes) bounds.push_back(round_up(c, granularity_));
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  try {
    for (std::size_t i = 0; i + 1 < bounds.size(); ++i) back(bounds[i], bounds[i + 1]);
  } catch (...) {
    DevicePages cleanup;
    swap(cleanup);  // its destructor gives back what was backed
    throw;
  }
}

DevicePages::~DevicePages() {
  if (data_ == nullptr) return;
  // The owner finished the stream's work first (DeviceRankModel's destructor); errors
  // here are ignored, as every CUDA resource's destructor does (cuda/resources.h).
  cudaStreamSynchronize(stream_);
  for (const Release& r : releases_) cudaEventDestroy(r.done);
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  if (!gives_back()) {
    cudaFree(data_);
    return;
  }
  const Driver* d = driver();
  for (auto& [first, piece] : pieces_) {
    d->unmap(reinterpret_cast<CUdeviceptr>(data_ + first), piece.end - first);
    d->release(piece.handle);
  }
  d->address_free(reinterpret_cast<CUdeviceptr>(data_), reserved_);
}

void DevicePages::swap(DevicePages& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  std::swap(reserved_, other.reserved_);
  std::swap(granularity_, other.granularity_);
  std::swap(device_, other.device_);
  std::swap(stream_, other.stream_);
  std::swap(pieces_, other.pieces_);
  std::swap(releases_, other.releases_);
  std::swap(spare_events_, other.spare_events_);
  std::swap(next_batch_, other.next_batch_);
}

std::size_t DevicePages::backed_bytes() const {
  std::size_t n = 0;
  for (const auto& [first, piece] : pieces_) n += piece.end - first;
  return gives_back() ? n : bytes_;
}

std::map<std::size_t, DevicePages::Piece>::iterator DevicePages::first_piece_at(
    std::size_t offset) {
  auto it = pieces_.upper_bound(offset);
  if (it != pieces_.begin() && std::prev(it)->second.end > offset) --it;
  return it;
}

void DevicePages::back(std::size_t first, std::size_t last) {
  const Driver* d = driver();
  const CUmemAllocationProp prop = properties(device_);
  CUmemGenericAllocationHandle handle = 0;
  check(d->create(&handle, last - first, &prop, 0), "cuMemCreate");
  const auto at = reinterpret_cast<CUdeviceptr>(data_ + first);
  if (const CUresult status = d->map(at, last - first, 0, handle, 0); status != CUDA_SUCCESS) {
    d->release(handle);
    check(status, "cuMemMap");
  }
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (const CUresult status = d->set_access(at, last - first, &access, 1); status != CUDA_SUCCESS) {
    d->unmap(at, last - first);
    d->release(handle);
    check(status, "cuMemSetAccess");
  }
  pieces_[first] = Piece{.end = last, .handle = handle};
  TANDEM_CUDA_CHECK(cudaMemsetAsync(data_ + first, 0, last - first, stream_));
  note_device_memory(device_);
}

void DevicePages::unback(std::map<std::size_t, Piece>::iterator piece) {
  const Driver* d = driver();
  check(d->unmap(reinterpret_cast<CUdeviceptr>(data_ + piece->first),
                 piece->second.end - piece->first),
        "cuMemUnmap");
  check(d->release(piece->second.handle), "cuMemRelease");
  pieces_.erase(piece);
}

void DevicePages::reclaim(bool bound) {
  while (!releases_.empty()) {
    Release& r = releases_.front();
    if (bound && releases_.size() > 1) {
      TANDEM_CUDA_CHECK(cudaEventSynchronize(r.done));
    } else {
      const cudaError_t status = cudaEventQuery(r.done);
      if (status == cudaErrorNotReady) {
        (void)cudaGetLastError();  // "not ready" is no sticky error
        return;
      }
      check_cuda_status(status, "cudaEventQuery (pages given back)");
    }
    for (auto it = pieces_.begin(); it != pieces_.end();) {
      auto next = std::next(it);
      if (it->second.releasing == r.batch) unback(it);
      it = next;
    }
    spare_events_.push_back(r.done);
    releases_.pop_front();
  }
}

void DevicePages::discard(std::size_t first, std::size_t last) {
  TANDEM_CHECK(first <= last && last <= bytes_);
  if (first == last) return;
  if (!gives_back()) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(data_ + first, 0, last - first, stream_));
    return;
  }
  reclaim(/*bound=*/false);
  // The array's last piece runs to the reserved end, past bytes_.
  const std::size_t whole_end = last == bytes_ ? reserved_ : last;
  std::vector<Piece*> going;
  for (auto it = first_piece_at(first); it != pieces_.end() && it->first < last; ++it) {
    Piece& piece = it->second;
    if (piece.releasing != 0) continue;  // going back already
    if (it->first >= first && piece.end <= whole_end) {
      going.push_back(&piece);
      continue;
    }
    const std::size_t lo = std::max(first, it->first);
    const std::size_t hi = std::min({last, piece.end, bytes_});
    TANDEM_CUDA_CHECK(cudaMemsetAsync(data_ + lo, 0, hi - lo, stream_));
  }
  if (going.empty()) return;
  // The event first: a piece is marked only once the release that frees it is recorded.
  cudaEvent_t done = nullptr;
  if (spare_events_.empty()) {
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else {
    done = spare_events_.back();
    spare_events_.pop_back();
  }
  if (const cudaError_t status = cudaEventRecord(done, stream_); status != cudaSuccess) {
    spare_events_.push_back(done);
    check_cuda_status(status, "cudaEventRecord (pages given back)");
  }
  const std::uint64_t batch = next_batch_++;
  for (Piece* piece : going) piece->releasing = batch;
  releases_.push_back({.batch = batch, .done = done});
}

void DevicePages::restore(std::size_t first, std::size_t last) {
  TANDEM_CHECK(first <= last && last <= bytes_);
  if (first == last || !gives_back()) return;
  const std::size_t lo = round_down(first, granularity_);
  const std::size_t hi = std::min(round_up(last, granularity_), reserved_);
  // Pieces whose release has not gone through are kept (and read as zero).
  std::vector<std::pair<std::size_t, std::size_t>> gaps;
  std::size_t at = lo;
  for (auto it = first_piece_at(lo); it != pieces_.end() && it->first < hi; ++it) {
    if (it->first > at) gaps.emplace_back(at, it->first);
    Piece& piece = it->second;
    if (piece.releasing != 0) {
      piece.releasing = 0;
      TANDEM_CUDA_CHECK(cudaMemsetAsync(data_ + it->first, 0, piece.end - it->first, stream_));
    }
    at = std::max(at, piece.end);
  }
  if (at < hi) gaps.emplace_back(at, hi);
  if (gaps.empty()) return;
  reclaim(/*bound=*/true);
  for (const auto& [a, b] : gaps) back(a, b);
}

void DevicePages::zero(std::size_t first, std::size_t last) {
  TANDEM_CHECK(first <= last && last <= bytes_);
  for (const auto& [begin, piece] : pieces_) {
    if (piece.releasing != 0) continue;  // reads as zero once restored
    const std::size_t lo = std::max(first, begin), hi = std::min({last, piece.end, bytes_});
    if (lo < hi) TANDEM_CUDA_CHECK(cudaMemsetAsync(data_ + lo, 0, hi - lo, stream_));
  }
}

void DevicePages::download(void* host, std::size_t first, std::size_t last) const {
  TANDEM_CHECK(first <= last && last <= bytes_);
  auto* out = static_cast<char*>(host);
  std::memset(out, 0, last - first);
  for (const auto& [begin, piece] : pieces_) {
    if (piece.releasing != 0) continue;  // discarded: zeros
    const std::size_t lo = std::max(first, begin), hi = std::min({last, piece.end, bytes_});
    if (lo >= hi) continue;
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(out + (lo - first), data_ + lo, hi - lo, cudaMemcpyDeviceToHost, stream_));
  }
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

std::int64_t device_memory_in_use(int device) {
  int previous = 0;
  std::size_t free = 0, total = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&previous));
  if (previous != device) TANDEM_CUDA_CHECK(cudaSetDevice(device));
  const cudaError_t status = cudaMemGetInfo(&free, &total);
  if (previous != device) TANDEM_CUDA_CHECK(cudaSetDevice(previous));
  check_cuda_status(status, "cudaMemGetInfo");
  return static_cast<std::int64_t>(total - free);
}

void note_device_memory(int device) {
  TANDEM_CHECK(device >= 0 && device < kMaxDevices);
  const std::int64_t now = device_memory_in_use(device);
  std::atomic<std::int64_t>& peak = peaks[static_cast<std::size_t>(device)];
  std::int64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

void reset_device_peak(int device) {
  TANDEM_CHECK(device >= 0 && device < kMaxDevices);
  peaks[static_cast<std::size_t>(device)].store(0);
}

std::int64_t device_peak(int device) {
  TANDEM_CHECK(device >= 0 && device < kMaxDevices);
  return peaks[static_cast<std::size_t>(device)].load();
}

}  // namespace tandem::cuda
