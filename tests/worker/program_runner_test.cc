// Module programs (core/modules/module_program.h) installed and run by the workers' command
// executors (LoadProgram, RunProgram), one thread per rank with real Gloo communicators in this
// process, on hand-built programs as the compiler emits them: a colwise Linear -> activation ->
// rowwise Linear MLP, a colwise Linear whose output is gathered, a rowwise Linear whose output is
// reduce-scattered by rows, a vocab-parallel Embedding, sequence-parallel LayerNorm and RMSNorm,
// a Megatron attention block, and a round trip through every collective; uneven torch.chunk
// shards where the sizes do not divide (10 features over 3 and 4 ranks, 5 rows over 4).
//
// Every rank's output, every parameter's gradient and every parameter (and momentum buffer) after
// SGD are compared with the same piece of a single-process float64 computation of the whole
// model (kernels/testing/nn_reference.h), for 1 to 4 ranks, in float64 and float32; then 2-D
// data x tensor parallelism, and the refusals of malformed programs and inputs, with their codes
// and messages, losing nothing.

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/modules/program_check.h"
#include "gtest/gtest.h"
#include "kernels/testing/nn_reference.h"
#include "proto/convert.h"
#include "tests/cluster/program_cluster.h"
#include "tests/support/status_assertions.h"

namespace tessera {
namespace {

using kernels::testing::AttentionShape;
using kernels::testing::ToValues;
using kernels::testing::Values;
using ::tessera::testing::Cluster;
using ::tessera::testing::ExpectOutputs;
using ::tessera::testing::ExpectStored;
using ::tessera::testing::Float64;
using ::tessera::testing::GradName;
using ::tessera::testing::InDType;
using ::tessera::testing::kMeshId;
using ::tessera::testing::kProgramId;
using ::tessera::testing::LoadEverywhere;
using ::tessera::testing::Mesh;
using ::tessera::testing::MomentumName;
using ::tessera::testing::NamesFor;
using ::tessera::testing::Ones;
using ::tessera::testing::Outcome;
using ::tessera::testing::Piece;
using ::tessera::testing::Random;
using ::tessera::testing::RandomValues;
using ::tessera::testing::RunCommand;
using ::tessera::testing::RunEverywhere;
using ::tessera::testing::RunOptions;
using ::tessera::testing::StatusIs;
using ::tessera::testing::Tensors;
using ::tessera::testing::TestDevice;
using ::tessera::testing::ValueName;
using K = ProgramOpKind;

double Tolerance(DType dtype, bool float32_intermediates) {
  if (dtype == DType::kFloat32) return 2e-4;
  return float32_intermediates ? 2e-6 : 1e-10;
}

// ---------------------------------------------------------------------------------------------
// Single-process references on row-major values

// y[m, n] = x[m, k] w[n, k]^T (+ b[n]).
Values LinearForward(const Values& x, const Values& w, const Values& b, int64_t k, int64_t n) {
  const int64_t m = static_cast<int64_t>(x.size()) / k;
  Values y(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = b.empty() ? 0 : b[j];
      for (int64_t l = 0; l < k; ++l) sum += x[i * k + l] * w[j * k + l];
      y[i * n + j] = sum;
    }
  }
  return y;
}

// The gradients of a Linear: dx = dy w, dw = dy^T x, db = dy summed over rows.
struct LinearGrads {
  Values dx, dw, db;
};
LinearGrads LinearBackward(const Values& x, const Values& w, const Values& dy, int64_t k,
                           int64_t n) {
  const int64_t m = static_cast<int64_t>(x.size()) / k;
  LinearGrads g{Values(m * k, 0.0), Values(n * k, 0.0), Values(n, 0.0)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double d = dy[i * n + j];
      g.db[j] += d;
      for (int64_t l = 0; l < k; ++l) {
        g.dx[i * k + l] += d * w[j * k + l];
        g.dw[j * k + l] += d * x[i * k + l];
      }
    }
  }
  return g;
}

kernels::Activation KernelActivation(ActivationKind f) {
  switch (f) {
    case ActivationKind::kGelu:
      return kernels::Activation::kGelu;
    case ActivationKind::kGeluTanh:
      return kernels::Activation::kGeluTanh;
    case ActivationKind::kSilu:
      return kernels::Activation::kSilu;
    default:
      return kernels::Activation::kRelu;
  }
}

// ---------------------------------------------------------------------------------------------
// Models: a hand-built program for a tp group of a given size, full parameters and input, and the
// single-process computation of the output and of every parameter's gradient of sum(output * dy).

struct Reference {
  HostTensor output;
  std::vector<HostTensor> grads;  // one per parameter, full
};

struct Model {
  Program program;
  std::vector<HostTensor> params;  // full, float64
  HostTensor input;                // full, float64 or int64
  Shape output_shape;              // full
  bool trains = true;
  // The kernels keep some intermediates in float32 (norm statistics, attention probabilities),
  // which bounds a float64 run's agreement with the reference.
  bool float32_intermediates = false;  // false: forward only (no parameters)
  std::function<Reference(const std::vector<HostTensor>& params, const HostTensor& input,
                          const HostTensor& dy)>
      reference;
};

ProgramStep Step(K kind, std::vector<int> inputs, std::vector<int> outputs, std::string module,
                 int weight = -1, int bias = -1) {
  ProgramStep step;
  step.kind = kind;
  step.inputs = std::move(inputs);
  step.outputs = std::move(outputs);
  step.module = std::move(module);
  step.weight = weight;
  step.bias = bias;
  return step;
}

ProgramStep WithDim(ProgramStep step, int dim, int dim2 = 0) {
  step.dim = dim;
  step.dim2 = dim2;
  return step;
}

// net1 (colwise Linear 5 -> 10) -> f -> net2 (rowwise Linear 10 -> 4, its bias added after the
// all-reduce), on [2, 3, 5] inputs.
// `hidden` 3 leaves the last of 4 ranks an empty shard of net1's rows and net2's columns.
Model Mlp(ActivationKind f, int64_t hidden = 10) {
  constexpr int64_t kIn = 5, kOut = 4;
  const int64_t kHidden = hidden;
  Model m;
  Program& p = m.program;
  p.parameters = {{"net1.weight", {kHidden, kIn}, {Placement::Shard(0)}},
                  {"net1.bias", {kHidden}, {Placement::Shard(0)}},
                  {"net2.weight", {kOut, kHidden}, {Placement::Shard(1)}},
                  {"net2.bias", {kOut}, {Placement::Replicate()}}};
  p.input = {DType::kFloat64, {-1, -1, kIn}};
  p.output_rank = 3;
  p.output_features = kOut;
  p.num_buffers = 10;
  p.forward = {Step(K::kLinear, {0}, {1}, "net1", 0, 1), Step(K::kActivation, {1}, {2}, "act"),
               Step(K::kLinear, {2}, {3}, "net2", 2), Step(K::kAllReduce, {3}, {4}, "net2"),
               Step(K::kBiasAdd, {4}, {5}, "net2", -1, 3)};
  p.forward[1].activation = f;
  p.output = 5;
  p.grad_output = 6;
  p.backward = {Step(K::kBiasAddBackward, {6}, {}, "net2", -1, 3),
                Step(K::kLinearBackward, {2, 6}, {7}, "net2", 2),
                Step(K::kActivationBackward, {1, 7}, {8}, "act"),
                Step(K::kLinearBackward, {0, 8}, {}, "net1", 0, 1)};
  p.backward[2].activation = f;
  m.params = Tensors(Random({kHidden, kIn}, 1), Random({kHidden}, 2), Random({kOut, kHidden}, 3),
                     Random({kOut}, 4));
  m.input = Random({2, 3, kIn}, 5);
  m.output_shape = {2, 3, kOut};
  m.reference = [f, kHidden](const std::vector<HostTensor>& w, const HostTensor& x,
                             const HostTensor& dy) {
    const Values h = LinearForward(ToValues(x), ToValues(w[0]), ToValues(w[1]), kIn, kHidden);
    Values a(h.size());
    const kernels::Activation g = KernelActivation(f);
    for (size_t i = 0; i < h.size(); ++i) a[i] = kernels::testing::NaiveActivation(g, h[i]);
    const Values y = LinearForward(a, ToValues(w[2]), ToValues(w[3]), kHidden, kOut);
    const LinearGrads g2 = LinearBackward(a, ToValues(w[2]), ToValues(dy), kHidden, kOut);
    Values dh(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
      dh[i] = g2.dx[i] * kernels::testing::NaiveActivationDerivative(g, h[i]);
    }
    const LinearGrads g1 = LinearBackward(ToValues(x), ToValues(w[0]), dh, kIn, kHidden);
    return Reference{Float64(WithDimSize(x.shape(), 2, kOut), y),
                     Tensors(Float64({kHidden, kIn}, g1.dw), Float64({kHidden}, g1.db),
                             Float64({kOut, kHidden}, g2.dw), Float64({kOut}, g2.db))};
  };
  return m;
}

