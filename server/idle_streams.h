#ifndef TESSERA_SERVER_IDLE_STREAMS_H_
#define TESSERA_SERVER_IDLE_STREAMS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace tessera {

// Ends client streams (uploads) whose client sends nothing for `limit` while the coordinator waits
// for its next message: the call is cancelled with DEADLINE_EXCEEDED naming the limit, so the
// handler's pending Read returns false and the handler releases what the stream held (its
// workers' command sequences, its buffers, its half-made tensor). Time the handler spends
// elsewhere (writing to slow workers) does not count. One thread checks every watched call.
// Thread-safe.
class IdleStreams {
 public:
  // A `limit` of zero or less, or infinite, watches nothing.
  explicit IdleStreams(absl::Duration limit);
  ~IdleStreams();
  IdleStreams(const IdleStreams&) = delete;
  IdleStreams& operator=(const IdleStreams&) = delete;

  // One watched call, for as long as it lives (it must not outlive the call or the IdleStreams).
  class Watch {
   public:
    ~Watch();
    // reader->Read(message), timed: true iff a message arrived.
    template <typename Reader, typename Message>
    bool Read(Reader& reader, Message* message) {
      Waiting(true);
      const bool read = reader.Read(message);
      Waiting(false);
      return read;
    }
    // True once the call was ended for want of a message.
    bool expired() const;
    // DEADLINE_EXCEEDED naming the call and the limit.
    absl::Status ExpiredError() const;

   private:
    friend class IdleStreams;
    Watch(IdleStreams* owner, int64_t id) : owner_(owner), id_(id) {}
    void Waiting(bool waiting);

    IdleStreams* owner_;
    int64_t id_;
  };

  // Watches `context`'s call, `what` naming it in messages ("DistributeTensor").
  std::unique_ptr<Watch> Start(grpc::ServerContext& context, std::string what);

  absl::Duration limit() const { return limit_; }

 private:
  struct Call {
    grpc_call* call = nullptr;
    std::string what;
    bool waiting = false;
    absl::Time since;  // when it started waiting
    bool expired = false;
  };
  void Run();
  std::string Message(const Call& call) const;

  const absl::Duration limit_;
  mutable absl::Mutex mu_;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, Call> calls_ ABSL_GUARDED_BY(mu_);
  absl::Notification stopping_;
  std::thread checker_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_IDLE_STREAMS_H_
