#include "core/simulated_mesh.h"

#include "absl/strings/str_cat.h"
#include "core/chunk.h"
#include "core/elementwise_reduce.h"

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
    absl::StatusOr<HostTensor> shard = PackBlock(full, local.offset, local.shape);
    if (!shard.ok()) return shard.status();
    for (int m = 0; m < mesh_.ndim(); ++m) {
      const Placement& p = spec.placements[m];
      if (p.is_partial() && coord[m] != 0 && PartitionUsesIdentity(p.op)) {
        FillIdentity(p.op, spec.dtype, shard->data(), shard->num_elements());
      }
    }
    shards.push_back(*std::move(shard));
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
    if (absl::Status s = RunStep(spec, step, shards); !s.ok()) return s;
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
          t = SliceAlong(t, step.to.dim, r.offset, r.size).value();
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
        HostTensor out = HostTensor::Zeros(spec.dtype, after_shape).value();
        for (int64_t q = 0; q < k; ++q) {
          const ChunkRange r = ChunkOf(n, k, q);
          const HostTensor padded = PadTo(shards[group[q]], WithDimSize(after_shape, d, c)).value();
          for (int64_t to = 0; to < k; ++to) {
            Transfer(group[q], group[to], static_cast<int64_t>(padded.nbytes()));
          }
          const HostTensor rows = SliceAlong(padded, d, 0, r.size).value();
          if (absl::Status s = PlaceAlong(rows, d, r.offset, out); !s.ok()) return s;
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
          HostTensor f = HostTensor::Zeros(spec.dtype, {k * c}).value();
          std::memcpy(f.data(), shards[group[q]].data(), shards[group[q]].nbytes());
          flat.push_back(std::move(f));
        }
        HostTensor out = HostTensor::Zeros(spec.dtype, {k * c}).value();
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
        HostTensor result =
            HostTensor::FromBytes(spec.dtype, shape, {out.data(), static_cast<size_t>(n * elem)})
                .value();
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
          padded.push_back(PadTo(shards[group[q]], WithDimSize(shape, d, k * c)).value());
        }
        for (int64_t j = 0; j < k; ++j) {
          HostTensor acc = SliceAlong(padded[0], d, j * c, c).value();
          Transfer(group[0], group[j], static_cast<int64_t>(acc.nbytes()));
          for (int64_t q = 1; q < k; ++q) {
            const HostTensor block = SliceAlong(padded[q], d, j * c, c).value();
            ReduceInto(step.from.op, spec.dtype, acc.data(), block.data(), block.num_elements());
            Transfer(group[q], group[j], static_cast<int64_t>(block.nbytes()));
          }
          if (step.from.op == ReduceOp::kAvg) {
            DivideInPlace(spec.dtype, acc.data(), acc.num_elements(), k);
          }
          shards[group[j]] = SliceAlong(acc, d, 0, ChunkOf(n, k, j).size).value();
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
          padded.push_back(
              PadTo(shards[group[p]], WithDimSize(WithDimSize(shape, i, ci), j, k * cj)).value());
        }
        for (int64_t q = 0; q < k; ++q) {
          const ChunkRange rj = ChunkOf(nj, k, q);
          HostTensor out =
              HostTensor::Zeros(spec.dtype,
                                WithDimSize(WithDimSize(padded[0].shape(), i, ni), j, rj.size))
                  .value();
          for (int64_t p = 0; p < k; ++p) {
            const HostTensor block = SliceAlong(padded[p], j, q * cj, cj).value();  // p sends to q
            Transfer(group[p], group[q], static_cast<int64_t>(block.nbytes()));
            const ChunkRange ri = ChunkOf(ni, k, p);
            const HostTensor kept =
                SliceAlong(SliceAlong(block, i, 0, ri.size).value(), j, 0, rj.size).value();
            if (absl::Status s = PlaceAlong(kept, i, ri.offset, out); !s.ok()) return s;
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
  absl::StatusOr<RedistributePlan> plan = PlanRedistribute(spec, replicated);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<std::vector<HostTensor>> out = Redistribute(spec, *plan, std::move(shards));
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

absl::StatusOr<HostTensor> AssembleShards(const DTensorSpec& spec,
                                          const std::vector<HostTensor>& shards) {
  if (HasPartial(spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot assemble ", spec.ToString(), " by placement: it has a Partial dim"));
  }
  absl::StatusOr<HostTensor> full = HostTensor::Zeros(spec.dtype, spec.shape);
  if (!full.ok()) return full.status();
  for (int64_t pos = 0; pos < spec.mesh.size(); ++pos) {
    const LocalShard local = LocalShapeAndOffsetAt(spec, spec.mesh.CoordinateOfIndex(pos));
    if (shards[pos].shape() != local.shape) {
      return absl::InvalidArgumentError(absl::StrCat("shard at position ", pos, " has shape ",
                                                     ShapeToString(shards[pos].shape()),
                                                     ", expected ", ShapeToString(local.shape)));
    }
    if (absl::Status s = UnpackBlock(shards[pos], local.offset, *full); !s.ok()) return s;
  }
  return full;
}

}  // namespace tessera
