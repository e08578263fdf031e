#include "core/files/checkpoint_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/files/file_bytes.h"
#include "core/files/safetensors.h"
#include "core/files/sharded_files.h"
#include "core/status_context.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string Join(absl::string_view directory, absl::string_view relative) {
  return (fs::path(std::string(directory)) / std::string(relative)).string();
}

// An open file read at offsets; closed when it goes.
class FileReader {
 public:
  static absl::StatusOr<FileReader> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      const std::string message = absl::StrCat("cannot open ", path, ": ", std::strerror(e));
      return e == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
    }
    return FileReader(fd, path);
  }
  FileReader(FileReader&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
    other.fd_ = -1;
  }
  FileReader& operator=(FileReader&&) = delete;
  ~FileReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Reads exactly `length` bytes at `offset` into `out`.
  absl::Status Read(uint64_t offset, std::byte* out, size_t length) const {
    while (length > 0) {
      const ssize_t n = ::pread(fd_, out, length, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::OutOfRangeError(absl::StrCat(path_, " ends before byte ", offset + length));
      }
      out += n;
      offset += static_cast<uint64_t>(n);
      length -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  FileReader(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

// The index of a `tessera shard` directory: one block per replica group, from its rank files.
absl::StatusOr<CheckpointIndex> IndexOfShardedFiles(absl::string_view directory) {
  std::string first;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(std::string(directory), ec)) {
    const std::string f = entry.path().filename().string();
    if (absl::StartsWith(f, "rank-") && entry.path().extension() == ".safetensors") {
      first = entry.path().string();
      break;
    }
  }
  if (ec || first.empty()) {
    return absl::NotFoundError(absl::StrCat(directory, " holds no checkpoint (no ",
                                            kCheckpointIndexFile, " nor rank-*.safetensors)"));
  }
  ASSIGN_OR_RETURN(const SafetensorsHeader head, ReadSafetensorsHeader(first));
  ASSIGN_OR_RETURN(const DTensorSpec spec, SpecFromMetadata(head.metadata, first));
  if (head.tensors.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(first, " holds ", head.tensors.size(), " tensors, not one"));
  }
  if (HasPartial(spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(directory, " holds ", spec.ToString(),
                     ", a Partial layout: `tessera reshard` it to Replicate first"));
  }
  CheckpointIndex index;
  ASSIGN_OR_RETURN(CheckpointTensor t, PlanCheckpointTensor(spec, "", "", head.tensors[0].name));
  for (CheckpointBlock& b : t.blocks) b.file = b.file.substr(1);  // "/rank-<r>..." -> relative
  index.tensors.push_back(std::move(t));
  return index;
}

// Whether `path`, resolved, is `root` or lies under it (both resolved, compared by component).
bool Within(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

// Creates `directory`/kCheckpointMarkerFile unless it exists.
absl::Status Mark(const fs::path& directory) {
  const std::string marker = (directory / kCheckpointMarkerFile).string();
  const int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", marker, ": ", std::strerror(errno)));
  }
  ::close(fd);
  return absl::OkStatus();
}

// Whether `directory` is a Tessera checkpoint: marked, or holding a Tessera index.
bool IsCheckpoint(const fs::path& directory) {
  std::error_code ec;
  if (fs::exists(directory / kCheckpointMarkerFile, ec)) return true;
  const fs::path index = directory / std::string(kCheckpointIndexFile);
  if (!fs::is_regular_file(index, ec)) return false;
  absl::StatusOr<std::vector<std::byte>> bytes = ReadFileBytes(index.string());
  return bytes.ok() &&
         ParseCheckpointIndex({reinterpret_cast<const char*>(bytes->data()), bytes->size()}).ok();
}

// The data directory `directory`'s current index names ("" when it has none or a bad one).
std::string CurrentDataDir(const fs::path& directory) {
  absl::StatusOr<std::vector<std::byte>> bytes =
      ReadFileBytes((directory / std::string(kCheckpointIndexFile)).string());
  if (!bytes.ok()) return "";
  absl::StatusOr<CheckpointIndex> index =
      ParseCheckpointIndex({reinterpret_cast<const char*>(bytes->data()), bytes->size()});
  return index.ok() ? index->data_dir : "";
}

}  // namespace

