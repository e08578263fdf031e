#ifndef TESSERA_SERVER_MODULES_MODULE_LOADER_H_
#define TESSERA_SERVER_MODULES_MODULE_LOADER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/modules/module_weights.h"
#include "grpcpp/grpcpp.h"
#include "server/modules/graph_modules.h"
#include "server/modules/module_programs.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/module_table.h"
#include "server/transfers/checkpoints.h"
#include "server/transfers/dtensor_streams.h"
#include "tessera/v1/module.pb.h"

namespace tessera {

// LoadModule: a module made from its spec on a mesh, its parameters created as DTensors laid out
// by the plan given (or Replicate) and filled from a seed on the workers, from weights streamed
// through the coordinator a window at a time, or from a checkpoint the workers read, its program
// installed. The weights' header is
// checked against the spec before any byte moves; a failed load leaves nothing behind.
class ModuleLoader {
 public:
  ModuleLoader(DTensorTable* tensors, ModuleTable* modules, ModulePrograms* programs,
               DTensorStreams* streams, Checkpoints* checkpoints)
      : tensors_(tensors),
        modules_(modules),
        programs_(programs),
        streams_(streams),
        checkpoints_(checkpoints) {}

  absl::StatusOr<v1::ModuleInfo> Load(const grpc::ServerContext& context,
                                      grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader);

 private:
  // Load for a header that carries a program (graph_modules.h): the program read, laid out and
  // planned, the weights' header checked against its parameters, buffers and constants before
  // any byte moves, each weight streamed to its shards, the graph program installed.
  absl::StatusOr<v1::ModuleInfo> LoadImported(
      grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader, v1::LoadModuleChunk& chunk,
      std::shared_ptr<Mesh> mesh, absl::Time deadline);
  // Makes an imported module's parameters, streams their weights and installs its graph.
  absl::Status FillImported(grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader,
                            v1::LoadModuleChunk& chunk, ModuleEntry& module,
                            const std::vector<WeightsTensor>& weights, absl::Time deadline,
                            bool& program_posted);
  // Creates the parameters of `module`, fills them (from `chunk` on, for weights) and installs
  // the program (setting `program_posted`); the caller discards the module on failure.
  absl::Status Fill(grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader,
                    v1::LoadModuleChunk& chunk, ModuleEntry& module, CompiledPlan compiled,
                    absl::Time deadline, bool& program_posted);
  // The weights' header, from `chunk` or the one after it (which then becomes `chunk`).
  static absl::StatusOr<std::vector<WeightsTensor>> ReadWeightsHeader(
      grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader, v1::LoadModuleChunk& chunk);
  // Posts the FillTensor of every parameter, as torch's reset_parameters() draws them.
  absl::Status FillFromSeed(const ModuleEntry& module, uint64_t seed);
  // Routes the weights' bytes, from `chunk` on, into the parameters' shards, tensor after tensor
  // in the order of `order`, and posts each one's broadcast to its replicas.
  absl::Status StreamWeights(grpc::ServerReaderInterface<v1::LoadModuleChunk>* reader,
                             v1::LoadModuleChunk& chunk, const std::vector<WeightsTensor>& order,
                             const std::map<std::string, std::shared_ptr<DTensorEntry>>& entries,
                             absl::Time deadline);
  // Reads the checkpoint at `path` and posts each parameter's reads from the tensor of its
  // state_dict name, after checking that the checkpoint holds every parameter with its shape and
  // dtype.
  absl::Status FillFromCheckpoint(const ModuleEntry& module, const std::string& path,
                                  absl::Time deadline);
  // Records the module once `filled` (its parameters and program) and enters it under its
  // reserved name; otherwise, or if the record fails, frees what it made and gives the name back.
  absl::StatusOr<v1::ModuleInfo> Enter(std::shared_ptr<ModuleEntry> module, absl::Status filled,
                                       bool program_posted);
  // Frees what a failed load of `module` made.
  void Discard(ModuleEntry& module, bool program_posted);

  DTensorTable* tensors_;
  ModuleTable* modules_;
  ModulePrograms* programs_;
  DTensorStreams* streams_;
  Checkpoints* checkpoints_;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_MODULES_MODULE_LOADER_H_
