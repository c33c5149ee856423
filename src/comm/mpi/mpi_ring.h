// Internal to the `mpi` backend: segmented ring collectives (allreduce sum,
// reduce-scatter sum, allgather) over MPI point-to-point messages, progressed without
// blocking by the communication thread. Elements are fp32, or fp16/bf16 for compressed
// gradients (MPI has no 16-bit float type: they travel as MPI_UINT16_T and every partial
// sum is rounded to 16 bits, as NCCL's ring does).
//
// The whole array (allreduce: the buffer; reduce-scatter: the input; allgather: the
// output) is cut into size() chunks and every chunk into segments. Each segment index k
// runs its own textbook ring, independently of the others, so transfers of one segment
// overlap the reduction of another (a pipeline). On rank r, n ranks:
//   allreduce, reduce-scatter steps s = 0..n-2: send chunk (r-s) to the right neighbour,
//     receive chunk (r-s-1) from the left one into scratch and add it in; then allgather
//     steps t = 0..n-2: send chunk (r+1-t), receive chunk (r-t) in place.
//   reduce-scatter alone, s = 0..n-2: send chunk (r-s-1) (the input's at s = 0, else the
//     partial sum of the step before), receive chunk (r-s-2) and add the input's chunk to
//     it; the last sum is chunk r, written to the output. The input is only read, and the
//     scratch is two segments per segment index: a fraction 2/n of the input, where
//     Open MPI's non-blocking reduce-scatter allocates a temporary the input's size.
//   allgather alone, t = 0..n-2: send chunk (r-t), receive chunk (r-t-1) in place.
// A segment moves to its next step only when both its send and its receive are done, so
// no buffer is overwritten while a send still reads it. Each chunk is finished on one
// rank and copied to the others, so every rank ends with the same bits. Bytes sent per
// rank: (n-1)/n of the whole array per phase, as any ring.
//
// Message matching: segment k uses tag k on a communicator of its own; one ring runs at
// a time per communicator, and MPI's non-overtaking rule orders the steps.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <vector>

#include "core/half.h"

namespace tandem {

enum class RingKind { kAllreduce, kReduceScatter, kAllgather };

class RingCollective {
 public:
  // allreduce: `input` == `output`, `total` elements. reduce-scatter: `input` has `total`
  // elements, `output` receives block rank of them (total / n). allgather: `input` is this
  // rank's block (total / n elements; it may be the output's block rank), `output` has
  // `total`. `scratch` is grown as needed and must outlive this object; the buffers must
  // stay alive and untouched until progress() returns true.
  // Elements are of `type`; `segment_elems` counts them.
  RingCollective(MPI_Comm comm, RingKind kind, DataType type, const void* input, void* output,
                 std::size_t total, std::size_t segment_elems, std::vector<float>& scratch);

  // Posts what is ready, reduces what has arrived; returns true once this rank's output
  // is complete. Throws RuntimeError on an MPI error.
  bool progress();

 private:
  struct Segment {
    int step = 0;  // 0..steps_; steps_ = finished
    bool posted = false;
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // send, recv
  };

  // [begin, end) of segment k of chunk c in the whole array; empty when the chunk is
  // shorter.
  std::pair<std::size_t, std::size_t> range(int chunk, int k) const;
  char* slot(int k, int which) const {  // scratch: `which` 0 receives, 1 holds a sum
    return scratch_ + (static_cast<std::size_t>(k) * slots_ + static_cast<std::size_t>(which)) *
                          segment_elems_ * element_bytes_;
  }
  const char* in_at(std::size_t element) const { return input_ + element * element_bytes_; }
  char* out_at(std::size_t element) const { return output_ + element * element_bytes_; }
  // sum[i] := a[i] + b[i] (sum may be a) in the ring's type, len elements.
  void add(char* sum, const char* a, const char* b, std::size_t len) const;
  void post(int k);
  void finish_step(int k);

  MPI_Comm comm_;
  RingKind kind_;
  DataType type_;
  std::size_t element_bytes_;
  MPI_Datatype mpi_type_;
  int rank_ = 0;
  int size_ = 1;
  const char* input_;
  char* output_;
  std::size_t total_ = 0;
  std::size_t segment_elems_ = 1;
  std::size_t chunk_elems_ = 0;  // the largest chunk
  std::size_t slots_ = 0;        // scratch segments per segment index
  int steps_ = 0;
  std::vector<Segment> segments_;
  char* scratch_ = nullptr;
  int unfinished_ = 0;
};

}  // namespace tandem
