// RETURN_IF_ERROR / ASSIGN_OR_RETURN: Debian 12's Abseil (20220623) has neither.
#ifndef UMAP_BASE_STATUS_MACROS_H_
#define UMAP_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status _umap_status = (expr);          \
    if (!_umap_status.ok()) return _umap_status;   \
  } while (0)

#define UMAP_CONCAT_INNER_(a, b) a##b
#define UMAP_CONCAT_(a, b) UMAP_CONCAT_INNER_(a, b)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(UMAP_CONCAT_(_umap_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                           \
  if (!statusor.ok()) return statusor.status();     \
  lhs = std::move(statusor).value()

#endif  // UMAP_BASE_STATUS_MACROS_H_