// A colwise Linear 6 -> 10 whose output is gathered (output_layouts Replicate); its gradient is
// chunked back.
Model ColwiseGathered() {
  constexpr int64_t kIn = 6, kOut = 10;
  Model m;
  Program& p = m.program;
  p.parameters = {{"proj.weight", {kOut, kIn}, {Placement::Shard(0)}},
                  {"proj.bias", {kOut}, {Placement::Shard(0)}}};
  p.input = {DType::kFloat64, {-1, 3, kIn}};
  p.output_rank = 3;
  p.output_features = kOut;
  p.num_buffers = 5;
  p.forward = {Step(K::kLinear, {0}, {1}, "proj", 0, 1),
               WithDim(Step(K::kAllGather, {1}, {2}, "proj"), 2)};
  p.output = 2;
  p.grad_output = 3;
  p.backward = {WithDim(Step(K::kChunk, {3}, {4}, "proj"), 2),
                Step(K::kLinearBackward, {0, 4}, {}, "proj", 0, 1)};
  m.params = Tensors(Random({kOut, kIn}, 11), Random({kOut}, 12));
  m.input = Random({2, 3, kIn}, 13);
  m.output_shape = {2, 3, kOut};
  m.reference = [](const std::vector<HostTensor>& w, const HostTensor& x, const HostTensor& dy) {
    const Values y = LinearForward(ToValues(x), ToValues(w[0]), ToValues(w[1]), kIn, kOut);
    const LinearGrads g = LinearBackward(ToValues(x), ToValues(w[0]), ToValues(dy), kIn, kOut);
    return Reference{Float64(WithDimSize(x.shape(), 2, kOut), y),
                     Tensors(Float64({kOut, kIn}, g.dw), Float64({kOut}, g.db))};
  };
  return m;
}

// A rowwise Linear 8 -> 4 on inputs sharded by features, its output reduce-scattered by rows (5
// rows) and its bias added to each rank's rows: the bias's gradient is all-reduced.
Model RowwiseScattered() {
  constexpr int64_t kRows = 5, kIn = 8, kOut = 4;
  Model m;
  Program& p = m.program;
  p.parameters = {{"proj.weight", {kOut, kIn}, {Placement::Shard(1)}},
                  {"proj.bias", {kOut}, {Placement::Replicate()}}};
  p.input = {DType::kFloat64, {kRows, kIn}};
  p.input_layout = {Placement::Shard(1), true};
  p.output_layout = {Placement::Shard(0), true};
  p.output_rank = 2;
  p.output_features = kOut;
  p.num_buffers = 6;
  p.forward = {Step(K::kLinear, {0}, {1}, "proj", 0),
               WithDim(Step(K::kReduceScatter, {1}, {2}, "proj"), 0),
               Step(K::kBiasAdd, {2}, {3}, "proj", -1, 1)};
  p.output = 3;
  p.grad_output = 4;
  p.backward = {Step(K::kBiasAddBackward, {4}, {}, "proj", -1, 1),
                WithDim(Step(K::kAllGather, {4}, {5}, "proj"), 0),
                Step(K::kLinearBackward, {0, 5}, {}, "proj", 0),
                Step(K::kGradAllReduce, {}, {}, "proj", 1)};
  m.params = Tensors(Random({kOut, kIn}, 21), Random({kOut}, 22));
  m.input = Random({kRows, kIn}, 23);
  m.output_shape = {kRows, kOut};
  m.reference = [](const std::vector<HostTensor>& w, const HostTensor& x, const HostTensor& dy) {
    const Values y = LinearForward(ToValues(x), ToValues(w[0]), ToValues(w[1]), kIn, kOut);
    const LinearGrads g = LinearBackward(ToValues(x), ToValues(w[0]), ToValues(dy), kIn, kOut);
    return Reference{Float64({kRows, kOut}, y),
                     Tensors(Float64({kOut, kIn}, g.dw), Float64({kOut}, g.db))};
  };
  return m;
}

// A vocab-parallel Embedding (10 rows of 4, rows sharded): each rank's rows, summed.
Model VocabEmbedding() {
  constexpr int64_t kVocab = 10, kDim = 4;
  Model m;
  Program& p = m.program;
  p.parameters = {{"tok.weight", {kVocab, kDim}, {Placement::Shard(0)}}};
  p.input = {DType::kInt64, {-1, -1}};
  p.output_rank = 3;
  p.output_features = kDim;
  p.num_buffers = 4;
  p.forward = {Step(K::kEmbedding, {0}, {1}, "tok", 0), Step(K::kAllReduce, {1}, {2}, "tok")};
  p.forward[0].size = kVocab;
  p.output = 2;
  p.grad_output = 3;
  p.backward = {Step(K::kEmbeddingBackward, {0, 3}, {}, "tok", 0)};
  m.params = Tensors(Random({kVocab, kDim}, 31));
  const std::vector<int64_t> ids = {0, 9, 3, 3, 7, 5, 1, 8};
  m.input = HostTensor::FromValues<int64_t>(DType::kInt64, {2, 4}, ids);
  m.output_shape = {2, 4, kDim};
  m.reference = [ids](const std::vector<HostTensor>& w, const HostTensor&, const HostTensor& dy) {
    const Values y = kernels::testing::NaiveEmbedding(ids, ToValues(w[0]), kVocab, kDim, 0);
    const Values dw = kernels::testing::NaiveEmbeddingBackward(ids, ToValues(dy), kVocab, kDim, 0);
    return Reference{Float64({2, 4, kDim}, y), Tensors(Float64({kVocab, kDim}, dw))};
  };
  return m;
}

