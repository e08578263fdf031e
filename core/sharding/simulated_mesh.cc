#include "core/sharding/simulated_mesh.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/sharding/chunk.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/sharding/padding.h"
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
      if (p.is_partial()) {
        PartitionValue(p.op, coord[m], spec.dtype, shard.data(), shard.num_elements());
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

namespace {

// Block q of a [k, block...] tensor, as a [1, block...] tensor.
absl::StatusOr<HostTensor> BlockAt(const HostTensor& blocks, int64_t q) {
  return SliceAlong(blocks, 0, q, 1);
}

// [1, block...] tensors stacked into one [k, block...] tensor.
absl::StatusOr<HostTensor> Stack(const std::vector<HostTensor>& blocks) {
  Shape shape = blocks[0].shape();
  shape[0] = static_cast<int64_t>(blocks.size());
  absl::StatusOr<HostTensor> out = HostTensor::Uninitialized(blocks[0].dtype(), shape);
  if (!out.ok()) return out.status();
  std::byte* next = out->data();
  for (const HostTensor& b : blocks) {
    std::memcpy(next, b.data(), b.nbytes());
    next += b.nbytes();
  }
  return out;
}

// Reduces block j of every rank's blocks (`padded[q]`, [k, block...]) into a [1, block...] tensor;
// kAvg is finished by dividing by k.
absl::StatusOr<HostTensor> ReduceBlock(const std::vector<HostTensor>& padded, int64_t j,
                                       ReduceOp op) {
  absl::StatusOr<HostTensor> acc = BlockAt(padded[0], j);
  if (!acc.ok()) return acc.status();
  for (size_t q = 1; q < padded.size(); ++q) {
    absl::StatusOr<HostTensor> block = BlockAt(padded[q], j);
    if (!block.ok()) return block.status();
    ReduceInto(op, acc->dtype(), acc->data(), block->data(), block->num_elements());
  }
  if (op == ReduceOp::kAvg) {
    DivideInPlace(acc->dtype(), acc->data(), acc->num_elements(),
                  static_cast<int64_t>(padded.size()));
  }
  return acc;
}

}  // namespace

absl::Status SimulatedMesh::LocalChunk(const Group& group, int d, std::vector<HostTensor>& shards) {
  const int64_t k = static_cast<int64_t>(group.size());
  for (int64_t q = 0; q < k; ++q) {
    HostTensor& t = shards[group[q]];
    const ChunkRange r = ChunkOf(t.shape()[d], k, q);
    absl::StatusOr<HostTensor> chunk = SliceAlong(t, d, r.offset, r.size);
    if (!chunk.ok()) return chunk.status();
    t = *std::move(chunk);
  }
  return absl::OkStatus();
}

void SimulatedMesh::LocalPartition(const Group& group, ReduceOp op,
                                   std::vector<HostTensor>& shards) {
  for (size_t q = 0; q < group.size(); ++q) {
    HostTensor& t = shards[group[q]];
    PartitionValue(op, static_cast<int64_t>(q), t.dtype(), t.data(), t.num_elements());
  }
}

absl::Status SimulatedMesh::LocalEmbed(const Group& group, int d, const Shape& after_shape,
                                       std::vector<HostTensor>& shards) {
  const int64_t k = static_cast<int64_t>(group.size());
  for (int64_t q = 0; q < k; ++q) {
    absl::StatusOr<HostTensor> out = HostTensor::Zeros(shards[group[q]].dtype(), after_shape);
    if (!out.ok()) return out.status();
    const ChunkRange r = ChunkOf(after_shape[d], k, q);
    if (absl::Status s = PlaceAlong(shards[group[q]], d, r.offset, *out); !s.ok()) return s;
    shards[group[q]] = *std::move(out);
  }
  return absl::OkStatus();
}

absl::Status SimulatedMesh::AllGather(const Group& group, int d, const Shape& after_shape,
                                      std::vector<HostTensor>& shards) {
  const int64_t k = static_cast<int64_t>(group.size());
  const Shape block_shape = WithDimSize(after_shape, d, ChunkSize(after_shape[d], k));
  std::vector<HostTensor> blocks;
  for (int64_t q = 0; q < k; ++q) {
    absl::StatusOr<HostTensor> padded = PadToChunks(shards[group[q]], d, 1, block_shape);
    if (!padded.ok()) return padded.status();
    for (int64_t to = 0; to < k; ++to) {
      Transfer(group[q], group[to], static_cast<int64_t>(padded->nbytes()));
    }
    blocks.push_back(*std::move(padded));
  }
  absl::StatusOr<HostTensor> gathered = Stack(blocks);
  if (!gathered.ok()) return gathered.status();
  absl::StatusOr<HostTensor> out = UnpadFromChunks(*gathered, d, after_shape);
  if (!out.ok()) return out.status();
  for (int64_t q = 0; q < k; ++q) shards[group[q]] = out->Clone();
  return absl::OkStatus();
}

absl::Status SimulatedMesh::AllReduce(const Group& group, ReduceOp op,
                                      std::vector<HostTensor>& shards) {
  const int64_t k = static_cast<int64_t>(group.size());
  const Shape shape = shards[group[0]].shape();
  const Shape flat_shape = {NumElements(shape)};
  std::vector<HostTensor> padded;  // each rank's elements as k blocks
  for (int64_t q = 0; q < k; ++q) {
    HostTensor flat = shards[group[q]].Clone();
    if (absl::Status s = flat.Reshape(flat_shape); !s.ok()) return s;
    absl::StatusOr<HostTensor> p = PadToChunks(flat, 0, k);
    if (!p.ok()) return p.status();
    padded.push_back(*std::move(p));
  }
  std::vector<HostTensor> reduced;
  for (int64_t j = 0; j < k; ++j) {  // reduce_scatter: rank j reduces block j
    absl::StatusOr<HostTensor> block = ReduceBlock(padded, j, op);
    if (!block.ok()) return block.status();
    const int64_t bytes = static_cast<int64_t>(block->nbytes());
    for (int64_t q = 0; q < k; ++q) Transfer(group[q], group[j], bytes);
    for (int64_t to = 0; to < k; ++to) Transfer(group[j], group[to], bytes);  // all_gather
    reduced.push_back(*std::move(block));
  }
  absl::StatusOr<HostTensor> gathered = Stack(reduced);
  if (!gathered.ok()) return gathered.status();
  absl::StatusOr<HostTensor> result = UnpadFromChunks(*gathered, 0, flat_shape);
  if (!result.ok()) return result.status();
  if (absl::Status s = result->Reshape(shape); !s.ok()) return s;
  for (int64_t q = 0; q < k; ++q) shards[group[q]] = result->Clone();
  return absl::OkStatus();
}

absl::Status SimulatedMesh::ReduceScatter(const Group& group, int d, ReduceOp op,
                                          std::vector<HostTensor>& shards) {
  const int64_t k = static_cast<int64_t>(group.size());
  const Shape shape = shards[group[0]].shape();
  std::vector<HostTensor> padded;
  for (int64_t q = 0; q < k; ++q) {
    absl::StatusOr<HostTensor> p = PadToChunks(shards[group[q]], d, k);
    if (!p.ok()) return p.status();
    padded.push_back(*std::move(p));
  }
  for (int64_t j = 0; j < k; ++j) {
    absl::StatusOr<HostTensor> block = ReduceBlock(padded, j, op);
    if (!block.ok()) return block.status();
    for (int64_t q = 0; q < k; ++q) {
      Transfer(group[q], group[j], static_cast<int64_t>(block->nbytes()));
    }
    absl::StatusOr<HostTensor> mine =
        UnpadFromChunks(*block, d, WithDimSize(shape, d, ChunkOf(shape[d], k, j).size));
    if (!mine.ok()) return mine.status();
    shards[group[j]] = *std::move(mine);
  }
  return absl::OkStatus();
}

absl::Status SimulatedMesh::AllToAll(const Group& group, int i, int j, int64_t ni,
                                     std::vector<HostTensor>& shards) {
  const int64_t k = static_cast<int64_t>(group.size());
  const Shape shape = shards[group[0]].shape();  // the group's shards differ along i only
  const int64_t nj = shape[j];
  const Shape block_shape =
      WithDimSize(WithDimSize(shape, i, ChunkSize(ni, k)), j, ChunkSize(nj, k));
  std::vector<HostTensor> padded;  // rank p's block q goes to rank q
  for (int64_t p = 0; p < k; ++p) {
    absl::StatusOr<HostTensor> blocks = PadToChunks(shards[group[p]], j, k, block_shape);
    if (!blocks.ok()) return blocks.status();
    padded.push_back(*std::move(blocks));
  }
  for (int64_t q = 0; q < k; ++q) {
    std::vector<HostTensor> received;
    for (int64_t p = 0; p < k; ++p) {
      absl::StatusOr<HostTensor> block = BlockAt(padded[p], q);
      if (!block.ok()) return block.status();
      Transfer(group[p], group[q], static_cast<int64_t>(block->nbytes()));
      received.push_back(*std::move(block));
    }
    absl::StatusOr<HostTensor> stacked = Stack(received);
    if (!stacked.ok()) return stacked.status();
    absl::StatusOr<HostTensor> out = UnpadFromChunks(
        *stacked, i, WithDimSize(WithDimSize(shape, i, ni), j, ChunkOf(nj, k, q).size));
    if (!out.ok()) return out.status();
    shards[group[q]] = *std::move(out);  // the other ranks' blocks were read from `padded`
  }
  return absl::OkStatus();
}

absl::Status SimulatedMesh::RunOnGroup(const DTensorSpec& after, const RedistributeStep& step,
                                       const Group& group, std::vector<HostTensor>& shards) {
  const Shape after_shape = LocalShapeAndOffsetAt(after, mesh_.CoordinateOfIndex(group[0])).shape;
  switch (step.collective) {
    case Collective::kLocalChunk:
      return LocalChunk(group, step.to.dim, shards);
    case Collective::kLocalPartition:
      LocalPartition(group, step.to.op, shards);
      return absl::OkStatus();
    case Collective::kLocalEmbed:
      return LocalEmbed(group, step.from.dim, after_shape, shards);
    case Collective::kAllGather:
      return AllGather(group, step.from.dim, after_shape, shards);
    case Collective::kAllReduce:
      return AllReduce(group, step.from.op, shards);
    case Collective::kReduceScatter:
      return ReduceScatter(group, step.to.dim, step.from.op, shards);
    case Collective::kAllToAll:
      return AllToAll(group, step.from.dim, step.to.dim, after_shape[step.from.dim], shards);
  }
  return absl::InternalError(
      absl::StrCat("unknown collective ", static_cast<int>(step.collective)));
}

absl::Status SimulatedMesh::RunStep(const DTensorSpec& spec, const RedistributeStep& step,
                                    std::vector<HostTensor>& shards) {
  const int m = step.mesh_dim;
  const int64_t k = mesh_.size(m);
  const int64_t stride = ContiguousStrides(mesh_.shape())[m];
  DTensorSpec after = spec;
  after.placements[m] = step.to;
  for (int64_t first = 0; first < mesh_.size(); ++first) {
    if (mesh_.CoordinateOfIndex(first)[m] != 0) continue;
    Group group(k);
    for (int64_t q = 0; q < k; ++q) group[q] = first + q * stride;
    if (absl::Status s = RunOnGroup(after, step, group, shards); !s.ok()) return s;
    for (int64_t position : group) {
      const Shape want = LocalShapeAndOffsetAt(after, mesh_.CoordinateOfIndex(position)).shape;
      if (shards[position].shape() != want) {
        return absl::InternalError(absl::StrCat(CollectiveName(step.collective), " on mesh dim ", m,
                                                " left rank position ", position, " with shape ",
                                                ShapeToString(shards[position].shape()),
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
