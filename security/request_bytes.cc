#include "security/request_bytes.h"

#include <malloc.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "metrics/registry.h"
#include "spdlog/spdlog.h"

namespace tessera {
namespace {

metrics::Family<metrics::Gauge>& InFlightGauge() {
  static metrics::Family<metrics::Gauge>& family = metrics::DefaultRegistry().AddGauge(
      "tessera_request_bytes_in_flight", "Bytes of requests being worked on now.", {"service"});
  return family;
}

metrics::Family<metrics::Counter>& RefusedCounter() {
  static metrics::Family<metrics::Counter>& family = metrics::DefaultRegistry().AddCounter(
      "tessera_requests_refused_total",
      "Requests refused RESOURCE_EXHAUSTED because too many bytes of requests were in flight.",
      {"service"});
  return family;
}

}  // namespace

RequestBytes::RequestBytes(std::string service, int64_t max_bytes, std::string flag)
    : service_(std::move(service)), max_bytes_(max_bytes), flag_(std::move(flag)) {
  InFlightGauge().With({service_}).Set(0);
  RefusedCounter().With({service_});
  trimmer_ = std::thread([this] { TrimLoop(); });
}

RequestBytes::~RequestBytes() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  trimmer_.join();
}

void RequestBytes::TrimLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const absl::Time at = trim_at_;
    const auto stop_or_due = [this, at]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || trim_at_ != at;
    };
    if (mu_.AwaitWithDeadline(absl::Condition(&stop_or_due), at)) continue;
    // Due: the burst's freed memory, scattered over the heap between live blocks where glibc
    // keeps it, goes back to the system (every whole free page; safe while requests run).
    trim_at_ = absl::InfiniteFuture();
    mu_.Unlock();
    malloc_trim(0);
    mu_.Lock();
  }
}

absl::StatusOr<RequestBytes::Ticket> RequestBytes::Admit(int64_t bytes, const std::string& what) {
  absl::MutexLock lock(&mu_);
  if (bytes > max_bytes_ - in_flight_) {
    RefusedCounter().With({service_}).Increment();
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " of ", bytes, " bytes refused: ", in_flight_,
                     " bytes of requests are in flight, at most ", max_bytes_, " (", flag_,
                     "); try again shortly"));
  }
  in_flight_ += bytes;
  peak_ = std::max(peak_, in_flight_);
  InFlightGauge().With({service_}).Set(static_cast<double>(in_flight_));
  return Ticket([this, bytes] { Leave(bytes); });
}

void RequestBytes::Leave(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  in_flight_ -= bytes;
  InFlightGauge().With({service_}).Set(static_cast<double>(in_flight_));
  // The burst is over: once its replies have gone, its memory goes back (TrimLoop).
  if (in_flight_ == 0 && peak_ >= kTrimAfterBytes) {
    peak_ = 0;
    trim_at_ = absl::Now() + kTrimDelay;
  }
}

int64_t RequestBytes::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

}  // namespace tessera
