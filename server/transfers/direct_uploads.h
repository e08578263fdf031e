#ifndef TESSERA_SERVER_TRANSFERS_DIRECT_UPLOADS_H_
#define TESSERA_SERVER_TRANSFERS_DIRECT_UPLOADS_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/cluster/sequence_lease.h"
#include "server/tables/dtensor_table.h"
#include "server/transfers/dtensor_streams.h"
#include "tessera/v1/dtensor.pb.h"

namespace tessera {

// distribute_tensor and from_local on the direct path: the client streams each block straight to
// its worker (from_local: each rank's local tensor whole, one route per rank).
// Plan checks the request as a relayed distribute is checked, adds the tensor hidden (its name,
// bytes against the workers' budgets and owner held as for a relayed one), reserves each block's
// sequence on its worker (the order stays the coordinator's) and signs a grant per block. Commit
// checks every worker's receipt, then spreads the replicas and reveals the tensor. A plan that is
// aborted, fails its commit or is not committed by its deadline is dropped: its tensor released
// (whatever blocks arrived are freed) and nothing becomes visible. Once the grants have expired
// (kReleaseMargin later) each block's sequence is released to its worker unless an upload the
// worker admitted by its grant holds it (that upload waits for its turn, however long commands
// before it run): a client that vanishes stalls no worker for longer than that, and a plan one of
// whose uploads never started is dropped then, so that the bytes it held against the workers'
// budgets are free again. The workers are asked again every grant lifetime until the commit, and a
// plan one of whose uploads failed after it started (a client that stalls half-way is cut by its
// worker's idle timeout) is dropped then. A client has at most kMaxPlansPerClient plans at once.
// Thread-safe.
class DirectUploads {
 public:
  // Grants expire `grant_lifetime` after the plan: the client must open every upload by then.
  DirectUploads(DTensorTable* tensors, DTensorStreams* streams,
                absl::Duration grant_lifetime = absl::Seconds(10));
  ~DirectUploads();
  DirectUploads(const DirectUploads&) = delete;
  DirectUploads& operator=(const DirectUploads&) = delete;

  absl::StatusOr<v1::UploadPlan> Plan(const v1::PlanUploadRequest& request,
                                      const std::string& owner);
  absl::StatusOr<v1::TensorInfo> Commit(const v1::CommitUploadRequest& request,
                                        const std::string& owner);
  // Releases the sequences of plans whose grants expired and drops plans past their deadline.
  void ExpireDue(absl::Time now);

  static constexpr absl::Duration kReleaseMargin = absl::Seconds(2);
  static constexpr int kMaxPlansPerClient = 16;
  static constexpr absl::Duration kDefaultTransfer = absl::Minutes(10);
  static constexpr absl::Duration kMaxTransfer = absl::Hours(1);

 private:
  // What a plan holds and where its blocks go.
  struct Layout {
    std::shared_ptr<Mesh> mesh;
    DTensorSpec spec;
    std::string name;
    std::vector<int64_t> source;      // the coordinate whose ranks receive the non-Shard dims' copy
    std::vector<int64_t> positions;   // the ranks that receive a block, in route order
    std::vector<int> broadcast_dims;  // spread from `source` along these at commit
    bool partition = true;            // distribute_tensor's layout of Partial dims
    bool whole_locals = false;        // from_local: each route's block is its rank's tensor
  };
  absl::StatusOr<Layout> DistributeLayout(const v1::DistributeHeader& header);
  absl::StatusOr<Layout> FromLocalLayout(const v1::PlanUploadRequest& request);

  struct Block {
    SequenceLease lease;
    v1::DirectGrant grant;
    std::string key;  // the worker's grant key, to check its receipt
  };
  struct Planned {
    std::string owner;
    std::shared_ptr<DTensorEntry> tensor;
    std::vector<int64_t> source;  // the coordinate whose ranks receive the non-Shard dims' copy
    std::vector<int> broadcast_dims;
    bool partition = true;
    std::vector<Block> blocks;
    absl::Time release_at;  // grants expired: unused sequences go back to the workers
    bool released = false;  // its sequences were released at release_at
    // The blocks whose admitted uploads hold their sequences, asked about again at recheck_at.
    std::vector<std::pair<WorkerHandle, int64_t>> watched;
    absl::Time recheck_at;
    bool asking = false;  // a round of release calls is out
    absl::Time commit_by;
  };
  // Releases every lease still held (the workers ignore numbers they used) and the tensor.
  void Drop(Planned& planned);
  // Releases the sequences of plan `id` (its grants expired; `first`) or asks about them again,
  // then drops the plan if an upload of it failed, or (first) had not started; otherwise watches
  // the blocks the workers hold.
  void ReleaseExpired(const std::string& id, std::vector<std::pair<WorkerHandle, int64_t>> blocks,
                      bool first);
  // Drops plan `id`, if it is still planned, for `why`.
  void DropPlanned(const std::string& id, const std::string& why);

  DTensorTable* tensors_;
  DTensorStreams* streams_;
  const absl::Duration grant_lifetime_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Planned>> planned_ ABSL_GUARDED_BY(mu_);
  int releasing_ ABSL_GUARDED_BY(mu_) = 0;  // release calls not yet answered
  // Plans to drop, and why: an upload of theirs had not started when their grants expired, or
  // failed.
  std::vector<std::pair<std::string, std::string>> failed_ ABSL_GUARDED_BY(mu_);
  absl::Notification stopping_;
  std::thread expirer_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TRANSFERS_DIRECT_UPLOADS_H_
