// Routing of a whole tensor's bytes to and from the ranks holding its blocks (ShardScatter,
// ShardGather, BlockHolders) against fake workers (fake_worker.h) registered with a real
// WorkerRegistry. The reference is core: each rank's block is PackBlock of the full tensor at
// LocalShapeAndOffset of that rank. Over meshes (1-D of 4 and of 3, 2x2; ranks permuted so that
// mesh position and worker id differ), placements (Shard on each dim, Replicate), even, uneven and
// zero-size shapes, dtypes of 1, 2, 4 and 8 bytes, and write pieces from 1 byte to the whole
// tensor: every fake receives exactly its rank's block and ShardGather gives back the full tensor
// bit for bit. Only the streams' public API is used.

#include "server/transfers/shard_streams.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/dtensor_spec.h"
#include "core/sharding/placement.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/fake_worker.h"
#include "tests/support/placement_product.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using testing::FakeCluster;
using testing::FakeTensor;
using testing::FakeWorker;
using testing::SharedFakeWorkers;
using testing::StatusIs;

constexpr int kWorkers = 4;
constexpr char kTensor[] = "t";

absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

// A mesh of fake workers: its shape and the worker id at each row-major position.
struct MeshCase {
  Shape shape;
  std::vector<int64_t> ranks;
};

// A mesh and one placement per mesh dim.
struct Layout {
  MeshCase mesh;
  std::vector<Placement> placements;
};

void PrintTo(const Layout& l, std::ostream* os) {
  *os << "mesh " << ShapeToString(l.mesh.shape) << " of workers ["
      << absl::StrJoin(l.mesh.ranks, ", ") << "], " << PlacementsToString(l.placements);
}

std::string LayoutName(const Layout& l) {
  std::string placements;
  for (const Placement& p : l.placements) {
    absl::StrAppend(&placements, "_",
                    absl::StrReplaceAll(PlacementToString(p), {{"(", ""}, {")", ""}}));
  }
  return absl::StrCat("mesh", absl::StrJoin(l.mesh.shape, "x"), placements);
}

// Every layout of the suite: each mesh with every tuple of Shard(0), Shard(1) and Replicate.
std::vector<Layout> Layouts() {
  const std::vector<MeshCase> meshes = {
      {{4}, {2, 0, 3, 1}},     // every worker, permuted
      {{3}, {1, 3, 0}},        // worker 2 is not in the mesh
      {{2, 2}, {3, 1, 0, 2}},  // nested sharding
  };
  std::vector<Layout> out;
  for (const MeshCase& mesh : meshes) {
    for (auto& placements : testing::PlacementProduct(
             {Placement::Shard(0), Placement::Shard(1), Placement::Replicate()},
             static_cast<int>(mesh.shape.size()))) {
      out.push_back({mesh, std::move(placements)});
    }
  }
  return out;
}

// Even, uneven (some ranks' blocks empty on 4 ranks), zero-size, and 3-D.
const Shape kShapes[] = {{8, 6}, {7, 5}, {3, 2}, {0, 5}, {5, 0}, {5, 3, 4}};
const DType kDTypes[] = {DType::kBool, DType::kBFloat16, DType::kFloat32, DType::kInt64};
// Bytes per Write: single bytes, odd sizes that split elements, and the whole tensor (0).
const size_t kPieces[] = {1, 3, 7, 1000, 0};

DTensorSpec SpecOf(const Layout& layout, const Shape& shape, DType dtype) {
  DeviceMesh mesh = DeviceMesh::Create("cpu", layout.mesh.shape, {}, layout.mesh.ranks).value();
  return MakeDTensorSpec(std::move(mesh), layout.placements, shape, dtype).value();
}

// A tensor whose every byte depends on its position and `seed` (bool: 0 or 1).
HostTensor Pattern(DType dtype, const Shape& shape, uint64_t seed) {
  HostTensor t = HostTensor::Zeros(dtype, shape).value();
  std::span<std::byte> bytes = t.bytes();
  for (size_t i = 0; i < bytes.size(); ++i) {
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    bytes[i] = static_cast<std::byte>(dtype == DType::kBool ? (h & 1) : (h & 0xff));
  }
  return t;
}