// A LayerNorm (or RMSNorm) over 6 features on inputs sharded by sequence (SequenceParallel): its
// replicated parameters' gradients are all-reduced.
Model SequenceParallelNorm(bool layer) {
  constexpr int64_t kBatch = 2, kSeq = 5, kDim = 6;
  constexpr double kEps = 1e-5;
  Model m;
  Program& p = m.program;
  p.parameters = {{"norm.weight", {kDim}, {Placement::Replicate()}}};
  if (layer) p.parameters.push_back({"norm.bias", {kDim}, {Placement::Replicate()}});
  p.input = {DType::kFloat64, {-1, -1, kDim}};
  p.input_layout = {Placement::Shard(1), true};
  p.output_layout = {Placement::Shard(1), true};
  p.output_rank = 3;
  p.output_features = kDim;
  if (layer) {
    p.num_buffers = 5;
    p.forward = {Step(K::kLayerNorm, {0}, {1, 2, 3}, "norm", 0, 1)};
    p.grad_output = 4;
    p.backward = {Step(K::kLayerNormBackward, {0, 2, 3, 4}, {}, "norm", 0, 1),
                  Step(K::kGradAllReduce, {}, {}, "norm", 0),
                  Step(K::kGradAllReduce, {}, {}, "norm", 1)};
  } else {
    p.num_buffers = 4;
    p.forward = {Step(K::kRmsNorm, {0}, {1, 2}, "norm", 0)};
    p.grad_output = 3;
    p.backward = {Step(K::kRmsNormBackward, {0, 2, 3}, {}, "norm", 0),
                  Step(K::kGradAllReduce, {}, {}, "norm", 0)};
  }
  p.forward[0].eps = kEps;
  p.output = 1;
  m.params = Tensors(Random({kDim}, 41));
  if (layer) m.params.push_back(Random({kDim}, 42));
  m.input = Random({kBatch, kSeq, kDim}, 43);
  m.output_shape = {kBatch, kSeq, kDim};
  m.float32_intermediates = true;
  m.reference = [layer](const std::vector<HostTensor>& w, const HostTensor& x,
                        const HostTensor& dy) {
    const Values bias = layer ? ToValues(w[1]) : Values{};
    const kernels::testing::NormForward f =
        kernels::testing::NaiveNorm(ToValues(x), kDim, ToValues(w[0]), bias, kEps, layer);
    const kernels::testing::NormGrads g = kernels::testing::NaiveNormBackward(
        ToValues(dy), ToValues(x), kDim, ToValues(w[0]), kEps, layer);
    Reference r{Float64(x.shape(), f.y), Tensors(Float64({kDim}, g.dweight))};
    if (layer) r.grads.push_back(Float64({kDim}, g.dbias));
    return r;
  };
  return m;
}

// Megatron self-attention: q, k, v colwise (12 heads of 2, split by heads), causal attention on
// each rank's heads, o rowwise with its bias added after the all-reduce.
Model AttentionBlock(int tp) {
  constexpr int64_t kBatch = 2, kSeq = 3, kHeads = 12, kHeadDim = 2, kDim = kHeads * kHeadDim;
  Model m;
  Program& p = m.program;
  for (const char* name : {"q", "k", "v"}) {
    p.parameters.push_back(
        {absl::StrCat("attn.", name, ".weight"), {kDim, kDim}, {Placement::Shard(0)}});
    p.parameters.push_back({absl::StrCat("attn.", name, ".bias"), {kDim}, {Placement::Shard(0)}});
  }
  p.parameters.push_back({"attn.o.weight", {kDim, kDim}, {Placement::Shard(1)}});
  p.parameters.push_back({"attn.o.bias", {kDim}, {Placement::Replicate()}});
  p.input = {DType::kFloat64, {-1, -1, kDim}};
  p.output_rank = 3;
  p.output_features = kDim;
  p.num_buffers = 14;
  p.forward = {
      Step(K::kLinear, {0}, {1}, "attn.q", 0, 1),  Step(K::kLinear, {0}, {2}, "attn.k", 2, 3),
      Step(K::kLinear, {0}, {3}, "attn.v", 4, 5),  Step(K::kAttention, {1, 2, 3}, {4, 5}, "attn"),
      Step(K::kLinear, {4}, {6}, "attn.o", 6),     Step(K::kAllReduce, {6}, {7}, "attn.o"),
      Step(K::kBiasAdd, {7}, {8}, "attn.o", -1, 7)};
  p.forward[3].heads = kHeads / tp;
  p.forward[3].causal = true;
  p.output = 8;
  p.grad_output = 9;
  p.backward = {Step(K::kBiasAddBackward, {9}, {}, "attn.o", -1, 7),
                Step(K::kLinearBackward, {4, 9}, {10}, "attn.o", 6),
                Step(K::kAttentionBackward, {1, 2, 3, 5, 10}, {11, 12, 13}, "attn"),
                Step(K::kLinearBackward, {0, 11}, {}, "attn.q", 0, 1),
                Step(K::kLinearBackward, {0, 12}, {}, "attn.k", 2, 3),
                Step(K::kLinearBackward, {0, 13}, {}, "attn.v", 4, 5)};
  p.backward[2].heads = kHeads / tp;
  p.backward[2].causal = true;
  // Small weights: SGD steps on the summed output then keep the softmax far from saturating, where
  // the float32 probabilities would make the runs drift apart.
  for (uint32_t i = 0; i < 8; ++i) {
    const Shape shape = i % 2 == 0 ? Shape{kDim, kDim} : Shape{kDim};
    Values v = RandomValues(NumElements(shape), 50 + i);
    for (double& x : v) x *= 0.05;
    m.params.push_back(Float64(shape, v));
  }
  m.input = Random({kBatch, kSeq, kDim}, 59);
  m.output_shape = {kBatch, kSeq, kDim};
  m.float32_intermediates = true;
  m.reference = [](const std::vector<HostTensor>& w, const HostTensor& x, const HostTensor& dy) {
    const Values xv = ToValues(x);
    std::vector<Values> qkv;
    for (int i = 0; i < 3; ++i) {
      qkv.push_back(LinearForward(xv, ToValues(w[2 * i]), ToValues(w[2 * i + 1]), kDim, kDim));
    }
    const AttentionShape shape{kBatch, kSeq, kHeads, kHeadDim};
    const Values attn = kernels::testing::NaiveAttention(qkv[0], qkv[1], qkv[2], shape, true);
    const Values y = LinearForward(attn, ToValues(w[6]), ToValues(w[7]), kDim, kDim);
    const LinearGrads go = LinearBackward(attn, ToValues(w[6]), ToValues(dy), kDim, kDim);
    const kernels::testing::AttentionGrads ga =
        kernels::testing::NaiveAttentionBackward(qkv[0], qkv[1], qkv[2], go.dx, shape, true);
    Reference r{Float64(x.shape(), y), {}};
    for (int i = 0; i < 3; ++i) {
      const Values& d = i == 0 ? ga.dq : i == 1 ? ga.dk : ga.dv;
      const LinearGrads g = LinearBackward(xv, ToValues(w[2 * i]), d, kDim, kDim);
      r.grads.push_back(Float64({kDim, kDim}, g.dw));
      r.grads.push_back(Float64({kDim}, g.db));
    }
    r.grads.push_back(Float64({kDim, kDim}, go.dw));
    r.grads.push_back(Float64({kDim}, go.db));
    return r;
  };
  return m;
}

