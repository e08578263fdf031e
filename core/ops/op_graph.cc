#include "core/ops/op_graph.h"

#include "absl/strings/str_join.h"

namespace tessera::ops {

std::string OpGraph::OpsText() const {
  return absl::StrJoin(nodes, ", ", [](std::string* out, const OpNode& n) { out->append(n.op); });
}

}  // namespace tessera::ops
