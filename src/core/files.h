// Output files that are never half-written: content goes to a temporary name in the
// same directory and is renamed over the target, so a reader sees the old file, the new
// file, or none, even if the process dies mid-write. And the lock that keeps two runs out
// of one output directory.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tandem {

// Writes `content` to `path` atomically; throws UsageError naming the path on failure.
void write_file_atomic(const std::filesystem::path& path, std::string_view content);

// Reads a whole file; throws UsageError naming the path on failure.
std::string read_file(const std::filesystem::path& path);

// An exclusive lock on `path` (flock, so the kernel releases it when the process dies),
// held from construction to destruction; the file holds the owner's pid and is removed on
// release. A second holder, in this process or another, is refused at once: throws
// UsageError("<what> is in use by another tandem run (pid N)"). The lock is taken only
// on the file that is still at `path` (a holder that was releasing it unlinked it: the
// next one locks a fresh file), so removal on release is safe.
class FileLock {
 public:
  FileLock(std::filesystem::path path, const std::string& what);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace tandem
