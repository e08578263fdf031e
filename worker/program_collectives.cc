// The collective steps of a module program, on the communicator of the step's mesh dim group.

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/sharding/chunk.h"
#include "core/sharding/dtensor_spec.h"
#include "core/status_macros.h"
#include "kernels/layout.h"
#include "worker/dim_collectives.h"
#include "worker/program_steps.h"

namespace tessera {
namespace {

// Dims of a local shape sent in a shape exchange; a tensor of more dims is refused (on every rank
// alike, since each sends its rank).
constexpr int kExchangedDims = 8;

// Every rank's local shape, in group rank order: one all_gather of a fixed-size record, through
// the memory the group's collectives use.
absl::StatusOr<std::vector<Shape>> ExchangeShapes(kernels::MemorySpace& memory,
                                                  comm::Communicator& group, const Shape& mine) {
  const int record = kExchangedDims + 1;
  std::vector<int64_t> send(record, 0);
  send[0] = static_cast<int64_t>(mine.size());
  std::copy_n(mine.begin(), std::min<size_t>(mine.size(), kExchangedDims), send.begin() + 1);
  ASSIGN_OR_RETURN(kernels::DeviceTensor sent,
                   memory.Upload(HostTensor::FromValues(DType::kInt64, {record}, send)));
  ASSIGN_OR_RETURN(kernels::DeviceTensor gathered,
                   memory.Allocate(DType::kInt64, {int64_t{record} * group.size()}));
  RETURN_IF_ERROR(group.AllGather(sent.data(), gathered.data(), record, DType::kInt64));
  ASSIGN_OR_RETURN(const HostTensor host, memory.Download(std::as_const(gathered).View()));
  const std::span<const int64_t> all(host.data_as<int64_t>(),
                                     static_cast<size_t>(host.num_elements()));
  std::vector<Shape> shapes;
  for (int r = 0; r < group.size(); ++r) {
    const int64_t* at = all.data() + static_cast<ptrdiff_t>(r) * record;
    if (at[0] > kExchangedDims) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", r, " holds a tensor of ", at[0],
                                                     " dims; collectives here take at most ",
                                                     kExchangedDims));
    }
    shapes.emplace_back(at + 1, at + 1 + at[0]);
  }
  return shapes;
}

// The size along `dim` of the tensor whose torch.chunk pieces the ranks hold (`shapes`, equal
// outside `dim`); INVALID_ARGUMENT naming the shapes when they are not such pieces.
absl::StatusOr<int64_t> JoinedSize(const std::vector<Shape>& shapes, int dim) {
  const auto describe = [&] {
    std::vector<std::string> each;
    for (const Shape& s : shapes) each.push_back(ShapeToString(s));
    return absl::StrJoin(each, ", ");
  };
  int64_t n = 0;
  for (const Shape& s : shapes) {
    if (s.size() != shapes[0].size() || static_cast<int>(s.size()) <= dim ||
        WithDimSize(s, dim, 0) != WithDimSize(shapes[0], dim, 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ranks' local shapes (", describe(), ") differ outside dim ", dim));
    }
    n += s[dim];
  }
  const int64_t k = static_cast<int64_t>(shapes.size());
  for (int64_t r = 0; r < k; ++r) {
    if (shapes[r][dim] != ChunkOf(n, k, r).size) {
      return absl::InvalidArgumentError(absl::StrCat("the ranks' local shapes (", describe(),
                                                     ") are not torch.chunk pieces along dim ", dim,
                                                     " of a tensor of size ", n));
    }
  }
  return n;
}

absl::Status NeedDim(absl::string_view field, int dim, const kernels::DeviceTensor& t) {
  if (dim < t.rank()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " ", dim, " is not a dim of the input ", ShapeToString(t.shape())));
}

}  // namespace

