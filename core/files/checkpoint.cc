#include "core/files/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/json.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("checkpoint index: ", what));
}

// A path inside the checkpoint directory: relative, without "..", "." or empty components.
bool IsInsidePath(absl::string_view path) {
  if (path.empty() || path.front() == '/') return false;
  for (const auto& part : std::filesystem::path(std::string(path))) {
    const std::string p = part.string();
    if (p.empty() || p == "." || p == "..") return false;
  }
  return true;
}

absl::StatusOr<std::vector<int64_t>> IntList(const nlohmann::json& j, absl::string_view field) {
  if (!j.is_array()) return Bad(absl::StrCat("'", field, "' is ", JsonTypeName(j), ", not a list"));
  std::vector<int64_t> out;
  for (const auto& v : j) {
    ASSIGN_OR_RETURN(int64_t x, JsonInt64(v));
    if (x < 0) return Bad(absl::StrCat("'", field, "' holds the negative value ", x));
    out.push_back(x);
  }
  return out;
}

absl::StatusOr<std::string> String(const nlohmann::json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end() || !it->is_string()) {
    return Bad(absl::StrCat("'", field, "' is missing or not a string"));
  }
  return it->get<std::string>();
}

absl::StatusOr<const nlohmann::json*> Member(const nlohmann::json& obj, const char* field) {
  auto it = obj.find(field);
  if (it == obj.end()) return Bad(absl::StrCat("'", field, "' is missing"));
  return &*it;
}

absl::StatusOr<CheckpointBlock> ParseBlock(const nlohmann::json& j) {
  if (!j.is_object()) return Bad("a block is not an object");
  CheckpointBlock b;
  ASSIGN_OR_RETURN(b.file, String(j, "file"));
  ASSIGN_OR_RETURN(b.key, String(j, "key"));
  if (!IsInsidePath(b.file)) {
    return Bad(absl::StrCat("block file '", b.file, "' is not inside the checkpoint directory"));
  }
  ASSIGN_OR_RETURN(const nlohmann::json* offset, Member(j, "offset"));
  ASSIGN_OR_RETURN(b.offset, IntList(*offset, "offset"));
  ASSIGN_OR_RETURN(const nlohmann::json* shape, Member(j, "shape"));
  ASSIGN_OR_RETURN(b.shape, IntList(*shape, "shape"));
  return b;
}

absl::StatusOr<CheckpointTensor> ParseTensor(const nlohmann::json& j) {
  if (!j.is_object()) return Bad("a tensor is not an object");
  CheckpointTensor t;
  ASSIGN_OR_RETURN(t.name, String(j, "name"));
  ASSIGN_OR_RETURN(std::string dtype, String(j, "dtype"));
  ASSIGN_OR_RETURN(t.dtype, ParseDType(dtype));
  ASSIGN_OR_RETURN(const nlohmann::json* shape, Member(j, "shape"));
  ASSIGN_OR_RETURN(t.shape, IntList(*shape, "shape"));
  if (auto it = j.find("saved_layout"); it != j.end() && it->is_string()) {
    t.saved_layout = it->get<std::string>();
  }
  ASSIGN_OR_RETURN(const nlohmann::json* blocks, Member(j, "blocks"));
  if (!blocks->is_array()) return Bad(absl::StrCat("blocks of '", t.name, "' are not a list"));
  for (const auto& b : *blocks) {
    ASSIGN_OR_RETURN(CheckpointBlock block, ParseBlock(b));
    t.blocks.push_back(std::move(block));
  }
  if (absl::Status s = CheckBlocksTile(t.shape, t.blocks); !s.ok()) {
    return Bad(absl::StrCat("tensor '", t.name, "': ", s.message()));
  }
  return t;
}

}  // namespace

std::vector<Placement> SavedPlacements(std::vector<Placement> placements) {
  for (Placement& p : placements) {
    if (p.is_partial()) p = Placement::Replicate();
  }
  return placements;
}

bool WritesBlock(const DTensorSpec& spec, const std::vector<int64_t>& coordinate) {
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    if (!spec.placements[m].is_shard() && coordinate[m] != 0) return false;
  }
  return true;
}