absl::StatusOr<std::string> ResolveCheckpointPath(absl::string_view root, absl::string_view path) {
  if (root.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this worker takes no checkpoint paths (its --checkpoint_root is not set); cannot use '",
        path, "'"));
  }
  if (path.empty()) return absl::InvalidArgumentError("the checkpoint path is empty");
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::path(std::string(root)), ec);
  if (ec || !fs::is_directory(base, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("this worker's checkpoint root ", root, " is not an existing directory"));
  }
  const fs::path given(std::string{path});
  const fs::path resolved = fs::weakly_canonical(given.is_absolute() ? given : base / given, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint path '", path, "' cannot be resolved: ", ec.message()));
  }
  if (!Within(resolved, base) || resolved == base) {
    return absl::PermissionDeniedError(
        absl::StrCat("checkpoint path '", path, "' resolves to ", resolved.string(),
                     ", which is not inside this worker's checkpoint root ", base.string(),
                     " (--checkpoint_root; symlinks are followed)"));
  }
  return resolved.string();
}

absl::Status CheckSaveDirectory(absl::string_view directory) {
  RETURN_IF_ERROR(CheckCheckpointDirectory(directory));
  const fs::path path{std::string(directory)};
  std::error_code ec;
  if (!fs::exists(path, ec) || fs::is_empty(path, ec) || IsCheckpoint(path)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint path '", directory,
      "' is a directory that is not a Tessera checkpoint (it is not empty and holds no ",
      kCheckpointMarkerFile,
      " nor a checkpoint index.json): a save writes only into a new or "
      "empty directory or an earlier checkpoint"));
}

absl::Status CheckCheckpointDirectory(absl::string_view directory) {
  const fs::path path{std::string(directory)};
  if (directory.empty() || !path.is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint path '", directory, "' is not an absolute path"));
  }
  const fs::path parent = path.lexically_normal().parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint path '", directory, "': its parent ",
                                                   parent.string(),
                                                   " is not an existing directory"));
  }
  if (fs::exists(path, ec) && !fs::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint path '", directory, "' exists and is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status WriteCheckpointBlock(absl::string_view directory, absl::string_view data_dir,
                                  absl::string_view param, absl::string_view key,
                                  const DTensorSpec& spec, int64_t rank, const HostTensor& block) {
  ASSIGN_OR_RETURN(const LocalShard local, LocalShapeAndOffset(spec, rank));
  if (block.shape() != local.shape || block.dtype() != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "block of rank ", rank, " is ", DTypeName(block.dtype()), ShapeToString(block.shape()),
        " but ", spec.ToString(), " gives it ", ShapeToString(local.shape)));
  }
  const std::string path = Join(Join(directory, data_dir), CheckpointFileName(param, rank));
  // The checkpoint directory is marked before anything goes into it, and each data directory
  // before its files: a rank that checks the directory meanwhile (CheckSaveDirectory) finds it
  // empty or marked, never holding unmarked data.
  const auto create = [](const fs::path& dir) -> absl::Status {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(create(fs::path(std::string(directory))));
  RETURN_IF_ERROR(Mark(fs::path(std::string(directory))));
  RETURN_IF_ERROR(create(fs::path(Join(directory, data_dir))));
  RETURN_IF_ERROR(Mark(fs::path(Join(directory, data_dir))));
  RETURN_IF_ERROR(create(fs::path(path).parent_path()));
  SafetensorsFile file;
  file.metadata = SpecMetadata(spec);
  file.metadata["tessera.rank"] = absl::StrCat(rank);
  file.metadata["tessera.offset"] = absl::StrJoin(local.offset, ",");
  file.tensors.emplace(std::string(key), block.Clone());
  return WriteSafetensorsFile(path, file);
}

