#ifndef TESSERA_SECURITY_REQUEST_BYTES_H_
#define TESSERA_SECURITY_REQUEST_BYTES_H_

#include <cstdint>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/hold.h"

namespace tessera {

// Bounds the bytes of requests a service works on at once (KServe inference requests, which are
// decoded, batched and copied several times over: a replicated model's input goes to every rank),
// refusing one past the bound with RESOURCE_EXHAUSTED before any of that work; and gives the
// memory of a burst back to the system (malloc_trim, kTrimDelay after the burst is over, once its
// replies are sent), so that the process does not stay as large as its largest burst. Counted in
// tessera_request_bytes_in_flight and tessera_requests_refused_total{service}. Thread-safe.
class RequestBytes {
 public:
  // `flag` names the bound in messages.
  RequestBytes(std::string service, int64_t max_bytes, std::string flag);
  ~RequestBytes();
  RequestBytes(const RequestBytes&) = delete;
  RequestBytes& operator=(const RequestBytes&) = delete;

  // One admitted request's bytes; given back when it goes.
  using Ticket = Hold;

  // Room for a request of `bytes`; RESOURCE_EXHAUSTED naming the bytes in flight and the bound when
  // there is none (a request larger than the bound alone is refused too).
  absl::StatusOr<Ticket> Admit(int64_t bytes, const std::string& what);

  int64_t in_flight() const;

  // A burst of at least this many bytes in flight is given back to the system once it is over.
  static constexpr int64_t kTrimAfterBytes = int64_t{64} << 20;
  static constexpr absl::Duration kTrimDelay = absl::Milliseconds(500);

 private:
  void Leave(int64_t bytes);
  // Gives freed memory back once a burst has been over for kTrimDelay.
  void TrimLoop();

  const std::string service_;
  const int64_t max_bytes_;
  const std::string flag_;
  mutable absl::Mutex mu_;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t peak_ ABSL_GUARDED_BY(mu_) = 0;  // the most in flight since the last trim
  absl::Time trim_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread trimmer_;
};

}  // namespace tessera

#endif  // TESSERA_SECURITY_REQUEST_BYTES_H_
