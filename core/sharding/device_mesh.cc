#include "core/sharding/device_mesh.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checked_math.h"
#include "core/names.h"
#include "core/status_macros.h"

namespace tessera {

absl::StatusOr<int64_t> DeviceMesh::CheckLayout(absl::string_view device_type, const Shape& shape,
                                                std::span<const std::string> dim_names) {
  if (device_type != "cpu" && device_type != "cuda") {
    return absl::InvalidArgumentError(absl::StrCat("unknown device type ", QuotedName(device_type),
                                                   "; expected 'cpu' or 'cuda'"));
  }
  if (shape.empty()) {
    return absl::InvalidArgumentError("a device mesh needs at least one dim");
  }
  if (shape.size() > static_cast<size_t>(kMaxMeshDims)) {
    return absl::InvalidArgumentError(absl::StrCat("a mesh of ", shape.size(),
                                                   " dims has more than ", kMaxMeshDims,
                                                   ", the most a mesh may have"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("mesh shape ", ShapeToString(shape),
                                                     " has size ", shape[i], " at dim ", i,
                                                     "; every mesh dim needs at least one rank"));
    }
  }
  const std::optional<int64_t> n = CheckedProduct(shape);
  if (!n || *n > kMaxMeshSize) {
    return absl::InvalidArgumentError(absl::StrCat("mesh shape ", ShapeToString(shape),
                                                   " has more than ", kMaxMeshSize,
                                                   " slots, the most a mesh may have"));
  }
  if (!dim_names.empty()) {
    if (dim_names.size() != shape.size()) {
      std::vector<std::string> shown;  // the first few, each quoted and cut
      for (size_t i = 0; i < dim_names.size() && i < 8; ++i) {
        shown.push_back(QuotedName(dim_names[i], 32));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh_dim_names (", absl::StrJoin(shown, ", "), dim_names.size() > 8 ? ", ..." : "",
          ") has ", dim_names.size(), " names but the mesh shape ", ShapeToString(shape), " has ",
          shape.size(), " dims"));
    }
    absl::flat_hash_set<absl::string_view> seen;
    for (const std::string& name : dim_names) {
      RETURN_IF_ERROR(CheckName(NameKind::kMeshDim, name));
      if (!seen.insert(name).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("mesh_dim_names (", absl::StrJoin(dim_names, ", "), ") repeats '", name,
                         "'; each mesh dim needs a unique name"));
      }
    }
  }
  return *n;
}

absl::StatusOr<DeviceMesh> DeviceMesh::Create(std::string device_type, Shape shape,
                                              std::vector<std::string> dim_names,
                                              std::vector<int64_t> ranks) {
  ASSIGN_OR_RETURN(const int64_t n, CheckLayout(device_type, shape, dim_names));
  if (ranks.empty()) {
    ranks.resize(n);
    for (int64_t i = 0; i < n; ++i) ranks[i] = i;
  } else if (static_cast<int64_t>(ranks.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("mesh shape ", ShapeToString(shape), " has ", n,
                                                   " slots but ", ranks.size(),
                                                   " ranks were given"));
  }
  absl::flat_hash_set<int64_t> seen_ranks;
  for (int64_t r : ranks) {
    if (r < 0) return absl::InvalidArgumentError(absl::StrCat("mesh rank ", r, " is negative"));
    if (!seen_ranks.insert(r).second) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " appears twice in the mesh"));
    }
  }
  DeviceMesh mesh;
  mesh.device_type_ = std::move(device_type);
  mesh.strides_ = ContiguousStrides(shape);
  mesh.shape_ = std::move(shape);
  mesh.dim_names_ = std::move(dim_names);
  mesh.ranks_ = std::move(ranks);
  return mesh;
}

absl::StatusOr<int> DeviceMesh::DimIndex(absl::string_view name) const {
  for (int i = 0; i < ndim(); ++i) {
    if (!dim_names_.empty() && dim_names_[i] == name) return i;
  }
  return absl::NotFoundError(absl::StrCat("mesh has no dim named ", QuotedName(name),
                                          "; its dims are (", absl::StrJoin(dim_names_, ", "),
                                          ")"));
}

bool DeviceMesh::Contains(int64_t rank) const {
  return std::find(ranks_.begin(), ranks_.end(), rank) != ranks_.end();
}

absl::StatusOr<std::vector<int64_t>> DeviceMesh::CoordinateOf(int64_t rank) const {
  auto it = std::find(ranks_.begin(), ranks_.end(), rank);
  if (it == ranks_.end()) {
    return absl::NotFoundError(absl::StrCat("rank ", rank, " is not in ", ToString()));
  }
  return CoordinateOfIndex(it - ranks_.begin());
}

std::vector<int64_t> DeviceMesh::CoordinateOfIndex(int64_t index) const {
  std::vector<int64_t> c(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) {
    c[i] = index / strides_[i];
    index %= strides_[i];
  }
  return c;
}

