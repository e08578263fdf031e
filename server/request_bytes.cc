#include "server/request_bytes.h"

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
}

RequestBytes::Ticket& RequestBytes::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr) owner_->Leave(bytes_);
    owner_ = other.owner_;
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
  }
  return *this;
}

RequestBytes::Ticket::~Ticket() {
  if (owner_ != nullptr) owner_->Leave(bytes_);
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
  return Ticket(this, bytes);
}

void RequestBytes::Leave(int64_t bytes) {
  bool trim = false;
  {
    absl::MutexLock lock(&mu_);
    in_flight_ -= bytes;
    InFlightGauge().With({service_}).Set(static_cast<double>(in_flight_));
    if (in_flight_ == 0 && peak_ >= kTrimAfterBytes) {
      peak_ = 0;
      trim = true;
    }
  }
  // The burst is over: its freed memory, scattered over the heap between live blocks where glibc
  // keeps it, goes back to the system (malloc_trim gives back every whole free page).
  if (trim) malloc_trim(0);
}

int64_t RequestBytes::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

}  // namespace tessera
