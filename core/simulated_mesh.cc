#include "core/simulated_mesh.h"

#include "absl/strings/str_cat.h"
#include "core/chunk.h"
#include "core/elementwise_reduce.h"
#include "core/status_macros.h"

namespace tessera {
SimulatedMesh::SimulatedMesh(const DeviceMesh& mesh)
    : mesh_(mesh), sent_(mesh.size(), 0), received_(mesh.size(), 0) {}

void SimulatedMesh::ResetTraffic() {
  std::fill(sent_.begin(), sent_.end(), 0);
  std::fill(received_.begin(), received_.end(), 0);
}

void SimulatedMesh::Transfer(int64_t from, int64_t to, int64_t bytes) {
  if (from == to) return;
  sent_[from] += bytes;
  received_[to] += bytes;
}

absl::StatusOr<std::vector<HostTensor>> SimulatedMesh::Distribute(const HostTensor& full,
                                                                  const DTensorSpec& spec) const {
  if (full.shape() != spec.shape || full.dtype() != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", DTypeName(full.dtype()),
                                                   ShapeToString(full.shape()),
                                                   " does not match the spec ", spec.ToString()));
  }
  std::vector<HostTensor> shards;
  for (int64_t pos = 0; pos < mesh_.size(); ++pos) {
    const std::vector<int64_t> coord = mesh_.CoordinateOfIndex(pos);
    const LocalShard local = LocalShapeAndOffsetAt(spec, coord);
    ASSIGN_OR_RETURN(HostTensor shard, PackBlock(full, local.offset, local.shape));
    for (int m = 0; m < mesh_.ndim(); ++m) {
      const Placement& p = spec.placements[m];
      if (p.is_partial() && coord[m] != 0 && PartitionUsesIdentity(p.op)) {
        FillIdentity(p.op, spec.dtype, shard.data(), shard.num_elements());
      }
    }
    shards.push_back(std::move(shard));
  }
  return shards;
}

absl::StatusOr<std::vector<HostTensor>> SimulatedMesh::Redistribute(
    const DTensorSpec& src, const RedistributePlan& plan, std::vector<HostTensor> shards) {
  if (static_cast<int64_t>(shards.size()) != mesh_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", shards.size(), " shards for a mesh of ", mesh_.size(), " ranks"));
  }
  DTensorSpec spec = src;
  for (const RedistributeStep& step : plan.steps) {
    if (spec.placements[step.mesh_dim] != step.from) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plan step on mesh dim ", step.mesh_dim, " starts from ", PlacementToString(step.from),
          " but the tensor is ", PlacementsToString(spec.placements)));
    }
    RETURN_IF_ERROR(RunStep(spec, step, shards));
    spec.placements[step.mesh_dim] = step.to;
  }
  return shards;
}