int64_t DeviceMesh::IndexOfCoordinate(std::span<const int64_t> coordinate) const {
  int64_t index = 0;
  for (size_t i = 0; i < shape_.size(); ++i) index += coordinate[i] * strides_[i];
  return index;
}

int64_t DeviceMesh::RankAt(std::span<const int64_t> coordinate) const {
  return ranks_[IndexOfCoordinate(coordinate)];
}

std::vector<int64_t> DeviceMesh::GroupAlong(int mesh_dim,
                                            std::span<const int64_t> coordinate) const {
  std::vector<int64_t> c(coordinate.begin(), coordinate.end());
  std::vector<int64_t> group(shape_[mesh_dim]);
  for (int64_t i = 0; i < shape_[mesh_dim]; ++i) {
    c[mesh_dim] = i;
    group[i] = RankAt(c);
  }
  return group;
}

std::vector<std::vector<int64_t>> DeviceMesh::GroupsAlong(int mesh_dim) const {
  std::vector<std::vector<int64_t>> groups;
  for (int64_t index = 0; index < size(); ++index) {
    std::vector<int64_t> c = CoordinateOfIndex(index);
    if (c[mesh_dim] == 0) groups.push_back(GroupAlong(mesh_dim, c));
  }
  return groups;
}

absl::StatusOr<DeviceMesh> DeviceMesh::Slice(std::span<const std::string> names,
                                             int64_t rank) const {
  ASSIGN_OR_RETURN(std::vector<int64_t> coord, CoordinateOf(rank));
  if (names.empty())
    return absl::InvalidArgumentError("slicing a mesh needs at least one dim name");
  std::vector<int> dims;
  for (const std::string& n : names) {
    ASSIGN_OR_RETURN(int d, DimIndex(n));
    if (!dims.empty() && d <= dims.back()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid mesh_dim_names (", absl::StrJoin(names, ", "),
          ") to slice: mesh dims must be given in ascending order of this mesh's dims (",
          absl::StrJoin(dim_names_, ", "), ")"));
    }
    dims.push_back(d);
  }
  Shape sub_shape;
  std::vector<std::string> sub_names;
  for (int d : dims) {
    sub_shape.push_back(shape_[d]);
    sub_names.push_back(dim_names_[d]);
  }
  std::vector<int64_t> sub_ranks;
  const int64_t n = NumElements(sub_shape);
  std::vector<int64_t> sub_strides = ContiguousStrides(sub_shape);
  std::vector<int64_t> c = coord;
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i;
    for (size_t j = 0; j < dims.size(); ++j) {
      c[dims[j]] = rem / sub_strides[j];
      rem %= sub_strides[j];
    }
    sub_ranks.push_back(RankAt(c));
  }
  return Create(device_type_, std::move(sub_shape), std::move(sub_names), std::move(sub_ranks));
}

absl::StatusOr<std::vector<DeviceMesh>> DeviceMesh::SliceAll(
    std::span<const std::string> names) const {
  std::vector<DeviceMesh> out;
  absl::flat_hash_set<int64_t> covered;
  for (int64_t r : ranks_) {
    if (covered.contains(r)) continue;
    ASSIGN_OR_RETURN(DeviceMesh sub, Slice(names, r));
    covered.insert(sub.ranks_.begin(), sub.ranks_.end());
    out.push_back(std::move(sub));
  }
  return out;
}

absl::StatusOr<DeviceMesh> DeviceMesh::Flatten(std::string name) const {
  if (name.empty()) {
    name = dim_names_.empty() ? "flat" : absl::StrJoin(dim_names_, "_");
  }
  return Create(device_type_, Shape{size()}, {std::move(name)}, ranks_);
}

std::string DeviceMesh::ToString() const {
  // Nested brackets of ranks, as torch prints mesh.mesh.
  std::string body;
  std::vector<int64_t> c(shape_.size(), 0);
  for (int64_t i = 0; i < size(); ++i) {
    std::vector<int64_t> ci = CoordinateOfIndex(i);
    int opens = 0;
    for (int d = ndim() - 1; d >= 0 && ci[d] == 0; --d) ++opens;
    if (i > 0) body += ", ";
    body += std::string(opens, '[');
    absl::StrAppend(&body, ranks_[i]);
    int closes = 0;
    for (int d = ndim() - 1; d >= 0 && ci[d] == shape_[d] - 1; --d) ++closes;
    body += std::string(closes, ']');
  }
  std::string s = absl::StrCat("DeviceMesh('", device_type_, "', ", body);
  if (!dim_names_.empty()) {
    // A Python tuple: ('dp', 'tp'), or ('tp',) for one name.
    absl::StrAppend(&s, ", mesh_dim_names=('", absl::StrJoin(dim_names_, "', '"), "'",
                    dim_names_.size() == 1 ? ",)" : ")");
  }
  return s + ")";
}

}  // namespace tessera
