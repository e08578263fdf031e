#ifndef TESSERA_SERVER_TRANSFERS_SHARD_STREAMS_H_
#define TESSERA_SERVER_TRANSFERS_SHARD_STREAMS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/sharding/block_runs.h"
#include "core/sharding/dtensor_spec.h"
#include "server/cluster/dispatcher.h"

namespace tessera {

// Routes a whole tensor's bytes, arriving in flat row-major order in pieces of any size, to the
// ranks that hold its blocks: one Upload stream per rank, written about 1 MiB at a time, so no
// more than a window per rank is ever held. Not thread-safe.
class ShardScatter {
 public:
  // Opens uploads of `worker_tensor` to the ranks at mesh `positions` (row-major) of `spec`'s mesh,
  // each receiving its block under `spec`.
  static absl::StatusOr<std::unique_ptr<ShardScatter>> Open(Dispatcher& dispatcher,
                                                            const DTensorSpec& spec,
                                                            const std::vector<int64_t>& positions,
                                                            const std::string& worker_tensor,
                                                            absl::Time deadline);
  ~ShardScatter();

  // The next bytes of the tensor; INVALID_ARGUMENT past the tensor's size. A piece that lies
  // whole in one rank's block is passed on without a copy.
  absl::Status Write(std::string bytes);
  // Checks that every byte arrived, closes the uploads and reports a worker's failure.
  absl::Status Finish();
  // Abandons the uploads: the workers store nothing.
  void Cancel();

  int64_t expected_bytes() const { return expected_; }
  int64_t received_bytes() const { return received_; }

 private:
  struct Upload;
  ShardScatter() = default;
  absl::Status Flush(Upload& u, bool force);

  std::string tensor_;
  size_t element_size_ = 1;
  int64_t expected_ = 0;
  int64_t received_ = 0;
  std::string carry_;  // bytes of an element split across pieces
  std::vector<std::unique_ptr<Upload>> uploads_;
  bool finished_ = false;
};

// Streams a whole tensor out of the ranks that hold its blocks, in flat row-major order, about
// 1 MiB at a time: one Download stream per distinct block, read only as far as the window needs.
// The spec must have no Partial placement. Not thread-safe.
class ShardGather {
 public:
  static absl::StatusOr<std::unique_ptr<ShardGather>> Open(Dispatcher& dispatcher,
                                                           const DTensorSpec& spec,
                                                           const std::string& worker_tensor,
                                                           absl::Time deadline);
  ~ShardGather();

  // The next window of the tensor's bytes in `out`; false at the end or on error (see status()).
  bool Next(std::string* out);
  absl::Status status() const { return status_; }
  int64_t total_bytes() const { return total_; }

 private:
  struct Download;
  ShardGather() = default;
  // Reads every download to its end.
  void DrainAll();
  // Ends `d`'s stream and settles its sequence (spent if the stream ended OK, else released).
  static grpc::Status EndDownload(Download& d);

  size_t element_size_ = 1;
  int64_t total_ = 0;
  int64_t next_element_ = 0;
  int64_t num_elements_ = 0;
  absl::Status status_;
  std::vector<std::unique_ptr<Download>> downloads_;
};

// Routes a tensor's bytes, `first` and then each piece `next` gives until it returns false, into
// its blocks on the ranks at mesh `positions` of `spec` (a ShardScatter), and checks that every
// byte arrived; returns the bytes received. Nothing is kept on failure.
absl::StatusOr<int64_t> ScatterStream(Dispatcher& dispatcher, const DTensorSpec& spec,
                                      const std::vector<int64_t>& positions,
                                      const std::string& worker_tensor, absl::Time deadline,
                                      std::string first,
                                      absl::FunctionRef<bool(std::string*)> next);

// Streams a tensor out of its blocks (a ShardGather) to `write`, window by window, at least once
// (one empty window for a tensor of no bytes). CANCELLED when `write` fails (the reader went away).
absl::Status GatherStream(Dispatcher& dispatcher, const DTensorSpec& spec,
                          const std::string& worker_tensor, absl::Time deadline,
                          absl::FunctionRef<bool(std::string)> write);

// Mesh positions (row-major) holding the distinct blocks of `spec`: coordinate `source` on every
// mesh dim that is not Shard, any coordinate on Shard dims.
std::vector<int64_t> BlockHolders(const DTensorSpec& spec, const std::vector<int64_t>& source);

// Mesh dims that are not Shard (and have more than one rank): the dims along which the one copy
// of each block that BlockHolders received is broadcast.
std::vector<int> ReplicaDims(const DTensorSpec& spec);

}  // namespace tessera

#endif  // TESSERA_SERVER_TRANSFERS_SHARD_STREAMS_H_