std::string CheckpointFileName(absl::string_view param, int64_t rank) {
  const std::string file = absl::StrCat("rank-", rank, ".safetensors");
  return param.empty() ? file : absl::StrCat(param, "/", file);
}

absl::StatusOr<CheckpointTensor> PlanCheckpointTensor(const DTensorSpec& spec,
                                                      absl::string_view data_dir,
                                                      absl::string_view param,
                                                      absl::string_view key) {
  if (HasPartial(spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.ToString(), " has a Partial placement: reduce it before saving"));
  }
  CheckpointTensor t;
  t.name = param.empty() ? std::string(key) : std::string(param);
  t.dtype = spec.dtype;
  t.shape = spec.shape;
  t.saved_layout = absl::StrCat(PlacementsToString(spec.placements), " on mesh [",
                                absl::StrJoin(spec.mesh.shape(), ", "), "]");
  for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
    const std::vector<int64_t> coord = spec.mesh.CoordinateOfIndex(pos);
    if (!WritesBlock(spec, coord)) continue;
    const LocalShard local = LocalShapeAndOffsetAt(spec, coord);
    t.blocks.push_back(CheckpointBlock{
        absl::StrCat(data_dir, "/", CheckpointFileName(param, spec.mesh.ranks()[pos])),
        std::string(key), local.offset, local.shape});
  }
  return t;
}

