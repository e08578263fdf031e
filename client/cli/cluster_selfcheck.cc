#include "client/cli/cluster_selfcheck.h"

#include <chrono>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/sharding/chunk.h"
#include "core/sharding/elementwise_reduce.h"
#include "core/small_integer_tensor.h"
#include "core/status_context.h"

namespace tessera {
namespace {

// Rows [begin, begin + rows) of `t`.
HostTensor Rows(const HostTensor& t, int64_t begin, int64_t rows) {
  Shape offsets(t.shape().size(), 0), sizes = t.shape();
  offsets[0] = begin;
  sizes[0] = rows;
  return PackBlock(t, offsets, sizes).value();
}

// `parts` stacked along dim 0.
HostTensor Concat(const std::vector<HostTensor>& parts) {
  Shape shape = parts[0].shape();
  shape[0] = 0;
  for (const HostTensor& p : parts) shape[0] += p.shape()[0];
  HostTensor out = HostTensor::Zeros(parts[0].dtype(), shape).value();
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
  client::CollectiveOp op;
  int64_t root;
  // The expected result on group rank `r` from the inputs of the group.
  std::function<HostTensor(const std::vector<HostTensor>&, int64_t)> expect;
};

// The collectives checked, each with its reference result on a group of `k` ranks.
std::vector<Check> CollectiveChecks(int64_t k) {
  return {
      {"all_reduce(sum)", client::CollectiveOp::kAllReduce, 0,
       [](const std::vector<HostTensor>& in, int64_t) { return Sum(in); }},
      {"all_gather", client::CollectiveOp::kAllGather, 0,
       [](const std::vector<HostTensor>& in, int64_t) { return Concat(in); }},
      {"reduce_scatter(sum)", client::CollectiveOp::kReduceScatter, 0,
       [k](const std::vector<HostTensor>& in, int64_t r) {
         const ChunkRange c = ChunkOf(in[0].shape()[0], k, r);
         return Rows(Sum(in), c.offset, c.size);
       }},
      {"broadcast(root 1)", client::CollectiveOp::kBroadcast, k > 1 ? 1 : 0,
       [k](const std::vector<HostTensor>& in, int64_t) { return in[k > 1 ? 1 : 0].Clone(); }},
      {"all_to_all", client::CollectiveOp::kAllToAll, 0,
       [k](const std::vector<HostTensor>& in, int64_t r) {
         std::vector<HostTensor> parts;
         const ChunkRange c = ChunkOf(in[0].shape()[0], k, r);
         for (const HostTensor& t : in) parts.push_back(Rows(t, c.offset, c.size));
         return Concat(parts);
       }},
  };
}

// The checks run on mesh `mesh` of `k` ranks, each rank holding its `inputs` entry as "x".
struct CollectiveRuns {
  client::Session& session;
  const std::string& mesh;
  int64_t k;
  const std::vector<HostTensor>& inputs;
  const std::vector<Check>& checks;

  // `check` as a request writing `output`.
  client::CollectiveRequest RequestFor(const Check& check, const std::string& output) const {
    return client::CollectiveRequest{check.op, {mesh, ""}, "x", output, ReduceOp::kSum, check.root};
  }

  // The check of every rank's `output` after `check` wrote it.
  absl::Status Verify(const Check& check, const std::string& output) const {
    for (int64_t r = 0; r < k; ++r) {
      absl::StatusOr<HostTensor> got = session.GetLocal(mesh, r, output);
      if (!got.ok()) return got.status();
      if (!got->BitEqual(check.expect(inputs, r))) {
        return absl::InternalError(absl::StrCat(check.name, " into '", output, "': rank ", r,
                                                " differs from the single-process reference"));
      }
    }
    return absl::OkStatus();
  }

  // Each collective on its own into "y", timed and checked.
  absl::Status OneByOne(const Shape& shape, std::ostream& out) const {
    for (const Check& check : checks) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<client::CollectiveResult> reply =
          session.RunCollective(RequestFor(check, "y"));
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      if (!reply.ok()) return reply.status();
      if (absl::Status s = Verify(check, "y"); !s.ok()) return s;
      out << absl::StrFormat("  %-20s on %d ranks of float32%s: %7.2f ms, every rank matches\n",
                             check.name, k, ShapeToString(shape), ms);
    }
    return absl::OkStatus();
  }

  // The same collectives again, sent back to back on `stream` (no round trip each), each into
  // its own output; then every output checked.
  absl::Status OnStream(client::CollectiveStream& stream, std::ostream& out) const {
    const auto start = std::chrono::steady_clock::now();
    for (size_t i = 0; i < checks.size(); ++i) {
      if (absl::Status s = stream.Submit(RequestFor(checks[i], absl::StrCat("s", i))); !s.ok()) {
        return s;
      }
    }
    for (const Check& check : checks) {
      absl::StatusOr<client::CollectiveResult> reply = stream.Next();
      if (!reply.ok()) return WithContext(check.name, reply.status());
    }
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    for (size_t i = 0; i < checks.size(); ++i) {
      if (absl::Status s = Verify(checks[i], absl::StrCat("s", i)); !s.ok()) return s;
    }
    out << absl::StrFormat(
        "  the same %d on one collective stream, back to back: %7.2f ms in all, "
        "every rank matches\n",
        static_cast<int>(checks.size()), ms);
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status RunClusterSelfcheck(client::Session& session, int workers, const std::string& device,
                                 std::ostream& out) {
  const std::string mesh = "selfcheck";
  (void)session.DeleteMesh(mesh);  // left over from an interrupted run, if any
  absl::StatusOr<client::MeshInfo> info =
      client::InitDeviceMesh(session, device, {workers}, {}, mesh);
  if (!info.ok()) return info.status();
  out << "created mesh '" << mesh << "' over " << workers << " workers\n";
  const int64_t k = workers;
  const Shape shape = {2 * k + 1, 257};  // uneven over k ranks on purpose
  std::vector<HostTensor> inputs;
  for (int64_t r = 0; r < k; ++r) {
    inputs.push_back(SmallIntegerTensor(DType::kFloat32, shape, static_cast<uint32_t>(100 + r)));
    if (absl::Status s = session.PutLocal(mesh, r, "x", inputs.back()); !s.ok()) return s;
  }
  const std::vector<Check> checks = CollectiveChecks(k);
  const CollectiveRuns runs{session, mesh, k, inputs, checks};
  if (absl::Status s = runs.OneByOne(shape, out); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<client::CollectiveStream>> stream = session.OpenCollectiveStream();
  if (!stream.ok()) return stream.status();
  if (absl::Status s = runs.OnStream(**stream, out); !s.ok()) return s;
  if (absl::Status s = session.DeleteMesh(mesh); !s.ok()) return s;
  return absl::OkStatus();
}

}  // namespace tessera
