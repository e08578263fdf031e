#ifndef TESSERA_CLIENT_CLI_PROGRESS_BAR_H_
#define TESSERA_CLIENT_CLI_PROGRESS_BAR_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::cli {

// A progress bar with throughput on stderr, drawn for transfers of more than a few MB; call it
// with (bytes done, bytes in all) as a transfer goes.
class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)) {}
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void operator()(int64_t done, int64_t total);

 private:
  std::string label_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
  bool drawn_ = false;
};

}  // namespace tessera::cli

#endif  // TESSERA_CLIENT_CLI_PROGRESS_BAR_H_
