// ModelSpec::parse: the spec grammar and its limits.
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "model/model.h"

namespace tandem {
namespace {

// Limits that keep a typo ("mlp:4x2560000") from allocating for minutes: every dimension
// fits in a BLAS int with room to spare, and the flat arrays stay under 2^31 floats
// (8 GiB each), so offsets and counts never overflow.
constexpr int kMaxDim = 65536;
constexpr int kMaxDepth = 1024;
constexpr std::int64_t kMaxParameters = std::int64_t{1} << 31;

[[noreturn]] void fail(std::string_view text, const std::string& why) {
  throw UsageError("model '" + std::string(text) + "': " + why);
}

// A positive decimal integer in [1, max]; `what` names it in the error.
int parse_dim(std::string_view spec, std::string_view digits, std::string_view what, int max) {
  std::uint64_t value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (digits.empty() || ec == std::errc::invalid_argument || ptr != end) {
    fail(spec, std::string(what) + " '" + std::string(digits) + "' is not a number");
  }
  if (ec == std::errc::result_out_of_range || value > static_cast<std::uint64_t>(max)) {
    fail(spec, std::string(what) + " must be <= " + std::to_string(max));
  }
  if (value < 1) fail(spec, std::string(what) + " must be >= 1");
  return static_cast<int>(value);
}

// "AxB" -> (A, B).
std::pair<int, int> parse_pair(std::string_view spec, std::string_view dims, std::string_view form,
                               std::string_view first, int first_max, std::string_view second) {
  const auto x = dims.find('x');
  if (x == std::string_view::npos) {
    fail(spec, "expected " + std::string(form));
  }
  return {parse_dim(spec, dims.substr(0, x), first, first_max),
          parse_dim(spec, dims.substr(x + 1), second, kMaxDim)};
}

}  // namespace

ModelSpec ModelSpec::parse(std::string_view text, int classes) {
  ModelSpec spec;
  spec.text = std::string(text);

  std::string_view body = text;
  std::string_view option;
  if (const auto comma = body.find(','); comma != std::string_view::npos) {
    option = body.substr(comma + 1);
    body = body.substr(0, comma);
  }

  if (body == "course") {
    if (!option.empty()) fail(text, "course takes no options");
    spec.depth = 1;
    spec.input = spec.width = spec.classes = 512;
    spec.bias = false;
    spec.activation = Activation::kNone;
    spec.default_batch = 1024;
  } else if (body.starts_with("mlp:")) {
    if (classes < 1 || classes > kMaxDim) {
      fail(text, "classes must be between 1 and " + std::to_string(kMaxDim) + " (got " +
                     std::to_string(classes) + ")");
    }
    const auto [depth, width] =
        parse_pair(text, body.substr(4), "mlp:DxW (e.g. mlp:4x256)", "depth", kMaxDepth, "width");
    spec.depth = depth;
    spec.input = spec.width = width;
    spec.classes = classes;
    spec.bias = true;
    if (option.empty() || option == "relu") {
      spec.activation = Activation::kReLU;
    } else if (option == "gelu") {
      spec.activation = Activation::kGELU;
    } else {
      fail(text, "unknown activation '" + std::string(option) + "' (expected relu or gelu)");
    }
  } else if (body.starts_with("linear:")) {
    if (!option.empty()) fail(text, "linear takes no options");
    const auto [in, out] = parse_pair(text, body.substr(7), "linear:IxO (e.g. linear:512x512)",
                                      "input", kMaxDim, "output");
    spec.depth = 1;
    spec.input = spec.width = in;
    spec.classes = out;
    spec.bias = false;
    spec.activation = Activation::kNone;
  } else {
    throw UsageError("unknown model '" + std::string(text) +
                     "' (expected mlp:DxW, linear:IxO or course)");
  }

  if (const std::int64_t n = spec.parameter_count(); n > kMaxParameters) {
    fail(text, std::to_string(n) + " parameters exceed the limit of 2^31");
  }
  return spec;
}

std::int64_t ModelSpec::parameter_count() const {
  std::int64_t total = 0;
  for (int layer = 0; layer < depth; ++layer) {
    const std::int64_t in = layer == 0 ? input : width;
    const std::int64_t out = layer == depth - 1 ? classes : width;
    total += in * out + (bias ? out : 0);
  }
  return total;
}

}  // namespace tandem
