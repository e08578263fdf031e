#include "core/sharding/view_ops.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checked_math.h"
#include "core/status_context.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

ViewDim Dims(std::vector<int> sources) {
  ViewDim d;
  d.kind = ViewDim::Kind::kDims;
  d.sources = std::move(sources);
  return d;
}

ViewDim Singleton() { return ViewDim{}; }

ViewDim NewDim(int64_t size) {
  ViewDim d;
  d.kind = ViewDim::Kind::kNewDim;
  d.size = size;
  return d;
}

// Split.new of torch: a group of one is the merged dims themselves; a piece of size 1 is a
// singleton; the other pieces index the group without its 1s.
ViewDim SplitPiece(const std::vector<int>& sources, const std::vector<int64_t>& group, int piece) {
  if (group.size() == 1) return sources.empty() ? Singleton() : Dims(sources);
  if (group[piece] == 1) return Singleton();
  ViewDim d;
  d.kind = ViewDim::Kind::kSplit;
  d.sources = sources;
  for (int i = 0; i < static_cast<int>(group.size()); ++i) {
    if (group[i] == 1) continue;
    if (i == piece) d.piece = static_cast<int>(d.group.size());
    d.group.push_back(group[i]);
  }
  return d;
}

// `to` with its -1 inferred from `numel`, as torch's infer_size.
absl::StatusOr<Shape> InferSize(int64_t numel, std::span<const int64_t> to, const std::string& op) {
  Shape out(to.begin(), to.end());
  std::optional<int> infer;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(out.size()); ++i) {
    if (out[i] == -1) {
      if (infer.has_value()) {
        return absl::InvalidArgumentError(absl::StrCat(op, ": only one dimension can be inferred"));
      }
      infer = i;
    } else if (out[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": invalid shape dimension ", out[i], " in ", ShapeToString(to)));
    } else {
      const std::optional<int64_t> product = CheckedMul(known, out[i]);
      if (!product.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": shape ", ShapeToString(to), " has more elements than int64"));
      }
      known = *product;
    }
  }
  if (infer.has_value()) {
    if (known == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": cannot reshape a tensor of ", numel, " elements into shape ", ShapeToString(to),
          " because the unspecified dimension size -1 can be any value and is ambiguous"));
    }
    if (numel % known == 0) {
      out[*infer] = numel / known;
      return out;
    }
  } else if (known == numel) {
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": shape '", ShapeToString(to), "' is invalid for input of size ", numel));
}

// The product of the mesh dims that shard tensor dim `dim`.
int64_t ShardingMeshSize(const DTensorSpec& spec, int dim) {
  int64_t size = 1;
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    const Placement& p = spec.placements[m];
    if (p.is_shard() && p.dim == dim) size *= spec.mesh.size(m);
  }
  return size;
}

}  // namespace

std::string ViewDim::ToString() const {
  auto merged = [&] {
    return sources.size() == 1 ? absl::StrCat("InputDim(", sources[0], ")")
                               : absl::StrCat("Flatten(", absl::StrJoin(sources, ", "), ")");
  };
  switch (kind) {
    case Kind::kDims:
      return merged();
    case Kind::kSplit:
      return absl::StrCat("Split(", merged(), ", [", absl::StrJoin(group, ", "), "], ", piece, ")");
    case Kind::kSingleton:
      return "Singleton()";
    case Kind::kBroadcast:
      return absl::StrCat("Broadcast(InputDim(", sources[0], "), ", size, ")");
    case Kind::kNewDim:
      return absl::StrCat("NewDim(", size, ")");
  }
  return "?";
}

absl::StatusOr<std::vector<ViewDim>> ViewDimMap(const Shape& from, std::span<const int64_t> to,
                                                const std::string& op) {
  const int64_t numel = NumElements(from);
  ASSIGN_OR_RETURN(const Shape out, InferSize(numel, to, op));
  std::vector<ViewDim> map;
  // No element to place: every output dim is new, so no Shard is kept (the input is empty, and
  // making it Replicate moves nothing).
  if (numel == 0) {
    for (int64_t s : out) map.push_back(NewDim(s));
    return map;
  }
  // torch's view_groups: consecutive runs of input and output dims with equal products.
  const int from_len = static_cast<int>(from.size()), to_len = static_cast<int>(out.size());
  int fi = 0, ti = 0;
  while (fi < from_len || ti < to_len) {
    std::vector<int> from_group;
    std::vector<int64_t> to_group;
    int64_t f = 1, t = 1;
    if (fi < from_len) {
      f = from[fi];
      from_group.push_back(fi++);
    }
    if (ti < to_len) {
      t = out[ti];
      to_group.push_back(out[ti++]);
    }
    if (f == 1 && t != 1) {
      --ti;  // an input dim of size 1 that maps to nothing
      to_group.clear();
    } else if (f != 1 && t == 1) {
      --fi;  // an output dim of size 1 from nothing
      from_group.clear();
    } else {
      while (f != t) {
        if (f < t) {
          f *= from[fi];
          from_group.push_back(fi++);
        } else {
          t *= out[ti];
          to_group.push_back(out[ti++]);
        }
      }
    }
    if (to_group.empty()) continue;
    std::vector<int> sources;
    for (int d : from_group) {
      if (from[d] != 1) sources.push_back(d);
    }
    for (int i = 0; i < static_cast<int>(to_group.size()); ++i) {
      map.push_back(SplitPiece(sources, to_group, i));
    }
  }
  return map;
}

