// --compress: what a data-parallel strategy does to the gradients around its collectives,
// with the semantics of PyTorch DDP's communication hooks (fp16_compress_hook,
// bf16_compress_hook, powerSGD_hook). docs/REDUCER.md ("Gradient compression") has the
// whole story; in short:
// - fp16, bf16: a bucket (a unit, for the sharded strategies) is cast to 16 bits and
//   divided by the world size as it becomes ready, summed in 16 bits by the collective,
//   and widened back into the gradient when it is waited for: half the bytes on the wire,
//   and two casts of compute on the compute lane;
// - powersgd:R: a bucket's matrices travel as rank-R factors P and Q (ddp/powersgd.h), in
//   two all-reduces, with error feedback and warm start; everything else in the bucket
//   travels uncompressed with P. DDP strategies on the CPU only.
// The casts and PowerSGD's products are compute spans named "compress" (ModelOp::kCompress)
// tagged with the bucket or unit: their contention with backward is part of the point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/half.h"
#include "model/model_ops.h"
#include "model/rank_model.h"

namespace tandem {

struct Compression {
  enum class Kind : std::uint8_t { kNone, kFp16, kBf16, kPowerSgd };
  Kind kind = Kind::kNone;
  int rank = 0;  // kPowerSgd: the approximation's rank R

  // "none", "fp16", "bf16" or "powersgd:R" (R 1..1024); throws UsageError (the caller
  // prefixes the flag).
  static Compression parse(std::string_view text);
  std::string to_string() const;
  bool enabled() const { return kind != Kind::kNone; }
  bool casts() const { return kind == Kind::kFp16 || kind == Kind::kBf16; }
  // What a cast compression sends: kFloat16 or kBFloat16; kFloat32 otherwise.
  DataType wire_type() const;
  bool operator==(const Compression&) const = default;
};

// Runs `body` as a compute span named "compress" tagged `tag` on the model's clock.
template <typename Body>
void time_compression(RankModel& model, int tag, const Body& body) {
  in_span(model, Lane::kCompute, SpanKind::kOther, tag, op_name(ModelOp::kCompress), body);
}

// The 16-bit copy of a gradient range that a cast compression sends: an array of `numel`
// elements in the model's memory, and the two timed casts into and out of it.
class WireCopy {
 public:
  WireCopy(RankModel& model, DataType type, std::size_t numel);

  std::span<std::uint16_t> span(std::size_t begin, std::size_t n);
  // [begin, begin + from.size()) := from * scale, rounded to the wire type: a compute span
  // named "compress" tagged `tag`.
  void narrow(std::span<const float> from, std::size_t begin, float scale, int tag);
  // to := the wire's [begin, begin + to.size()), widened: the same kind of span.
  void widen(std::size_t begin, std::span<float> to, int tag);
  std::int64_t bytes() const { return static_cast<std::int64_t>(numel_ * size_of(type_)); }
  DataType type() const { return type_; }

 private:
  RankModel& model_;
  DataType type_;
  std::size_t numel_;
  std::unique_ptr<ModelArray> array_;  // numel_ 16-bit values in ceil(numel_ / 2) floats
};

}  // namespace tandem
