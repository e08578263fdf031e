#ifndef TESSERA_SERVER_TABLES_DYNAMIC_BATCHER_H_
#define TESSERA_SERVER_TABLES_DYNAMIC_BATCHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/host_tensor.h"
#include "server/tables/model_runner.h"

namespace tessera {

// Triton's dynamic batcher as a ModelRunner over another: concurrent requests of one dtype whose
// shapes agree beyond dim 0 are joined along dim 0, in arrival order, up to max_batch_size rows,
// while the oldest waits at most max_queue_delay; the inner runner runs once on the joined batch
// and each request gets its own rows of the output back. Batches run one at a time on the
// batcher's own thread, as on one Triton model instance. With batching off (max_batch_size 0), or
// for a scalar input, Run calls the inner runner directly. A request whose deadline passes while it
// waits in the queue leaves it with DEADLINE_EXCEEDED; a batch runs until the latest deadline of
// its requests.
class DynamicBatcher final : public ModelRunner {
 public:
  // `model` names the model in messages ("'mlp' version 1").
  DynamicBatcher(std::string model, BatchingOptions options, std::shared_ptr<ModelRunner> inner);
  // Runs every request still queued, then stops the thread.
  ~DynamicBatcher() override;
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // The request's rows of its batch's output. INVALID_ARGUMENT naming both sizes for more rows
  // than max_batch_size. When the inner runner refuses a batch as INVALID_ARGUMENT, each of its
  // requests runs again alone, so a request the model refuses fails by itself; any other failure
  // of the inner runner fails every request of the batch with its status.
  absl::StatusOr<HostTensor> Run(const HostTensor& input, absl::Time deadline) override;

  // Requests waiting for a batch (not those of the batch running), for metrics and tests.
  int64_t QueuedRequests() const;

 private:
  // A queued request; its caller waits on `done`, after which the batcher no longer touches it.
  struct Request {
    const HostTensor* input = nullptr;
    absl::Time arrival;
    absl::Time deadline;
    absl::StatusOr<HostTensor> result;
    absl::Notification done;
  };

  // The queued requests that join the oldest, in arrival order: those of its dtype and shape
  // beyond dim 0 while their rows fit in max_batch_size. `*full` says whether the batch can take
  // no more (the rows reach the maximum, or the next joinable request does not fit).
  std::vector<Request*> Joinable(bool* full) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when stopping, or when the oldest request's batch is full.
  bool ReadyToRun() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The batcher thread: waits for a full batch or the oldest request's deadline, takes the batch
  // off the queue and runs it; returns once stopping with nothing queued.
  void Loop();
  // Runs one batch through the inner runner and answers each of its requests.
  void RunBatch(const std::vector<Request*>& batch);

  const std::string model_;
  const BatchingOptions options_;
  const std::shared_ptr<ModelRunner> inner_;

  mutable absl::Mutex mu_;
  std::deque<Request*> queue_ ABSL_GUARDED_BY(mu_);  // oldest first
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started last
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_DYNAMIC_BATCHER_H_