absl::StatusOr<std::vector<ViewDim>> UnsqueezeDimMap(const Shape& from, int dim) {
  const int rank = static_cast<int>(from.size());
  ASSIGN_OR_RETURN(const int d, NormalizeDim(dim, rank + 1));
  std::vector<ViewDim> map;
  for (int i = 0; i < rank; ++i) {
    if (i == d) map.push_back(Singleton());
    map.push_back(Dims({i}));
  }
  if (d == rank) map.push_back(Singleton());
  return map;
}

absl::StatusOr<std::vector<ViewDim>> SqueezeDimMap(const Shape& from, int dim) {
  const int rank = static_cast<int>(from.size());
  if (rank == 0) return std::vector<ViewDim>{};
  ASSIGN_OR_RETURN(const int d, NormalizeDim(dim, rank));
  std::vector<ViewDim> map;
  for (int i = 0; i < rank; ++i) {
    if (i == d && from[i] == 1) continue;  // squeeze of a dim that is not 1 keeps it, as torch
    map.push_back(Dims({i}));
  }
  return map;
}

absl::StatusOr<std::vector<ViewDim>> PermuteDimMap(const Shape& from, std::span<const int> dims) {
  const int rank = static_cast<int>(from.size());
  if (static_cast<int>(dims.size()) != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("permute: ", dims.size(), " dims given for a tensor of ", rank, " dims"));
  }
  std::vector<bool> seen(rank, false);
  std::vector<ViewDim> map;
  for (int dim : dims) {
    ASSIGN_OR_RETURN(const int d, NormalizeDim(dim, rank));
    if (seen[d]) {
      return absl::InvalidArgumentError(absl::StrCat("permute: dim ", dim, " appears twice in [",
                                                     absl::StrJoin(dims, ", "), "]"));
    }
    seen[d] = true;
    map.push_back(Dims({d}));
  }
  return map;
}

absl::StatusOr<std::vector<ViewDim>> TransposeDimMap(const Shape& from, int dim0, int dim1) {
  const int rank = static_cast<int>(from.size());
  ASSIGN_OR_RETURN(const int a, NormalizeDim(dim0, std::max(rank, 1)));
  ASSIGN_OR_RETURN(const int b, NormalizeDim(dim1, std::max(rank, 1)));
  std::vector<int> dims(rank);
  for (int i = 0; i < rank; ++i) dims[i] = i;
  if (rank > 0) std::swap(dims[a], dims[b]);
  return PermuteDimMap(from, dims);
}

absl::StatusOr<std::vector<ViewDim>> ExpandDimMap(const Shape& from,
                                                  std::span<const int64_t> sizes) {
  const int rank = static_cast<int>(from.size());
  const int out_rank = static_cast<int>(sizes.size());
  if (out_rank < rank) {
    return absl::InvalidArgumentError(absl::StrCat("expand: the number of sizes given (", out_rank,
                                                   ") must be at least the tensor's dims (", rank,
                                                   ")"));
  }
  std::vector<ViewDim> map;
  const int lead = out_rank - rank;
  for (int i = 0; i < out_rank; ++i) {
    const int64_t s = sizes[i];
    if (i < lead) {
      if (s < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "expand: size -1 is not allowed in a leading, non-existing dimension ", i));
      }
      map.push_back(NewDim(s));
      continue;
    }
    const int d = i - lead;
    if (s == -1 || s == from[d]) {
      map.push_back(Dims({d}));
    } else if (from[d] == 1 && s >= 0) {
      ViewDim b;
      b.kind = ViewDim::Kind::kBroadcast;
      b.sources = {d};
      b.size = s;
      map.push_back(std::move(b));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "expand: the expanded size of the tensor (", s, ") must match the existing size (",
          from[d], ") at non-singleton dimension ", i, ".  Target sizes: ", ShapeToString(sizes),
          ".  Tensor sizes: ", ShapeToString(from)));
    }
  }
  return map;
}

