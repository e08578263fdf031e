// The module specs and plans several tensor-parallel tests share (JSON, as users write them).
#ifndef TESSERA_TESTS_TEST_MODELS_H_
#define TESSERA_TESTS_TEST_MODELS_H_

namespace tessera::testing {

// A pre-norm transformer block on float64 [batch, seq, 8]: 4 heads, a 32-wide MLP.
inline constexpr char kBlockDim8Float64[] =
    R"js({"type": "Module", "input": {"dtype": "float64", "shape": [-1, -1, 8]},
  "children": [
    {"name": "attn", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "LayerNorm", "normalized_shape": 8},
      {"name": "attention", "type": "Attention", "dim": 8, "n_heads": 4, "causal": true}]},
    {"name": "mlp", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "RMSNorm", "normalized_shape": 8},
      {"name": "net1", "type": "Linear", "in_features": 8, "out_features": 32},
      {"name": "act", "type": "GELU", "approximate": "tanh"},
      {"name": "net2", "type": "Linear", "in_features": 32, "out_features": 8}]}]})js";

// A pre-norm transformer block on float32 [batch, seq, 16]: 4 heads, a 64-wide MLP.
inline constexpr char kBlockDim16Float32[] =
    R"js({"type": "Module", "input": {"dtype": "float32", "shape": [-1, -1, 16]},
  "children": [
    {"name": "attn", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "LayerNorm", "normalized_shape": 16},
      {"name": "attention", "type": "Attention", "dim": 16, "n_heads": 4, "causal": true}]},
    {"name": "mlp", "type": "Module", "residual": true, "children": [
      {"name": "norm", "type": "RMSNorm", "normalized_shape": 16},
      {"name": "net1", "type": "Linear", "in_features": 16, "out_features": 64},
      {"name": "act", "type": "GELU", "approximate": "tanh"},
      {"name": "net2", "type": "Linear", "in_features": 64, "out_features": 16}]}]})js";

// Token ids [batch, seq] -> Embedding(20, 8) -> LayerNorm -> a Linear head over the vocabulary.
inline constexpr char kEmbeddingHead[] = R"js({"type": "Module",
  "input": {"dtype": "int64", "shape": [-1, -1]},
  "children": [
    {"name": "tok", "type": "Embedding", "num_embeddings": 20, "embedding_dim": 8},
    {"name": "norm", "type": "LayerNorm", "normalized_shape": 8},
    {"name": "head", "type": "Linear", "in_features": 8, "out_features": 20}]})js";

// torch's Megatron-style MLP plan: net1 colwise, net2 rowwise.
inline constexpr char kMlpPlan[] =
    R"js({"plan": {"net1": "ColwiseParallel", "net2": "RowwiseParallel"}})js";

// Megatron's transformer-block plan: q, k, v colwise (heads split), o rowwise; the MLP
// colwise then rowwise.
inline constexpr char kMegatron[] = R"js({"plan": {
  "attn.attention.[qkv]": "ColwiseParallel", "attn.attention.o": "RowwiseParallel",
  "mlp.net1": "ColwiseParallel", "mlp.net2": "RowwiseParallel"}})js";

// The sequence-parallel transformer-block plan: norms on Shard(1) of the sequence, the
// projections gathering it and the rowwise layers reduce-scattering back to it.
inline constexpr char kSequenceParallel[] = R"js({"plan": {
  "attn.norm": "SequenceParallel",
  "attn.attention.[qkv]": {"style": "ColwiseParallel", "input_layouts": "Shard(1)"},
  "attn.attention.o": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"},
  "mlp.norm": "SequenceParallel",
  "mlp.net1": {"style": "ColwiseParallel", "input_layouts": "Shard(1)"},
  "mlp.net2": {"style": "RowwiseParallel", "output_layouts": "Shard(1)"}}})js";

// The vocabulary split over the ranks (each looks up the ids in its range, the partial
// embeddings summed), then the MLP colwise and rowwise.
inline constexpr char kVocabParallel[] = R"js({"plan": {
  "tok": {"style": "RowwiseParallel", "input_layouts": "Replicate()"},
  "net1": "ColwiseParallel", "net2": "RowwiseParallel"}})js";

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TEST_MODELS_H_
