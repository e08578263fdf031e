#ifndef TESSERA_SERVER_TABLES_SERVED_MODELS_H_
#define TESSERA_SERVER_TABLES_SERVED_MODELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/dtype.h"
#include "core/host_tensor.h"
#include "core/shape.h"
#include "server/tables/model_runner.h"

namespace tessera {

// One input or output of a served model as KServe's ModelMetadata states it: name, dtype, and
// shape with -1 for a size that varies (dim 0 is the batch).
struct ServedTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
};

// A model published for serving: name, version, its inputs and outputs in order (a module's one
// of each; an imported program's named ones), its runner. Dynamic batching takes models of one
// input.
struct ServedModel {
  std::string name;
  std::string version;               // "1", "2", ...
  std::vector<ServedTensor> inputs;  // each dtype the dtype requests may send; others convert
                                     // where they can
  std::vector<ServedTensor> outputs;
  BatchingOptions batching;
  std::shared_ptr<ModelRunner> runner;
};

// The published models by name and version. Thread-safe.
class ServedModels {
 public:
  // ALREADY_EXISTS if that name and version is published; INVALID_ARGUMENT for an empty name or
  // version, no runner, or a negative max_batch_size. A model with batching on is served (and
  // found) with a DynamicBatcher (server/dynamic_batcher.h) over its runner.
  absl::Status Publish(ServedModel model);
  // Removes every version of `name` (or only `version` when not empty); NOT_FOUND if none.
  absl::Status Unpublish(const std::string& name, const std::string& version = "");
  // The model; version "" means the highest published version. NOT_FOUND naming the model (and
  // version) if it is not published.
  absl::StatusOr<std::shared_ptr<const ServedModel>> Find(const std::string& name,
                                                          const std::string& version) const;
  // Every published model, ordered by name then version.
  std::vector<std::shared_ptr<const ServedModel>> List() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::shared_ptr<const ServedModel>> models_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera

#endif  // TESSERA_SERVER_TABLES_SERVED_MODELS_H_