absl::StatusOr<std::vector<ViewDim>> FlattenDimMap(const Shape& from, int start_dim, int end_dim) {
  const int rank = static_cast<int>(from.size());
  if (rank == 0) return ViewDimMap(from, std::vector<int64_t>{1}, "flatten");
  ASSIGN_OR_RETURN(const int a, NormalizeDim(start_dim, rank));
  ASSIGN_OR_RETURN(const int b, NormalizeDim(end_dim, rank));
  if (a > b) {
    return absl::InvalidArgumentError(
        absl::StrCat("flatten: start_dim ", start_dim, " comes after end_dim ", end_dim));
  }
  Shape to(from.begin(), from.begin() + a);
  to.push_back(NumElements(std::span<const int64_t>(from).subspan(a, b - a + 1)));
  to.insert(to.end(), from.begin() + b + 1, from.end());
  return ViewDimMap(from, to, "flatten");
}

absl::StatusOr<std::vector<ViewDim>> UnflattenDimMap(const Shape& from, int dim,
                                                     std::span<const int64_t> sizes) {
  const int rank = static_cast<int>(from.size());
  ASSIGN_OR_RETURN(const int d, NormalizeDim(dim, rank));
  if (sizes.empty()) {
    return absl::InvalidArgumentError("unflatten: sizes must be non-empty");
  }
  absl::StatusOr<Shape> inner = InferSize(from[d], sizes, "unflatten");
  if (!inner.ok()) return WithContext(absl::StrCat("unflatten of dim ", dim), inner.status());
  Shape to(from.begin(), from.begin() + d);
  to.insert(to.end(), inner->begin(), inner->end());
  to.insert(to.end(), from.begin() + d + 1, from.end());
  return ViewDimMap(from, to, "unflatten");
}

Shape ViewOutputShape(const Shape& from, const std::vector<ViewDim>& map) {
  Shape out;
  for (const ViewDim& v : map) {
    switch (v.kind) {
      case ViewDim::Kind::kDims: {
        int64_t s = 1;
        for (int d : v.sources) s *= from[d];
        out.push_back(s);
        break;
      }
      case ViewDim::Kind::kSplit:
        out.push_back(v.group[v.piece]);
        break;
      case ViewDim::Kind::kSingleton:
        out.push_back(1);
        break;
      case ViewDim::Kind::kBroadcast:
      case ViewDim::Kind::kNewDim:
        out.push_back(v.size);
        break;
    }
  }
  return out;
}

absl::StatusOr<ViewSharding> PropagateView(const DTensorSpec& input,
                                           const std::vector<ViewDim>& map) {
  const int rank = static_cast<int>(input.shape.size());
  for (const ViewDim& v : map) {
    for (int d : v.sources) {
      if (d < 0 || d >= rank) {
        return absl::InvalidArgumentError(
            absl::StrCat("view dim ", v.ToString(), " names a dim past the input's ", rank));
      }
    }
  }
  // Where each input dim can stay sharded: the output dim it leads, if every rank's block of it
  // stays one block of that output dim (a merge or split of a sharded dim needs it divisible by
  // the mesh dims that shard it; a dim merged behind another, broadcast or dropped cannot).
  std::vector<std::optional<int>> kept(rank);
  for (int j = 0; j < static_cast<int>(map.size()); ++j) {
    const ViewDim& v = map[j];
    if (v.sources.empty() || v.kind == ViewDim::Kind::kBroadcast) continue;
    const int lead = v.sources.front();
    const int64_t shards = ShardingMeshSize(input, lead);
    bool whole = true;
    if (v.sources.size() > 1) whole = input.shape[lead] % shards == 0;
    if (v.kind == ViewDim::Kind::kSplit) whole = whole && v.piece == 0 && v.group[0] % shards == 0;
    if (whole) kept[lead] = j;
  }
  ViewSharding out;
  out.shape = ViewOutputShape(input.shape, map);
  for (const Placement& p : input.placements) {
    if (p.is_shard() && !kept[p.dim].has_value()) {
      out.input.push_back(Placement::Replicate());
      out.output.push_back(Placement::Replicate());
    } else {
      out.input.push_back(p);
      out.output.push_back(p.is_shard() ? Placement::Shard(*kept[p.dim]) : p);
    }
  }
  return out;
}

}  // namespace tessera
