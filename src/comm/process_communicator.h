// The communicator of a multi-process job's one rank (mpi): the contract
// (comm/communicator.h) plus what such a job needs on top of it: where the ranks are,
// clock alignment, gathers of bytes, and ending the whole job.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/progress_communicator.h"

namespace tandem {

// Rank r's clock against rank 0's: t_rank0 = t_r - offset_ns, known within
// +-uncertainty_ns (half the round trip of the best ping-pong), measured at rank 0's
// time at_ns.
struct ClockOffset {
  std::int64_t offset_ns = 0;
  std::int64_t uncertainty_ns = 0;
  std::int64_t at_ns = 0;
};

// The extra collectives run on the backend's communication thread
// (ProgressCommunicator::run_task), in issue order with the other operations.
class ProcessCommunicator : public ProgressCommunicator {
 public:
  using ProgressCommunicator::ProgressCommunicator;

  virtual int hosts() const = 0;          // distinct hosts in the job
  virtual int ranks_on_host() const = 0;  // ranks sharing this rank's host
  virtual int local_rank() const = 0;     // this rank's index among them
  virtual std::string host_name() const = 0;

  // Collective: estimates every rank's clock offset to rank 0 by `rounds` ping-pongs
  // per rank. On rank 0 returns size() entries (its own is zero); elsewhere empty.
  virtual std::vector<ClockOffset> estimate_clock_offsets(int rounds) = 0;
  // Collective: every rank's bytes, in rank order, on `root`; empty elsewhere.
  virtual std::vector<std::string> gather_bytes(std::string_view mine, int root) = 0;
  // Collective: root's bytes on every rank.
  virtual std::string broadcast_bytes(std::string_view mine, int root) = 0;
  // Ends every process of the job with `exit_code` (MPI_Abort). Print first: this
  // prints nothing of its own.
  [[noreturn]] virtual void abort_job(int exit_code) = 0;
};

}  // namespace tandem
