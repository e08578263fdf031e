#include "server/program_proto.h"

#include "proto/convert.h"

namespace tessera {
namespace {

v1::ProgramStep StepToProto(const ProgramStep& step) {
  v1::ProgramStep s;
  s.set_kind(static_cast<int32_t>(step.kind));
  for (int b : step.inputs) s.add_inputs(b);
  for (int b : step.outputs) s.add_outputs(b);
  s.set_weight(step.weight);
  s.set_bias(step.bias);
  s.set_activation(static_cast<int32_t>(step.activation));
  s.set_eps(step.eps);
  s.set_heads(step.heads);
  s.set_causal(step.causal);
  s.set_size(step.size);
  s.set_mesh_dim(step.mesh_dim);
  s.set_dim(step.dim);
  s.set_dim2(step.dim2);
  s.set_reduce_op(ToProto(step.reduce_op));
  s.set_scale(step.scale);
  s.set_module(step.module);
  return s;
}

v1::EdgeLayout EdgeToProto(const EdgeLayout& edge) {
  v1::EdgeLayout e;
  *e.mutable_placement() = ToProto(edge.placement);
  e.set_is_dtensor(edge.is_dtensor);
  return e;
}

}  // namespace

v1::Program ProgramToProto(const Program& program) {
  v1::Program p;
  p.set_tp_mesh_dim(program.tp_mesh_dim);
  for (const ProgramParameter& param : program.parameters) {
    v1::ProgramParameter* out = p.add_parameters();
    out->set_fqn(param.fqn);
    *out->mutable_shape() = ToProto(param.shape);
    *out->mutable_placements() = ToProto(param.placements);
  }
  p.set_input_dtype(ToProto(program.input.dtype));
  *p.mutable_input_shape() = ToProto(program.input.shape);
  *p.mutable_input_layout() = EdgeToProto(program.input_layout);
  *p.mutable_output_layout() = EdgeToProto(program.output_layout);
  p.set_output_rank(program.output_rank);
  p.set_output_dtype(ToProto(program.output_dtype));
  p.set_output_features(program.output_features);
  p.set_num_buffers(program.num_buffers);
  p.set_output(program.output);
  for (const ProgramStep& step : program.forward) *p.add_forward() = StepToProto(step);
  p.set_grad_output(program.grad_output);
  for (const ProgramStep& step : program.backward) *p.add_backward() = StepToProto(step);
  return p;
}

}  // namespace tessera
