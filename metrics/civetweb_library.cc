#include "metrics/civetweb_library.h"

#include <civetweb.h>

#include <mutex>

namespace tessera::metrics {

void InitCivetweb() {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
}

}  // namespace tessera::metrics
