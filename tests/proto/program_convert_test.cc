// Module programs on the wire (proto/convert.h) and core's CheckProgram: a program survives the
// trip field for field with its parameters' tensor names, and every malformed program is refused
// with INVALID_ARGUMENT naming the step (list, index, kind, module) or parameter and the field.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/modules/program_check.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using ::tessera::testing::StatusIs;

ProgramStep Step(ProgramOpKind kind, std::vector<int> inputs, std::vector<int> outputs,
                 std::string module, int weight = -1, int bias = -1) {
  ProgramStep step;
  step.kind = kind;
  step.inputs = std::move(inputs);
  step.outputs = std::move(outputs);
  step.module = std::move(module);
  step.weight = weight;
  step.bias = bias;
  return step;
}

// Two Linears with a ReLU between, colwise then rowwise on a 1-D mesh, with their backward.
Program TwoLinears() {
  Program p;
  p.parameters = {{"net1.weight", {8, 5}, {Placement::Shard(0)}},
                  {"net1.bias", {8}, {Placement::Shard(0)}},
                  {"net2.weight", {4, 8}, {Placement::Shard(1)}}};
  p.input = {DType::kFloat32, {-1, 5}};
  p.input_layout = {Placement::Replicate(), true};
  p.output_layout = {Placement::Replicate(), false};
  p.output_rank = 2;
  p.output_features = 4;
  p.num_buffers = 8;
  p.forward = {Step(ProgramOpKind::kLinear, {0}, {1}, "net1", 0, 1),
               Step(ProgramOpKind::kActivation, {1}, {2}, "relu"),
               Step(ProgramOpKind::kLinear, {2}, {3}, "net2", 2),
               Step(ProgramOpKind::kAllReduce, {3}, {4}, "net2")};
  p.forward[1].activation = ActivationKind::kRelu;
  p.output = 4;
  p.grad_output = 5;
  p.backward = {Step(ProgramOpKind::kLinearBackward, {2, 5}, {6}, "net2", 2),
                Step(ProgramOpKind::kActivationBackward, {1, 6}, {7}, "relu"),
                Step(ProgramOpKind::kLinearBackward, {0, 7}, {}, "net1", 0, 1)};
  p.backward[1].activation = ActivationKind::kRelu;
  return p;
}

// TwoLinears as distribute_module compiles it with the weights sharded: each weight gathered
// whole into a buffer its Linear reads, and its whole gradient cut back to this rank's shard.
Program GatheredLinears() {
  Program p;
  p.parameters = {{"net1.weight", {8, 5}, {Placement::Shard(0)}},
                  {"net1.bias", {8}, {Placement::Replicate()}},
                  {"net2.weight", {4, 8}, {Placement::Shard(1)}}};
  p.input = {DType::kFloat32, {-1, 5}};
  p.input_layout = {Placement::Replicate(), false};
  p.output_layout = {Placement::Replicate(), false};
  p.output_rank = 2;
  p.output_features = 4;
  p.num_buffers = 11;
  using K = ProgramOpKind;
  p.forward = {Step(K::kGatherParameter, {}, {1}, "net1", 0),
               Step(K::kLinear, {0}, {2}, "net1", -1, 1), Step(K::kActivation, {2}, {3}, "relu"),
               Step(K::kGatherParameter, {}, {4}, "net2", 2), Step(K::kLinear, {3}, {5}, "net2")};
  p.forward[1].weight_buffer = 1;
  p.forward[2].activation = ActivationKind::kRelu;
  p.forward[4].weight_buffer = 4;
  p.output = 5;
  p.grad_output = 6;
  p.backward = {Step(K::kLinearBackward, {3, 6}, {7}, "net2"),
                Step(K::kShardGrad, {8}, {}, "net2", 2),
                Step(K::kActivationBackward, {2, 7}, {9}, "relu"),
                Step(K::kLinearBackward, {0, 9}, {}, "net1", -1, 1),
                Step(K::kShardGrad, {10}, {}, "net1", 0)};
  p.backward[0].weight_buffer = 4;
  p.backward[0].weight_grad_buffer = 8;
  p.backward[2].activation = ActivationKind::kRelu;
  p.backward[3].weight_buffer = 1;
  p.backward[3].weight_grad_buffer = 10;
  return p;
}

