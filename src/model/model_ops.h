// The names of the sub-operations inside a transformer's units, for its compute spans.
//
// A span carries a NameId, but the model records into a RankRecorder, which has no
// NameTable. So the model writes fixed ids (ModelOp below, the same on every rank and in
// every process) and the engine's launcher interns model_op_names() first into the run's
// table, where they get exactly these ids (engine/launch.h, Note [fixed span names]).
// Spans keep tag = the unit, so per-unit analysis is unchanged; the name says which part
// of the unit ran.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "timeline/span.h"

namespace tandem {

enum class ModelOp : NameId {
  kEmbedding = 1,  // token (+ position) embedding
  kNorm,           // LayerNorm / RMSNorm (block and final)
  kAttention,      // qkv projection, (rotary,) causal attention, output projection
  kMlp,            // the MLP: up projection(s), GELU / SwiGLU, down projection
  kHead,           // the output head (logits)
  kLoss,           // cross-entropy over the vocabulary
  kRecompute,      // --recompute: a block's forward (or its attention) again, in backward
  kCompress,       // --compress: the gradient's casts and PowerSGD's products (the reducer's)
  kResidual,       // --tensor: a row-parallel product's residual add, after its all-reduce
  kTensor,         // --tensor: a tensor-parallel collective (comm spans), and its wait
  kGiveBack,       // zero2/fsdp: memory given back to the system (the engine's, a unit's)
};
inline constexpr int kModelOpCount = 11;

constexpr NameId op_name(ModelOp op) { return static_cast<NameId>(op); }
std::string_view to_string(ModelOp op);
// to_string of every ModelOp in id order: element i names id i + 1.
std::vector<std::string> model_op_names();

}  // namespace tandem
