#include "core/status_context.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status WithContext(absl::string_view context, const absl::Status& status) {
  if (status.ok()) return status;
  absl::Status out(status.code(), absl::StrCat(context, ": ", status.message()));
  status.ForEachPayload([&out](absl::string_view type_url, const absl::Cord& payload) {
    out.SetPayload(type_url, payload);
  });
  return out;
}

}  // namespace tessera
