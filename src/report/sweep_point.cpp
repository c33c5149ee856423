#include "report/sweep_point.h"

#include <cctype>

namespace tandem {

std::string point_id_part(std::string_view value) {
  std::string part;
  for (char c : value) {
    const bool safe = std::isalnum(static_cast<unsigned char>(c)) || c == '-';
    part += safe ? c : '_';
  }
  return part;
}

std::string point_id(const SweepPoint& point) {
  if (point.empty()) return "default";
  std::string id;
  for (const auto& [key, value] : point) {
    if (!id.empty()) id += '.';
    id += key + '-' + point_id_part(value);
  }
  return id;
}

std::string describe(const SweepPoint& point) {
  if (point.empty()) return "default";
  std::string text;
  for (const auto& [key, value] : point) text += (text.empty() ? "" : " ") + key + "=" + value;
  return text;
}

}  // namespace tandem
