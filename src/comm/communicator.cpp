// ReduceOp names.
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

}  // namespace tandem