// No parameters: chunk, all_to_all there and back, gather, reduce_scatter, gather, scale and an
// averaging all_reduce on a [7, 10] input give the input times the group size times 0.5.
Model CollectivesRoundTrip(int tp) {
  Model m;
  Program& p = m.program;
  p.input = {DType::kFloat64, {7, 10}};
  p.output_rank = 2;
  p.output_features = 10;
  p.num_buffers = 9;
  p.forward = {WithDim(Step(K::kChunk, {0}, {1}, "a"), 1),
               WithDim(Step(K::kAllToAll, {1}, {2}, "b"), 1, 0),
               WithDim(Step(K::kAllToAll, {2}, {3}, "c"), 0, 1),
               WithDim(Step(K::kAllGather, {3}, {4}, "d"), 1),
               WithDim(Step(K::kReduceScatter, {4}, {5}, "e"), 0),
               WithDim(Step(K::kAllGather, {5}, {6}, "f"), 0),
               Step(K::kScale, {6}, {7}, "g"),
               Step(K::kAllReduce, {7}, {8}, "h")};
  p.forward[6].scale = 0.5;
  p.forward[7].reduce_op = ReduceOp::kAvg;
  p.output = 8;
  m.input = Random({7, 10}, 61);
  m.output_shape = {7, 10};
  m.trains = false;
  m.reference = [tp](const std::vector<HostTensor>&, const HostTensor& x, const HostTensor&) {
    Values y = ToValues(x);
    for (double& v : y) v *= tp * 0.5;
    return Reference{Float64(x.shape(), y), Tensors()};
  };
  return m;
}

struct ModelCase {
  std::string name;
  std::function<Model(int tp)> make;
};

std::vector<ModelCase> Models() {
  return {
      {"MlpRelu", [](int) { return Mlp(ActivationKind::kRelu); }},
      {"MlpGelu", [](int) { return Mlp(ActivationKind::kGelu); }},
      {"MlpGeluTanh", [](int) { return Mlp(ActivationKind::kGeluTanh); }},
      {"MlpSilu", [](int) { return Mlp(ActivationKind::kSilu); }},
      {"MlpHiddenSmallerThanTheMesh", [](int) { return Mlp(ActivationKind::kGelu, 3); }},
      {"ColwiseGathered", [](int) { return ColwiseGathered(); }},
      {"RowwiseScattered", [](int) { return RowwiseScattered(); }},
      {"VocabEmbedding", [](int) { return VocabEmbedding(); }},
      {"SequenceParallelLayerNorm", [](int) { return SequenceParallelNorm(true); }},
      {"SequenceParallelRmsNorm", [](int) { return SequenceParallelNorm(false); }},
      {"AttentionBlock", AttentionBlock},
      {"CollectivesRoundTrip", CollectivesRoundTrip},
  };
}

// A model in `dtype`: its program takes that dtype (ids stay int64) and its parameters are held
// in it.
Model InDType(Model m, DType dtype) {
  if (m.program.input.dtype == DType::kFloat64) m.program.input.dtype = dtype;
  m.program.output_dtype = dtype;
  return m;
}

// ---------------------------------------------------------------------------------------------
// Tensor parallelism on a 1-D mesh: every model, 1 to 4 ranks, float64 and float32

using ModelParam = std::tuple<ModelCase, int, DType>;

class ModelProgramTest : public ::testing::TestWithParam<ModelParam> {
 protected:
  const ModelCase& model_case() const { return std::get<0>(GetParam()); }
  int tp() const { return std::get<1>(GetParam()); }
  DType dtype() const { return std::get<2>(GetParam()); }
  Model MakeModel() const { return InDType(model_case().make(tp()), dtype()); }
  double tolerance() const { return Tolerance(dtype(), MakeModel().float32_intermediates); }
};

std::string PrintModelParam(const ::testing::TestParamInfo<ModelParam>& info) {
  return absl::StrCat(std::get<0>(info.param).name, "_", std::get<1>(info.param), "Ranks_",
                      DTypeName(std::get<2>(info.param)));
}

TEST_P(ModelProgramTest, ForwardAndGradientsEqualOneProcess) {
  const Model m = MakeModel();
  ASSERT_TRUE(CheckProgram(m.program).ok()) << CheckProgram(m.program);
  Cluster cluster(Mesh({tp()}));
  ASSERT_TRUE(LoadEverywhere(cluster, m.program, m.params, dtype()));
  const HostTensor input = InDType(m.input, dtype());
  const Reference ref = m.reference(m.params, m.input, Ones(m.output_shape));
  // A forward stores nothing but the prepared copies of its weights (PreparedWeightBudgetTest).
  const int64_t held = cluster.store(0).used_bytes();
  ExpectOutputs(cluster, m.program, RunEverywhere(cluster, m.program, input, {}), ref.output,
                tolerance());
  EXPECT_EQ(cluster.store(0).used_bytes() - cluster.store(0).outside_bytes(), held);
  if (!m.trains) return;

  const HostTensor dy = Random(m.output_shape, 99);
  const Reference with_dy = m.reference(m.params, m.input, dy);
  const std::vector<Outcome> trained =
      RunEverywhere(cluster, m.program, input, {.train = true, .dy = InDType(dy, dtype())});
  ExpectOutputs(cluster, m.program, trained, with_dy.output, tolerance());
  ExpectStored(cluster, m.program, with_dy.grads, GradName, tolerance());
  // The reply names the gradients it wrote; the parameters are untouched without SGD.
  EXPECT_EQ(trained[0].reply.tensors_size(), static_cast<int>(m.params.size()));
  std::vector<HostTensor> params;
  for (const HostTensor& p : m.params) params.push_back(InDType(p, dtype()));
  ExpectStored(cluster, m.program, params, ValueName, 0);
  // Gradients are zeroed for each step, not accumulated across steps.
  RunEverywhere(cluster, m.program, input, {.train = true, .dy = InDType(dy, dtype())});
  ExpectStored(cluster, m.program, with_dy.grads, GradName, tolerance());
}

TEST_P(ModelProgramTest, SgdStepsEqualTorchOptimSgd) {
  const Model m = MakeModel();
  if (!m.trains) GTEST_SKIP() << "no parameters";
  Cluster cluster(Mesh({tp()}));
  ASSERT_TRUE(LoadEverywhere(cluster, m.program, m.params, dtype()));
  const HostTensor input = InDType(m.input, dtype());
  // Reference parameters and momentum buffers, float64, updated as torch.optim.SGD does.
  std::vector<Values> params, buffers;
  for (const HostTensor& p : m.params) params.push_back(ToValues(InDType(p, dtype())));
  buffers.resize(params.size());
  const auto full = [&](const std::vector<Values>& values) {
    std::vector<HostTensor> out;
    for (size_t i = 0; i < values.size(); ++i) {
      out.push_back(Float64(m.params[i].shape(), values[i]));
    }
    return out;
  };
  const std::vector<SgdOptions> steps = {{0.25, 0, 0}, {0.25, 0.9, 0.01}, {0.25, 0.9, 0.01}};
  bool momentum_started = false;
  for (size_t s = 0; s < steps.size(); ++s) {
    SCOPED_TRACE(absl::StrCat("step ", s));
    const Reference ref = m.reference(full(params), m.input, Ones(m.output_shape));
    RunEverywhere(cluster, m.program, input, {.train = true, .sgd = steps[s]});
    for (size_t i = 0; i < params.size(); ++i) {
      if (buffers[i].empty()) buffers[i].assign(params[i].size(), 0.0);
      kernels::testing::NaiveSgdStep(params[i], ToValues(ref.grads[i]), buffers[i], steps[s].lr,
                                     steps[s].momentum, steps[s].weight_decay,
                                     steps[s].momentum != 0 && !momentum_started);
    }
    momentum_started |= steps[s].momentum != 0;
    ExpectStored(cluster, m.program, ref.grads, GradName, tolerance());
    ExpectStored(cluster, m.program, full(params), ValueName, tolerance());
    if (momentum_started)
      ExpectStored(cluster, m.program, full(buffers), MomentumName, tolerance());
  }
}

