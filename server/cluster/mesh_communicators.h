#ifndef TESSERA_SERVER_CLUSTER_MESH_COMMUNICATORS_H_
#define TESSERA_SERVER_CLUSTER_MESH_COMMUNICATORS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace tessera {

// A mesh's communicators as the coordinator sees them: the generation its workers have formed (or
// are forming), and whether they can run collectives. A failure part way through a collective
// breaks a communicator for good; a worker reports it with the generation it broke in, and the
// mesh is re-formed as the next generation (MeshReformer posts the SetupMesh). Reports of an older
// generation are stale and ignored. A failed re-form is tried again, up to kMaxAttempts in all;
// then the mesh stays broken. Thread-safe.
class MeshCommunicators {
 public:
  static constexpr int kMaxAttempts = 3;

  // OK while usable; otherwise UNAVAILABLE saying why (broken and being re-formed, or re-forming
  // failed).
  absl::Status Health() const;
  int64_t generation() const;

  // A worker reported generation `generation` broken for `reason`. Returns the generation to form
  // when this starts a re-form: the first report of the current generation while none runs.
  std::optional<int64_t> Broke(int64_t generation, const std::string& reason);
  // Forming `generation` ended with `status`. Returns the generation to form next when another
  // attempt is due: after a failure (fewer than kMaxAttempts so far), or when the generation just
  // formed was reported broken already.
  std::optional<int64_t> Formed(int64_t generation, const absl::Status& status);

 private:
  // Starts forming the next generation; returns it.
  int64_t Next(absl::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool forming_ ABSL_GUARDED_BY(mu_) = false;
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;   // of the re-form under way or last failed
  std::string cause_ ABSL_GUARDED_BY(mu_);  // what broke the communicators being re-formed
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  // A break of the generation being formed, reported by a worker that had formed it already.
  std::string broke_while_forming_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_CLUSTER_MESH_COMMUNICATORS_H_
