#ifndef TESSERA_CORE_NAMES_H_
#define TESSERA_CORE_NAMES_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tessera {

// What a client-given name names. Each kind has one rule, checked where such a name is made (a
// lookup of a name never made simply finds nothing):
//   mesh, module:  1..100 bytes of letters, digits, '_' and '-'
//   model:         the same, and '.' after the first byte (Triton's model names)
//   mesh dim:      1..64 bytes of letters, digits, '_' and '-', not starting with a digit (so a
//                  dim's name never reads as its index)
//   tensor:        1..200 bytes of letters, digits, '_', '-' and '.', not starting with '.' and
//                  without ".." (module parameters are "<module>.<fqn>")
//   module child:  1..64 bytes of letters, digits, '_' and '-' (torch's child names, '.' joins
//                  them into FQNs)
//   client id:     1..128 bytes of letters, digits, '_', '-', '.', ':' and '@'
enum class NameKind { kMesh, kModule, kModel, kMeshDim, kTensor, kChild, kClient };

// OK iff `name` follows the rule of `kind`; INVALID_ARGUMENT naming the kind, the name (quoted and
// cut, QuotedName) and the rule otherwise.
absl::Status CheckName(NameKind kind, absl::string_view name);

// `text` in single quotes for a message, bytes outside printable ASCII escaped as \xNN, cut to
// `max` bytes with its full length said: a name echoed in a refusal stays short and printable
// whatever the client sent.
std::string QuotedName(absl::string_view text, size_t max = 64);

}  // namespace tessera

#endif  // TESSERA_CORE_NAMES_H_