absl::Status SimulatedMesh::RunStep(const DTensorSpec& spec, const RedistributeStep& step,
                                    std::vector<HostTensor>& shards) {
  const int m = step.mesh_dim;
  const int64_t k = mesh_.size(m);
  const int64_t stride = ContiguousStrides(mesh_.shape())[m];
  DTensorSpec after = spec;
  after.placements[m] = step.to;
  const int64_t elem = static_cast<int64_t>(DTypeSize(spec.dtype));

  for (int64_t first = 0; first < mesh_.size(); ++first) {
    const std::vector<int64_t> coord = mesh_.CoordinateOfIndex(first);
    if (coord[m] != 0) continue;
    std::vector<int64_t> group(k);
    for (int64_t q = 0; q < k; ++q) group[q] = first + q * stride;
    const Shape after_shape = LocalShapeAndOffsetAt(after, coord).shape;

    switch (step.collective) {
      case Collective::kLocalChunk: {
        for (int64_t q = 0; q < k; ++q) {
          HostTensor& t = shards[group[q]];
          const ChunkRange r = ChunkOf(t.shape()[step.to.dim], k, q);
          ASSIGN_OR_RETURN(t, SliceAlong(t, step.to.dim, r.offset, r.size));
        }
        break;
      }
      case Collective::kLocalPartition: {
        if (!PartitionUsesIdentity(step.to.op)) break;
        for (int64_t q = 1; q < k; ++q) {
          HostTensor& t = shards[group[q]];
          FillIdentity(step.to.op, t.dtype(), t.data(), t.num_elements());
        }
        break;
      }
      case Collective::kAllGather: {
        const int d = step.from.dim;
        const int64_t n = after_shape[d];
        const int64_t c = ChunkSize(n, k);
        ASSIGN_OR_RETURN(HostTensor out, HostTensor::Zeros(spec.dtype, after_shape));
        for (int64_t q = 0; q < k; ++q) {
          const ChunkRange r = ChunkOf(n, k, q);
          ASSIGN_OR_RETURN(const HostTensor padded,
                           PadTo(shards[group[q]], WithDimSize(after_shape, d, c)));
          for (int64_t to = 0; to < k; ++to) {
            Transfer(group[q], group[to], static_cast<int64_t>(padded.nbytes()));
          }
          ASSIGN_OR_RETURN(const HostTensor rows, SliceAlong(padded, d, 0, r.size));
          RETURN_IF_ERROR(PlaceAlong(rows, d, r.offset, out));
        }
        for (int64_t q = 0; q < k; ++q) shards[group[q]] = out.Clone();
        break;
      }
      case Collective::kAllReduce: {
        const Shape shape = shards[group[0]].shape();
        const int64_t n = NumElements(shape);
        const int64_t c = ChunkSize(n, k);
        std::vector<HostTensor> flat;
        for (int64_t q = 0; q < k; ++q) {
          ASSIGN_OR_RETURN(HostTensor f, HostTensor::Zeros(spec.dtype, {k * c}));
          std::memcpy(f.data(), shards[group[q]].data(), shards[group[q]].nbytes());
          flat.push_back(std::move(f));
        }
        ASSIGN_OR_RETURN(HostTensor out, HostTensor::Zeros(spec.dtype, {k * c}));
        for (int64_t j = 0; j < k; ++j) {  // reduce_scatter: rank j reduces block j
          std::byte* acc = out.data() + j * c * elem;
          std::memcpy(acc, flat[0].data() + j * c * elem, c * elem);
          Transfer(group[0], group[j], c * elem);
          for (int64_t q = 1; q < k; ++q) {
            ReduceInto(step.from.op, spec.dtype, acc, flat[q].data() + j * c * elem, c);
            Transfer(group[q], group[j], c * elem);
          }
          if (step.from.op == ReduceOp::kAvg) DivideInPlace(spec.dtype, acc, c, k);
          for (int64_t to = 0; to < k; ++to) Transfer(group[j], group[to], c * elem);  // gather
        }
        ASSIGN_OR_RETURN(
            HostTensor result,
            HostTensor::FromBytes(spec.dtype, shape, {out.data(), static_cast<size_t>(n * elem)}));
        for (int64_t q = 0; q < k; ++q) shards[group[q]] = result.Clone();
        break;
      }
      case Collective::kReduceScatter: {
        const int d = step.to.dim;
        const Shape shape = shards[group[0]].shape();
        const int64_t n = shape[d];
        const int64_t c = ChunkSize(n, k);
        std::vector<HostTensor> padded;
        for (int64_t q = 0; q < k; ++q) {
          ASSIGN_OR_RETURN(HostTensor padded_q,
                           PadTo(shards[group[q]], WithDimSize(shape, d, k * c)));
          padded.push_back(std::move(padded_q));
        }
        for (int64_t j = 0; j < k; ++j) {
          ASSIGN_OR_RETURN(HostTensor acc, SliceAlong(padded[0], d, j * c, c));
          Transfer(group[0], group[j], static_cast<int64_t>(acc.nbytes()));
          for (int64_t q = 1; q < k; ++q) {
            ASSIGN_OR_RETURN(const HostTensor block, SliceAlong(padded[q], d, j * c, c));
            ReduceInto(step.from.op, spec.dtype, acc.data(), block.data(), block.num_elements());
            Transfer(group[q], group[j], static_cast<int64_t>(block.nbytes()));
          }
          if (step.from.op == ReduceOp::kAvg) {
            DivideInPlace(spec.dtype, acc.data(), acc.num_elements(), k);
          }
          ASSIGN_OR_RETURN(shards[group[j]], SliceAlong(acc, d, 0, ChunkOf(n, k, j).size));
        }
        break;
      }
      case Collective::kAllToAll: {
        const int i = step.from.dim;
        const int j = step.to.dim;
        const int64_t ni = after_shape[i];
        const int64_t nj = shards[group[0]].shape()[j];
        const int64_t ci = ChunkSize(ni, k);
        const int64_t cj = ChunkSize(nj, k);
        std::vector<HostTensor> padded;
        for (int64_t p = 0; p < k; ++p) {
          const Shape& shape = shards[group[p]].shape();
          ASSIGN_OR_RETURN(
              HostTensor padded_p,
              PadTo(shards[group[p]], WithDimSize(WithDimSize(shape, i, ci), j, k * cj)));
          padded.push_back(std::move(padded_p));
        }
        for (int64_t q = 0; q < k; ++q) {
          const ChunkRange rj = ChunkOf(nj, k, q);
          ASSIGN_OR_RETURN(
              HostTensor out,
              HostTensor::Zeros(spec.dtype,
                                WithDimSize(WithDimSize(padded[0].shape(), i, ni), j, rj.size)));
          for (int64_t p = 0; p < k; ++p) {
            // p sends to q
            ASSIGN_OR_RETURN(const HostTensor block, SliceAlong(padded[p], j, q * cj, cj));
            Transfer(group[p], group[q], static_cast<int64_t>(block.nbytes()));
            const ChunkRange ri = ChunkOf(ni, k, p);
            ASSIGN_OR_RETURN(const HostTensor rows, SliceAlong(block, i, 0, ri.size));
            ASSIGN_OR_RETURN(const HostTensor kept, SliceAlong(rows, j, 0, rj.size));
            RETURN_IF_ERROR(PlaceAlong(kept, i, ri.offset, out));
          }
          shards[group[q]] = std::move(out);  // group members other than q are read from padded
        }
        break;
      }
    }
    for (int64_t q = 0; q < k; ++q) {
      const Shape want = LocalShapeAndOffsetAt(after, mesh_.CoordinateOfIndex(group[q])).shape;
      if (shards[group[q]].shape() != want) {
        return absl::InternalError(absl::StrCat(CollectiveName(step.collective), " on mesh dim ", m,
                                                " left rank position ", group[q], " with shape ",
                                                ShapeToString(shards[group[q]].shape()),
                                                ", expected ", ShapeToString(want)));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HostTensor> SimulatedMesh::FullTensor(const DTensorSpec& spec,
                                                     std::vector<HostTensor> shards) {
  const std::vector<Placement> replicated(mesh_.ndim(), Placement::Replicate());
  ASSIGN_OR_RETURN(RedistributePlan plan, PlanRedistribute(spec, replicated));
  ASSIGN_OR_RETURN(std::vector<HostTensor> out, Redistribute(spec, plan, std::move(shards)));
  return std::move(out[0]);
}

absl::StatusOr<HostTensor> AssembleShards(const DTensorSpec& spec,
                                          const std::vector<HostTensor>& shards) {
  if (HasPartial(spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot assemble ", spec.ToString(), " by placement: it has a Partial dim"));
  }
  ASSIGN_OR_RETURN(HostTensor full, HostTensor::Zeros(spec.dtype, spec.shape));
  for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
    const LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(pos));
    if (shards[pos].shape() != local.shape) {
      return absl::InvalidArgumentError(absl::StrCat("shard at position ", pos, " has shape ",
                                                     ShapeToString(shards[pos].shape()),
                                                     ", expected ", ShapeToString(local.shape)));
    }
    RETURN_IF_ERROR(UnpackBlock(shards[pos], local.offset, full));
  }
  return full;
}

}  // namespace tessera
