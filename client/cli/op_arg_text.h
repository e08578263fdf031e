#ifndef TESSERA_CLIENT_CLI_OP_ARG_TEXT_H_
#define TESSERA_CLIENT_CLI_OP_ARG_TEXT_H_

// The arguments of `tessera tensor op NAME ARGS...` as written on the command line, into the C++
// client's op arguments (tessera/ops.h).

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "tessera/ops.h"

namespace tessera::cli {

// The tensor named `name` on the cluster.
using TensorLookup = std::function<absl::StatusOr<client::DTensor>(const std::string& name)>;

// One argument token. `key=value` is the keyword argument `key` (an identifier); a value is
// `%name` (the tensor `name`), an integer (`-1`), any other number (`0.5`, `1e-5`, `inf`, `-inf`,
// `nan`), `true` / `false`, `none`, a list of integers (`[0,1]`, `[]`) or of tensors (`[%a,%b]`;
// `none` among them is None, for a Tensor?[] argument), a dtype (`float32`, `torch.float32`,
// `long`, ...), or a string in single or double quotes (`'tanh'`, quoted again for the shell).
// INVALID_ARGUMENT naming the token and what it may be otherwise; a tensor `lookup` cannot find
// fails with its error.
absl::StatusOr<client::OpArg> ParseOpArg(const std::string& token, const TensorLookup& lookup);

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_OP_ARG_TEXT_H_
