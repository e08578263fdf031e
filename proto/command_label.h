#ifndef TESSERA_PROTO_COMMAND_LABEL_H_
#define TESSERA_PROTO_COMMAND_LABEL_H_

#include <cstdint>
#include <optional>
#include <string>

#include "tessera/v1/worker.pb.h"

namespace tessera {

// A worker command as log lines name it: its kind, the mesh it works on (when it names one) and its
// sequence, e.g. "redistribute (mesh 3, sequence 12)" or "delete_tensors (sequence 13)".
std::string CommandLabel(const v1::Command& command);

// A command's kind as the proto names it ("run_op"), or "empty" when none is set.
std::string CommandKind(const v1::Command& command);

// The mesh a command works on, for every kind that names one in its int64 field `mesh_id`.
std::optional<int64_t> CommandMesh(const v1::Command& command);

// A command as structured log lines carry it, in key=value form:
// "kind=redistribute mesh=3 seq=12", with mesh=- for a kind that names no mesh.
std::string CommandFields(const v1::Command& command);

}  // namespace tessera

#endif  // TESSERA_PROTO_COMMAND_LABEL_H_
