#ifndef TESSERA_CORE_MODULES_MODULE_PROGRAM_H_
#define TESSERA_CORE_MODULES_MODULE_PROGRAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/modules/module_spec.h"
#include "core/modules/parallel_plan.h"
#include "core/sharding/device_mesh.h"
#include "core/sharding/placement.h"

namespace tessera {

// What one step of a compiled module program does. Every rank of the mesh runs the same steps on
// its own shards (SPMD); collectives run in the group of the step's mesh dim. Buffers are the
// activations of one run, numbered; buffer 0 is the input. Forward steps write new buffers;
// backward steps write gradient buffers (also numbered buffers) and accumulate into the
// gradients of the parameters they name.
//
// A step that takes a weight or bias reads it from a parameter (ProgramStep::weight, bias) or,
// under distribute_module, from a buffer holding a whole parameter gathered from its shards
// (kGatherParameter; ProgramStep::weight_buffer, bias_buffer). The backward step of such a step
// writes that weight's (bias's) whole gradient to a buffer of its own (weight_grad_buffer,
// bias_grad_buffer), which kShardGrad cuts to this rank's shard of the parameter's gradient.
enum class ProgramOpKind : int {
  // --- forward: local compute ---
  kLinear = 1,      // out = in0 @ W^T (+ b); W [out_local, in_local]
  kEmbedding = 2,   // out = W[in0 - row_offset] for ids within this rank's rows, else 0;
                    // row_offset is the weight shard's offset on dim 0, `size` num_embeddings
  kLayerNorm = 3,   // outputs: y, mean, rstd (float32 [rows]); weight, bias optional
  kRmsNorm = 4,     // outputs: y, rstd; weight optional
  kActivation = 5,  // out = f(in0), f = `activation`
  kAttention = 6,   // inputs q, k, v [B, S, H*D]; outputs: out [B, S, H*D], probs [B, H, S, S];
                    // `heads` local heads, `causal`
  kAdd = 7,         // out = in0 + in1 (same shape)
  kBiasAdd = 8,     // out = in0 + b over the last dim (a rowwise Linear's bias, added after the
                    // reduction of its partial products)
  // --- collectives on the group of `mesh_dim` ---
  kAllReduce = 20,        // out = reduce(in0) over the group, `reduce_op`
  kAllGather = 21,        // out = the ranks' in0 concatenated on `dim` (torch.chunk layout,
                          // uneven shards padded and unpadded)
  kReduceScatter = 22,    // out = this rank's torch.chunk piece on `dim` of reduce(in0)
  kChunk = 23,            // out = this rank's torch.chunk piece on `dim` of in0 (no communication)
  kAllToAll = 24,         // Shard(dim) -> Shard(dim2): out = pieces of in0 on dim2 exchanged,
                          // joined on `dim`
  kGatherParameter = 25,  // no inputs; out = the whole value of parameter `weight`: this rank's
                          // shard all-gathered over each mesh dim its placements shard (the last
                          // mesh dim first; torch.chunk layout, uneven shards included);
                          // `mesh_dim` unused
  // --- backward: local compute (inputs and outputs described per kind) ---
  kLinearBackward = 40,      // inputs x, dy -> out dx (omitted when outputs is empty);
                             // grad[W] += dy^T x, grad[b] += sum of dy over rows
  kEmbeddingBackward = 41,   // inputs ids, dy; grad[W] rows += dy (ids within this rank's rows)
  kLayerNormBackward = 42,   // inputs x, mean, rstd, dy -> dx; grad[weight], grad[bias]
  kRmsNormBackward = 43,     // inputs x, rstd, dy -> dx; grad[weight]
  kActivationBackward = 44,  // inputs x, dy -> dx
  kAttentionBackward = 45,   // inputs q, k, v, probs, dout -> dq, dk, dv
  kAccumulate = 46,          // out = in0 + in1 (a gradient reaching a buffer twice)
  kScale = 47,               // out = in0 * `scale` (forward: Replicate -> Partial(sum) as 1/n)
  kBiasAddBackward = 48,     // inputs dy; grad[b] += sum of dy over rows
  kShardGrad = 49,           // input: the whole gradient of parameter `weight` (the same on every
                             // rank); grad[weight] += this rank's shard of it (no communication)
  // --- after backward: a parameter's gradient reduced over the group of `mesh_dim` ---
  kGradAllReduce = 60,  // grad[weight] = reduce(grad[weight]), `reduce_op` (sum or avg)
};

// "linear", "all_gather", ...
absl::string_view ProgramOpKindName(ProgramOpKind kind);

// Elementwise functions of kActivation.
enum class ActivationKind : int { kIdentity = 0, kRelu = 1, kGelu = 2, kGeluTanh = 3, kSilu = 4 };

struct ProgramStep {
  ProgramOpKind kind = ProgramOpKind::kLinear;
  std::vector<int> inputs;   // buffer numbers
  std::vector<int> outputs;  // buffer numbers, each written once
  int weight = -1;           // index into Program::parameters, or -1
  int bias = -1;             // index into Program::parameters, or -1
  // A step taking a weight (bias) names a parameter or a buffer holding it whole, not both: the
  // compute steps and their backward (kLinear, kEmbedding, kLayerNorm, kRmsNorm, kBiasAdd).
  int weight_buffer = -1;       // buffer read as the weight, or -1
  int bias_buffer = -1;         // buffer read as the bias, or -1
  int weight_grad_buffer = -1;  // backward with weight_buffer: buffer written with its gradient
  int bias_grad_buffer = -1;    // backward with bias_buffer: buffer written with its gradient
  ActivationKind activation = ActivationKind::kIdentity;
  double eps = 0;
  int64_t heads = 0;
  bool causal = false;
  int64_t size = 0;  // kEmbedding: num_embeddings
  int mesh_dim = 0;  // collectives
  int dim = 0;       // collectives: tensor dim (normalized, >= 0)
  int dim2 = 0;      // kAllToAll: the dim sharded after
  ReduceOp reduce_op = ReduceOp::kSum;
  double scale = 1.0;  // kScale
  std::string module;  // FQN of the module the step comes from ("" for the root), for messages
};

// A parameter as the program holds it: FQN, full shape and its placements on the mesh.
struct ProgramParameter {
  std::string fqn;
  Shape shape;
  std::vector<Placement> placements;  // one per mesh dim
};

// The activation layout at the program's edges, on the tensor-parallel mesh dim.
struct EdgeLayout {
  Placement placement;     // how the ranks' local tensors make the full one
  bool is_dtensor = true;  // false: the user gets local tensors (use_local_output)
};

// The buffers `step` reads: its inputs, then its weight and bias buffers.
std::vector<int> StepReads(const ProgramStep& step);
// The buffers `step` writes: its outputs, then its weight's and bias's gradient buffers.
std::vector<int> StepWrites(const ProgramStep& step);

// A module compiled for a mesh: the same program on every rank.
struct Program {
  int tp_mesh_dim = 0;  // the mesh dim collectives of the plan run on
  // Mesh dims that split the batch (dim 0 of the input and output) and average the gradients
  // over their groups (AddDataParallel). Every other mesh dim but tp_mesh_dim holds the whole
  // batch on every rank.
  std::vector<int> data_parallel_dims;
  std::vector<ProgramParameter> parameters;
  ModuleInput input;         // dtype and full shape (-1: varies)
  EdgeLayout input_layout;   // how a full input is split over the tp group
  EdgeLayout output_layout;  // how the ranks' outputs make the full output
  int output_rank = 0;       // rank of the output
  DType output_dtype = DType::kFloat32;
  int64_t output_features = 0;  // full size of the output's last dim
  int num_buffers = 1;          // forward and backward buffers together
  int output = 0;               // the forward's output buffer
  std::vector<ProgramStep> forward;
  // Run after forward with buffer `grad_output` holding the output's gradient (laid out as the
  // output); leaves every parameter's gradient with its parameter's placements.
  int grad_output = 0;
  std::vector<ProgramStep> backward;
  // Patterns of the plan that matched no module.
  std::vector<std::string> unmatched;
};

// Compiles `model` with `plan` for `mesh` as parallelize_module would shard it. The tp mesh dim is
// the plan's (by name or index); parameters of styled modules get the style's placements on it,
// every other parameter and mesh dim Replicate. Activations are tracked as DTensor layouts on the
// tp dim, with torch's rules at each style's input and output; modules without a style compute on
// what they get, redistributing first when they need a full dim (a norm over a sharded last dim, a
// Partial input). INVALID_ARGUMENT naming the module for a style it cannot take, a local feature
// size that does not fit the module, or heads that do not split evenly across the tp group.
absl::StatusOr<Program> CompileParallelize(const ModelSpec& model, const ParallelizePlan& plan,
                                           const DeviceMesh& mesh);

// Compiles `model` under distribute_module: each parameter's placements (Shard or Replicate, one
// per mesh dim) from `plan`, computed on as DTensor would with replicated activations. A
// parameter sharded on some mesh dim is gathered whole before the step that uses it
// (kGatherParameter), and its whole gradient, the same on every rank, is cut to this rank's
// shard (kShardGrad). Activations stay Replicate on every mesh dim: no mesh dim splits the batch
// and no gradient is reduced. INVALID_ARGUMENT as DistributePlacements and CompileParallelize.
absl::StatusOr<Program> CompileDistribute(const ModelSpec& model, const DistributePlan& plan,
                                          const DeviceMesh& mesh);

// Adds data-parallel gradient averaging over `dp_mesh_dim` (parameters Replicate on it, the batch
// split on dim 0): a kGradAllReduce(avg) per parameter at the end of backward, and the dim to
// data_parallel_dims.
void AddDataParallel(Program& program, int dp_mesh_dim);

}  // namespace tessera

#endif  // TESSERA_CORE_MODULES_MODULE_PROGRAM_H_
