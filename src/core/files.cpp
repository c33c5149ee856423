#include "core/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kAtomicFileBuffer = 1 << 20;
constexpr std::string_view kTemporaryInfix = ".tmp.";  // NAME.tmp.PID

const char* kind_of(const fs::file_status& st) {
  switch (st.type()) {
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

// A write that fails for want of room (a full disk, a quota, a file-size limit) or of a
// working device is a failure at run time (exit 1); the rest (permissions, a missing
// directory) is a path the user gave that cannot be used (exit 2).
[[noreturn]] void throw_write_error(const fs::path& path, int error) {
  const std::string message = "cannot write '" + path.string() + "': " + std::strerror(error);
  if (error == ENOSPC || error == EDQUOT || error == EFBIG || error == EIO) {
    throw RuntimeError(message);
  }
  throw UsageError(message);
}

// Where an atomic write of `path` renames its temporary to: `path`, or for a symbolic link
// what it points to (followed link by link, a dangling one included), so that the link
// stays. Something there that is not a regular file is refused: renaming over a device
// node, a FIFO or a socket would replace it.
fs::path atomic_target(const fs::path& path) {
  fs::path target = path;
  std::error_code ec;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    if (hops == 40) {
      throw UsageError("cannot write '" + path.string() + "': too many levels of symbolic links");
    }
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) throw UsageError("cannot write '" + path.string() + "': " + ec.message());
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    throw UsageError("cannot write '" + path.string() + "': it is " + kind_of(st) +
                     ", not a regular file (tandem writes a new file and renames it into place)");
  }
  return target;
}

}  // namespace

AtomicFile::AtomicFile(fs::path path)
    : path_(std::move(path)),
      target_(atomic_target(path_)),
      tmp_(target_.string() + std::string(kTemporaryInfix) + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_write_error(path_, errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;  // committed, or failed and cleaned up
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::fail(int error) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw_write_error(path_, error);
}

void AtomicFile::flush() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(errno);
    }
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

void AtomicFile::write(std::string_view piece) {
  TANDEM_CHECK(fd_ >= 0);
  buffer_.append(piece);
  if (buffer_.size() >= kAtomicFileBuffer) flush();
}

void AtomicFile::commit() {
  TANDEM_CHECK(fd_ >= 0);
  flush();
  if (::close(std::exchange(fd_, -1)) != 0) fail(errno);
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail(errno);
}

bool is_atomic_file_temporary(const fs::path& path) {
  const std::string name = path.filename().string();
  const std::size_t at = name.rfind(kTemporaryInfix);
  if (at == std::string::npos) return false;
  const std::string pid = name.substr(at + kTemporaryInfix.size());
  return !pid.empty() && pid.find_first_not_of("0123456789") == std::string::npos;
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  AtomicFile file(path);
  file.write(content);
  file.commit();
}

FileLock::FileLock(fs::path path, const std::string& what) : path_(std::move(path)) {
  for (;;) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw UsageError(what + ": cannot create lock '" + path_.string() +
                       "': " + std::strerror(errno));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int error = errno;
      char pid[32] = {};
      const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
      ::close(fd_);
      fd_ = -1;
      if (error == EWOULDBLOCK) {
        std::string owner(pid, n > 0 ? static_cast<std::size_t>(n) : 0);
        owner = owner.substr(0, owner.find('\n'));
        throw UsageError(what + " is in use by another tandem run" +
                         (owner.empty() ? std::string() : " (pid " + owner + ")"));
      }
      throw UsageError(what + ": cannot lock '" + path_.string() + "': " + std::strerror(error));
    }
    // Locked; but if the holder before us unlinked the file while we waited to open it,
    // our lock is on a file nobody else will see: take the one at `path` instead.
    struct stat held {};
    struct stat named {};
    if (::fstat(fd_, &held) == 0 && ::stat(path_.c_str(), &named) == 0 &&
        held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
      break;
    }
    ::close(fd_);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, pid.data(), pid.size(), 0);
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still holding it: see the constructor
  ::close(fd_);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UsageError("cannot read '" + path.string() +
                     "': " + (fs::exists(path) ? std::strerror(errno) : "no such file"));
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace tandem
