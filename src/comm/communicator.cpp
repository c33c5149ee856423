// ReduceOp names; ending what a failed rank has in flight.
#include "comm/communicator.h"

namespace tandem {

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAverage:
      return "average";
  }
  return "unknown";
}

void end_in_flight(Communicator& comm, const std::string& why) {
  comm.abort(why);
  comm.drain();
}

}  // namespace tandem
