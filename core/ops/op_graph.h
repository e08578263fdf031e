// A graph of registered ops: an op's decomposition into others (as torch's refs and
// decompositions), and the unit that sharding propagation plans in one pass, node by node, as
// DTensor would run the same ops one after another.
#ifndef TESSERA_CORE_OPS_OP_GRAPH_H_
#define TESSERA_CORE_OPS_OP_GRAPH_H_

#include <string>
#include <vector>

#include "core/ops/op_schema.h"

namespace tessera::ops {

// One node: a registered op by name and its arguments as a client gives them. A TensorRef (or a
// Tensor[] element) `i` refers to the graph's value `i`: the graph's inputs are values
// [0, num_inputs), node k's output is value num_inputs + k.
struct OpNode {
  std::string op;
  std::vector<NamedValue> args;
};

// The nodes in the order they run; the last node's output is the graph's output.
struct OpGraph {
  int num_inputs = 0;
  std::vector<OpNode> nodes;

  int num_values() const { return num_inputs + static_cast<int>(nodes.size()); }
  // "cross_entropy_loss = amax, sub.Tensor, exp, ...": the ops in order.
  std::string OpsText() const;
};

// Builds a graph: inputs are values 0..num_inputs-1; each Add returns the new node's value.
class GraphBuilder {
 public:
  explicit GraphBuilder(int num_inputs) { graph_.num_inputs = num_inputs; }

  // A positional tensor argument for value `v`.
  static NamedValue V(int v) { return {"", TensorRef{v}}; }
  static NamedValue P(OpValue value) { return {"", std::move(value)}; }
  static NamedValue K(std::string name, OpValue value) {
    return {std::move(name), std::move(value)};
  }

  int Add(std::string op, std::vector<NamedValue> args) {
    graph_.nodes.push_back({std::move(op), std::move(args)});
    return graph_.num_values() - 1;
  }
  OpGraph Finish() && { return std::move(graph_); }

 private:
  OpGraph graph_;
};

}  // namespace tessera::ops

#endif  // TESSERA_CORE_OPS_OP_GRAPH_H_
