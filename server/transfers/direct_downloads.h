#ifndef TESSERA_SERVER_TRANSFERS_DIRECT_DOWNLOADS_H_
#define TESSERA_SERVER_TRANSFERS_DIRECT_DOWNLOADS_H_

#include <map>
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

// full_tensor and to_local on the direct path: the client reads each block straight from its
// worker. Plan reserves a read of every block the answer needs on its worker (so the read is
// ordered after the writes before it and before those after it, as the relayed read is), signs a
// read grant per block and returns the routes; for full_tensor, Partial values are first reduced
// into a temporary whose deletion is posted right behind the reads. Sequences are released to
// their workers once the grants have expired (kReleaseMargin later; a number the worker used is
// ignored), so a client that never reads stalls no worker for longer than that. Thread-safe.
class DirectDownloads {
 public:
  DirectDownloads(DTensorTable* tensors, DTensorStreams* streams,
                  absl::Duration grant_lifetime = absl::Seconds(10));
  ~DirectDownloads();
  DirectDownloads(const DirectDownloads&) = delete;
  DirectDownloads& operator=(const DirectDownloads&) = delete;

  // Plans once the tensor's write is done and recorded durably (so that what a client reads is
  // never lost with the coordinator), at most until `deadline`.
  absl::StatusOr<v1::DownloadPlan> Plan(const v1::PlanDownloadRequest& request,
                                        const std::string& owner, absl::Time deadline);
  // Releases now the reads of `owner`'s plan `download_id` (a read made is ignored by its worker);
  // NOT_FOUND for a plan unknown, expired, or another client's.
  absl::Status Release(const std::string& download_id, const std::string& owner);
  // Releases the sequences of plans whose grants expired.
  void ExpireDue(absl::Time now);

  static constexpr absl::Duration kReleaseMargin = absl::Seconds(2);

 private:
  struct Planned {
    std::string owner;
    std::vector<SequenceLease> leases;
    absl::Time release_at;
  };

  DTensorTable* tensors_;
  DTensorStreams* streams_;
  const absl::Duration grant_lifetime_;
  mutable absl::Mutex mu_;
  std::map<std::string, Planned> planned_ ABSL_GUARDED_BY(mu_);  // by download id
  absl::Notification stopping_;
  std::thread expirer_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TRANSFERS_DIRECT_DOWNLOADS_H_
