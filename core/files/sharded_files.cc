#include "core/files/sharded_files.h"

#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/files/safetensors.h"
#include "core/status_context.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

std::string JoinInts(const std::vector<int64_t>& v) { return absl::StrJoin(v, ","); }

absl::StatusOr<std::vector<int64_t>> SplitInts(absl::string_view text) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("'", part, "' is not an integer"));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

std::map<std::string, std::string> SpecMetadata(const DTensorSpec& spec) {
  return {{"tessera.device", spec.mesh.device_type()},
          {"tessera.mesh_shape", JoinInts(spec.mesh.shape())},
          {"tessera.mesh_dim_names", absl::StrJoin(spec.mesh.dim_names(), ",")},
          {"tessera.mesh_ranks", JoinInts(spec.mesh.ranks())},
          {"tessera.placements", PlacementsToString(spec.placements)},
          {"tessera.shape", JoinInts(spec.shape)},
          {"tessera.dtype", std::string(DTypeName(spec.dtype))}};
}

absl::StatusOr<DTensorSpec> SpecFromMetadata(const std::map<std::string, std::string>& meta,
                                             const std::string& file) {
  auto get = [&](const char* key) -> absl::StatusOr<std::string> {
    auto it = meta.find(key);
    if (it == meta.end()) {
      return absl::InvalidArgumentError(absl::StrCat(file, " has no metadata key '", key, "'"));
    }
    return it->second;
  };
  auto annotate = [&](const absl::Status& s) { return WithContext(file, s); };
  absl::StatusOr<std::string> device = get("tessera.device"),
                              mesh_shape = get("tessera.mesh_shape"),
                              names = get("tessera.mesh_dim_names"),
                              ranks = get("tessera.mesh_ranks"),
                              placements = get("tessera.placements"), shape = get("tessera.shape"),
                              dtype = get("tessera.dtype");
  for (const auto* s : {&device, &mesh_shape, &names, &ranks, &placements, &shape, &dtype}) {
    if (!s->ok()) return s->status();
  }
  absl::StatusOr<std::vector<int64_t>> mesh_dims = SplitInts(*mesh_shape);
  absl::StatusOr<std::vector<int64_t>> rank_list = SplitInts(*ranks);
  absl::StatusOr<std::vector<int64_t>> dims = SplitInts(*shape);
  absl::StatusOr<DType> dt = ParseDType(*dtype);
  absl::StatusOr<std::vector<Placement>> ps = ParsePlacements(*placements);
  for (const absl::Status& s :
       {mesh_dims.status(), rank_list.status(), dims.status(), dt.status(), ps.status()}) {
    if (!s.ok()) return annotate(s);
  }
  std::vector<std::string> dim_names;
  if (!names->empty()) dim_names = absl::StrSplit(*names, ',');
  absl::StatusOr<DeviceMesh> mesh =
      DeviceMesh::Create(*device, *mesh_dims, std::move(dim_names), *rank_list);
  if (!mesh.ok()) return annotate(mesh.status());
  absl::StatusOr<DTensorSpec> spec = MakeDTensorSpec(*mesh, *ps, *dims, *dt);
  if (!spec.ok()) return annotate(spec.status());
  return spec;
}

std::string ShardFilePath(absl::string_view dir, int64_t rank) {
  return (std::filesystem::path(std::string(dir)) / absl::StrCat("rank-", rank, ".safetensors"))
      .string();
}

absl::Status WriteShardedTensor(absl::string_view dir, absl::string_view name,
                                const ShardedTensor& tensor) {
  const DTensorSpec& spec = tensor.spec;
  if (static_cast<int64_t>(tensor.shards.size()) != spec.mesh.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", tensor.shards.size(), " shards for a mesh of ", spec.mesh.size()));
  }
  std::error_code ec;
  std::filesystem::create_directories(std::string(dir), ec);
  if (ec) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  }
  for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
    const LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(pos));
    const HostTensor& shard = tensor.shards[pos];
    if (shard.shape() != local.shape || shard.dtype() != spec.dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat("shard of rank ", spec.mesh.ranks()[pos], " is ", DTypeName(shard.dtype()),
                       ShapeToString(shard.shape()), " but the spec gives it ",
                       DTypeName(spec.dtype), ShapeToString(local.shape)));
    }
    SafetensorsFile file;
    file.metadata = SpecMetadata(spec);
    file.metadata["tessera.rank"] = absl::StrCat(spec.mesh.ranks()[pos]);
    file.metadata["tessera.offset"] = JoinInts(local.offset);
    file.tensors.emplace(std::string(name), shard.Clone());
    RETURN_IF_ERROR(WriteSafetensorsFile(ShardFilePath(dir, spec.mesh.ranks()[pos]), file));
  }
  return absl::OkStatus();
}

absl::StatusOr<ShardedTensor> ReadShardedTensor(absl::string_view dir, absl::string_view name) {
  // Rank 0's file may not exist under custom ranks: find any rank file to learn the spec.
  std::string first;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(dir), ec)) {
    const std::string f = entry.path().filename().string();
    if (f.rfind("rank-", 0) == 0 && entry.path().extension() == ".safetensors") {
      first = entry.path().string();
      break;
    }
  }
  if (ec)
    return absl::NotFoundError(absl::StrCat("cannot read directory ", dir, ": ", ec.message()));
  if (first.empty()) {
    return absl::NotFoundError(absl::StrCat("no rank-*.safetensors files in ", dir));
  }
  ASSIGN_OR_RETURN(SafetensorsFile head, ReadSafetensorsFile(first));
  ASSIGN_OR_RETURN(DTensorSpec spec, SpecFromMetadata(head.metadata, first));

  ShardedTensor out{spec, {}};
  for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
    const std::string path = ShardFilePath(dir, spec.mesh.ranks()[pos]);
    ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensorsFile(path));
    ASSIGN_OR_RETURN(DTensorSpec other, SpecFromMetadata(file.metadata, path));
    if (other.ToString() != spec.ToString()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " describes ", other.ToString(), " but ",
                                                     first, " describes ", spec.ToString()));
    }
    auto it = file.tensors.find(std::string(name));
    if (it == file.tensors.end()) {
      return absl::NotFoundError(absl::StrCat(path, " has no tensor named '", name, "'"));
    }
    const LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(pos));
    if (it->second.shape() != local.shape || it->second.dtype() != spec.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " holds ", DTypeName(it->second.dtype()), ShapeToString(it->second.shape()),
          " but the spec gives this rank ", DTypeName(spec.dtype), ShapeToString(local.shape)));
    }
    out.shards.push_back(std::move(it->second));
  }
  return out;
}

}  // namespace tessera
