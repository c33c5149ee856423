// Output files that are never half-written: content goes to a temporary name in the
// same directory and is renamed over the target, so a reader sees the old file, the new
// file, or none, even if the process dies mid-write. And the lock that keeps two runs out
// of one output directory.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tandem {

// A file written piece by piece and then atomically: pieces go to `path`.tmp.PID (through
// a buffer), commit() renames it over `path`; without commit() (an exception on the way)
// the temporary is removed and `path` is untouched. A symbolic link is followed (the
// file it points to is replaced, the link stays); a path that holds something other than
// a regular file (a directory, a device node such as /dev/full, a FIFO, a socket) is
// refused, never replaced. Every failure throws "cannot write 'PATH': REASON": a
// RuntimeError (exit 1) where room ran out (ENOSPC, EDQUOT, EFBIG) or the device failed
// (EIO), else a UsageError (exit 2).
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(std::string_view piece);
  void commit();

 private:
  void flush();
  [[noreturn]] void fail(int error);

  std::filesystem::path path_;    // as given, for errors
  std::filesystem::path target_;  // what commit() replaces: path_, its link followed
  std::filesystem::path tmp_;
  int fd_ = -1;
  std::string buffer_;
};

// Whether `path` names an AtomicFile's temporary ("NAME.tmp.PID"): what a process killed
// mid-write leaves behind.
bool is_atomic_file_temporary(const std::filesystem::path& path);

// Writes `content` to `path` atomically (an AtomicFile of one piece).
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
