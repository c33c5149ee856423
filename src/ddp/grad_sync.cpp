#include "ddp/grad_sync.h"

namespace tandem {

void wait_timed(RankModel& model, Communicator& comm, Work& work, int tag) {
  // On the host a finished collective costs no wait; on a device the stream must be told
  // to wait whatever the host knows.
  if (comm.memory() == MemoryKind::kHost && work.test()) {
    work.wait();  // rethrows a stored error
    return;
  }
  in_span(model, Lane::kWait, SpanKind::kWait, tag, kNoName, [&] { work.wait(); });
}

}  // namespace tandem
