// Segmented ring collectives; see mpi_ring.h for the schedules.
#include "comm/mpi/mpi_ring.h"

#include <algorithm>
#include <string>

#include "core/error.h"

namespace tandem {
namespace {

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw RuntimeError(std::string(what) + ": " +
                     std::string(text, static_cast<std::size_t>(length)));
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// Tags below 32768 are valid on every MPI (the standard's minimum MPI_TAG_UB).
constexpr std::size_t kMaxSegments = 32767;

}  // namespace

RingCollective::RingCollective(MPI_Comm comm, RingKind kind, DataType type, const void* input,
                               void* output, std::size_t total, std::size_t segment_elems,
                               std::vector<float>& scratch)
    : comm_(comm),
      kind_(kind),
      type_(type),
      element_bytes_(size_of(type)),
      mpi_type_(type == DataType::kFloat32 ? MPI_FLOAT : MPI_UINT16_T),
      input_(static_cast<const char*>(input)),
      output_(static_cast<char*>(output)),
      total_(total) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  const auto n = static_cast<std::size_t>(size_);
  const std::size_t block = total / n;  // reduce-scatter and allgather: total = n blocks
  // allgather: this rank's block starts the ring from the output (one copy, unless it is
  // there already); a world of one has nothing else to do.
  char* own_block = out_at(static_cast<std::size_t>(rank_) * block);
  if (kind == RingKind::kAllgather && input_ != own_block) {
    std::copy(input_, in_at(block), own_block);
  }
  if (kind == RingKind::kReduceScatter && size_ == 1) std::copy(input_, in_at(total), output_);
  chunk_elems_ = (total + n - 1) / n;
  segment_elems_ = std::max<std::size_t>(
      {std::size_t{1}, segment_elems, (chunk_elems_ + kMaxSegments - 1) / kMaxSegments});
  steps_ = kind == RingKind::kAllreduce ? 2 * (size_ - 1) : size_ - 1;
  slots_ = kind == RingKind::kAllreduce ? 1 : kind == RingKind::kReduceScatter ? 2 : 0;
  const std::size_t count =
      size_ > 1 && chunk_elems_ > 0 ? (chunk_elems_ + segment_elems_ - 1) / segment_elems_ : 0;
  segments_.resize(count);
  unfinished_ = static_cast<int>(count);
  const std::size_t scratch_floats =
      (count * slots_ * segment_elems_ * element_bytes_ + sizeof(float) - 1) / sizeof(float);
  if (scratch.size() < scratch_floats) scratch.resize(scratch_floats);
  scratch_ = reinterpret_cast<char*>(scratch.data());
}

std::pair<std::size_t, std::size_t> RingCollective::range(int chunk, int k) const {
  const auto n = static_cast<std::size_t>(size_);
  // Balanced chunks: chunk c is [c*N/n, (c+1)*N/n).
  const std::size_t chunk_begin = static_cast<std::size_t>(chunk) * total_ / n;
  const std::size_t chunk_end = static_cast<std::size_t>(chunk + 1) * total_ / n;
  const std::size_t begin =
      std::min(chunk_end, chunk_begin + static_cast<std::size_t>(k) * segment_elems_);
  return {begin, std::min(chunk_end, begin + segment_elems_)};
}

void RingCollective::post(int k) {
  Segment& seg = segments_[static_cast<std::size_t>(k)];
  const int n = size_;
  const int right = mod(rank_ + 1, n);
  const int left = mod(rank_ - 1, n);
  const char* send_from;
  char* recv_into;
  int send_chunk, recv_chunk;
  if (kind_ == RingKind::kReduceScatter) {
    send_chunk = mod(rank_ - seg.step - 1, n);
    recv_chunk = mod(rank_ - seg.step - 2, n);
    send_from = seg.step == 0 ? in_at(range(send_chunk, k).first) : slot(k, 1);
    recv_into = slot(k, 0);
  } else if (kind_ == RingKind::kAllgather || seg.step >= n - 1) {  // gathering
    const int t = kind_ == RingKind::kAllgather ? seg.step : seg.step - (n - 1);
    const int shift = kind_ == RingKind::kAllgather ? 0 : 1;  // allreduce: r holds r+1
    send_chunk = mod(rank_ + shift - t, n);
    recv_chunk = mod(rank_ + shift - t - 1, n);
    send_from = out_at(range(send_chunk, k).first);
    recv_into = out_at(range(recv_chunk, k).first);
  } else {  // allreduce, reduce-scatter phase
    send_chunk = mod(rank_ - seg.step, n);
    recv_chunk = mod(rank_ - seg.step - 1, n);
    send_from = out_at(range(send_chunk, k).first);
    recv_into = slot(k, 0);
  }
  const auto [send_begin, send_end] = range(send_chunk, k);
  const auto [recv_begin, recv_end] = range(recv_chunk, k);
  check(MPI_Irecv(recv_into, static_cast<int>(recv_end - recv_begin), mpi_type_, left, k, comm_,
                  &seg.requests[1]),
        "ring MPI_Irecv");
  check(MPI_Isend(send_from, static_cast<int>(send_end - send_begin), mpi_type_, right, k, comm_,
                  &seg.requests[0]),
        "ring MPI_Isend");
  seg.posted = true;
}

void RingCollective::add(char* sum, const char* a, const char* b, std::size_t len) const {
  if (type_ == DataType::kFloat32) {
    auto* out = reinterpret_cast<float*>(sum);
    const auto* x = reinterpret_cast<const float*>(a);
    const auto* y = reinterpret_cast<const float*>(b);
    for (std::size_t i = 0; i < len; ++i) out[i] = x[i] + y[i];
    return;
  }
  if (sum != a) std::copy(a, a + len * element_bytes_, sum);
  add_narrow(type_, reinterpret_cast<std::uint16_t*>(sum),
             reinterpret_cast<const std::uint16_t*>(b), len);
}

void RingCollective::finish_step(int k) {
  Segment& seg = segments_[static_cast<std::size_t>(k)];
  const int n = size_;
  const char* in = slot(k, 0);
  if (kind_ == RingKind::kReduceScatter) {
    // The received partial sum plus this rank's share: sent on at the next step, or, at
    // the last, this rank's block of the result.
    const int chunk = mod(rank_ - seg.step - 2, n);
    const auto [begin, end] = range(chunk, k);
    const std::size_t block_begin =
        static_cast<std::size_t>(rank_) * (total_ / static_cast<std::size_t>(n));
    char* sum = seg.step == n - 2 ? out_at(begin - block_begin) : slot(k, 1);
    add(sum, in, in_at(begin), end - begin);
  } else if (kind_ == RingKind::kAllreduce && seg.step < n - 1) {
    const auto [begin, end] = range(mod(rank_ - seg.step - 1, n), k);
    add(out_at(begin), out_at(begin), in, end - begin);
  }
  seg.posted = false;
  if (++seg.step == steps_) --unfinished_;
}

bool RingCollective::progress() {
  for (int k = 0; k < static_cast<int>(segments_.size()); ++k) {
    Segment& seg = segments_[static_cast<std::size_t>(k)];
    // A segment may finish a step and post the next in one pass.
    while (seg.step < steps_) {
      if (!seg.posted) post(k);
      int done = 0;
      check(MPI_Testall(2, seg.requests, &done, MPI_STATUSES_IGNORE), "ring MPI_Testall");
      if (!done) break;
      finish_step(k);
    }
  }
  return unfinished_ == 0;
}

}  // namespace tandem
