#ifndef TESSERA_SERVER_MODULE_SERVICE_H_
#define TESSERA_SERVER_MODULE_SERVICE_H_

#include "security/idle_streams.h"
#include "security/stream_limits.h"
#include "server/modules/module_loader.h"
#include "server/modules/module_plans.h"
#include "server/modules/module_programs.h"
#include "server/modules/module_runs.h"
#include "server/recovery/module_recovery.h"
#include "server/tables/dtensor_table.h"
#include "server/tables/module_table.h"
#include "server/tables/served_models.h"
#include "server/transfers/checkpoints.h"
#include "server/transfers/dtensor_streams.h"
#include "tessera/v1/module.grpc.pb.h"

namespace tessera {

// The client-facing ModuleService: modules loaded from a spec with a seed or streamed weights,
// parallelize_module / distribute_module, forwards and training steps, saving, and publishing for
// serving. Loading, plans and runs are each one class; this one maps them to the RPCs. Every call
// runs until the caller's deadline at most (and at most kTransferTimeout).
class ModuleService final : public v1::ModuleService::Service {
 public:
  // `served` (may be null: nothing is served) receives the published modules. A LoadModule
  // stream whose client sends nothing, or a SaveModule stream whose client takes nothing, for
  // `stream_idle_timeout` is ended (IdleStreams), and what it held released.
  ModuleService(DTensorTable* tensors, ModuleTable* modules, ServedModels* served,
                absl::Duration stream_idle_timeout = absl::Seconds(30));

  // Streams are admitted to `limits` (per peer and in all); set before serving. None: all are.
  void LimitStreams(StreamLimits* limits) { limits_ = limits; }

  // Brings back the modules a state store recorded: Load before serving, Restore once the meshes
  // and tensors are back.
  ModuleRecovery& recovery() { return recovery_; }

  // Moves the modules of `old` onto `now`, the same mesh set up again after a restarted worker
  // came back (ReplicaRepair), their parameters moved (and repaired) with the mesh's tensors: each
  // is reinstalled as a recovery reinstalls it (ModuleRecovery::Reinstall), its published versions
  // served again, or DATA_LOSS naming a parameter no replica held.
  void MeshRejoined(const Mesh& old, const std::shared_ptr<Mesh>& now);

  // Client stream.
  grpc::Status LoadModule(grpc::ServerContext* context,
                          grpc::ServerReader<v1::LoadModuleChunk>* reader,
                          v1::ModuleInfo* reply) override;
  // Unary.
  grpc::Status ParallelizeModule(grpc::ServerContext* context,
                                 const v1::ParallelizeModuleRequest* request,
                                 v1::ParallelizeModuleReply* reply) override;
  // Unary.
  grpc::Status DistributeModule(grpc::ServerContext* context,
                                const v1::DistributeModuleRequest* request,
                                v1::ParallelizeModuleReply* reply) override;
  // Unary.
  grpc::Status ListModules(grpc::ServerContext* context, const v1::ListModulesRequest* request,
                           v1::ListModulesReply* reply) override;
  // Unary.
  grpc::Status ShowModule(grpc::ServerContext* context, const v1::ShowModuleRequest* request,
                          v1::ModuleInfo* reply) override;
  // Unary.
  grpc::Status ExportPlan(grpc::ServerContext* context, const v1::ExportPlanRequest* request,
                          v1::ExportPlanReply* reply) override;
  // Unary.
  grpc::Status RemoveModule(grpc::ServerContext* context, const v1::RemoveModuleRequest* request,
                            v1::RemoveModuleReply* reply) override;
  // Unary.
  grpc::Status Forward(grpc::ServerContext* context, const v1::ForwardRequest* request,
                       v1::ForwardReply* reply) override;
  // Unary.
  grpc::Status Step(grpc::ServerContext* context, const v1::StepRequest* request,
                    v1::StepReply* reply) override;
  // Server stream.
  grpc::Status SaveModule(grpc::ServerContext* context, const v1::SaveModuleRequest* request,
                          grpc::ServerWriter<v1::SaveModuleChunk>* writer) override;
  // Unary.
  grpc::Status PublishModule(grpc::ServerContext* context, const v1::PublishModuleRequest* request,
                             v1::PublishModuleReply* reply) override;
  // Unary.
  grpc::Status SaveModuleCheckpoint(grpc::ServerContext* context,
                                    const v1::SaveModuleCheckpointRequest* request,
                                    v1::SaveTensorReply* reply) override;
  // Unary.
  grpc::Status UnpublishModule(grpc::ServerContext* context,
                               const v1::UnpublishModuleRequest* request,
                               v1::UnpublishModuleReply* reply) override;

