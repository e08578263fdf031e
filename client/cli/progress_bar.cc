#include "client/cli/progress_bar.h"

#include <iostream>

#include "absl/strings/str_format.h"

namespace tessera::cli {
namespace {

constexpr int64_t kProgressFrom = 4 << 20;  // transfers this large show a progress bar

}  // namespace

ProgressBar::~ProgressBar() {
  if (drawn_) std::cerr << "\n";
}

void ProgressBar::operator()(int64_t done, int64_t total) {
  if (total < kProgressFrom) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const int filled = static_cast<int>(30 * done / total);
  std::cerr << absl::StrFormat("\r%s [%s%s] %3d%% %7.1f / %.1f MiB  %6.1f MB/s", label_,
                               std::string(filled, '#'), std::string(30 - filled, '.'),
                               static_cast<int>(100 * done / total), done / 1048576.0,
                               total / 1048576.0, seconds > 0 ? done / seconds / 1e6 : 0.0);
  drawn_ = true;
}

}  // namespace tessera::cli
