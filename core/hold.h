#ifndef TESSERA_CORE_HOLD_H_
#define TESSERA_CORE_HOLD_H_

#include <utility>

#include "absl/functional/any_invocable.h"

namespace tessera {

// A share taken of something bounded (a stream's place, a request's bytes), given back when the
// hold goes. Move-only; a default-made hold holds nothing.
class Hold {
 public:
  Hold() = default;
  explicit Hold(absl::AnyInvocable<void() &&> give_back) : give_back_(std::move(give_back)) {}
  Hold(Hold&& other) noexcept : give_back_(std::exchange(other.give_back_, nullptr)) {}
  Hold& operator=(Hold&& other) noexcept {
    if (this != &other) {
      Reset();
      give_back_ = std::exchange(other.give_back_, nullptr);
    }
    return *this;
  }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  ~Hold() { Reset(); }

  // Gives the share back now.
  void Reset() {
    if (give_back_) std::exchange(give_back_, nullptr)();
  }

 private:
  absl::AnyInvocable<void() &&> give_back_;
};

}  // namespace tessera

#endif  // TESSERA_CORE_HOLD_H_