absl::Status CommitCheckpointIndex(absl::string_view directory, const CheckpointIndex& index) {
  ASSIGN_OR_RETURN(const std::string text, CheckpointIndexToJson(index));
  // One commit at a time per directory: a concurrent save's commit may have removed this save's
  // data (it was not in that index); then this one fails and that checkpoint stays whole.
  const std::string lock_path = Join(directory, ".commit.lock");
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno)));
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing releases the flock
  } unlock{lock};
  while (::flock(lock, LOCK_EX) != 0) {
    if (errno != EINTR) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot lock ", lock_path, ": ", std::strerror(errno)));
    }
  }
  for (const CheckpointTensor& t : index.tensors) {
    for (const CheckpointBlock& b : t.blocks) {
      std::error_code ec;
      if (!fs::exists(Join(directory, b.file), ec)) {
        return absl::AbortedError(absl::StrCat(
            "block file ", Join(directory, b.file),
            " is gone (a concurrent save to the same directory replaced it); the checkpoint there "
            "is that save's"));
      }
    }
  }
  const std::string replaced = CurrentDataDir(fs::path(std::string(directory)));
  RETURN_IF_ERROR(WriteFileBytes(Join(directory, kCheckpointIndexFile),
                                 {reinterpret_cast<const std::byte*>(text.data()), text.size()}));
  // Old data goes only once the new index is in place; a failure here leaves garbage, not harm.
  // Only what a save wrote goes: a data directory it marked, or the one the old index named.
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(std::string(directory), ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "data-") || name == index.data_dir) continue;
    std::error_code ignored;
    if (entry.is_symlink(ignored) || !entry.is_directory(ignored)) continue;
    if (name == replaced || fs::exists(entry.path() / kCheckpointMarkerFile, ignored)) {
      fs::remove_all(entry.path(), ignored);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointIndex> ReadCheckpointIndex(absl::string_view directory) {
  const std::string path = Join(directory, kCheckpointIndexFile);
  std::error_code ec;
  if (!fs::exists(path, ec)) return IndexOfShardedFiles(directory);
  ASSIGN_OR_RETURN(const std::vector<std::byte> bytes, ReadFileBytes(path));
  absl::StatusOr<CheckpointIndex> index =
      ParseCheckpointIndex({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  if (!index.ok()) {
    return WithContext(path, index.status());
  }
  return index;
}

absl::StatusOr<HostTensor> LoadCheckpointShard(absl::string_view directory,
                                               const CheckpointTensor& tensor,
                                               const LocalShard& target) {
  ASSIGN_OR_RETURN(HostTensor out, HostTensor::Uninitialized(tensor.dtype, target.shape));
  const std::vector<ByteCopy> copies = PlanShardReads(tensor.blocks, tensor.dtype, target);
  size_t i = 0;
  while (i < copies.size()) {
    const CheckpointBlock& block = tensor.blocks[copies[i].block];
    const std::string path = Join(directory, block.file);
    ASSIGN_OR_RETURN(const SafetensorsHeader header, ReadSafetensorsHeader(path));
    const SafetensorsEntry* entry = nullptr;
    for (const SafetensorsEntry& e : header.tensors) {
      if (e.name == block.key) entry = &e;
    }
    if (entry == nullptr || entry->dtype != tensor.dtype || entry->shape != block.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " does not hold ", DTypeName(tensor.dtype), ShapeToString(block.shape),
                       " under '", block.key, "' as the checkpoint index says"));
    }
    ASSIGN_OR_RETURN(const FileReader file, FileReader::Open(path));
    const uint64_t base = header.data_offset + entry->begin;
    for (; i < copies.size() && &tensor.blocks[copies[i].block] == &block; ++i) {
      const ByteCopy& c = copies[i];
      RETURN_IF_ERROR(file.Read(base + static_cast<uint64_t>(c.source), out.data() + c.target,
                                static_cast<size_t>(c.bytes)));
    }
  }
  return out;
}

}  // namespace tessera
