// Workers and meshes: init_device_mesh and the MeshService calls of a Session.

#include "tessera/mesh.h"

#include "client/session_impl.h"
#include "client/wire.h"
#include "core/status_macros.h"
#include "proto/grpc_status.h"
#include "tessera/session.h"

namespace tessera::client {

absl::StatusOr<MeshInfo> InitDeviceMesh(Session& session, const std::string& device_type,
                                        const Shape& shape,
                                        const std::vector<std::string>& dim_names,
                                        const std::string& name, const MeshOptions& options) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::CreateMeshRequest request;
  request.set_name(name);
  request.set_device_type(device_type);
  for (int64_t d : shape) request.add_shape(d);
  for (const std::string& n : dim_names) request.add_dim_names(n);
  for (int64_t w : options.worker_ids) request.add_worker_ids(w);
  request.set_timeout_ms(absl::ToInt64Milliseconds(options.collective_timeout));
  grpc::ClientContext context;
  // Setting up the communicators may take up to the collective timeout.
  impl.Prepare(&context, options.collective_timeout + impl.options.timeout);
  v1::MeshInfo reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl.meshes->CreateMesh(&context, request, &reply)));
  return FromWire(reply);
}

absl::StatusOr<MeshInfo> GetMesh(Session& session, const std::string& name) {
  const internal::SessionImpl& impl = internal_impl(session);
  v1::GetMeshRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  impl.Prepare(&context);
  v1::MeshInfo reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl.meshes->GetMesh(&context, request, &reply)));
  return FromWire(reply);
}

absl::StatusOr<std::vector<WorkerInfo>> Session::ListWorkers() {
  grpc::ClientContext context;
  impl_->Prepare(&context);
  v1::ListWorkersReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl_->meshes->ListWorkers(&context, {}, &reply)));
  std::vector<WorkerInfo> workers;
  for (const v1::WorkerInfo& w : reply.workers()) workers.push_back(FromWire(w));
  return workers;
}

absl::StatusOr<std::vector<MeshInfo>> Session::ListMeshes() {
  grpc::ClientContext context;
  impl_->Prepare(&context);
  v1::ListMeshesReply reply;
  RETURN_IF_ERROR(FromGrpcStatus(impl_->meshes->ListMeshes(&context, {}, &reply)));
  std::vector<MeshInfo> meshes;
  for (const v1::MeshInfo& m : reply.meshes()) {
    ASSIGN_OR_RETURN(MeshInfo info, FromWire(m));
    meshes.push_back(std::move(info));
  }
  return meshes;
}

absl::Status Session::DeleteMesh(const std::string& name) {
  v1::DeleteMeshRequest request;
  request.set_name(name);
  grpc::ClientContext context;
  impl_->Prepare(&context);
  v1::DeleteMeshReply reply;
  return FromGrpcStatus(impl_->meshes->DeleteMesh(&context, request, &reply));
}

}  // namespace tessera::client