absl::StatusOr<kernels::DeviceTensor> RunCollectiveStep(kernels::KernelBackend& kernels,
                                                        const ProgramStep& step,
                                                        comm::Communicator& group,
                                                        StepInput input) {
  const kernels::DeviceTensor& in = *input.tensor;
  const int64_t k = group.size();
  switch (step.kind) {
    case ProgramOpKind::kAllReduce: {
      kernels::DeviceTensor out;
      if (input.last_use) {
        out = std::move(*input.tensor);
      } else {
        ASSIGN_OR_RETURN(out, kernels.Clone(in.View()));
      }
      RETURN_IF_ERROR(group.AllReduce(out.data(), out.num_elements(), out.dtype(), step.reduce_op));
      return out;
    }
    case ProgramOpKind::kAllGather: {
      RETURN_IF_ERROR(NeedDim("dim", step.dim, in));
      if (k == 1) return kernels.Clone(in.View());
      ASSIGN_OR_RETURN(std::vector<Shape> shapes, ExchangeShapes(kernels, group, in.shape()));
      ASSIGN_OR_RETURN(int64_t n, JoinedSize(shapes, step.dim));
      return AllGatherAlong(kernels, group, in, step.dim, WithDimSize(in.shape(), step.dim, n));
    }
    case ProgramOpKind::kReduceScatter:
      RETURN_IF_ERROR(NeedDim("dim", step.dim, in));
      return ReduceScatterAlong(kernels, group, in, step.dim, step.reduce_op);
    case ProgramOpKind::kChunk: {
      RETURN_IF_ERROR(NeedDim("dim", step.dim, in));
      const ChunkRange piece = ChunkOf(in.shape()[step.dim], k, group.rank());
      return kernels::SliceAlong(kernels, in.View(), step.dim, piece.offset, piece.size);
    }
    case ProgramOpKind::kAllToAll: {
      RETURN_IF_ERROR(NeedDim("dim", step.dim, in));
      RETURN_IF_ERROR(NeedDim("dim2", step.dim2, in));
      if (k == 1) return kernels.Clone(in.View());
      ASSIGN_OR_RETURN(std::vector<Shape> shapes, ExchangeShapes(kernels, group, in.shape()));
      ASSIGN_OR_RETURN(int64_t n, JoinedSize(shapes, step.dim));
      return AllToAllAlong(kernels, group, in, step.dim, step.dim2, n);
    }
    default:
      break;
  }
  return absl::InternalError(
      absl::StrCat(ProgramOpKindName(step.kind), " is not a collective step"));
}

absl::StatusOr<kernels::DeviceTensor> GatherParameter(
    kernels::KernelBackend& kernels, const ProgramParameter& param,
    const kernels::DeviceTensor& local, const DeviceMesh& mesh, std::span<const int64_t> coordinate,
    std::span<comm::Communicator* const> dim_groups) {
  ASSIGN_OR_RETURN(
      std::vector<Placement> placements,
      NormalizePlacements(mesh, param.placements, static_cast<int>(param.shape.size())));
  std::optional<kernels::DeviceTensor> gathered;
  for (int m = mesh.ndim() - 1; m >= 0; --m) {
    if (!placements[m].is_shard()) continue;
    const int d = placements[m].dim;
    placements[m] = Placement::Replicate();
    if (mesh.size(m) == 1) continue;
    if (dim_groups[m] == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("no communicator for mesh dim ", m));
    }
    // What this rank holds once mesh dims m and after no longer shard the parameter.
    ASSIGN_OR_RETURN(const DTensorSpec spec,
                     MakeDTensorSpec(mesh, placements, param.shape, local.dtype()));
    const Shape joined = LocalShapeAndOffsetAt(spec, coordinate).shape;
    ASSIGN_OR_RETURN(kernels::DeviceTensor next,
                     AllGatherAlong(kernels, *dim_groups[m],
                                    gathered.has_value() ? *gathered : local, d, joined));
    gathered = std::move(next);
  }
  if (!gathered.has_value()) return kernels.Clone(local.View());
  return *std::move(gathered);
}

}  // namespace tessera
