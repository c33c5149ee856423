// Internal to the `mpi` backend: a segmented ring allreduce (sum) over MPI
// point-to-point messages, progressed without blocking by the communication thread.
//
// The buffer is cut into size() chunks and every chunk into segments. Each segment index
// k runs its own textbook ring, independently of the others, so transfers of one
// segment overlap the reduction of another (a pipeline):
//   reduce-scatter, steps s = 0..n-2: send chunk (r-s) to the right neighbour, receive
//     chunk (r-s-1) from the left one into scratch and add it in;
//   allgather, steps t = 0..n-2: send chunk (r+1-t), receive chunk (r-t) in place.
// A segment moves to its next step only when both its send and its receive are done, so
// no buffer is overwritten while a send still reads it. Each chunk is finished on one
// rank and copied to the others, so every rank ends with the same bits. Bytes sent per
// rank: 2(n-1)/n of the buffer, as any ring.
//
// Message matching: segment k uses tag k on a communicator of its own; one ring runs at
// a time per communicator, and MPI's non-overtaking rule orders the steps.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <span>
#include <vector>

namespace tandem {

class RingAllreduce {
 public:
  // `scratch` is grown as needed and must outlive this object; `data` must stay alive
  // and untouched until done() is true.
  RingAllreduce(MPI_Comm comm, std::span<float> data, std::size_t segment_elems,
                std::vector<float>& scratch);

  // Posts what is ready, reduces what has arrived; returns true once the whole buffer
  // holds the sum on this rank. Throws RuntimeError on an MPI error.
  bool progress();

 private:
  struct Segment {
    int step = 0;  // 0..2(n-1); 2(n-1) = finished
    bool posted = false;
    MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // send, recv
  };

  // [begin, end) of segment k of chunk c; empty when the chunk is shorter.
  std::pair<std::size_t, std::size_t> range(int chunk, int k) const;
  void post(int k);
  void finish_step(int k);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  std::span<float> data_;
  std::size_t segment_elems_ = 1;
  std::size_t chunk_elems_ = 0;  // the largest chunk
  std::vector<Segment> segments_;
  float* scratch_ = nullptr;  // segment k's receive slot: scratch_ + k * segment_elems_
  int unfinished_ = 0;
};

}  // namespace tandem
