#ifndef TESSERA_SECURITY_CONSTANT_TIME_H_
#define TESSERA_SECURITY_CONSTANT_TIME_H_

#include "absl/strings/string_view.h"

namespace tessera {

// a == b in a time that depends on their lengths only, not on where they differ (for secrets).
inline bool ConstantTimeEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ |= static_cast<unsigned char>(a[i] ^ b[i]);
  return differ == 0;
}

}  // namespace tessera

#endif  // TESSERA_SECURITY_CONSTANT_TIME_H_