// Forward-only runs read Linear weights through a prepared copy kept between runs (oneDNN's packed
// layout on the CPU): after SGD writes the parameters, and after new values are stored under their
// names (as a load or a redistribute stores them), a forward computes with the new values.
TEST_P(ModelProgramTest, ForwardsAfterTheWeightsAreWrittenReadTheNewWeights) {
  const Model m = MakeModel();
  if (!m.trains) GTEST_SKIP() << "no parameters";
  Cluster cluster(Mesh({tp()}));
  ASSERT_TRUE(LoadEverywhere(cluster, m.program, m.params, dtype()));
  const HostTensor input = InDType(m.input, dtype());
  std::vector<Values> params;
  for (const HostTensor& p : m.params) params.push_back(ToValues(InDType(p, dtype())));
  const auto full = [&] {
    std::vector<HostTensor> out;
    for (size_t i = 0; i < params.size(); ++i) {
      out.push_back(Float64(m.params[i].shape(), params[i]));
    }
    return out;
  };
  const auto expect_forward = [&](absl::string_view when) {
    SCOPED_TRACE(when);
    for (int run = 0; run < 2; ++run) {
      ExpectOutputs(cluster, m.program, RunEverywhere(cluster, m.program, input, {}),
                    m.reference(full(), m.input, Ones(m.output_shape)).output, tolerance());
    }
  };
  expect_forward("the loaded weights");

  const SgdOptions sgd{0.25, 0, 0};
  const Reference before = m.reference(full(), m.input, Ones(m.output_shape));
  RunEverywhere(cluster, m.program, input, {.train = true, .sgd = sgd});
  for (size_t i = 0; i < params.size(); ++i) {
    Values unused;
    kernels::testing::NaiveSgdStep(params[i], ToValues(before.grads[i]), unused, sgd.lr, 0, 0,
                                   false);
  }
  expect_forward("after an SGD step");

  const std::vector<ParameterTensors> names = NamesFor(m.program);
  for (size_t i = 0; i < params.size(); ++i) {
    params[i] = ToValues(InDType(Random(m.params[i].shape(), 300 + i), dtype()));
    for (int r = 0; r < cluster.size(); ++r) {
      const HostTensor piece =
          Piece(InDType(Float64(m.params[i].shape(), params[i]), dtype()), cluster.mesh(),
                m.program.parameters[i].placements, cluster.coordinate(r));
      ASSERT_TRUE(cluster.store(r).PutHost(names[i].tensor, piece).ok());
    }
  }
  expect_forward("after new values are stored");
}

// Each prepared copy counts against its worker's memory budget while it lives: a forward-only run
// charges about the local weights' bytes once (its second run and a run after new weights charge
// no more), dropping the program frees them, and a budget without room for the copies leaves the
// forward reading the weights as they are, with the same output.
TEST(PreparedWeightBudgetTest, CopiesAreChargedToTheStoreAndOptional) {
  if (TestDevice() != "cpu") GTEST_SKIP() << "only the CPU backend prepares weights";
  const Model m = InDType(Mlp(ActivationKind::kRelu), DType::kFloat32);
  const HostTensor input = InDType(m.input, DType::kFloat32);
  const Reference ref = m.reference(m.params, m.input, Ones(m.output_shape));
  const std::vector<ParameterTensors> names = NamesFor(m.program);
  // The bytes of rank r's local Linear weights (parameters 0 and 2).
  const auto weight_bytes = [&](Cluster& cluster, int r) {
    int64_t bytes = 0;
    for (int i : {0, 2}) {
      absl::StatusOr<std::shared_ptr<const kernels::DeviceTensor>> w =
          cluster.store(r).Get(names[i].tensor);
      EXPECT_TRUE(w.ok()) << w.status();
      if (w.ok()) bytes += static_cast<int64_t>((*w)->nbytes());
    }
    return bytes;
  };

  std::vector<int64_t> tensors_only;
  {
    Cluster cluster(Mesh({2}));
    ASSERT_TRUE(LoadEverywhere(cluster, m.program, m.params, DType::kFloat32));
    for (int r = 0; r < cluster.size(); ++r) {
      tensors_only.push_back(cluster.store(r).used_bytes());
      EXPECT_EQ(cluster.store(r).outside_bytes(), 0);
    }
    std::vector<int64_t> charged;
    for (int run = 0; run < 2; ++run) {
      ExpectOutputs(cluster, m.program, RunEverywhere(cluster, m.program, input, {}), ref.output,
                    2e-4);
      for (int r = 0; r < cluster.size(); ++r) {
        SCOPED_TRACE(absl::StrCat("run ", run, ", rank ", r));
        const int64_t outside = cluster.store(r).outside_bytes();
        EXPECT_GE(outside, weight_bytes(cluster, r));
        EXPECT_EQ(cluster.store(r).used_bytes(), tensors_only[r] + outside);
        if (run == 0) charged.push_back(outside);
        EXPECT_EQ(outside, charged[r]);
      }
    }
    // New values of every parameter: the copies of the old ones are dropped as the new ones are
    // made, so the charge stays the same.
    for (size_t i = 0; i < m.params.size(); ++i) {
      for (int r = 0; r < cluster.size(); ++r) {
        const HostTensor piece = Piece(InDType(m.params[i], DType::kFloat32), cluster.mesh(),
                                       m.program.parameters[i].placements, cluster.coordinate(r));
        ASSERT_TRUE(cluster.store(r).PutHost(names[i].tensor, piece).ok());
      }
    }
    ExpectOutputs(cluster, m.program, RunEverywhere(cluster, m.program, input, {}), ref.output,
                  2e-4);
    for (int r = 0; r < cluster.size(); ++r)
      EXPECT_EQ(cluster.store(r).outside_bytes(), charged[r]);
    for (const Outcome& o : cluster.OnEveryRank([&](int) {
           v1::Command command;
           command.mutable_drop_program()->set_program_id(kProgramId);
           return command;
         })) {
      EXPECT_TRUE(o.status.ok()) << o.status;
    }
    for (int r = 0; r < cluster.size(); ++r) {
      EXPECT_EQ(cluster.store(r).outside_bytes(), 0);
      EXPECT_EQ(cluster.store(r).used_bytes(), tensors_only[r]);
    }
  }

  // A budget the parameters fill: no copy is made, and the forward is the same.
  Cluster tight(Mesh({2}), *std::max_element(tensors_only.begin(), tensors_only.end()) + 8);
  ASSERT_TRUE(LoadEverywhere(tight, m.program, m.params, DType::kFloat32));
  for (int run = 0; run < 2; ++run) {
    ExpectOutputs(tight, m.program, RunEverywhere(tight, m.program, input, {}), ref.output, 2e-4);
    for (int r = 0; r < tight.size(); ++r) EXPECT_EQ(tight.store(r).outside_bytes(), 0);
  }
}

