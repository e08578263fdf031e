#include "core/file_bytes.h"

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

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

}  // namespace

absl::StatusOr<std::vector<std::byte>> ReadFileBytes(absl::string_view path) {
  const std::string p(path);
  FilePtr f(std::fopen(p.c_str(), "rb"));
  if (f == nullptr) return FileError(errno, "open", path);
  std::vector<std::byte> bytes;
  std::byte chunk[1 << 16];
  while (true) {
    const size_t n = std::fread(chunk, 1, sizeof(chunk), f.get());
    bytes.insert(bytes.end(), chunk, chunk + n);
    if (n < sizeof(chunk)) break;
  }
  if (std::ferror(f.get())) return FileError(errno, "read", path);
  return bytes;
}

absl::StatusOr<uint64_t> FileSize(absl::string_view path) {
  const std::string p(path);
  FilePtr f(std::fopen(p.c_str(), "rb"));
  if (f == nullptr) return FileError(errno, "open", path);
  if (std::fseek(f.get(), 0, SEEK_END) != 0) return FileError(errno, "seek in", path);
  const long size = std::ftell(f.get());
  if (size < 0) return FileError(errno, "measure", path);
  return static_cast<uint64_t>(size);
}

absl::StatusOr<std::string> ReadFileRange(absl::string_view path, uint64_t offset, size_t length) {
  const std::string p(path);
  FilePtr f(std::fopen(p.c_str(), "rb"));
  if (f == nullptr) return FileError(errno, "open", path);
  if (std::fseek(f.get(), static_cast<long>(offset), SEEK_SET) != 0) {
    return FileError(errno, "seek in", path);
  }
  std::string bytes(length, '\0');
  const size_t n = std::fread(bytes.data(), 1, length, f.get());
  if (std::ferror(f.get())) return FileError(errno, "read", path);
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
  if (std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size() ||
      std::fflush(f.get()) != 0) {
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
  return absl::OkStatus();
}

}  // namespace tessera
