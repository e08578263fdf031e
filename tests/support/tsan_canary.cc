// The TSan build's check of itself, run by scripts/run-sanitizers.sh thread before the suite:
//   tsan_canary race     two threads increment a counter with no lock: TSan must report it.
//   tsan_canary locked   the same under an absl::Mutex, and a value handed over through
//                        absl::Mutex::Await: TSan must report nothing (it reports both when absl
//                        is not built with TSan, as Debian's is not).
// A run that reports nothing for `race` or something for `locked` means the build does not check
// what the suite's run claims to.

#include <cstdio>
#include <string_view>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace {

constexpr int kRounds = 100000;

int Race() {
  long counter = 0;
  std::thread other([&] {
    for (int i = 0; i < kRounds; ++i) ++counter;
  });
  for (int i = 0; i < kRounds; ++i) ++counter;
  other.join();
  std::printf("%ld\n", counter);
  return 0;
}

int Locked() {
  absl::Mutex mu;
  long counter = 0;
  long handed = 0;
  bool ready = false;
  std::thread other([&] {
    for (int i = 0; i < kRounds; ++i) {
      absl::MutexLock lock(&mu);
      ++counter;
    }
    handed = 42;  // written without the lock, published by `ready` under it
    absl::MutexLock lock(&mu);
    ready = true;
  });
  for (int i = 0; i < kRounds; ++i) {
    absl::MutexLock lock(&mu);
    ++counter;
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&ready));
  }
  const long seen = handed;  // before the join, whose edge would hide a missing one
  other.join();
  std::printf("%ld %ld\n", counter, seen);
  return counter == 2 * kRounds && seen == 42 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc == 2 ? argv[1] : "";
  if (mode == "race") return Race();
  if (mode == "locked") return Locked();
  std::fprintf(stderr, "usage: tsan_canary race|locked\n");
  return 2;
}