std::vector<ModelCase> AllModels() { return Models(); }

INSTANTIATE_TEST_SUITE_P(Models, ModelProgramTest,
                         ::testing::Combine(::testing::ValuesIn(AllModels()),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DType::kFloat64, DType::kFloat32)),
                         PrintModelParam);

// ---------------------------------------------------------------------------------------------
// Data x tensor parallelism: the MLP on a (dp 2, tp n) mesh, the batch split over dp, every
// gradient averaged over dp (AddDataParallel)

// `m` with its tensor-parallel program moved to mesh dim 1 of a 2-D mesh (Replicate on dim 0),
// and data parallel on dim 0.
Model OnDataParallelMesh(Model m) {
  Program& p = m.program;
  p.tp_mesh_dim = 1;
  for (ProgramParameter& param : p.parameters) {
    param.placements = {Placement::Replicate(), param.placements[0]};
  }
  for (std::vector<ProgramStep>* steps : {&p.forward, &p.backward}) {
    for (ProgramStep& step : *steps) step.mesh_dim = 1;
  }
  AddDataParallel(p, 0);
  return m;
}

class DataParallelProgramTest : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelProgramTest, GradientsAreTheBatchMeanOverDataParallelGroups) {
  constexpr int kDp = 2;
  Model m = OnDataParallelMesh(InDType(Mlp(ActivationKind::kGelu), DType::kFloat64));
  m.input = Random({4, 3, 5}, 71);
  m.output_shape = {4, 3, 4};
  ASSERT_TRUE(CheckProgram(m.program).ok()) << CheckProgram(m.program);
  Cluster cluster(Mesh({kDp, GetParam()}));
  ASSERT_TRUE(LoadEverywhere(cluster, m.program, m.params, DType::kFloat64));
  const HostTensor dy = Random(m.output_shape, 72);
  Reference ref = m.reference(m.params, m.input, dy);
  // Each dp group's loss is the sum over its rows; the groups' gradients are averaged.
  for (HostTensor& g : ref.grads) {
    for (int64_t i = 0; i < g.num_elements(); ++i) g.data_as<double>()[i] /= kDp;
  }
  const std::vector<Outcome> trained =
      RunEverywhere(cluster, m.program, m.input, {.train = true, .dy = dy.Clone()});
  ExpectOutputs(cluster, m.program, trained, ref.output, 1e-10);
  ExpectStored(cluster, m.program, ref.grads, GradName, 1e-10);
  // And SGD keeps the replicas of each parameter equal.
  RunEverywhere(cluster, m.program, m.input,
                {.train = true, .dy = dy.Clone(), .sgd = SgdOptions{0.25}});
  std::vector<HostTensor> stepped;
  for (size_t i = 0; i < m.params.size(); ++i) {
    Values p = ToValues(m.params[i]), none;
    kernels::testing::NaiveSgdStep(p, ToValues(ref.grads[i]), none, 0.25, 0, 0, false);
    stepped.push_back(Float64(m.params[i].shape(), p));
  }
  ExpectStored(cluster, m.program, stepped, ValueName, 1e-10);
}

INSTANTIATE_TEST_SUITE_P(TpSizes, DataParallelProgramTest, ::testing::Values(1, 2, 3));

// ---------------------------------------------------------------------------------------------
// Refusals: a malformed program, command or input fails on every rank with the code and a message
// naming the value, and loses nothing: the installed program and its parameters stay as they were.

// A bad command for every rank of a 2-rank mesh holding the MLP (program kProgramId), and what
// its refusal must be.
struct BadCommand {
  std::string name;
  std::function<v1::Command(Cluster& cluster, const Model& m, int rank)> command;
  absl::StatusCode code;
  std::vector<std::string> message;
};

std::string PrintBadCommand(const ::testing::TestParamInfo<BadCommand>& info) {
  return info.param.name;
}

// A LoadProgram of `m` under `names` as program `id`.
v1::Command LoadCommand(const Program& program, const std::vector<ParameterTensors>& names,
                        int64_t id = kProgramId, int64_t mesh_id = kMeshId) {
  v1::Command command;
  v1::LoadProgram* load = command.mutable_load_program();
  load->set_mesh_id(mesh_id);
  load->set_program_id(id);
  *load->mutable_program() = ToProto(program, names);
  return command;
}

// A forward (or, with `train`, a training step without its output's gradient) of the whole
// input, changed by `change`.
std::function<v1::Command(Cluster&, const Model&, int)> ChangedRun(
    std::function<void(v1::RunProgram&)> change, bool train = false) {
  return [change, train](Cluster& cluster, const Model& m, int r) {
    RunOptions options;
    options.train = train;
    v1::Command command = RunCommand(cluster, m.program, r, m.input, options);
    command.mutable_run_program()->set_loss_sum(false);  // the change says where dy comes from
    change(*command.mutable_run_program());
    return command;
  };
}

HostTensor Zeros(DType dtype, const Shape& shape) {
  return HostTensor::ZerosOfValidShape(dtype, shape);
}

