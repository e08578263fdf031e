#ifndef TESSERA_INCLUDE_TESSERA_COLLECTIVES_H_
#define TESSERA_INCLUDE_TESSERA_COLLECTIVES_H_

// torch.distributed's collectives on the local tensors the ranks of a mesh hold, over a mesh dim's
// process groups: a request built with torch's names (AllReduce, Broadcast, ...) runs synchronously
// (Session::RunCollective), as async_op with a Work to wait on (Session::StartCollective), or in
// order on one stream with no round trip each (CollectiveStream).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/sharding/placement.h"
#include "tessera/mesh.h"

namespace tessera::client {

class Session;

// The collectives; values are the wire values of tessera.v1.CollectiveOp.
enum class CollectiveOp : int {
  kBroadcast = 1,      // root's tensor to every rank
  kAllReduce = 2,      // element-wise reduction, result on every rank
  kReduce = 3,         // element-wise reduction, result on root
  kAllGather = 4,      // every rank's tensor concatenated along dim 0, on every rank
  kGather = 5,         // the same, on root
  kScatter = 6,        // root's tensor split along dim 0, one piece per rank
  kReduceScatter = 7,  // reduction, then split along dim 0
  kAllToAll = 8,       // piece j of rank i's tensor (split along dim 0) goes to rank j
  kBarrier = 9,        // no data: every rank waits for all
  kSendRecv = 10,      // group rank `root` sends its tensor to group rank `peer`
};

// "broadcast", "all_reduce", ..., "send_recv".
absl::string_view CollectiveOpName(CollectiveOp op);

// One collective on every process group of `group`, reading each rank's local tensor `input`.
// Every member has a default, so designated initializers may name any of them.
struct CollectiveRequest {
  CollectiveOp op = CollectiveOp::kBarrier;
  ProcessGroup group = {};
  std::string input = {};
  std::string output = {};              // Tensor written; empty: in place where the op allows.
  ReduceOp reduce_op = ReduceOp::kSum;  // For the reducing ops.
  int64_t root = 0;                     // Group rank of the root, or of the sender.
  int64_t peer = 0;                     // Group rank of the receiver of kSendRecv.
};

// The requests with torch.distributed's names; `src` and `dst` are group ranks.
CollectiveRequest AllReduce(ProcessGroup group, std::string input, std::string output = "",
                            ReduceOp op = ReduceOp::kSum);
CollectiveRequest Broadcast(ProcessGroup group, std::string input, int64_t src,
                            std::string output = "");
CollectiveRequest Reduce(ProcessGroup group, std::string input, int64_t dst,
                         std::string output = "", ReduceOp op = ReduceOp::kSum);
CollectiveRequest AllGather(ProcessGroup group, std::string input, std::string output = "");
CollectiveRequest Gather(ProcessGroup group, std::string input, int64_t dst,
                         std::string output = "");
CollectiveRequest Scatter(ProcessGroup group, std::string input, int64_t src,
                          std::string output = "");
CollectiveRequest ReduceScatter(ProcessGroup group, std::string input, std::string output = "",
                                ReduceOp op = ReduceOp::kSum);
CollectiveRequest AllToAll(ProcessGroup group, std::string input, std::string output = "");
// send on group rank `src` paired with recv on group rank `dst`.
CollectiveRequest SendRecv(ProcessGroup group, std::string input, int64_t src, int64_t dst,
                           std::string output = "");
CollectiveRequest Barrier(ProcessGroup group);

// One rank's local tensor as a collective left it.
struct LocalTensorInfo {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
};

// What a collective wrote: the output of every rank that wrote one, in row-major mesh order.
struct CollectiveResult {
  std::vector<LocalTensorInfo> outputs;
};

// A collective started with Session::StartCollective (torch's async_op=True work handle). The
// mesh runs its commands in the order the coordinator accepts them, so later calls may use the
// output at once; Wait reports the collective's own outcome, once.
class Work {
 public:
  const std::string& mesh() const { return mesh_; }
  // Its id on the mesh (> 0), as Session::WaitCollectives takes it.
  int64_t id() const { return id_; }
  // Waits for the collective; its outcome, or why the wait failed.
  absl::StatusOr<CollectiveResult> Wait(absl::Duration timeout = absl::InfiniteDuration()) const;

 private:
  friend class Session;
  Work(std::shared_ptr<Session> session, std::string mesh, int64_t id)
      : session_(std::move(session)), mesh_(std::move(mesh)), id_(id) {}

  std::shared_ptr<Session> session_;
  std::string mesh_;
  int64_t id_ = 0;
};

// An ordered stream of collectives on one connection: Submit sends a collective and returns at
// once, with no round trip; Next reports outcomes in submission order, each once its collective
// has finished. One thread may Submit while another calls Next. At most kMaxUnread outcomes may be
// left unread: past that, Submit refuses until Next catches up (the service stops reading a
// stream whose outcomes are not read). The stream lives until the timeout given when it was
// opened (Session::OpenCollectiveStream).
class CollectiveStream {
 public:
  static constexpr int64_t kMaxUnread = 1024;

  // Closes the sending side and waits for the outcomes not read yet (their collectives run to the
  // end either way).
  ~CollectiveStream();
  CollectiveStream(const CollectiveStream&) = delete;
  CollectiveStream& operator=(const CollectiveStream&) = delete;

  // Sends `request`. FAILED_PRECONDITION with kMaxUnread outcomes unread; UNAVAILABLE when the
  // stream itself has broken (Next then says why).
  absl::Status Submit(const CollectiveRequest& request);
  // The outcome of the oldest submitted collective not reported yet, waiting for it; a refused or
  // failed collective fails alone.
  absl::StatusOr<CollectiveResult> Next();
  // Submitted collectives whose outcome Next has not returned yet.
  int64_t outstanding() const;

 private:
  friend class Session;
  struct Impl;
  explicit CollectiveStream(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::client

#endif  // TESSERA_INCLUDE_TESSERA_COLLECTIVES_H_
