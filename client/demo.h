#ifndef TESSERA_CLIENT_DEMO_H_
#define TESSERA_CLIENT_DEMO_H_

#include <ostream>

#include "absl/status/status.h"
#include "client/cli_args.h"

namespace tessera::cli {

// tessera demo: layouts, plans and a shard → reshard → unshard round trip through real files on
// generated data, each result checked against a single-process reference. Fails on any mismatch.
absl::Status RunDemo(const Args& args, std::ostream& out);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_DEMO_H_
