// A tiny binary encoding for results that travel between the ranks of one job (a gather to
// rank 0): trivially copyable values, vectors of them and strings, each count-prefixed.
// Every rank runs the same binary on the same architecture (a homogeneous job, as
// MPI_BYTE transfers assume), so values travel as their bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace tandem {

class ByteWriter {
 public:
  template <typename T>
  void put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof value);
  }
  template <typename T>
  void put_vector(const std::vector<T>& items) {
    static_assert(std::is_trivially_copyable_v<T>);
    put<std::uint64_t>(items.size());
    out_.append(reinterpret_cast<const char*>(items.data()), items.size() * sizeof(T));
  }
  void put_string(std::string_view text) {
    put<std::uint64_t>(text.size());
    out_.append(text);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what a ByteWriter wrote, in the same order; a short buffer is a broken invariant.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}

  template <typename T>
  T get() {
    static_assert(std::is_trivially_copyable_v<T>);
    T value;
    TANDEM_CHECK(in_.size() >= sizeof value);
    std::memcpy(&value, in_.data(), sizeof value);
    in_.remove_prefix(sizeof value);
    return value;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const auto count = get<std::uint64_t>();
    TANDEM_CHECK(in_.size() / sizeof(T) >= count);
    std::vector<T> items(count);
    if (count > 0) std::memcpy(items.data(), in_.data(), count * sizeof(T));
    in_.remove_prefix(count * sizeof(T));
    return items;
  }
  std::string get_string() {
    const auto count = get<std::uint64_t>();
    TANDEM_CHECK(in_.size() >= count);
    std::string text(in_.substr(0, count));
    in_.remove_prefix(count);
    return text;
  }

 private:
  std::string_view in_;
};

}  // namespace tandem