// Every step kind once, with every attribute set to something other than its default.
Program EveryKind() {
  Program p;
  p.tp_mesh_dim = 1;
  p.data_parallel_dims = {0};
  p.parameters = {{"emb.weight", {10, 4}, {Placement::Replicate(), Placement::Shard(0)}},
                  {"ln.weight", {4}, {Placement::Replicate(), Placement::Replicate()}},
                  {"ln.bias", {4}, {Placement::Replicate(), Placement::Replicate()}},
                  {"rms.weight", {4}, {Placement::Replicate(), Placement::Replicate()}},
                  {"out.weight", {4, 4}, {Placement::Replicate(), Placement::Shard(1)}},
                  {"out.bias", {4}, {Placement::Replicate(), Placement::Replicate()}}};
  p.input = {DType::kInt64, {-1, 3}};
  p.input_layout = {Placement::Replicate(), false};
  p.output_layout = {Placement::Partial(ReduceOp::kSum), true};
  p.output_rank = 3;
  p.output_dtype = DType::kFloat64;
  p.output_features = 4;
  p.num_buffers = 31;
  using K = ProgramOpKind;
  p.forward = {Step(K::kEmbedding, {0}, {1}, "emb", 0),
               Step(K::kAllReduce, {1}, {2}, "emb"),
               Step(K::kLayerNorm, {2}, {3, 4, 5}, "ln", 1, 2),
               Step(K::kRmsNorm, {3}, {6, 7}, "rms", 3),
               Step(K::kAttention, {6, 6, 6}, {8, 9}, "attn"),
               Step(K::kChunk, {8}, {10}, "attn"),
               Step(K::kAllToAll, {10}, {11}, "attn"),
               Step(K::kAllGather, {11}, {12}, "attn"),
               Step(K::kReduceScatter, {12}, {13}, "attn"),
               Step(K::kAllGather, {13}, {14}, "attn"),
               Step(K::kActivation, {14}, {15}, "act"),
               Step(K::kAdd, {15, 6}, {16}, ""),
               Step(K::kLinear, {16}, {17}, "out", 4),
               Step(K::kBiasAdd, {17}, {29}, "out", -1, 5),
               Step(K::kScale, {29}, {18}, "out")};
  p.forward[0].size = 10;
  p.forward[1].mesh_dim = 1;
  p.forward[1].reduce_op = ReduceOp::kMax;
  p.forward[2].eps = 1e-5;
  p.forward[3].eps = 1e-6;
  p.forward[4].heads = 2;
  p.forward[4].causal = true;
  p.forward[5].dim = 1;
  p.forward[6].dim = 1;
  p.forward[6].dim2 = 0;
  p.forward[7].dim = 0;
  p.forward[8].dim = 2;
  p.forward[8].reduce_op = ReduceOp::kAvg;
  p.forward[9].dim = 2;
  p.forward[10].activation = ActivationKind::kGeluTanh;
  p.forward[14].scale = 0.25;
  p.output = 18;
  p.grad_output = 30;
  p.backward = {Step(K::kBiasAddBackward, {30}, {}, "out", -1, 5),
                Step(K::kLinearBackward, {16, 30}, {19}, "out", 4),
                Step(K::kScale, {19}, {20}, "out"),
                Step(K::kAccumulate, {19, 20}, {21}, ""),
                Step(K::kActivationBackward, {14, 21}, {22}, "act"),
                Step(K::kAttentionBackward, {6, 6, 6, 9, 22}, {23, 24, 25}, "attn"),
                Step(K::kAccumulate, {23, 24}, {26}, "attn"),
                Step(K::kRmsNormBackward, {3, 7, 26}, {27}, "rms", 3),
                Step(K::kLayerNormBackward, {2, 4, 5, 27}, {28}, "ln", 1, 2),
                Step(K::kEmbeddingBackward, {0, 28}, {}, "emb", 0),
                Step(K::kGradAllReduce, {}, {}, "ln", 1)};
  p.backward[2].scale = 0.5;
  p.backward[4].activation = ActivationKind::kGeluTanh;
  p.backward[5].heads = 2;
  p.backward[5].causal = true;
  p.backward[10].mesh_dim = 1;
  p.backward[10].reduce_op = ReduceOp::kAvg;
  return p;
}

std::vector<ParameterTensors> NamesFor(const Program& p) {
  std::vector<ParameterTensors> names;
  for (const ProgramParameter& param : p.parameters) {
    names.push_back({"p/" + param.fqn, "g/" + param.fqn, "m/" + param.fqn});
  }
  return names;
}

