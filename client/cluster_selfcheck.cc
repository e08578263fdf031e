#include "client/cluster_selfcheck.h"

#include <chrono>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/chunk.h"
#include "core/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "core/status_macros.h"

namespace tessera {
namespace {

// Rows [begin, begin + rows) of `t`.
absl::StatusOr<HostTensor> Rows(const HostTensor& t, int64_t begin, int64_t rows) {
  Shape offsets(t.shape().size(), 0), sizes = t.shape();
  offsets[0] = begin;
  sizes[0] = rows;
  return PackBlock(t, offsets, sizes);
}

// `parts` stacked along dim 0.
absl::StatusOr<HostTensor> Concat(const std::vector<HostTensor>& parts) {
  Shape shape = parts[0].shape();
  shape[0] = 0;
  for (const HostTensor& p : parts) shape[0] += p.shape()[0];
  ASSIGN_OR_RETURN(HostTensor out, HostTensor::Zeros(parts[0].dtype(), shape));
  size_t offset = 0;
  for (const HostTensor& p : parts) {
    std::memcpy(out.data() + offset, p.data(), p.nbytes());
    offset += p.nbytes();
  }
  return out;
}

HostTensor Sum(const std::vector<HostTensor>& parts) {
  HostTensor out = parts[0].Clone();
  for (size_t i = 1; i < parts.size(); ++i) {
    ReduceInto(ReduceOp::kSum, out.dtype(), out.data(), parts[i].data(), out.num_elements());
  }
  return out;
}

struct Check {
  const char* name;
  v1::CollectiveOp op;
  int64_t root;
  // The expected result on group rank `r` from the inputs of the group.
  std::function<absl::StatusOr<HostTensor>(const std::vector<HostTensor>&, int64_t)> expect;
};

}  // namespace

absl::Status RunClusterSelfcheck(CoordinatorClient& client, int workers, std::ostream& out) {
  const std::string mesh = "selfcheck";
  (void)client.DeleteMesh(mesh);  // left over from an interrupted run, if any
  ASSIGN_OR_RETURN(v1::MeshInfo info, client.CreateMesh(mesh, "cpu", {workers}));
  out << "created mesh '" << mesh << "' over " << workers << " workers\n";
  const int64_t k = workers;
  const Shape shape = {2 * k + 1, 257};  // uneven over k ranks on purpose
  std::vector<HostTensor> inputs;
  for (int64_t r = 0; r < k; ++r) {
    inputs.push_back(SmallIntegerTensor(DType::kFloat32, shape, static_cast<uint32_t>(100 + r)));
    RETURN_IF_ERROR(client.PutLocal(mesh, r, "x", inputs.back()));
  }
  const std::vector<Check> checks = {
      {"all_reduce(sum)", v1::ALL_REDUCE_OP, 0,
       [](const std::vector<HostTensor>& in, int64_t) { return Sum(in); }},
      {"all_gather", v1::ALL_GATHER_OP, 0,
       [](const std::vector<HostTensor>& in, int64_t) { return Concat(in); }},
      {"reduce_scatter(sum)", v1::REDUCE_SCATTER_OP, 0,
       [k](const std::vector<HostTensor>& in, int64_t r) {
         const ChunkRange c = ChunkOf(in[0].shape()[0], k, r);
         return Rows(Sum(in), c.offset, c.size);
       }},
      {"broadcast(root 1)", v1::BROADCAST, k > 1 ? 1 : 0,
       [k](const std::vector<HostTensor>& in, int64_t) { return in[k > 1 ? 1 : 0].Clone(); }},
      {"all_to_all", v1::ALL_TO_ALL_OP, 0,
       [k](const std::vector<HostTensor>& in, int64_t r) -> absl::StatusOr<HostTensor> {
         std::vector<HostTensor> parts;
         const ChunkRange c = ChunkOf(in[0].shape()[0], k, r);
         for (const HostTensor& t : in) {
           ASSIGN_OR_RETURN(HostTensor rows, Rows(t, c.offset, c.size));
           parts.push_back(std::move(rows));
         }
         return Concat(parts);
       }},
  };
  // `check` as a request writing `output`, and the check of every rank's `output` afterwards.
  auto request_for = [&](const Check& check, const std::string& output) {
    v1::CollectiveRequest request;
    request.set_mesh(mesh);
    request.set_op(check.op);
    request.set_input("x");
    request.set_output(output);
    request.set_reduce_op(v1::SUM);
    request.set_root(check.root);
    return request;
  };
  auto verify = [&](const Check& check, const std::string& output) -> absl::Status {
    for (int64_t r = 0; r < k; ++r) {
      ASSIGN_OR_RETURN(HostTensor got, client.GetLocal(mesh, r, output));
      ASSIGN_OR_RETURN(HostTensor want, check.expect(inputs, r));
      if (!got.BitEqual(want)) {
        return absl::InternalError(absl::StrCat(check.name, " into '", output, "': rank ", r,
                                                " differs from the single-process reference"));
      }
    }
    return absl::OkStatus();
  };
  for (const Check& check : checks) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<v1::CollectiveReply> reply = client.RunCollective(request_for(check, "y"));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!reply.ok()) return reply.status();
    RETURN_IF_ERROR(verify(check, "y"));
    out << absl::StrFormat("  %-20s on %d ranks of float32%s: %7.2f ms, every rank matches\n",
                           check.name, k, ShapeToString(shape), ms);
  }
  // The same collectives again, sent back to back on one stream (no round trip each), each into
  // its own output; then every output checked.
  ASSIGN_OR_RETURN(std::unique_ptr<CollectiveStream> stream, client.OpenCollectiveStream());
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < checks.size(); ++i) {
    RETURN_IF_ERROR(stream->Submit(request_for(checks[i], absl::StrCat("s", i))));
  }
  for (const Check& check : checks) {
    absl::StatusOr<v1::CollectiveReply> reply = stream->Next();
    if (!reply.ok())
      return absl::Status(reply.status().code(),
                          absl::StrCat(check.name, ": ", reply.status().message()));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < checks.size(); ++i) {
    RETURN_IF_ERROR(verify(checks[i], absl::StrCat("s", i)));
  }
  out << absl::StrFormat(
      "  the same %d on one collective stream, back to back: %7.2f ms in all, "
      "every rank matches\n",
      static_cast<int>(checks.size()), ms);
  RETURN_IF_ERROR(client.DeleteMesh(mesh));
  return absl::OkStatus();
}

}  // namespace tessera
