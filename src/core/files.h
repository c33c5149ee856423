// Output files that are never half-written: content goes to a temporary name in the
// same directory and is renamed over the target, so a reader sees the old file, the new
// file, or none, even if the process dies mid-write.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tandem {

// Creates `dir` (and parents) and checks that a file can be created in it; throws
// UsageError("<flag>: cannot write to '<dir>': <reason>").
void prepare_output_dir(const std::filesystem::path& dir, std::string_view flag);

// Writes `content` to `path` atomically; throws UsageError naming the path on failure.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// Reads a whole file; throws UsageError naming the path on failure.
std::string read_file(const std::filesystem::path& path);

}  // namespace tandem