v1::Program OverTheWire(const v1::Program& message) {
  v1::Program parsed;
  EXPECT_TRUE(parsed.ParseFromString(message.SerializeAsString()));
  return parsed;
}

class ProgramRoundTripTest : public ::testing::TestWithParam<std::function<Program()>> {};

TEST_P(ProgramRoundTripTest, SurvivesTheWireWithItsTensorNames) {
  const Program program = GetParam()();
  ASSERT_TRUE(CheckProgram(program).ok()) << CheckProgram(program);
  const std::vector<ParameterTensors> names = NamesFor(program);
  const v1::Program wire = OverTheWire(ToProto(program, names));
  absl::StatusOr<WorkerProgram> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tensors, names);
  const Program& got = back->program;
  ASSERT_EQ(got.parameters.size(), program.parameters.size());
  for (size_t i = 0; i < got.parameters.size(); ++i) {
    EXPECT_EQ(got.parameters[i].fqn, program.parameters[i].fqn);
    EXPECT_EQ(got.parameters[i].shape, program.parameters[i].shape);
    EXPECT_EQ(got.parameters[i].placements, program.parameters[i].placements);
  }
  EXPECT_EQ(got.tp_mesh_dim, program.tp_mesh_dim);
  EXPECT_EQ(got.data_parallel_dims, program.data_parallel_dims);
  EXPECT_EQ(got.input.dtype, program.input.dtype);
  EXPECT_EQ(got.input.shape, program.input.shape);
  EXPECT_EQ(got.input_layout.placement, program.input_layout.placement);
  EXPECT_EQ(got.input_layout.is_dtensor, program.input_layout.is_dtensor);
  EXPECT_EQ(got.output_layout.placement, program.output_layout.placement);
  EXPECT_EQ(got.output_layout.is_dtensor, program.output_layout.is_dtensor);
  EXPECT_EQ(got.output_rank, program.output_rank);
  EXPECT_EQ(got.output_dtype, program.output_dtype);
  EXPECT_EQ(got.output_features, program.output_features);
  EXPECT_EQ(got.num_buffers, program.num_buffers);
  EXPECT_EQ(got.output, program.output);
  EXPECT_EQ(got.grad_output, program.grad_output);
  for (auto [got_steps, want_steps] :
       {std::pair{&got.forward, &program.forward}, std::pair{&got.backward, &program.backward}}) {
    ASSERT_EQ(got_steps->size(), want_steps->size());
    for (size_t i = 0; i < got_steps->size(); ++i) {
      const ProgramStep& a = (*got_steps)[i];
      const ProgramStep& b = (*want_steps)[i];
      SCOPED_TRACE(ProgramStepLabel("step", static_cast<int>(i), b));
      EXPECT_EQ(a.kind, b.kind);
      EXPECT_EQ(a.inputs, b.inputs);
      EXPECT_EQ(a.outputs, b.outputs);
      EXPECT_EQ(a.weight, b.weight);
      EXPECT_EQ(a.bias, b.bias);
      EXPECT_EQ(a.weight_buffer, b.weight_buffer);
      EXPECT_EQ(a.bias_buffer, b.bias_buffer);
      EXPECT_EQ(a.weight_grad_buffer, b.weight_grad_buffer);
      EXPECT_EQ(a.bias_grad_buffer, b.bias_grad_buffer);
      EXPECT_EQ(a.activation, b.activation);
      EXPECT_EQ(a.eps, b.eps);
      EXPECT_EQ(a.heads, b.heads);
      EXPECT_EQ(a.causal, b.causal);
      EXPECT_EQ(a.size, b.size);
      EXPECT_EQ(a.mesh_dim, b.mesh_dim);
      EXPECT_EQ(a.dim, b.dim);
      EXPECT_EQ(a.dim2, b.dim2);
      EXPECT_EQ(a.reduce_op, b.reduce_op);
      EXPECT_EQ(a.scale, b.scale);
      EXPECT_EQ(a.module, b.module);
    }
  }
  // And back again to the same message.
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(ToProto(got, back->tensors), wire));
}

INSTANTIATE_TEST_SUITE_P(Programs, ProgramRoundTripTest,
                         ::testing::Values(TwoLinears, GatheredLinears, EveryKind));

TEST(ProgramToProtoTest, LeavesTensorNamesUnsetWithoutThem) {
  const v1::Program wire = ToProto(TwoLinears());
  ASSERT_EQ(wire.parameters_size(), 3);
  EXPECT_EQ(wire.parameters(0).tensor(), "");
  EXPECT_EQ(wire.parameters(0).fqn(), "net1.weight");
}

