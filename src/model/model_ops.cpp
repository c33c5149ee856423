// ModelOp names (model_ops.h).
#include "model/model_ops.h"


namespace tandem {

std::string_view to_string(ModelOp op) {
  switch (op) {
    case ModelOp::kEmbedding:
      return "embedding";
    case ModelOp::kNorm:
      return "norm";
    case ModelOp::kAttention:
      return "attention";
    case ModelOp::kMlp:
      return "mlp";
    case ModelOp::kHead:
      return "head";
    case ModelOp::kLoss:
      return "loss";
    case ModelOp::kRecompute:
      return "recompute";
    case ModelOp::kCompress:
      return "compress";
    case ModelOp::kResidual:
      return "residual";
    case ModelOp::kTensor:
      return "tp";
    case ModelOp::kGiveBack:
      return "give back";
  }
  return "?";
}

std::vector<std::string> model_op_names() {
  std::vector<std::string> names;
  for (int op = 1; op <= kModelOpCount; ++op) {
    names.emplace_back(to_string(static_cast<ModelOp>(op)));
  }
  return names;
}

}  // namespace tandem