absl::Status CheckBlocksTile(const Shape& shape, const std::vector<CheckpointBlock>& blocks) {
  const size_t n = shape.size();
  int64_t covered = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const CheckpointBlock& b = blocks[i];
    if (b.offset.size() != n || b.shape.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("block ", i, " in ", b.file, " has ",
                                                     b.shape.size(), " dims, the tensor ", n));
    }
    for (size_t d = 0; d < n; ++d) {
      if (b.offset[d] < 0 || b.shape[d] < 0 || b.offset[d] > shape[d] - b.shape[d]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "block ", i, " in ", b.file, " at [", absl::StrJoin(b.offset, ", "), "] of shape ",
            ShapeToString(b.shape), " lies outside ", ShapeToString(shape)));
      }
    }
    covered += NumElements(b.shape);
    if (NumElements(b.shape) == 0) continue;
    for (size_t k = 0; k < i; ++k) {
      const CheckpointBlock& o = blocks[k];
      if (NumElements(o.shape) == 0) continue;
      bool overlap = true;
      for (size_t d = 0; d < n && overlap; ++d) {
        overlap = b.offset[d] < o.offset[d] + o.shape[d] && o.offset[d] < b.offset[d] + b.shape[d];
      }
      if (overlap) {
        return absl::InvalidArgumentError(
            absl::StrCat("blocks in ", o.file, " and ", b.file, " overlap"));
      }
    }
  }
  if (covered != NumElements(shape)) {
    return absl::InvalidArgumentError(absl::StrCat("blocks cover ", covered, " of the ",
                                                   NumElements(shape), " elements of ",
                                                   ShapeToString(shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointIndexToJson(const CheckpointIndex& index) {
  nlohmann::ordered_json j;
  j["format"] = std::string(kCheckpointFormat);
  j["version"] = kCheckpointVersion;
  j["data_dir"] = index.data_dir;
  j["tensors"] = nlohmann::ordered_json::array();
  for (const CheckpointTensor& t : index.tensors) {
    nlohmann::ordered_json tj;
    tj["name"] = t.name;
    tj["dtype"] = std::string(DTypeName(t.dtype));
    tj["shape"] = t.shape;
    tj["saved_layout"] = t.saved_layout;
    tj["blocks"] = nlohmann::ordered_json::array();
    for (const CheckpointBlock& b : t.blocks) {
      nlohmann::ordered_json bj;
      bj["file"] = b.file;
      bj["key"] = b.key;
      bj["offset"] = b.offset;
      bj["shape"] = b.shape;
      tj["blocks"].push_back(std::move(bj));
    }
    j["tensors"].push_back(std::move(tj));
  }
  return DumpJson(j);
}

absl::StatusOr<CheckpointIndex> ParseCheckpointIndex(absl::string_view text) {
  ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text));
  if (!j.is_object()) return Bad(absl::StrCat("the index is ", JsonTypeName(j), ", not an object"));
  ASSIGN_OR_RETURN(std::string format, String(j, "format"));
  if (format != kCheckpointFormat) {
    return Bad(absl::StrCat("format '", format, "' is not '", kCheckpointFormat, "'"));
  }
  ASSIGN_OR_RETURN(const nlohmann::json* version, Member(j, "version"));
  ASSIGN_OR_RETURN(int64_t v, JsonInt64(*version));
  if (v != kCheckpointVersion) {
    return Bad(absl::StrCat("version ", v, " is not ", kCheckpointVersion));
  }
  CheckpointIndex index;
  ASSIGN_OR_RETURN(index.data_dir, String(j, "data_dir"));
  // Empty for the index of a `tessera shard` directory, whose files lie in the directory itself.
  if (!index.data_dir.empty() && !IsInsidePath(index.data_dir)) {
    return Bad(absl::StrCat("data_dir '", index.data_dir, "' is not inside the directory"));
  }
  ASSIGN_OR_RETURN(const nlohmann::json* tensors, Member(j, "tensors"));
  if (!tensors->is_array()) return Bad("'tensors' is not a list");
  for (const auto& tj : *tensors) {
    ASSIGN_OR_RETURN(CheckpointTensor t, ParseTensor(tj));
    for (const CheckpointTensor& other : index.tensors) {
      if (other.name == t.name) return Bad(absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    index.tensors.push_back(std::move(t));
  }
  return index;
}

std::vector<ByteCopy> PlanShardReads(const std::vector<CheckpointBlock>& blocks, DType dtype,
                                     const LocalShard& target) {
  const int64_t elem = static_cast<int64_t>(DTypeSize(dtype));
  const size_t n = target.shape.size();
  std::vector<ByteCopy> copies;
  auto add = [&](ByteCopy c) {
    if (!copies.empty()) {
      ByteCopy& last = copies.back();
      if (last.block == c.block && last.source + last.bytes == c.source &&
          last.target + last.bytes == c.target) {
        last.bytes += c.bytes;
        return;
      }
    }
    copies.push_back(c);
  };
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const CheckpointBlock& b = blocks[bi];
    if (b.shape.size() != n || b.offset.size() != n) continue;
    std::vector<int64_t> lo(n), hi(n);
    bool empty = NumElements(target.shape) == 0 || NumElements(b.shape) == 0;
    for (size_t d = 0; d < n && !empty; ++d) {
      lo[d] = std::max(b.offset[d], target.offset[d]);
      hi[d] = std::min(b.offset[d] + b.shape[d], target.offset[d] + target.shape[d]);
      empty = hi[d] <= lo[d];
    }
    if (empty) continue;
    if (n == 0) {
      add(ByteCopy{static_cast<int64_t>(bi), 0, 0, elem});
      continue;
    }
    // Row-major strides (in elements) of the block and of the target shard.
    std::vector<int64_t> bs(n, 1), ts(n, 1);
    for (size_t d = n - 1; d > 0; --d) {
      bs[d - 1] = bs[d] * b.shape[d];
      ts[d - 1] = ts[d] * target.shape[d];
    }
    const int64_t run = (hi[n - 1] - lo[n - 1]) * elem;
    std::vector<int64_t> idx = lo;  // walks the outer dims of the intersection
    while (true) {
      int64_t src = 0, dst = 0;
      for (size_t d = 0; d < n; ++d) {
        src += (idx[d] - b.offset[d]) * bs[d];
        dst += (idx[d] - target.offset[d]) * ts[d];
      }
      add(ByteCopy{static_cast<int64_t>(bi), src * elem, dst * elem, run});
      // Next index of the outer dims, odometer-style; done once the outermost wraps.
      int64_t d = static_cast<int64_t>(n) - 2;
      for (; d >= 0; --d) {
        if (++idx[d] < hi[d]) break;
        idx[d] = lo[d];
      }
      if (d < 0) break;
    }
  }
  return copies;
}

}  // namespace tessera
