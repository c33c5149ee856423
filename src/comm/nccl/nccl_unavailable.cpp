// Built instead of nccl_comm.cpp when CMake found no NCCL: asking for it is a usage error.
#include "comm/nccl/nccl_comm.h"
#include "core/error.h"

namespace tandem {

namespace {
[[noreturn]] void no_nccl() {
  throw UsageError(
      "--backend nccl: this build of tandem has no NCCL (CMake found no nccl.h/libnccl; set "
      "NCCL_HOME and rebuild), use --backend emulated on one GPU");
}
}  // namespace

std::vector<std::unique_ptr<DeviceCommunicator>> make_nccl_local(const DeviceCommOptions&, int) {
  no_nccl();
}

std::unique_ptr<DeviceCommunicator> make_nccl_process(const DeviceCommOptions&, Communicator&,
                                                      int) {
  no_nccl();
}

}  // namespace tandem