std::vector<BadCommand> BadCommands() {
  using absl::StatusCode;
  return {
      {"LoadOnAnUnknownMesh",
       [](Cluster&, const Model& m, int) {
         return LoadCommand(m.program, NamesFor(m.program), kProgramId, 77);
       },
       StatusCode::kFailedPrecondition,
       {"no communicators for mesh 77"}},
      {"LoadWithAMissingParameterTensor",
       [](Cluster&, const Model& m, int) {
         std::vector<ParameterTensors> names = NamesFor(m.program);
         names[2].tensor = "nope";
         return LoadCommand(m.program, names);
       },
       StatusCode::kFailedPrecondition,
       {"program 9", "parameter 2 (\"net2.weight\")", "no local tensor 'nope'"}},
      {"LoadWithAParameterOfAnotherShape",
       [](Cluster& cluster, const Model& m, int r) {
         EXPECT_TRUE(cluster.store(r).PutHost("whole", InDType(m.params[0], DType::kFloat64)).ok());
         std::vector<ParameterTensors> names = NamesFor(m.program);
         names[0].tensor = "whole";
         return LoadCommand(m.program, names);
       },
       StatusCode::kFailedPrecondition,
       {"parameter 0 (\"net1.weight\")", "local tensor 'whole' is float64[10, 5]",
        "this rank's shard of [10, 5] (S(0)) is [5, 5]"}},
      {"LoadAMalformedProgram",
       [](Cluster&, const Model& m, int) {
         Program p = m.program;
         p.forward[2].inputs = {40};
         return LoadCommand(p, NamesFor(p));
       },
       StatusCode::kInvalidArgument,
       {"program 9", "forward step 2 (linear, module \"net2\")", "inputs[0] is buffer 40"}},
      {"LoadACollectiveOffTheMesh",
       [](Cluster&, const Model& m, int) {
         Program p = m.program;
         p.forward[3].mesh_dim = 1;
         return LoadCommand(p, NamesFor(p));
       },
       StatusCode::kInvalidArgument,
       {"forward step 3 (all_reduce, module \"net2\")", "mesh_dim is 1 on a mesh of 1 dims"}},
      {"LoadParametersOffTheMesh",
       [](Cluster&, const Model& m, int) {
         Program p = m.program;
         for (ProgramParameter& param : p.parameters) {
           param.placements.push_back(Placement::Replicate());
         }
         return LoadCommand(p, NamesFor(p));
       },
       StatusCode::kInvalidArgument,
       {"parameter 0 (\"net1.weight\")"}},
      {"LoadWithoutProgram",
       [](Cluster&, const Model& m, int) {
         v1::Command command = LoadCommand(m.program, NamesFor(m.program));
         command.mutable_load_program()->clear_program();
         return command;
       },
       StatusCode::kInvalidArgument,
       {"LoadProgram has no program"}},
      {"RunAnUnknownProgram",
       ChangedRun([](v1::RunProgram& run) { run.set_program_id(404); }),
       StatusCode::kNotFound,
       {"has no program 404"}},
      {"RunOnAnotherMesh",
       ChangedRun([](v1::RunProgram& run) { run.set_mesh_id(6); }),
       StatusCode::kInvalidArgument,
       {"program 9 runs on mesh 5, not mesh 6"}},
      {"RunWithoutInput",
       ChangedRun([](v1::RunProgram& run) { run.clear_input(); }),
       StatusCode::kInvalidArgument,
       {"RunProgram has no input"}},
      {"InputOfAnotherDtype",
       ChangedRun([](v1::RunProgram& run) {
         *run.mutable_input() = ToProto(Zeros(DType::kFloat32, {2, 3, 5}));
       }),
       StatusCode::kInvalidArgument,
       {"input float32[2, 3, 5] does not fit the program's input float64[-1, -1, 5]"}},
      {"InputOfAnotherRank",
       ChangedRun([](v1::RunProgram& run) {
         *run.mutable_input() = ToProto(Zeros(DType::kFloat64, {6, 5}));
       }),
       StatusCode::kInvalidArgument,
       {"input float64[6, 5] does not fit the program's input float64[-1, -1, 5]"}},
      {"InputWithOtherFeatures",
       ChangedRun([](v1::RunProgram& run) {
         *run.mutable_input() = ToProto(Zeros(DType::kFloat64, {2, 3, 6}));
       }),
       StatusCode::kInvalidArgument,
       {"input float64[2, 3, 6] is not this rank's piece [-1, -1, 5]", "dim 2 must be 5"}},
      {"InputBytesShort",
       ChangedRun([](v1::RunProgram& run) { run.mutable_input()->set_data("12345678"); }),
       StatusCode::kInvalidArgument,
       {"input", "needs 240 bytes, got 8"}},
      {"InputWithoutDtype",
       ChangedRun([](v1::RunProgram& run) { run.mutable_input()->clear_dtype(); }),
       StatusCode::kInvalidArgument,
       {"input: dtype", "DTYPE_UNSPECIFIED"}},
      {"TrainingWithoutAGradient",
       ChangedRun([](v1::RunProgram&) {}, /*train=*/true),
       StatusCode::kInvalidArgument,
       {"exactly one of loss_sum and grad_output"}},
      {"TrainingWithTwoGradients",
       ChangedRun(
           [](v1::RunProgram& run) {
             run.set_loss_sum(true);
             *run.mutable_grad_output() = ToProto(Zeros(DType::kFloat64, {2, 3, 4}));
           },
           /*train=*/true),
       StatusCode::kInvalidArgument,
       {"exactly one of loss_sum and grad_output"}},
      {"GradientOfAnotherShape",
       ChangedRun(
           [](v1::RunProgram& run) {
             *run.mutable_grad_output() = ToProto(Zeros(DType::kFloat64, {2, 3, 5}));
           },
           /*train=*/true),
       StatusCode::kInvalidArgument,
       {"grad_output float64[2, 3, 5] does not match this rank's output float64[2, 3, 4]"}},
      {"GradientOfAnotherDtype",
       ChangedRun(
           [](v1::RunProgram& run) {
             *run.mutable_grad_output() = ToProto(Zeros(DType::kFloat32, {2, 3, 4}));
           },
           /*train=*/true),
       StatusCode::kInvalidArgument,
       {"grad_output float32[2, 3, 4] does not match this rank's output float64[2, 3, 4]"}},
      {"NegativeLearningRate",
       ChangedRun(
           [](v1::RunProgram& run) {
             run.set_loss_sum(true);
             run.mutable_sgd()->set_lr(-1);
           },
           /*train=*/true),
       StatusCode::kInvalidArgument,
       {"sgd.lr is -1"}},
      {"NanMomentum",
       ChangedRun(
           [](v1::RunProgram& run) {
             run.set_loss_sum(true);
             run.mutable_sgd()->set_lr(0.1);
             run.mutable_sgd()->set_momentum(std::nan(""));
           },
           /*train=*/true),
       StatusCode::kInvalidArgument,
       {"sgd.momentum is nan"}},
      {"SgdWithoutTraining",
       ChangedRun([](v1::RunProgram& run) { run.mutable_sgd()->set_lr(0.1); }),
       StatusCode::kInvalidArgument,
       {"belong to training steps; train is not set"}},
      {"MomentumBufferOfAnotherShape",
       [](Cluster& cluster, const Model& m, int r) {
         EXPECT_TRUE(cluster.store(r).PutHost("m/net2.bias", Zeros(DType::kFloat64, {3})).ok());
         RunOptions options;
         options.train = true;
         options.sgd = SgdOptions{0.1, 0.9, 0};
         return RunCommand(cluster, m.program, r, m.input, options);
       },
       StatusCode::kFailedPrecondition,
       {"parameter 3 (\"net2.bias\")", "momentum buffer 'm/net2.bias' is float64[3]",
        "the parameter is float64[4]"}},
  };
}

class BadCommandTest : public ::testing::TestWithParam<BadCommand> {};

TEST_P(BadCommandTest, FailsOnEveryRankAndLosesNothing) {
  const Model m = InDType(Mlp(ActivationKind::kRelu), DType::kFloat64);
  Cluster cluster(Mesh({2}));
  ASSERT_TRUE(LoadEverywhere(cluster, m.program, m.params, DType::kFloat64));
  const BadCommand& bad = GetParam();
  for (const Outcome& o : cluster.OnEveryRank([&](int r) { return bad.command(cluster, m, r); })) {
    EXPECT_TRUE(StatusIs(o.status, bad.code, bad.message));
  }
  // The program and its parameters are as they were: a forward gives the reference output.
  ExpectStored(cluster, m.program, m.params, ValueName, 0);
  const Reference ref = m.reference(m.params, m.input, Ones(m.output_shape));
  ExpectOutputs(cluster, m.program, RunEverywhere(cluster, m.program, m.input, {}), ref.output,
                1e-10);
}

INSTANTIATE_TEST_SUITE_P(Cases, BadCommandTest, ::testing::ValuesIn(BadCommands()),
                         PrintBadCommand);

