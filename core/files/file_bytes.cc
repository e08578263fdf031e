#include "core/files/file_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

// A status for the errno left by a failed call, naming what was attempted on which path.
absl::Status FileError(int error_number, absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(error_number, absl::StrCat("cannot ", what, " '", path, "'"));
}

// Closes the file when it goes out of scope.
struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// What a file that is not a regular one is, for messages.
const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// A regular file opened for reading, and its size when opened.
struct RegularFile {
  FilePtr file;
  uint64_t size = 0;
};

// Opens `path` for reading if it is a regular file: without blocking (a FIFO with no writer would
// block a plain open), then checked with fstat, so that a device, FIFO or directory is refused
// with INVALID_ARGUMENT naming the path instead of read without end or waited on.
absl::StatusOr<RegularFile> OpenRegularFile(absl::string_view path) {
  const std::string p(path);
  const int fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return FileError(errno, "open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error_number = errno;
    ::close(fd);
    return FileError(error_number, "stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is ", FileKind(st.st_mode), "; only regular files are read"));
  }
  // Regular files ignore O_NONBLOCK; cleared all the same so that reads behave as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  RegularFile out{FilePtr(::fdopen(fd, "rb")), static_cast<uint64_t>(st.st_size)};
  if (out.file == nullptr) {
    const int error_number = errno;
    ::close(fd);
    return FileError(error_number, "open", path);
  }
  return out;
}

// Flushes the directory `path` to the disk, with the entries created or renamed in it. Some
// filesystems cannot sync a directory (EINVAL): their entries are as durable as they get.
absl::Status SyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError(errno, "open the directory", path);
  const int synced = ::fsync(fd);
  const int error_number = errno;
  ::close(fd);
  if (synced != 0 && error_number != EINVAL) return FileError(error_number, "sync", path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::byte>> ReadFileBytes(absl::string_view path) {
  ASSIGN_OR_RETURN(RegularFile f, OpenRegularFile(path));
  // At most the size it had when opened: a file that grows meanwhile is not read without bound.
  std::vector<std::byte> bytes(f.size);
  const size_t n = std::fread(bytes.data(), 1, bytes.size(), f.file.get());
  if (std::ferror(f.file.get())) return FileError(errno, "read", path);
  if (n != bytes.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("'", path, "' shrank from ", f.size, " to ", n, " bytes while it was read"));
  }
  return bytes;
}

absl::StatusOr<uint64_t> FileSize(absl::string_view path) {
  ASSIGN_OR_RETURN(RegularFile f, OpenRegularFile(path));
  return f.size;
}

absl::StatusOr<std::string> ReadFileRange(absl::string_view path, uint64_t offset, size_t length) {
  ASSIGN_OR_RETURN(RegularFile file, OpenRegularFile(path));
  if (offset > file.size || length > file.size - offset) {
    return absl::OutOfRangeError(absl::StrCat("'", path, "' ends before byte ", offset + length,
                                              " (", file.size, " bytes)"));
  }
  std::FILE* f = file.file.get();
  if (std::fseek(f, static_cast<long>(offset), SEEK_SET) != 0) {
    return FileError(errno, "seek in", path);
  }
  std::string bytes(length, '\0');
  const size_t n = std::fread(bytes.data(), 1, length, f);
  if (std::ferror(f)) return FileError(errno, "read", path);
  if (n != length) {
    return absl::OutOfRangeError(absl::StrCat("'", path, "' ends before byte ", offset + length,
                                              " (", offset + n, " bytes)"));
  }
  return bytes;
}

absl::Status WriteFileBytes(absl::string_view path, std::span<const std::byte> bytes) {
  const std::string p(path);
  const std::string tmp = p + ".tmp";
  FilePtr f(std::fopen(tmp.c_str(), "wb"));
  if (f == nullptr) return FileError(errno, "create", tmp);
  // An empty span's data() may be null, which fwrite must not be given.
  if ((!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) ||
      std::fflush(f.get()) != 0 || ::fsync(::fileno(f.get())) != 0) {
    const int error_number = errno;
    f.reset();
    std::remove(tmp.c_str());
    return FileError(error_number, "write", tmp);
  }
  if (std::fclose(f.release()) != 0) {
    const int error_number = errno;
    std::remove(tmp.c_str());
    return FileError(error_number, "close", tmp);
  }
  if (std::rename(tmp.c_str(), p.c_str()) != 0) {
    const int error_number = errno;
    std::remove(tmp.c_str());
    return FileError(error_number, "rename into", path);
  }
  const std::string parent = std::filesystem::path(p).parent_path().string();
  return SyncDirectory(parent.empty() ? "." : parent);
}

}  // namespace tessera
