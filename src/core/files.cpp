#include "core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace tandem {

namespace fs = std::filesystem;

void prepare_output_dir(const fs::path& dir, std::string_view flag) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw UsageError(std::string(flag) + ": cannot create directory '" + dir.string() +
                     "': " + (ec ? ec.message() : "not a directory"));
  }
  const fs::path probe = dir / (".tandem-probe." + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    throw UsageError(std::string(flag) + ": cannot write to '" + dir.string() +
                     "': " + std::strerror(errno));
  }
  ::close(fd);
  fs::remove(probe, ec);
}

void write_file_atomic(const fs::path& path, std::string_view content) {
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    throw UsageError("cannot write '" + path.string() + "': " + std::strerror(errno));
  }
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string reason = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      throw UsageError("cannot write '" + path.string() + "': " + reason);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw UsageError("cannot write '" + path.string() + "': " + reason);
  }
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UsageError("cannot read '" + path.string() + "': " +
                     (fs::exists(path) ? std::strerror(errno) : "no such file"));
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace tandem
