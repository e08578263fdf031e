#ifndef TESSERA_SERVER_RECOVERY_MESH_REFORMER_H_
#define TESSERA_SERVER_RECOVERY_MESH_REFORMER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/cluster/dispatcher.h"
#include "server/cluster/rendezvous_store.h"
#include "server/tables/mesh_table.h"
#include "tessera/v1/worker.pb.h"

namespace tessera {

// Forms a mesh's communicators on its workers, and re-forms them after a failure broke one. A
// worker reports a broken communicator in its reply to any command on the mesh (the Dispatcher
// passes such replies to OnBroken as they arrive); the first report of the mesh's current
// generation marks the mesh broken (MeshInfo.ready is false with the reason, and commands that
// need its communicators are refused with UNAVAILABLE) and posts a SetupMesh of the next
// generation, under a rendezvous prefix of its own, to every worker of the mesh, ordered after the
// commands posted before it (which fail on the broken communicators). Once every worker has formed
// it the mesh is ready again; a failed attempt is retried (MeshCommunicators::kMaxAttempts).
// Thread-safe.
class MeshReformer {
 public:
  MeshReformer(MeshTable* meshes, Dispatcher* dispatcher, RendezvousStore* store)
      : meshes_(meshes), dispatcher_(dispatcher), store_(store) {}

  // Forms generation 0 of a new mesh's communicators and waits for every worker. The workers wait
  // for each other no later than `deadline` (a caller's: a set-up never outlives the call that
  // asked for it, holding the workers' order); DEADLINE_EXCEEDED at once if it has passed.
  absl::Status SetUp(const Mesh& mesh, absl::Time deadline = absl::InfiniteFuture());
  // A worker reported a communicator broken: re-forms its mesh unless that is under way already.
  void OnBroken(const WorkerHandle& worker, const v1::BrokenCommunicator& broken);
  // SetUp of `mesh` (a mesh taking restarted workers back, or one recovered after a coordinator
  // restart) failed for `why` while the mesh is in use: forms it again as a broken generation is
  // re-formed, up to MeshCommunicators::kMaxAttempts, its Health UNAVAILABLE meanwhile. Commands
  // posted after this call run on the new generation.
  void FormAgain(const std::shared_ptr<Mesh>& mesh, const absl::Status& why);
  // FormAgain, waiting for it: each attempt's outcome before the next, for a caller that holds
  // the mesh's order (commands posted after the call need the communicators, and a command that
  // ran after a failed attempt would find none). Returns the mesh's Health once the last attempt
  // ended: OK once some generation formed.
  absl::Status FormAgainNow(Mesh& mesh, const absl::Status& why);

  // The rendezvous prefix under which every generation of `mesh`'s communicators meets.
  static std::string StorePrefix(const Mesh& mesh);

  // The least a re-form's rendezvous waits for the workers: the workers reach it at different
  // times, each once the commands before it have failed on the broken communicators.
  static constexpr absl::Duration kReformConnectTimeout = absl::Seconds(10);
  // What a set-up leaves of its caller's deadline for the workers' answers to come back.
  static constexpr absl::Duration kReplySlack = absl::Milliseconds(200);

 private:
  // The SetupMesh of `generation` of the mesh's communicators, connecting within `connect`.
  static v1::Command SetupCommand(const Mesh& mesh, int64_t generation, absl::Duration connect);
  static std::string GenerationPrefix(const Mesh& mesh, int64_t generation);
  // Posts the SetupMesh of `generation`; its outcome may start the next attempt.
  void Reform(const std::shared_ptr<Mesh>& mesh, int64_t generation);

  MeshTable* meshes_;
  Dispatcher* dispatcher_;
  RendezvousStore* store_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_RECOVERY_MESH_REFORMER_H_
