// --compress (ddp/compression.h).
#include "ddp/compression.h"

#include "core/error.h"
#include "core/parse.h"

namespace tandem {

Compression Compression::parse(std::string_view text) {
  if (text == "none") return {};
  if (text == "fp16") return {Kind::kFp16, 0};
  if (text == "bf16") return {Kind::kBf16, 0};
  if (text.starts_with("powersgd:")) {
    const long long r = parse_int(text.substr(9), "PowerSGD rank");
    if (r < 1 || r > 1024) {
      throw UsageError("'" + std::string(text) + "': the PowerSGD rank must be 1..1024");
    }
    return {Kind::kPowerSgd, static_cast<int>(r)};
  }
  throw UsageError("unknown compression '" + std::string(text) +
                   "' (expected none, fp16, bf16 or powersgd:R)");
}

std::string Compression::to_string() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kFp16:
      return "fp16";
    case Kind::kBf16:
      return "bf16";
    case Kind::kPowerSgd:
      return "powersgd:" + std::to_string(rank);
  }
  return "?";
}

DataType Compression::wire_type() const {
  return kind == Kind::kFp16   ? DataType::kFloat16
         : kind == Kind::kBf16 ? DataType::kBFloat16
                               : DataType::kFloat32;
}

WireCopy::WireCopy(RankModel& model, DataType type, std::size_t numel)
    : model_(model), type_(type), numel_(numel), array_(model.allocate_zeroed((numel + 1) / 2)) {
  TANDEM_CHECK(type != DataType::kFloat32);
}

std::span<std::uint16_t> WireCopy::span(std::size_t begin, std::size_t n) {
  TANDEM_CHECK(begin + n <= numel_);
  return {reinterpret_cast<std::uint16_t*>(array_->span().data()) + begin, n};
}

void WireCopy::narrow(std::span<const float> from, std::size_t begin, float scale, int tag) {
  time_compression(model_, tag,
                   [&] { model_.narrow(from, span(begin, from.size()).data(), type_, scale); });
}

void WireCopy::widen(std::size_t begin, std::span<float> to, int tag) {
  time_compression(model_, tag, [&] { model_.widen(span(begin, to.size()).data(), to, type_); });
}

}  // namespace tandem
