// Early-return helpers for absl::Status, shared by every layer.
#ifndef BLOSSOM_KERNELS_STATUS_MACROS_H_
#define BLOSSOM_KERNELS_STATUS_MACROS_H_

#include "absl/status/status.h"

#define BLOSSOM_STATUS_CONCAT_INNER_(a, b) a##b
#define BLOSSOM_STATUS_CONCAT_(a, b) BLOSSOM_STATUS_CONCAT_INNER_(a, b)

// Evaluates a Status expression and returns it from the enclosing function if not OK.
#define BLOSSOM_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::absl::Status blossom_status_ = (expr);          \
    if (!blossom_status_.ok()) return blossom_status_; \
  } while (0)

// BLOSSOM_ASSIGN_OR_RETURN(auto x, StatusOrExpr): unwraps or returns the error.
#define BLOSSOM_ASSIGN_OR_RETURN(lhs, rexpr)                                        \
  BLOSSOM_ASSIGN_OR_RETURN_IMPL_(BLOSSOM_STATUS_CONCAT_(blossom_statusor_, __LINE__), lhs, rexpr)
#define BLOSSOM_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                   \
  if (!statusor.ok()) return statusor.status();              \
  lhs = std::move(*statusor)

#endif  // BLOSSOM_KERNELS_STATUS_MACROS_H_
