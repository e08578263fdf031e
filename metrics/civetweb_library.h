// civetweb's process-wide initialisation, done once before its first server or client.
#ifndef TESSERA_METRICS_CIVETWEB_LIBRARY_H_
#define TESSERA_METRICS_CIVETWEB_LIBRARY_H_

namespace tessera::metrics {

// Calls mg_init_library once per process.
void InitCivetweb();

}  // namespace tessera::metrics

#endif  // TESSERA_METRICS_CIVETWEB_LIBRARY_H_
