#include "server/tables/dynamic_batcher.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/shape.h"
#include "metrics/registry.h"

namespace tessera {
namespace {

// True when `a` and `b` can be joined along dim 0: same dtype, same rank, same sizes beyond dim 0.
bool Joins(const HostTensor& a, const HostTensor& b) {
  return a.dtype() == b.dtype() && a.rank() == b.rank() &&
         std::equal(a.shape().begin() + 1, a.shape().end(), b.shape().begin() + 1);
}

}  // namespace

DynamicBatcher::DynamicBatcher(std::string model, BatchingOptions options,
                               std::shared_ptr<ModelRunner> inner)
    : model_(std::move(model)), options_(options), inner_(std::move(inner)) {
  if (options_.max_batch_size > 0) thread_ = std::thread([this] { Loop(); });
}

DynamicBatcher::~DynamicBatcher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<HostTensor> DynamicBatcher::Run(const HostTensor& input, absl::Time deadline) {
  if (options_.max_batch_size <= 0 || input.rank() == 0) return inner_->Run(input, deadline);
  if (input.shape()[0] > options_.max_batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a request of ", input.shape()[0], " rows (shape ", ShapeToString(input.shape()),
        ") exceeds max_batch_size ", options_.max_batch_size, " of model ", model_));
  }
  Request request;
  request.input = &input;
  request.arrival = absl::Now();
  request.deadline = deadline;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      return absl::UnavailableError(absl::StrCat("model ", model_, " is shutting down"));
    }
    queue_.push_back(&request);
  }
  if (!request.done.WaitForNotificationWithDeadline(deadline)) {
    absl::MutexLock lock(&mu_);
    if (auto it = std::find(queue_.begin(), queue_.end(), &request); it != queue_.end()) {
      queue_.erase(it);
      return absl::DeadlineExceededError(
          absl::StrCat("the request waited ", absl::FormatDuration(absl::Now() - request.arrival),
                       " in the queue of model ", model_, " and its deadline passed"));
    }
    // Its batch runs (until the latest deadline of its requests) and answers it.
  }
  request.done.WaitForNotification();
  return std::move(request.result);
}

int64_t DynamicBatcher::QueuedRequests() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

std::vector<DynamicBatcher::Request*> DynamicBatcher::Joinable(bool* full) const {
  std::vector<Request*> batch;
  *full = false;
  if (queue_.empty()) return batch;
  const HostTensor& oldest = *queue_.front()->input;
  int64_t rows = 0;
  for (Request* r : queue_) {
    if (!Joins(oldest, *r->input)) continue;
    const int64_t more = r->input->shape()[0];
    if (rows + more > options_.max_batch_size) {
      *full = true;
      break;
    }
    rows += more;
    batch.push_back(r);
  }
  if (rows == options_.max_batch_size) *full = true;
  return batch;
}

bool DynamicBatcher::ReadyToRun() const {
  bool full = false;
  Joinable(&full);
  return stopping_ || full;
}

void DynamicBatcher::Loop() {
  while (true) {
    std::vector<Request*> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DynamicBatcher* b)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(b->mu_) { return b->stopping_ || !b->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping, nothing left to run
      const absl::Time deadline = queue_.front()->arrival + options_.max_queue_delay;
      mu_.AwaitWithDeadline(absl::Condition(this, &DynamicBatcher::ReadyToRun), deadline);
      bool full = false;
      batch = Joinable(&full);
      for (Request* r : batch) queue_.erase(std::find(queue_.begin(), queue_.end(), r));
    }
    RunBatch(batch);
  }
}

void DynamicBatcher::RunBatch(const std::vector<Request*>& batch) {
  static metrics::Family<metrics::Histogram>& requests = metrics::DefaultRegistry().AddHistogram(
      "tessera_inference_batch_requests", "requests joined into each batch the batcher ran",
      {"model"}, metrics::CountBounds());
  static metrics::Family<metrics::Histogram>& sizes = metrics::DefaultRegistry().AddHistogram(
      "tessera_inference_batch_rows", "rows (the batch size) of each batch the batcher ran",
      {"model"}, metrics::CountBounds());
  requests.With({model_}).Observe(static_cast<double>(batch.size()));
  int64_t rows = 0;
  for (const Request* r : batch) rows += r->input->shape()[0];
  sizes.With({model_}).Observe(static_cast<double>(rows));
  auto answer_all = [&](const absl::Status& status) {
    for (Request* r : batch) {
      r->result = status;
      r->done.Notify();
    }
  };
  absl::Time deadline = absl::InfinitePast();
  for (const Request* r : batch) deadline = std::max(deadline, r->deadline);
  if (batch.size() == 1) {
    batch[0]->result = inner_->Run(*batch[0]->input, deadline);
    batch[0]->done.Notify();
    return;
  }
  const HostTensor& first = *batch[0]->input;
  absl::StatusOr<HostTensor> joined =
      HostTensor::Uninitialized(first.dtype(), WithDimSize(first.shape(), 0, rows));
  if (!joined.ok()) return answer_all(joined.status());
  int64_t offset = 0;
  for (const Request* r : batch) {
    if (absl::Status s = PlaceAlong(*r->input, 0, offset, *joined); !s.ok()) return answer_all(s);
    offset += r->input->shape()[0];
  }
  absl::StatusOr<HostTensor> output = inner_->Run(*joined, deadline);
  if (absl::IsInvalidArgument(output.status())) {
    // The model refused a value one of the requests holds (an id out of range): each runs on its
    // own, so that only those it refuses fail, each with a message about its own rows.
    for (Request* r : batch) {
      r->result = inner_->Run(*r->input, r->deadline);
      r->done.Notify();
    }
    return;
  }
  if (!output.ok()) return answer_all(output.status());
  if (output->rank() == 0 || output->shape()[0] != rows) {
    return answer_all(absl::InternalError(
        absl::StrCat("model ", model_, " gave an output of shape ", ShapeToString(output->shape()),
                     " for a batch of ", rows, " rows (shape ", ShapeToString(joined->shape()),
                     "); its rows cannot be split back per request")));
  }
  offset = 0;
  for (Request* r : batch) {
    const int64_t own = r->input->shape()[0];
    r->result = SliceAlong(*output, 0, offset, own);
    offset += own;
    r->done.Notify();
  }
}

}  // namespace tessera
