#ifndef TESSERA_CORE_STATUS_CONTEXT_H_
#define TESSERA_CORE_STATUS_CONTEXT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tessera {

// `status` with `context` in front of its message: OK stays OK; otherwise the same code (and
// payloads), with the message "<context>: <message>".
absl::Status WithContext(absl::string_view context, const absl::Status& status);

}  // namespace tessera

#endif  // TESSERA_CORE_STATUS_CONTEXT_H_
