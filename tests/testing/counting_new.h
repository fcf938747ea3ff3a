// Counts the allocations each thread makes, by replacing the global operator new, so a
// test can assert that a path allocates nothing. Include it in exactly one source file of a
// test binary (it defines the replaceable operators, which the whole binary then uses).
#ifndef UMAP_TESTS_TESTING_COUNTING_NEW_H_
#define UMAP_TESTS_TESTING_COUNTING_NEW_H_

#include <cstdint>
#include <cstdlib>
#include <new>

namespace umaptest {

// Allocations made so far by the calling thread.
inline thread_local uint64_t t_thread_allocations = 0;
inline uint64_t ThreadAllocations() { return t_thread_allocations; }

}  // namespace umaptest

// GCC sees the replacement's free() against the library's operator new where it inlines
// both.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  ++umaptest::t_thread_allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

#endif  // UMAP_TESTS_TESTING_COUNTING_NEW_H_
