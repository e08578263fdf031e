#ifndef TESSERA_CORE_STATUS_MACROS_H_
#define TESSERA_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr`, an absl::Status, once; returns it from the enclosing function (which returns
// absl::Status or absl::StatusOr<T>) if it is not OK.
#define RETURN_IF_ERROR(expr)                                                                     \
  do {                                                                                            \
    if (::absl::Status tessera_status_macros_status = (expr); !tessera_status_macros_status.ok()) \
      return tessera_status_macros_status;                                                        \
  } while (false)

// Evaluates `expr`, an absl::StatusOr<T>, once; returns its status from the enclosing function
// (which returns absl::Status or absl::StatusOr<U>) if it is not OK, and otherwise moves its value
// into `lhs`: a declaration (`auto x`, `const Shape& shape`) or an existing lvalue (`*out`). A
// declaration whose type holds a comma goes in parentheses: `(std::pair<int, int> p)`. It expands
// to several statements, so it cannot be the unbraced body of an `if`.
#define ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL(    \
      TESSERA_STATUS_MACROS_CONCAT(tessera_status_macros_statusor_, __COUNTER__), lhs, expr)

// Implementation details of the macros above.
#define TESSERA_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)   \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return ::std::move(statusor).status(); \
  TESSERA_STATUS_MACROS_UNPARENTHESIZE(lhs) = *::std::move(statusor)
#define TESSERA_STATUS_MACROS_CONCAT(a, b) TESSERA_STATUS_MACROS_CONCAT_INNER(a, b)
#define TESSERA_STATUS_MACROS_CONCAT_INNER(a, b) a##b
// `(a, b)` becomes `a, b`; anything without enclosing parentheses is left as it is.
#define TESSERA_STATUS_MACROS_UNPARENTHESIZE(x) \
  TESSERA_STATUS_MACROS_UNPARENTHESIZE_EVAL(TESSERA_STATUS_MACROS_UNPARENTHESIZE_STRIP x)
#define TESSERA_STATUS_MACROS_UNPARENTHESIZE_STRIP(...) \
  TESSERA_STATUS_MACROS_UNPARENTHESIZE_STRIP __VA_ARGS__
#define TESSERA_STATUS_MACROS_UNPARENTHESIZE_EVAL(...) \
  TESSERA_STATUS_MACROS_UNPARENTHESIZE_PASTE(__VA_ARGS__)
#define TESSERA_STATUS_MACROS_UNPARENTHESIZE_PASTE(...) \
  TESSERA_STATUS_MACROS_UNPARENTHESIZE_DONE_##__VA_ARGS__
#define TESSERA_STATUS_MACROS_UNPARENTHESIZE_DONE_TESSERA_STATUS_MACROS_UNPARENTHESIZE_STRIP

#endif  // TESSERA_CORE_STATUS_MACROS_H_