std::string AsString(std::span<const std::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// Rank `rank`'s block of `full` under `spec`: the reference each worker must hold.
std::string BlockOf(const DTensorSpec& spec, const HostTensor& full, int64_t rank,
                    Shape* block_shape = nullptr) {
  const LocalShard local = LocalShapeAndOffset(spec, rank).value();
  if (block_shape != nullptr) *block_shape = local.shape;
  return AsString(PackBlock(full, local.offset, local.shape).value().bytes());
}

// "" if equal, else where they first differ.
std::string Diff(const std::string& got, const std::string& want) {
  if (got == want) return "";
  const size_t n = std::min(got.size(), want.size());
  size_t i = 0;
  while (i < n && got[i] == want[i]) ++i;
  return absl::StrCat("got ", got.size(), " bytes, want ", want.size(),
                      "; first difference at byte ", i);
}

// Positions (row-major) at coordinate `source` on every mesh dim that is not Shard.
std::vector<int64_t> PositionsAt(const DTensorSpec& spec, const std::vector<int64_t>& source) {
  std::vector<int64_t> out;
  for (int64_t p = 0; p < spec.mesh.size(); ++p) {
    const std::vector<int64_t> coord = spec.mesh.CoordinateOfIndex(p);
    bool at = true;
    for (int m = 0; m < spec.mesh.ndim(); ++m) {
      at = at && (spec.placements[m].is_shard() || coord[m] == source[m]);
    }
    if (at) out.push_back(p);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// BlockHolders

class BlockHoldersTest : public ::testing::TestWithParam<std::tuple<Layout, Shape, bool>> {};

// The holders sit at `source` on every non-Shard mesh dim, one per combination of Shard
// coordinates, and their blocks tile the tensor exactly once.
TEST_P(BlockHoldersTest, HoldersAtTheSourceTileTheTensorOnce) {
  const auto& [layout, shape, last] = GetParam();
  const DTensorSpec spec = SpecOf(layout, shape, DType::kFloat32);
  std::vector<int64_t> source(spec.mesh.ndim(), 0);
  if (last) {
    for (int m = 0; m < spec.mesh.ndim(); ++m) source[m] = spec.mesh.size(m) - 1;
  }
  const std::vector<int64_t> holders = BlockHolders(spec, source);
  int64_t want_count = 1;
  for (int m = 0; m < spec.mesh.ndim(); ++m) {
    if (spec.placements[m].is_shard()) want_count *= spec.mesh.size(m);
  }
  ASSERT_EQ(static_cast<int64_t>(holders.size()), want_count) << spec.ToString();
  EXPECT_TRUE(std::is_sorted(holders.begin(), holders.end()));
  // Count how often each element of the tensor is covered by a holder's block.
  HostTensor covered = HostTensor::Zeros(DType::kInt32, shape).value();
  for (int64_t p : holders) {
    const std::vector<int64_t> coord = spec.mesh.CoordinateOfIndex(p);
    for (int m = 0; m < spec.mesh.ndim(); ++m) {
      if (!spec.placements[m].is_shard()) {
        EXPECT_EQ(coord[m], source[m]) << "position " << p;
      }
    }
    const LocalShard local = LocalShapeAndOffsetAt(spec, coord);
    HostTensor block = PackBlock(covered, local.offset, local.shape).value();
    for (int64_t i = 0; i < block.num_elements(); ++i) ++block.data_as<int32_t>()[i];
    ASSERT_TRUE(UnpackBlock(block, local.offset, covered).ok());
  }
  for (int64_t i = 0; i < covered.num_elements(); ++i) {
    ASSERT_EQ(covered.data_as<int32_t>()[i], 1) << "element " << i << " of " << spec.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, BlockHoldersTest,
                         ::testing::Combine(::testing::ValuesIn(Layouts()),
                                            ::testing::ValuesIn(kShapes), ::testing::Bool()),
                         [](const auto& info) {
                           return absl::StrCat(LayoutName(std::get<0>(info.param)), "_",
                                               absl::StrJoin(std::get<1>(info.param), "x"),
                                               std::get<2>(info.param) ? "_last" : "_first");
                         });

// Worked by hand on the 2x2 mesh (positions 0 1 / 2 3).
TEST(BlockHoldersTest, WorkedExamplesOn2x2) {
  const Layout sr{{{2, 2}, {0, 1, 2, 3}}, {Placement::Shard(0), Placement::Replicate()}};
  const Layout rr{{{2, 2}, {0, 1, 2, 3}}, {Placement::Replicate(), Placement::Replicate()}};
  const Layout rs{{{2, 2}, {0, 1, 2, 3}}, {Placement::Replicate(), Placement::Shard(1)}};
  const Layout ss{{{2, 2}, {0, 1, 2, 3}}, {Placement::Shard(0), Placement::Shard(0)}};
  EXPECT_EQ(BlockHolders(SpecOf(sr, {4, 4}, DType::kFloat32), {0, 1}),
            (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(BlockHolders(SpecOf(rr, {4, 4}, DType::kFloat32), {1, 0}), (std::vector<int64_t>{2}));
  EXPECT_EQ(BlockHolders(SpecOf(rs, {4, 4}, DType::kFloat32), {1, 0}),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(BlockHolders(SpecOf(ss, {4, 4}, DType::kFloat32), {1, 1}),
            (std::vector<int64_t>{0, 1, 2, 3}));
}

// ---------------------------------------------------------------------------------------------
// ShardScatter and ShardGather over the product

using ScatterParam = std::tuple<Layout, Shape, DType, size_t, bool>;

std::string ScatterName(const ::testing::TestParamInfo<ScatterParam>& info) {
  const auto& [layout, shape, dtype, piece, last] = info.param;
  return absl::StrCat(LayoutName(layout), "_", absl::StrJoin(shape, "x"), "_", DTypeName(dtype),
                      "_", piece == 0 ? "whole" : absl::StrCat("piece", piece),
                      last ? "_last" : "_first");
}

class ShardScatterTest : public ::testing::TestWithParam<ScatterParam> {};

// Writes the whole tensor in pieces; each holder at the source receives exactly its rank's block
// under its header (name, dtype, local shape, sequence 1, its incarnation); no one else anything.
TEST_P(ShardScatterTest, EveryHolderReceivesExactlyItsBlock) {
  const auto& [layout, shape, dtype, piece_bytes, last] = GetParam();
  FakeCluster cluster(SharedFakeWorkers(kWorkers));
  const DTensorSpec spec = SpecOf(layout, shape, dtype);
  const HostTensor full = Pattern(dtype, shape, 17);
  std::vector<int64_t> source(spec.mesh.ndim(), 0);
  if (last) {
    for (int m = 0; m < spec.mesh.ndim(); ++m) source[m] = spec.mesh.size(m) - 1;
  }
  const std::vector<int64_t> positions = BlockHolders(spec, source);
  absl::StatusOr<std::unique_ptr<ShardScatter>> scatter =
      ShardScatter::Open(cluster.dispatcher(), spec, positions, kTensor, Deadline());
  ASSERT_TRUE(scatter.ok()) << scatter.status();
  EXPECT_EQ((*scatter)->expected_bytes(), static_cast<int64_t>(full.nbytes()));
  const std::string bytes = AsString(full.bytes());
  const size_t piece = piece_bytes == 0 ? std::max<size_t>(1, bytes.size()) : piece_bytes;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    ASSERT_TRUE((*scatter)->Write(bytes.substr(at, piece)).ok()) << "at byte " << at;
  }
  EXPECT_EQ((*scatter)->received_bytes(), static_cast<int64_t>(bytes.size()));
  const absl::Status finished = (*scatter)->Finish();
  ASSERT_TRUE(finished.ok()) << finished;

  std::vector<bool> holds(kWorkers, false);
  for (int64_t p : PositionsAt(spec, source)) holds[spec.mesh.ranks()[p]] = true;
  for (int64_t id = 0; id < kWorkers; ++id) {
    const std::vector<testing::ReceivedUpload> uploads = cluster.worker(id).uploads();
    if (!holds[id]) {
      EXPECT_TRUE(uploads.empty()) << "worker " << id << " holds no block at the source";
      continue;
    }
    ASSERT_EQ(uploads.size(), 1u) << "worker " << id;
    Shape block_shape;
    const std::string want = BlockOf(spec, full, id, &block_shape);
    const v1::TensorChunk& header = uploads[0].header;
    EXPECT_EQ(header.tensor(), kTensor);
    EXPECT_EQ(header.dtype(), ToProto(dtype));
    EXPECT_EQ(FromProto(header.shape()).value(), block_shape) << "worker " << id;
    EXPECT_EQ(header.sequence(), 1);
    EXPECT_EQ(header.incarnation(), cluster.incarnation(id));
    EXPECT_TRUE(uploads[0].complete) << "worker " << id;
    EXPECT_EQ(Diff(uploads[0].bytes, want), "") << "worker " << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Product, ShardScatterTest,
                         ::testing::Combine(::testing::ValuesIn(Layouts()),
                                            ::testing::ValuesIn(kShapes),
                                            ::testing::ValuesIn(kDTypes),
                                            ::testing::ValuesIn(kPieces), ::testing::Bool()),
                         ScatterName);

using GatherParam = std::tuple<Layout, Shape, DType, size_t>;

std::string GatherName(const ::testing::TestParamInfo<GatherParam>& info) {
  const auto& [layout, shape, dtype, chunk] = info.param;
  return absl::StrCat(LayoutName(layout), "_", absl::StrJoin(shape, "x"), "_", DTypeName(dtype),
                      "_", chunk == 0 ? "chunk1MiB" : absl::StrCat("chunk", chunk));
}

class ShardGatherTest : public ::testing::TestWithParam<GatherParam> {};

// The holders at coordinate 0 of every non-Shard mesh dim hold their blocks (served in chunks of
// the given size), no one else anything: the gather reads each of them once and reassembles the
// full tensor bit for bit.
TEST_P(ShardGatherTest, ReassemblesTheFullTensor) {
  const auto& [layout, shape, dtype, chunk_bytes] = GetParam();
  FakeCluster cluster(SharedFakeWorkers(kWorkers));
  const DTensorSpec spec = SpecOf(layout, shape, dtype);
  const HostTensor full = Pattern(dtype, shape, 29);
  std::vector<bool> holds(kWorkers, false);
  for (int64_t p : PositionsAt(spec, std::vector<int64_t>(spec.mesh.ndim(), 0))) {
    const int64_t id = spec.mesh.ranks()[p];
    holds[id] = true;
    Shape block_shape;
    std::string block = BlockOf(spec, full, id, &block_shape);
    cluster.worker(id).Put(kTensor, FakeTensor{dtype, block_shape, std::move(block)});
    if (chunk_bytes > 0) cluster.worker(id).SetDownloadChunkBytes(chunk_bytes);
  }
  absl::StatusOr<std::unique_ptr<ShardGather>> gather =
      ShardGather::Open(cluster.dispatcher(), spec, kTensor, Deadline());
  ASSERT_TRUE(gather.ok()) << gather.status();
  EXPECT_EQ((*gather)->total_bytes(), static_cast<int64_t>(full.nbytes()));
  std::string got, window;
  while ((*gather)->Next(&window)) got += window;
  ASSERT_TRUE((*gather)->status().ok()) << (*gather)->status();
  EXPECT_EQ(Diff(got, AsString(full.bytes())), "");
  for (int64_t id = 0; id < kWorkers; ++id) {
    const std::vector<v1::DownloadRequest> downloads = cluster.worker(id).downloads();
    if (!holds[id]) {
      EXPECT_TRUE(downloads.empty()) << "worker " << id << " holds no block at coordinate 0";
      continue;
    }
    ASSERT_EQ(downloads.size(), 1u) << "worker " << id;
    EXPECT_EQ(downloads[0].tensor(), kTensor);
    EXPECT_EQ(downloads[0].sequence(), 1);
    EXPECT_EQ(downloads[0].incarnation(), cluster.incarnation(id));
  }
}

INSTANTIATE_TEST_SUITE_P(Product, ShardGatherTest,
                         ::testing::Combine(::testing::ValuesIn(Layouts()),
                                            ::testing::ValuesIn(kShapes),
                                            ::testing::ValuesIn(kDTypes),
                                            ::testing::Values(size_t{1}, size_t{5}, size_t{0})),
                         GatherName);

// ---------------------------------------------------------------------------------------------
// Tensors larger than the streams' 1 MiB window

class LargeTensorTest : public ::testing::TestWithParam<std::tuple<Layout, size_t>> {};

TEST_P(LargeTensorTest, ScatterAndGatherRoundTripAcrossWindows) {
  const auto& [layout, size] = GetParam();
  const Shape shape = {701, 503};  // 1.4 MB of float32, uneven on every mesh
  FakeCluster cluster(SharedFakeWorkers(kWorkers));
  const DTensorSpec spec = SpecOf(layout, shape, DType::kFloat32);
  const HostTensor full = Pattern(DType::kFloat32, shape, 43);
  const std::string bytes = AsString(full.bytes());
  const std::vector<int64_t> zeros(spec.mesh.ndim(), 0);
  auto scatter = ShardScatter::Open(cluster.dispatcher(), spec, BlockHolders(spec, zeros), kTensor,
                                    Deadline());
  ASSERT_TRUE(scatter.ok()) << scatter.status();
  const size_t piece = size == 0 ? bytes.size() : size;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    ASSERT_TRUE((*scatter)->Write(bytes.substr(at, piece)).ok());
  }
  ASSERT_TRUE((*scatter)->Finish().ok());
  for (int64_t p : PositionsAt(spec, zeros)) {
    const int64_t id = spec.mesh.ranks()[p];
    const std::optional<FakeTensor> stored = cluster.worker(id).tensor(kTensor);
    ASSERT_TRUE(stored.has_value()) << "worker " << id;
    EXPECT_EQ(Diff(stored->bytes, BlockOf(spec, full, id)), "") << "worker " << id;
    // Served back in chunks of the same size as the writes (or 1 MiB for whole writes).
    if (size > 0) cluster.worker(id).SetDownloadChunkBytes(size);
  }
  auto gather = ShardGather::Open(cluster.dispatcher(), spec, kTensor, Deadline());
  ASSERT_TRUE(gather.ok()) << gather.status();
  std::string got, window;
  while ((*gather)->Next(&window)) {
    EXPECT_LE(window.size(), size_t{1} << 20);
    got += window;
  }
  ASSERT_TRUE((*gather)->status().ok()) << (*gather)->status();
  EXPECT_EQ(Diff(got, bytes), "");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LargeTensorTest,
    ::testing::Combine(::testing::Values(Layout{{{2, 2}, {3, 1, 0, 2}},
                                                {Placement::Shard(0), Placement::Shard(1)}},
                                         Layout{{{2, 2}, {3, 1, 0, 2}},
                                                {Placement::Replicate(), Placement::Shard(0)}},
                                         Layout{{{2, 2}, {3, 1, 0, 2}},
                                                {Placement::Shard(1), Placement::Replicate()}},
                                         Layout{{{3}, {1, 3, 0}}, {Placement::Shard(1)}}),
                       ::testing::Values(size_t{4093}, size_t{1000003}, size_t{0})),
    [](const auto& info) {
      const size_t size = std::get<1>(info.param);
      return absl::StrCat(LayoutName(std::get<0>(info.param)), "_",
                          size == 0 ? "whole" : absl::StrCat("piece", size));
    });

// ---------------------------------------------------------------------------------------------
// Errors

// float32[4, 3] on the 2x2 mesh as (S(0), R): 48 bytes, two holders at source (0, 0).
const Layout kSmallLayout{{{2, 2}, {0, 1, 2, 3}}, {Placement::Shard(0), Placement::Replicate()}};
const Shape kSmallShape = {4, 3};

TEST(ShardScatterErrorsTest, BytesBeyondTheTensorAreRejectedAndLoseNothing) {
  FakeCluster cluster(SharedFakeWorkers(kWorkers));
  const DTensorSpec spec = SpecOf(kSmallLayout, kSmallShape, DType::kFloat32);
  const HostTensor full = Pattern(DType::kFloat32, kSmallShape, 5);
  const std::string bytes = AsString(full.bytes());
  auto scatter = ShardScatter::Open(cluster.dispatcher(), spec, BlockHolders(spec, {0, 0}), kTensor,
                                    Deadline());
  ASSERT_TRUE(scatter.ok()) << scatter.status();
  EXPECT_TRUE(
      StatusIs((*scatter)->Write(bytes + "x"), absl::StatusCode::kInvalidArgument, {"48 bytes"}));
  EXPECT_EQ((*scatter)->received_bytes(), 0);
  ASSERT_TRUE((*scatter)->Write(bytes.substr(0, 41)).ok());
  EXPECT_TRUE(StatusIs((*scatter)->Write(bytes.substr(41) + "x"),
                       absl::StatusCode::kInvalidArgument, {"48 bytes"}));
  EXPECT_EQ((*scatter)->received_bytes(), 41);
  // The rejected piece changed nothing: the right remainder completes the tensor.
  ASSERT_TRUE((*scatter)->Write(bytes.substr(41)).ok());
  ASSERT_TRUE((*scatter)->Finish().ok());
  for (int64_t id : {0, 2}) {
    const std::optional<FakeTensor> stored = cluster.worker(id).tensor(kTensor);
    ASSERT_TRUE(stored.has_value()) << "worker " << id;
    EXPECT_EQ(Diff(stored->bytes, BlockOf(spec, full, id)), "") << "worker " << id;
  }
}

TEST(ShardScatterErrorsTest, TooFewBytesAtFinishAreRejectedAndNothingIsStored) {
  FakeCluster cluster(SharedFakeWorkers(kWorkers));
  const DTensorSpec spec = SpecOf(kSmallLayout, kSmallShape, DType::kFloat32);
  const std::string bytes = AsString(Pattern(DType::kFloat32, kSmallShape, 5).bytes());
  auto scatter = ShardScatter::Open(cluster.dispatcher(), spec, BlockHolders(spec, {0, 0}), kTensor,
                                    Deadline());
  ASSERT_TRUE(scatter.ok()) << scatter.status();
  ASSERT_TRUE((*scatter)->Write(bytes.substr(0, 47)).ok());
  EXPECT_TRUE(StatusIs((*scatter)->Finish(), absl::StatusCode::kInvalidArgument,
                       {"after 47 of the 48 bytes"}));
  for (int64_t id = 0; id < kWorkers; ++id) {
    EXPECT_FALSE(cluster.worker(id).tensor(kTensor).has_value()) << "worker " << id;
  }
}

TEST(ShardScatterErrorsTest, AFailingWorkerIsNamed) {
  FakeCluster cluster(SharedFakeWorkers(kWorkers));
  cluster.worker(2).FailTransfers(absl::ResourceExhaustedError("budget of 16 bytes exceeded"));
  const DTensorSpec spec = SpecOf(kSmallLayout, kSmallShape, DType::kFloat32);
  const std::string bytes = AsString(Pattern(DType::kFloat32, kSmallShape, 5).bytes());
  auto scatter = ShardScatter::Open(cluster.dispatcher(), spec, BlockHolders(spec, {0, 0}), kTensor,
                                    Deadline());
  ASSERT_TRUE(scatter.ok()) << scatter.status();
  ASSERT_TRUE((*scatter)->Write(bytes).ok());
  EXPECT_TRUE(StatusIs((*scatter)->Finish(), absl::StatusCode::kResourceExhausted,
                       {absl::StrCat("worker 2 at ", cluster.worker(2).address(),
                                     ": budget of 16 bytes exceeded")}));
}

TEST(ShardScatterErrorsTest, AnUnreachableOrDeadWorkerIsNamed) {
  std::unique_ptr<FakeWorker> gone = FakeWorker::Start();
  ASSERT_NE(gone, nullptr);
  std::vector<FakeWorker*> workers = SharedFakeWorkers(kWorkers);
  workers[2] = gone.get();
  {
    FakeCluster cluster(workers);
    gone->Stop();
    const DTensorSpec spec = SpecOf(kSmallLayout, kSmallShape, DType::kFloat32);
    const std::string bytes = AsString(Pattern(DType::kFloat32, kSmallShape, 5).bytes());
    auto scatter = ShardScatter::Open(cluster.dispatcher(), spec, BlockHolders(spec, {0, 0}),
                                      kTensor, Deadline());
    ASSERT_TRUE(scatter.ok()) << scatter.status();
    ASSERT_TRUE((*scatter)->Write(bytes).ok());
    EXPECT_TRUE(StatusIs((*scatter)->Finish(), absl::StatusCode::kUnavailable,
                         {absl::StrCat("worker 2 at ", gone->address())}));
    auto gather = ShardGather::Open(cluster.dispatcher(), spec, kTensor, Deadline());
    ASSERT_TRUE(gather.ok()) << gather.status();
    std::string window;
    while ((*gather)->Next(&window)) {
    }
    EXPECT_TRUE(StatusIs((*gather)->status(), absl::StatusCode::kUnavailable,
                         {absl::StrCat("worker 2 at ", gone->address())}));
  }
  FakeCluster dying(SharedFakeWorkers(kWorkers), /*dead_after=*/absl::Milliseconds(1));
  absl::SleepFor(absl::Milliseconds(20));
  const DTensorSpec spec = SpecOf(kSmallLayout, kSmallShape, DType::kFloat32);
  EXPECT_TRUE(StatusIs(
      ShardScatter::Open(dying.dispatcher(), spec, BlockHolders(spec, {0, 0}), kTensor, Deadline())
          .status(),
      absl::StatusCode::kUnavailable, {"worker 0 at", "heartbeats"}));
  EXPECT_TRUE(StatusIs(ShardGather::Open(dying.dispatcher(), spec, kTensor, Deadline()).status(),
                       absl::StatusCode::kUnavailable, {"worker 0 at", "heartbeats"}));
}

TEST(ShardGatherErrorsTest, AMissingFailingOrShortBlockIsNamed) {
  const DTensorSpec spec = SpecOf(kSmallLayout, kSmallShape, DType::kFloat32);
  const HostTensor full = Pattern(DType::kFloat32, kSmallShape, 5);
  Shape block_shape;
  const std::string block0 = BlockOf(spec, full, 0, &block_shape);
  const std::string block2 = BlockOf(spec, full, 2);
  auto drain = [](ShardGather& g) {
    std::string window;
    while (g.Next(&window)) {
    }
    return g.status();
  };
  {  // Worker 2 holds nothing.
    FakeCluster cluster(SharedFakeWorkers(kWorkers));
    cluster.worker(0).Put(kTensor, FakeTensor{DType::kFloat32, block_shape, block0});
    auto gather = ShardGather::Open(cluster.dispatcher(), spec, kTensor, Deadline());
    ASSERT_TRUE(gather.ok()) << gather.status();
    EXPECT_TRUE(StatusIs(drain(**gather), absl::StatusCode::kNotFound,
                         {absl::StrCat("worker 2 at ", cluster.worker(2).address(), ": "), "'t'"}));
  }
  {  // Worker 0 fails its downloads.
    FakeCluster cluster(SharedFakeWorkers(kWorkers));
    cluster.worker(0).FailTransfers(absl::InternalError("disk on fire"));
    cluster.worker(2).Put(kTensor, FakeTensor{DType::kFloat32, block_shape, block2});
    auto gather = ShardGather::Open(cluster.dispatcher(), spec, kTensor, Deadline());
    ASSERT_TRUE(gather.ok()) << gather.status();
    EXPECT_TRUE(
        StatusIs(drain(**gather), absl::StatusCode::kInternal,
                 {absl::StrCat("worker 0 at ", cluster.worker(0).address(), ": disk on fire")}));
  }
  {  // Worker 2's block is 4 bytes short.
    FakeCluster cluster(SharedFakeWorkers(kWorkers));
    cluster.worker(0).Put(kTensor, FakeTensor{DType::kFloat32, block_shape, block0});
    cluster.worker(2).Put(
        kTensor, FakeTensor{DType::kFloat32, block_shape, block2.substr(0, block2.size() - 4)});
    auto gather = ShardGather::Open(cluster.dispatcher(), spec, kTensor, Deadline());
    ASSERT_TRUE(gather.ok()) << gather.status();
    EXPECT_TRUE(StatusIs(
        drain(**gather), absl::StatusCode::kDataLoss,
        {absl::StrCat("worker 2 at ", cluster.worker(2).address()), "fewer bytes than its shard"}));
  }
}

}  // namespace
}  // namespace tessera
