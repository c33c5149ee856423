// Segmented ring allreduce; see mpi_ring.h for the schedule.
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
  throw RuntimeError(std::string(what) + ": " + std::string(text, static_cast<std::size_t>(length)));
}

int mod(int a, int n) { return ((a % n) + n) % n; }

// Tags below 32768 are valid on every MPI (the standard's minimum MPI_TAG_UB).
constexpr std::size_t kMaxSegments = 32767;

}  // namespace

RingAllreduce::RingAllreduce(MPI_Comm comm, std::span<float> data, std::size_t segment_elems,
                             std::vector<float>& scratch)
    : comm_(comm), data_(data) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  const auto n = static_cast<std::size_t>(size_);
  chunk_elems_ = (data.size() + n - 1) / n;
  segment_elems_ = std::max<std::size_t>(
      {std::size_t{1}, segment_elems, (chunk_elems_ + kMaxSegments - 1) / kMaxSegments});
  const std::size_t count =
      size_ > 1 && chunk_elems_ > 0 ? (chunk_elems_ + segment_elems_ - 1) / segment_elems_ : 0;
  segments_.resize(count);
  unfinished_ = static_cast<int>(count);
  if (scratch.size() < count * segment_elems_) scratch.resize(count * segment_elems_);
  scratch_ = scratch.data();
}

std::pair<std::size_t, std::size_t> RingAllreduce::range(int chunk, int k) const {
  const auto n = static_cast<std::size_t>(size_);
  // Balanced chunks: chunk c is [c*N/n, (c+1)*N/n).
  const std::size_t chunk_begin = static_cast<std::size_t>(chunk) * data_.size() / n;
  const std::size_t chunk_end = static_cast<std::size_t>(chunk + 1) * data_.size() / n;
  const std::size_t begin = std::min(chunk_end, chunk_begin + static_cast<std::size_t>(k) * segment_elems_);
  return {begin, std::min(chunk_end, begin + segment_elems_)};
}

void RingAllreduce::post(int k) {
  Segment& seg = segments_[static_cast<std::size_t>(k)];
  const int n = size_;
  const int right = mod(rank_ + 1, n);
  const int left = mod(rank_ - 1, n);
  int send_chunk, recv_chunk;
  float* recv_into;
  if (seg.step < n - 1) {  // reduce-scatter
    send_chunk = mod(rank_ - seg.step, n);
    recv_chunk = mod(rank_ - seg.step - 1, n);
    recv_into = scratch_ + static_cast<std::size_t>(k) * segment_elems_;
  } else {  // allgather
    const int t = seg.step - (n - 1);
    send_chunk = mod(rank_ + 1 - t, n);
    recv_chunk = mod(rank_ - t, n);
    recv_into = data_.data() + range(recv_chunk, k).first;
  }
  const auto [send_begin, send_end] = range(send_chunk, k);
  const auto [recv_begin, recv_end] = range(recv_chunk, k);
  check(MPI_Irecv(recv_into, static_cast<int>(recv_end - recv_begin), MPI_FLOAT, left, k, comm_,
                  &seg.requests[1]),
        "ring allreduce MPI_Irecv");
  check(MPI_Isend(data_.data() + send_begin, static_cast<int>(send_end - send_begin), MPI_FLOAT,
                  right, k, comm_, &seg.requests[0]),
        "ring allreduce MPI_Isend");
  seg.posted = true;
}

void RingAllreduce::finish_step(int k) {
  Segment& seg = segments_[static_cast<std::size_t>(k)];
  const int n = size_;
  if (seg.step < n - 1) {
    const auto [begin, end] = range(mod(rank_ - seg.step - 1, n), k);
    float* __restrict acc = data_.data() + begin;
    const float* __restrict in = scratch_ + static_cast<std::size_t>(k) * segment_elems_;
    for (std::size_t i = 0, len = end - begin; i < len; ++i) acc[i] += in[i];
  }
  seg.posted = false;
  if (++seg.step == 2 * (n - 1)) --unfinished_;
}

bool RingAllreduce::progress() {
  for (int k = 0; k < static_cast<int>(segments_.size()); ++k) {
    Segment& seg = segments_[static_cast<std::size_t>(k)];
    // A segment may finish a step and post the next in one pass.
    while (seg.step < 2 * (size_ - 1)) {
      if (!seg.posted) post(k);
      int done = 0;
      check(MPI_Testall(2, seg.requests, &done, MPI_STATUSES_IGNORE), "ring allreduce MPI_Testall");
      if (!done) break;
      finish_step(k);
    }
  }
  return unfinished_ == 0;
}

}  // namespace tandem
