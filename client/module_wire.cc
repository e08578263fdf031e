#include "client/module_wire.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_context.h"
#include "core/status_macros.h"
#include "proto/convert.h"

namespace tessera::client {
namespace {

absl::StatusOr<EdgeLayoutInfo> FromWire(const v1::EdgeLayoutInfo& edge) {
  ASSIGN_OR_RETURN(Placement placement, FromProto(edge.placement()));
  return EdgeLayoutInfo{placement, edge.is_dtensor()};
}

}  // namespace

v1::SgdOptions ToWire(const SgdOptions& sgd) {
  v1::SgdOptions wire;
  wire.set_lr(sgd.lr);
  wire.set_momentum(sgd.momentum);
  wire.set_weight_decay(sgd.weight_decay);
  return wire;
}

v1::ModuleOutputs ToWire(Outputs outputs) { return static_cast<v1::ModuleOutputs>(outputs); }

absl::StatusOr<ModuleParameter> FromWire(const v1::ModuleParameter& parameter) {
  ASSIGN_OR_RETURN(DTensorSpec spec, FromProto(parameter.meta()));
  std::vector<LocalShard> shards;
  for (const v1::LocalShard& s : parameter.meta().shards()) {
    shards.push_back({Shape(s.local_shape().begin(), s.local_shape().end()),
                      std::vector<int64_t>(s.global_offset().begin(), s.global_offset().end())});
  }
  return ModuleParameter{parameter.fqn(), parameter.tensor(), std::move(spec), std::move(shards),
                         parameter.grad()};
}

PublishedVersion FromWire(const v1::PublishedVersion& published) {
  return PublishedVersion{published.model(), published.version(), published.max_batch_size(),
                          absl::Microseconds(published.max_queue_delay_us())};
}

absl::StatusOr<ModuleInfo> FromWire(const v1::ModuleInfo& module) {
  ModuleInfo info;
  info.name = module.name();
  info.mesh = module.mesh();
  info.spec_json = module.spec_json();
  info.plan_json = module.plan_json();
  for (const v1::ModuleParameter& p : module.parameters()) {
    ASSIGN_OR_RETURN(ModuleParameter parameter, FromWire(p));
    info.parameters.push_back(std::move(parameter));
  }
  ASSIGN_OR_RETURN(info.input_dtype, FromProto(module.input_dtype()));
  info.input_shape.assign(module.input_shape().begin(), module.input_shape().end());
  ASSIGN_OR_RETURN(info.input_layout, FromWire(module.input_layout()));
  ASSIGN_OR_RETURN(info.output_layout, FromWire(module.output_layout()));
  info.tp_mesh_dim = module.tp_mesh_dim();
  ASSIGN_OR_RETURN(info.output_dtype, FromProto(module.output_dtype()));
  info.output_features = module.output_features();
  info.unmatched.assign(module.unmatched().begin(), module.unmatched().end());
  for (const v1::PublishedVersion& p : module.published()) info.published.push_back(FromWire(p));
  info.program_steps = module.program_steps();
  if (module.has_imported()) {
    const v1::ImportedInfo& in = module.imported();
    ImportedInfo imported;
    imported.source = in.source();
    imported.nodes = in.nodes();
    for (const auto* edges : {&in.inputs(), &in.outputs()}) {
      for (const v1::ProgramEdge& e : *edges) {
        absl::StatusOr<DTensorSpec> spec = FromProto(e.meta());
        if (!spec.ok())
          return WithContext(absl::StrCat("program edge '", e.name(), "'"), spec.status());
        (edges == &in.inputs() ? imported.inputs : imported.outputs)
            .push_back({e.name(), *std::move(spec)});
      }
    }
    imported.styled.assign(in.styled().begin(), in.styled().end());
    imported.tp_plan_json = in.tp_plan_json();
    imported.collectives = in.collectives();
    info.imported = std::move(imported);
  }
  return info;
}

absl::StatusOr<ModuleOutput> FromWire(const v1::ForwardReply& reply) {
  ModuleOutput output;
  ASSIGN_OR_RETURN(output.layout, FromWire(reply.output_layout()));
  output.tp_mesh_dim = reply.tp_mesh_dim();
  if (reply.has_output()) {
    absl::StatusOr<HostTensor> full = FromProto(reply.output());
    if (!full.ok()) return WithContext("the full output", full.status());
    output.full = *std::move(full);
  }
  for (int r = 0; r < reply.local_outputs_size(); ++r) {
    absl::StatusOr<HostTensor> t = FromProto(reply.local_outputs(r));
    if (!t.ok()) return WithContext(absl::StrCat("rank ", r, "'s output"), t.status());
    output.locals.push_back(*std::move(t));
  }
  return output;
}

}  // namespace tessera::client
