#ifndef TESSERA_SERVER_TABLES_DTENSOR_ENTRY_H_
#define TESSERA_SERVER_TABLES_DTENSOR_ENTRY_H_

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/sharding/dtensor_spec.h"
#include "server/tables/mesh_table.h"

namespace tessera {

// Work posted to the workers that writes a tensor: done once every worker replied.
struct TensorWrite {
  absl::Notification done;
  absl::Status status;  // written before done is notified
};

// A DTensor as the table holds it: its spec on a mesh, its owner and the work that writes it.
// Immutable once made, but for whether it was released.
struct DTensorEntry {
  // A tensor not yet named, whose write has not begun.
  DTensorEntry(std::shared_ptr<Mesh> mesh, DTensorSpec spec, std::string owner)
      : mesh(std::move(mesh)),
        spec(std::move(spec)),
        owner(std::move(owner)),
        write(std::make_shared<TensorWrite>()) {}

  std::string name;
  std::shared_ptr<Mesh> mesh;
  DTensorSpec spec;
  std::string owner;
  std::shared_ptr<TensorWrite> write;
  // Held while a command that writes the tensor, or the one that frees it, is posted: a write is
  // posted before the free or not at all, so none recreates shards on the workers after the free.
  mutable absl::Mutex post_mu;
  mutable bool released ABSL_GUARDED_BY(post_mu) = false;
  // A relayout in place whose intent (a "relayout" record of the new spec) is in the store until
  // the new layout is written and recorded.
  bool relayout_recorded = false;
  // The entry that took its place when its mesh was set up again (DTensorTable::Rehome): freeing
  // this one frees that one.
  mutable std::shared_ptr<DTensorEntry> moved_to ABSL_GUARDED_BY(post_mu);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_DTENSOR_ENTRY_H_
