#ifndef TESSERA_CLIENT_MODULE_WIRE_H_
#define TESSERA_CLIENT_MODULE_WIRE_H_

// The module API's public structs to and from tessera.v1 messages (module.proto). FromWire
// validates what it reads and returns INVALID_ARGUMENT naming the bad value. Internal to the
// client library.

#include "absl/status/statusor.h"
#include "tessera/module.h"
#include "tessera/v1/module.pb.h"
#include "tessera/v1/worker.pb.h"

namespace tessera::client {

v1::SgdOptions ToWire(const SgdOptions& sgd);
v1::ModuleOutputs ToWire(Outputs outputs);

absl::StatusOr<ModuleInfo> FromWire(const v1::ModuleInfo& module);
absl::StatusOr<ModuleParameter> FromWire(const v1::ModuleParameter& parameter);
absl::StatusOr<ModuleOutput> FromWire(const v1::ForwardReply& reply);
PublishedVersion FromWire(const v1::PublishedVersion& published);

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_MODULE_WIRE_H_
