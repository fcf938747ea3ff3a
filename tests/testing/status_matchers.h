// StatusIs / IsOk matchers: Abseil 20220623 ships none.
#ifndef UMAP_TESTS_TESTING_STATUS_MATCHERS_H_
#define UMAP_TESTS_TESTING_STATUS_MATCHERS_H_

#include <gmock/gmock.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace umap::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER_P(StatusIs, code, "has status code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.ok();
}

}  // namespace umap::testing

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::umap::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::umap::testing::IsOk())
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                          \
  ASSERT_OK_AND_ASSIGN_IMPL_(UMAP_CONCAT_(_umap_test_sor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(sor, lhs, expr) \
  auto sor = (expr);                               \
  ASSERT_OK(sor.status());                         \
  lhs = std::move(sor).value()

#endif  // UMAP_TESTS_TESTING_STATUS_MATCHERS_H_