 private:
  // The handlers' bodies, each answered through ToGrpcStatus.
  absl::Status LoadModuleImpl(const grpc::ServerContext& context,
                              grpc::ServerReader<v1::LoadModuleChunk>* reader,
                              v1::ModuleInfo& reply);
  absl::Status ParallelizeModuleImpl(const grpc::ServerContext& context,
                                     const v1::ParallelizeModuleRequest& request,
                                     v1::ParallelizeModuleReply& reply);
  absl::Status DistributeModuleImpl(const grpc::ServerContext& context,
                                    const v1::DistributeModuleRequest& request,
                                    v1::ParallelizeModuleReply& reply);
  absl::Status ShowModuleImpl(const v1::ShowModuleRequest& request, v1::ModuleInfo& reply);
  absl::Status ExportPlanImpl(const v1::ExportPlanRequest& request, v1::ExportPlanReply& reply);
  absl::Status RemoveModuleImpl(const v1::RemoveModuleRequest& request);
  absl::Status ForwardImpl(const grpc::ServerContext& context, const v1::ForwardRequest& request,
                           v1::ForwardReply& reply);
  // ForwardImpl for a module imported from a program: its named inputs, full, to its outputs.
  absl::Status ForwardProgram(const grpc::ServerContext& context, const v1::ForwardRequest& request,
                              ModuleEntry& module, v1::ForwardReply& reply);
  absl::Status StepImpl(const grpc::ServerContext& context, const v1::StepRequest& request,
                        v1::StepReply& reply);
  absl::Status SaveModuleImpl(const grpc::ServerContext& context,
                              const v1::SaveModuleRequest& request,
                              grpc::ServerWriter<v1::SaveModuleChunk>* writer);
  absl::Status SaveModuleCheckpointImpl(const grpc::ServerContext& context,
                                        const v1::SaveModuleCheckpointRequest& request,
                                        v1::SaveTensorReply& reply);
  absl::Status PublishModuleImpl(const v1::PublishModuleRequest& request,
                                 v1::PublishModuleReply& reply);
  absl::Status UnpublishModuleImpl(const v1::UnpublishModuleRequest& request);
  // Applies a parsed plan (ParallelizeModule and DistributeModule).
  absl::Status ApplyPlan(const grpc::ServerContext& context, const std::string& name, PlanSpec plan,
                         const std::string& mesh_dim, v1::ParallelizeModuleReply* reply);
  // Streams every parameter of `module` (and gradient, with `gradients`) whole, one after another.
  absl::Status Save(const grpc::ServerContext& context, ModuleEntry& module, bool gradients,
                    IdleStreams::Watch& watch, grpc::ServerWriter<v1::SaveModuleChunk>* writer);
  // The served model of `module` as `published` publishes it; the caller holds the module's mu.
  ServedModel Served(std::shared_ptr<ModuleEntry> module, const v1::PublishedVersion& published);
  // Forgets published versions of model `model` (only `version`, when not empty) in the modules.
  void ForgetPublished(const std::string& model, const std::string& version);

  DTensorTable* tensors_;
  ModuleTable* modules_;
  ServedModels* served_;
  DTensorStreams streams_;
  Checkpoints checkpoints_;
  ModulePrograms programs_;
  ModuleLoader loader_;
  ModulePlans plans_;
  ModuleRuns runs_;
  ModuleRecovery recovery_;
  IdleStreams idle_;
  StreamLimits* limits_ = nullptr;
};

}  // namespace tessera

#endif  // TESSERA_SERVER_MODULE_SERVICE_H_