// A step that fails names itself; a program installed is dropped by DropProgram.
TEST(ProgramStepFailureTest, NamesTheStepAndLosesNothing) {
  Model m = VocabEmbedding();
  m.program.output_dtype = DType::kFloat64;
  Cluster cluster(Mesh({2}));
  ASSERT_TRUE(LoadEverywhere(cluster, m.program, m.params, DType::kFloat64));
  const HostTensor out_of_range =
      HostTensor::FromValues<int64_t>(DType::kInt64, {1, 2}, std::vector<int64_t>{3, 12});
  for (const Outcome& o : cluster.OnEveryRank([&](int r) {
         return RunCommand(cluster, m.program, r, out_of_range, {.train = true});
       })) {
    EXPECT_TRUE(StatusIs(o.status, absl::StatusCode::kInvalidArgument,
                         {"program 9: forward step 0 (embedding, module \"tok\")", "12"}));
  }
  ExpectStored(cluster, m.program, m.params, ValueName, 0);
  EXPECT_FALSE(cluster.store(0).Get("g/tok.weight").ok());
  const Reference ref = m.reference(m.params, m.input, Ones(m.output_shape));
  ExpectOutputs(cluster, m.program, RunEverywhere(cluster, m.program, m.input, {}), ref.output,
                1e-10);

  for (const Outcome& o : cluster.OnEveryRank([&](int) {
         v1::Command command;
         command.mutable_drop_program()->set_program_id(kProgramId);
         return command;
       })) {
    EXPECT_TRUE(o.status.ok()) << o.status;
  }
  for (const Outcome& o :
       cluster.OnEveryRank([&](int r) { return RunCommand(cluster, m.program, r, m.input, {}); })) {
    EXPECT_TRUE(StatusIs(o.status, absl::StatusCode::kNotFound, {"has no program 9"}));
  }
  // Its parameters stay: they are the caller's tensors.
  ExpectStored(cluster, m.program, m.params, ValueName, 0);
}

// ---------------------------------------------------------------------------------------------
// One rank fails, its peers stop at once: the failing rank answers its own error, the others
// ABORTED naming its mesh coordinate, every rank within a second or so (the communicators' timeout
// here is 10 s, which a peer left in a collective would wait out), nothing is stored anywhere, and
// the next run on the mesh is right.

struct OneRankFails {
  std::string name;
  std::function<Model()> model;
  std::vector<int64_t> mesh;
  bool train;                                   // a training step: with SGD (momentum 0.9)
  bool dy;                                      // with grad_output (ones), else loss_sum
  int rank;                                     // the rank whose command is changed
  std::function<void(v1::RunProgram&)> change;  // what is wrong with it
  absl::StatusCode code;                        // its answer
  std::vector<std::string> message;
  std::string coordinate;  // as its peers name it
};

void PrintTo(const OneRankFails& c, std::ostream* os) { *os << c.name; }

std::vector<OneRankFails> OneRankFailures() {
  const auto mlp = [] { return InDType(Mlp(ActivationKind::kRelu), DType::kFloat64); };
  const auto dp_mlp = [] {
    Model m = OnDataParallelMesh(InDType(Mlp(ActivationKind::kGelu), DType::kFloat64));
    m.input = Random({4, 3, 5}, 71);
    m.output_shape = {4, 3, 4};
    return m;
  };
  const auto embedding = [] {
    Model m = VocabEmbedding();
    m.program.output_dtype = DType::kFloat64;
    return m;
  };
  const auto other_input = [](HostTensor t) {
    auto held = std::make_shared<const HostTensor>(std::move(t));
    return [held](v1::RunProgram& run) { *run.mutable_input() = ToProto(*held); };
  };
  return {
      {"ForwardInputOfOtherFeatures",
       mlp,
       {2},
       false,
       false,
       1,
       other_input(Zeros(DType::kFloat64, {2, 3, 6})),
       absl::StatusCode::kInvalidArgument,
       {"program 9: input float64[2, 3, 6] is not this rank's piece"},
       "[1]"},
      {"TrainingInputThatDoesNotDecode",
       mlp,
       {2},
       true,
       false,
       0,
       [](v1::RunProgram& run) { run.mutable_input()->set_data("12345678"); },
       absl::StatusCode::kInvalidArgument,
       {"program 9: input", "got 8"},
       "[0]"},
      // The forward runs whole on both ranks; rank 0 fails before its backward, which has no
      // collective: its peer stops where the step would store.
      {"GradientOfAnotherShapeAfterTheLastCollective",
       mlp,
       {2},
       true,
       true,
       0,
       [](v1::RunProgram& run) {
         *run.mutable_grad_output() = ToProto(Zeros(DType::kFloat64, {2, 3, 5}));
       },
       absl::StatusCode::kInvalidArgument,
       {"grad_output float64[2, 3, 5] does not match"},
       "[0]"},
      {"AStepFailsOnOneRank",
       embedding,
       {2},
       true,
       false,
       1,
       other_input(
           HostTensor::FromValues<int64_t>(DType::kInt64, {1, 2}, std::vector<int64_t>{3, 12})),
       absl::StatusCode::kInvalidArgument,
       {"program 9: forward step 0 (embedding, module \"tok\")", "12"},
       "[1]"},
      {"DataParallelMeshOneRankOfFour",
       dp_mlp,
       {2, 2},
       true,
       false,
       3,
       other_input(Zeros(DType::kFloat64, {2, 3, 6})),
       absl::StatusCode::kInvalidArgument,
       {"is not this rank's piece"},
       "[1, 1]"},
  };
}

class OneRankFailsTest : public ::testing::TestWithParam<OneRankFails> {};

TEST_P(OneRankFailsTest, ItsPeersStopAtOnceAndNothingIsStored) {
  const OneRankFails& c = GetParam();
  const Model m = c.model();
  Cluster cluster(Mesh(c.mesh));
  ASSERT_TRUE(LoadEverywhere(cluster, m.program, m.params, DType::kFloat64));
  const auto command = [&](int r) {
    RunOptions options;
    if (c.train) options = {.train = true, .sgd = SgdOptions{0.1, 0.9, 0}};
    if (c.dy) options.dy = Ones(m.output_shape);
    v1::Command command = RunCommand(cluster, m.program, r, m.input, options);
    if (r == c.rank) c.change(*command.mutable_run_program());
    return command;
  };
  const absl::Time start = absl::Now();
  const std::vector<Outcome> outcomes = cluster.OnEveryRank(command);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3)) << "a peer waited in a collective";
  for (int r = 0; r < cluster.size(); ++r) {
    if (r == c.rank) {
      EXPECT_TRUE(StatusIs(outcomes[r].status, c.code, c.message)) << "rank " << r;
    } else {
      EXPECT_TRUE(StatusIs(outcomes[r].status, absl::StatusCode::kAborted,
                           {"the rank at mesh coordinate " + c.coordinate + " failed this run",
                            "nothing was updated"}))
          << "rank " << r;
    }
  }
  // Nothing was stored on any rank: parameters as loaded, no gradient, no momentum buffer.
  ExpectStored(cluster, m.program, m.params, ValueName, 0);
  for (int r = 0; r < cluster.size(); ++r) {
    for (const ParameterTensors& n : NamesFor(m.program)) {
      EXPECT_FALSE(cluster.store(r).Get(n.grad).ok()) << n.grad << " on rank " << r;
      EXPECT_FALSE(cluster.store(r).Get(n.momentum).ok()) << n.momentum << " on rank " << r;
    }
  }
  // The mesh serves the next run at once, and rightly.
  const Reference ref = m.reference(m.params, m.input, Ones(m.output_shape));
  ExpectOutputs(cluster, m.program, RunEverywhere(cluster, m.program, m.input, {}), ref.output,
                1e-10);
}

INSTANTIATE_TEST_SUITE_P(Cases, OneRankFailsTest, ::testing::ValuesIn(OneRankFailures()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace tessera