// A malformed program: what is changed, and what the refusal must name.
struct Malformed {
  std::string name;
  std::function<void(Program&)> change;
  std::vector<std::string> message;
};

std::string PrintMalformed(const ::testing::TestParamInfo<Malformed>& info) {
  return info.param.name;
}

std::vector<Malformed> MalformedPrograms() {
  using K = ProgramOpKind;
  return {
      {"UnknownKind",
       [](Program& p) { p.forward[1].kind = static_cast<K>(99); },
       {"forward step 1 (kind 99, module \"relu\")", "not a step kind"}},
      {"BackwardKindInForward",
       [](Program& p) { p.forward[1].kind = K::kAccumulate; },
       {"forward step 1 (accumulate, module \"relu\")", "cannot be in forward"}},
      {"ForwardKindInBackward",
       [](Program& p) { p.backward[2].kind = K::kLinear; },
       {"backward step 2 (linear, module \"net1\")", "cannot be in backward"}},
      {"InputOutsideBuffers",
       [](Program& p) { p.forward[2].inputs = {8}; },
       {"forward step 2 (linear, module \"net2\")", "inputs[0] is buffer 8",
        "outside the program's 8 buffers"}},
      {"NegativeOutput",
       [](Program& p) { p.backward[0].outputs = {-1}; },
       {"backward step 0 (linear_backward, module \"net2\")", "outputs[0] is buffer -1"}},
      {"ReadBeforeWrite",
       [](Program& p) { p.forward[1].inputs = {3}; },
       {"forward step 1 (activation, module \"relu\")", "inputs[0] reads buffer 3",
        "before a step writes it"}},
      {"WrittenTwice",
       [](Program& p) { p.forward[2].outputs = {2}; },
       {"forward step 2 (linear, module \"net2\")", "outputs[0] writes buffer 2",
        "written before"}},
      {"WritesTheInput",
       [](Program& p) { p.forward[0].outputs = {0}; },
       {"forward step 0 (linear, module \"net1\")", "writes buffer 0, the input"}},
      {"WritesTheOutputGradient",
       [](Program& p) { p.backward[1].outputs = {5}; },
       {"backward step 1 (activation_backward, module \"relu\")",
        "writes buffer 5, the output's gradient"}},
      {"TooManyInputs",
       [](Program& p) {
         p.forward[0].inputs = {0, 0};
       },
       {"forward step 0 (linear, module \"net1\")", "has 2 inputs; linear takes 1"}},
      {"TooFewOutputs",
       [](Program& p) {
         p.forward[1].kind = K::kLayerNorm;
         p.forward[1].outputs = {2};
       },
       {"forward step 1 (layer_norm, module \"relu\")", "has 1 outputs; layer_norm writes 3"}},
      {"TooManyBackwardOutputs",
       [](Program& p) {
         p.backward[2].outputs = {6, 7};
       },
       {"backward step 2 (linear_backward, module \"net1\")",
        "has 2 outputs; linear_backward writes 0 to 1"}},
      {"WeightOutOfRange",
       [](Program& p) { p.forward[2].weight = 3; },
       {"forward step 2 (linear, module \"net2\")", "weight is parameter 3",
        "outside the program's 3 parameters"}},
      {"MissingWeight",
       [](Program& p) { p.forward[0].weight = -1; },
       {"forward step 0 (linear, module \"net1\")",
        "weight and weight_buffer are -1 but this kind needs one"}},
      {"WeightOnAnActivation",
       [](Program& p) { p.forward[1].weight = 0; },
       {"forward step 1 (activation, module \"relu\")", "takes no weight"}},
      {"BadActivation",
       [](Program& p) { p.forward[1].activation = static_cast<ActivationKind>(9); },
       {"forward step 1 (activation, module \"relu\")", "activation 9 is not an activation kind"}},
      {"EmbeddingWithoutSize",
       [](Program& p) {
         p.forward[0].kind = K::kEmbedding;
         p.forward[0].bias = -1;
       },
       {"forward step 0 (embedding, module \"net1\")", "size (num_embeddings) is 0"}},
      {"AttentionWithoutHeads",
       [](Program& p) {
         p.forward[1] = Step(K::kAttention, {1, 1, 1}, {2, 7}, "attn");
       },
       {"forward step 1 (attention, module \"attn\")", "heads is 0"}},
      {"BiasAddWithoutBias",
       [](Program& p) { p.forward[1] = Step(K::kBiasAdd, {1}, {2}, "net1"); },
       {"forward step 1 (bias_add, module \"net1\")",
        "bias and bias_buffer are -1 but this kind needs one"}},
      {"WeightAsParameterAndBuffer",
       [](Program& p) { p.forward[2].weight_buffer = 2; },
       {"forward step 2 (linear, module \"net2\")",
        "weight is parameter 2 and weight_buffer buffer 2; one or the other"}},
      {"WeightBufferOnACollective",
       [](Program& p) { p.forward[3].weight_buffer = 1; },
       {"forward step 3 (all_reduce, module \"net2\")",
        "weight_buffer is buffer 1 but this kind reads no weight from a buffer"}},
      {"WeightBufferReadBeforeWrite",
       [](Program& p) {
         p.forward[2].weight = -1;
         p.forward[2].weight_buffer = 3;
       },
       {"forward step 2 (linear, module \"net2\")", "weight_buffer reads buffer 3",
        "before a step writes it"}},
      {"BufferOperandWithoutItsGradient",
       [](Program& p) {
         p.backward[0].weight = -1;
         p.backward[0].weight_buffer = 3;
       },
       {"backward step 0 (linear_backward, module \"net2\")", "weight_grad_buffer is -1",
        "writes the gradient of a buffer operand"}},
      {"GradientBufferWithoutABufferOperand",
       [](Program& p) { p.backward[0].weight_grad_buffer = 7; },
       {"backward step 0 (linear_backward, module \"net2\")", "weight_grad_buffer is 7",
        "only a backward step with a buffer operand writes its gradient"}},
      {"GradientBufferWrittenTwice",
       [](Program& p) {
         p.backward[0].weight = -1;
         p.backward[0].weight_buffer = 3;
         p.backward[0].weight_grad_buffer = 5;
       },
       {"backward step 0 (linear_backward, module \"net2\")", "weight_grad_buffer writes buffer 5",
        "the output's gradient"}},
      {"GatherWithoutParameter",
       [](Program& p) { p.forward[1] = Step(K::kGatherParameter, {}, {2}, "net1"); },
       {"forward step 1 (gather_parameter, module \"net1\")",
        "weight and weight_buffer are -1 but this kind needs one"}},
      {"ShardGradInForward",
       [](Program& p) { p.forward[1] = Step(K::kShardGrad, {1}, {}, "net1", 0); },
       {"forward step 1 (shard_grad, module \"net1\")", "cannot be in forward"}},
      {"DataParallelOnTheTpDim",
       [](Program& p) { p.data_parallel_dims = {0}; },
       {"data_parallel_dims[0] is 0", "other than tp_mesh_dim 0"}},
      {"DataParallelDimTwice",
       [](Program& p) {
         p.data_parallel_dims = {1, 1};
       },
       {"data_parallel_dims[1] is 1"}},
      {"AllToAllOnOneDim",
       [](Program& p) {
         p.forward[3].kind = K::kAllToAll;
         p.forward[3].dim = 1;
         p.forward[3].dim2 = 1;
       },
       {"forward step 3 (all_to_all, module \"net2\")", "dim2 is 1 with dim 1"}},
      {"NegativeCollectiveDim",
       [](Program& p) {
         p.forward[3].kind = K::kAllGather;
         p.forward[3].dim = -1;
       },
       {"forward step 3 (all_gather, module \"net2\")", "dim is -1"}},
      {"NegativeMeshDim",
       [](Program& p) { p.forward[3].mesh_dim = -1; },
       {"forward step 3 (all_reduce, module \"net2\")", "mesh_dim is -1"}},
      {"UnsetReduceOp",
       [](Program& p) { p.forward[3].reduce_op = static_cast<ReduceOp>(0); },
       {"forward step 3 (all_reduce, module \"net2\")", "reduce_op 0 is not a reduce op"}},
      {"GradientReducedByMax",
       [](Program& p) {
         p.backward.push_back(Step(K::kGradAllReduce, {}, {}, "net1", 0));
         p.backward.back().reduce_op = ReduceOp::kMax;
       },
       {"backward step 3 (grad_all_reduce, module \"net1\")", "reduce_op 3 is not sum or avg"}},
      {"OutputNotWritten",
       [](Program& p) { p.output = 6; },
       {"output is buffer 6, which no forward step writes"}},
      {"OutputOutsideBuffers", [](Program& p) { p.output = 8; }, {"output is buffer 8"}},
      {"GradOutputWrittenByForward",
       [](Program& p) { p.grad_output = 3; },
       {"grad_output is buffer 3, which forward already writes"}},
      {"NoBuffers", [](Program& p) { p.num_buffers = 0; }, {"num_buffers is 0"}},
      {"NegativeInputSize",
       [](Program& p) {
         p.input.shape = {-2, 5};
       },
       {"has size -2 at dim 0"}},
      {"PlacementCounts",
       [](Program& p) { p.parameters[2].placements.push_back(Placement::Replicate()); },
       {"parameter 2 (\"net2.weight\")", "has 2 placements but parameter 0 has 1"}},
      {"NoFqn", [](Program& p) { p.parameters[1].fqn = ""; }, {"parameter 1", "fqn is empty"}},
  };
}

