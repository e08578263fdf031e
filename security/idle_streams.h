#ifndef TESSERA_SECURITY_IDLE_STREAMS_H_
#define TESSERA_SECURITY_IDLE_STREAMS_H_

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
#include "grpcpp/support/sync_stream.h"

namespace tessera {

// Ends streams whose client moves nothing for `limit` while the handler waits on it: a Read
// waiting for the client's next message, or a Write waiting for the client to take the last one
// (a client that stops reading a download). The call is cancelled with DEADLINE_EXCEEDED naming
// the limit, so the handler's pending Read or Write returns false and the handler releases what
// the stream held (its workers' command sequences, its buffers, its half-made tensor, its
// thread). Time the handler spends elsewhere (writing to slow workers) does not count. One thread
// checks every watched call. Thread-safe.
class IdleStreams {
 public:
  // A `limit` of zero or less, or infinite, watches nothing. `flag` names the setting in messages
  // ("the coordinator's --stream_idle_timeout").
  explicit IdleStreams(absl::Duration limit,
                       std::string flag = "the coordinator's --stream_idle_timeout");
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
      Waiting(true, /*writing=*/false);
      const bool read = reader.Read(message);
      Waiting(false, false);
      return read;
    }
    // writer->Write(message), timed: true iff it was written.
    template <typename Writer, typename Message>
    bool Write(Writer& writer, const Message& message) {
      Waiting(true, /*writing=*/true);
      const bool written = writer.Write(message);
      Waiting(false, false);
      return written;
    }
    // True once the call was ended for want of a message.
    bool expired() const;
    // DEADLINE_EXCEEDED naming the call and the limit.
    absl::Status ExpiredError() const;

   private:
    friend class IdleStreams;
    Watch(IdleStreams* owner, int64_t id) : owner_(owner), id_(id) {}
    void Waiting(bool waiting, bool writing);

    IdleStreams* owner_;
    int64_t id_;
  };

  // Watches `context`'s call, `what` naming it in messages ("DistributeTensor").
  std::unique_ptr<Watch> Start(const grpc::ServerContext& context, std::string what);

 private:
  struct Call {
    grpc_call* call = nullptr;
    std::string what;
    bool waiting = false;
    bool writing = false;  // waiting for the client to take a message, not to send one
    absl::Time since;      // when it started waiting
    bool expired = false;
  };
  void Run();
  std::string Message(const Call& call) const;

  const absl::Duration limit_;
  const std::string flag_;
  mutable absl::Mutex mu_;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, Call> calls_ ABSL_GUARDED_BY(mu_);
  absl::Notification stopping_;
  std::thread checker_;
};

// A server stream's reader whose every Read is timed by `watch` (IdleStreams::Watch::Read), for
// code that takes a grpc::ServerReaderInterface.
template <typename Message>
class WatchedReader final : public grpc::ServerReaderInterface<Message> {
 public:
  WatchedReader(grpc::ServerReaderInterface<Message>* reader, IdleStreams::Watch* watch)
      : reader_(reader), watch_(watch) {}
  void SendInitialMetadata() override { reader_->SendInitialMetadata(); }
  bool NextMessageSize(uint32_t* size) override { return reader_->NextMessageSize(size); }
  bool Read(Message* message) override { return watch_->Read(*reader_, message); }

 private:
  grpc::ServerReaderInterface<Message>* reader_;
  IdleStreams::Watch* watch_;
};

}  // namespace tessera

#endif  // TESSERA_SECURITY_IDLE_STREAMS_H_
