#ifndef TESSERA_CLIENT_DTENSOR_ACCESS_H_
#define TESSERA_CLIENT_DTENSOR_ACCESS_H_

// DTensorAccess: the one friend of a DTensor handle's state, through which the client's .cc files
// make handles from replies and read what a handle shares. Internal to the client library.

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/wire.h"
#include "core/status_macros.h"
#include "tessera/dtensor.h"
#include "tessera/v1/tensor.pb.h"

namespace tessera::client {

struct DTensorAccess {
  // A handle to the tensor `tensor` describes, freeing it when the last copy goes if `owned`.
  static absl::StatusOr<DTensor> Adopt(std::shared_ptr<Session> session,
                                       const v1::TensorInfo& tensor, bool owned) {
    ASSIGN_OR_RETURN(DTensorInfo info, FromWire(tensor));
    DTensor t;
    t.state_ = std::make_shared<DTensor::State>(std::move(session), std::move(info), owned);
    return t;
  }
  static DTensor::State& StateOf(DTensor& t) { return *t.state_; }
  // The shared state; null for an empty handle.
  static const std::shared_ptr<DTensor::State>& StateOf(const DTensor& t) { return t.state_; }
  // Waits until the coordinator accepted the op that makes `state`'s tensor, when one on the op
  // stream does; its failure, naming the tensor, otherwise.
  static absl::Status AwaitCreated(const DTensor::State& state);
};

}  // namespace tessera::client

#endif  // TESSERA_CLIENT_DTENSOR_ACCESS_H_