class MalformedProgramTest : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedProgramTest, IsRefusedNamingTheStepAndField) {
  Program program = TwoLinears();
  ASSERT_TRUE(CheckProgram(program).ok()) << CheckProgram(program);
  GetParam().change(program);
  EXPECT_TRUE(
      StatusIs(CheckProgram(program), absl::StatusCode::kInvalidArgument, GetParam().message));
  // The wire refuses it the same way.
  absl::StatusOr<WorkerProgram> got = FromProto(ToProto(program, NamesFor(program)));
  EXPECT_TRUE(StatusIs(got.status(), absl::StatusCode::kInvalidArgument, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(Cases, MalformedProgramTest, ::testing::ValuesIn(MalformedPrograms()),
                         PrintMalformed);

// A malformed wire form: what is changed, and what the refusal must name.
struct MalformedWire {
  std::string name;
  std::function<void(v1::Program&)> change;
  std::vector<std::string> message;
};

std::string PrintMalformedWire(const ::testing::TestParamInfo<MalformedWire>& info) {
  return info.param.name;
}

std::vector<MalformedWire> MalformedWires() {
  return {
      {"NoTensorName",
       [](v1::Program& p) { p.mutable_parameters(1)->clear_tensor(); },
       {"parameters[1] (\"net1.bias\").tensor is empty"}},
      {"NoGradName",
       [](v1::Program& p) { p.mutable_parameters(0)->clear_grad(); },
       {"parameters[0] (\"net1.weight\").grad is empty"}},
      {"NoMomentumName",
       [](v1::Program& p) { p.mutable_parameters(2)->clear_momentum(); },
       {"parameters[2] (\"net2.weight\").momentum is empty"}},
      {"SharedName",
       [](v1::Program& p) { p.mutable_parameters(2)->set_grad("p/net1.weight"); },
       {"parameters[2] (\"net2.weight\").grad is 'p/net1.weight'", "already uses"}},
      {"NegativeParameterShape",
       [](v1::Program& p) { p.mutable_parameters(0)->mutable_shape()->set_dims(0, -3); },
       {"parameters[0] (\"net1.weight\").shape"}},
      {"UnsetPlacement",
       [](v1::Program& p) { p.mutable_parameters(1)->mutable_placements(0)->Clear(); },
       {"parameters[1] (\"net1.bias\").placements[0]"}},
      {"NoInputDtype",
       [](v1::Program& p) { p.clear_input_dtype(); },
       {"input_dtype", "DTYPE_UNSPECIFIED"}},
      {"BadOutputDtype",
       [](v1::Program& p) { p.set_output_dtype(static_cast<v1::DType>(42)); },
       {"output_dtype", "unknown dtype number 42"}},
      {"NoInputLayout", [](v1::Program& p) { p.clear_input_layout(); }, {"input_layout.placement"}},
  };
}

class MalformedWireTest : public ::testing::TestWithParam<MalformedWire> {};

TEST_P(MalformedWireTest, IsRefusedNamingTheField) {
  const Program program = TwoLinears();
  v1::Program wire = ToProto(program, NamesFor(program));
  ASSERT_TRUE(FromProto(wire).ok());
  GetParam().change(wire);
  EXPECT_TRUE(
      StatusIs(FromProto(wire).status(), absl::StatusCode::kInvalidArgument, GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(Cases, MalformedWireTest, ::testing::ValuesIn(MalformedWires()),
                         PrintMalformedWire);

}  // namespace
}  // namespace tessera
