/* A malloc that takes every block from mmap() and gives it back with munmap(), preloaded
 * before libumap_preload.so by the tests: allocation then reaches the shim's mmap from
 * inside dlsym (which allocates) and from libc's start-up, before the shim's constructor has
 * resolved anything. Slow and wasteful on purpose; for tests only. */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

struct Head {
  void* base;  /* what mmap returned */
  size_t len;  /* what was mapped */
  size_t size; /* what the caller asked for */
  size_t pad;
};

static void* Alloc(size_t size, size_t align) {
  if (align < 16) align = 16;
  size_t len = size + align + sizeof(struct Head);
  char* base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t p = ((uintptr_t)base + sizeof(struct Head) + align - 1) & ~(uintptr_t)(align - 1);
  struct Head* h = (struct Head*)p - 1;
  h->base = base;
  h->len = len;
  h->size = size;
  return (void*)p;
}

void* malloc(size_t size) { return Alloc(size, 16); }

void free(void* p) {
  if (p == NULL) return;
  struct Head* h = (struct Head*)p - 1;
  munmap(h->base, h->len);
}

void* calloc(size_t n, size_t size) {
  if (size != 0 && n > SIZE_MAX / size) {
    errno = ENOMEM;
    return NULL;
  }
  return Alloc(n * size, 16); /* anonymous pages are zero */
}

void* realloc(void* p, size_t size) {
  if (p == NULL) return malloc(size);
  struct Head* h = (struct Head*)p - 1;
  void* q = malloc(size);
  if (q == NULL) return NULL;
  memcpy(q, p, h->size < size ? h->size : size);
  free(p);
  return q;
}

void* memalign(size_t align, size_t size) { return Alloc(size, align); }
void* aligned_alloc(size_t align, size_t size) { return Alloc(size, align); }
int posix_memalign(void** out, size_t align, size_t size) {
  void* p = Alloc(size, align);
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t size) { return Alloc(size, 4096); }
void* pvalloc(size_t size) { return Alloc((size + 4095) & ~(size_t)4095, 4096); }
size_t malloc_usable_size(void* p) { return p ? ((struct Head*)p - 1)->size : 0; }
