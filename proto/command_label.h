#ifndef TESSERA_PROTO_COMMAND_LABEL_H_
#define TESSERA_PROTO_COMMAND_LABEL_H_

#include <string>

#include "tessera/v1/worker.pb.h"

namespace tessera {

// A worker command as log lines name it: its kind, the mesh it works on (when it names one) and its
// sequence, e.g. "redistribute (mesh 3, sequence 12)" or "delete_tensors (sequence 13)".
std::string CommandLabel(const v1::Command& command);

}  // namespace tessera

#endif  // TESSERA_PROTO_COMMAND_LABEL_H_
