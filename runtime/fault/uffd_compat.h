// userfaultfd definitions newer than Debian 12's kernel headers (6.1), in one place.
// Values are the kernel's ABI (include/uapi/linux/userfaultfd.h, 6.8+); guarded so newer
// headers win.
#ifndef UMAP_RUNTIME_FAULT_UFFD_COMPAT_H_
#define UMAP_RUNTIME_FAULT_UFFD_COMPAT_H_

#include <linux/types.h>
#include <linux/userfaultfd.h>

#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_POISON
#define UFFD_FEATURE_POISON (1 << 14)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_FEATURE_MOVE
#define UFFD_FEATURE_MOVE (1 << 16)
#endif

#ifndef UFFDIO_POISON
struct uffdio_poison {
  struct uffdio_range range;
  __u64 mode;
  __s64 updated;
};
#define _UFFDIO_POISON (0x08)
#define UFFDIO_POISON _IOWR(UFFDIO, _UFFDIO_POISON, struct uffdio_poison)
#define UFFDIO_POISON_MODE_DONTWAKE ((__u64)1 << 0)
#endif

#ifndef UFFDIO_MOVE
struct uffdio_move {
  __u64 dst;
  __u64 src;
  __u64 len;
  __u64 mode;
  __s64 move;
};
#define _UFFDIO_MOVE (0x05)
#define UFFDIO_MOVE _IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)
#define UFFDIO_MOVE_MODE_DONTWAKE ((__u64)1 << 0)
#define UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES ((__u64)1 << 1)
#endif

#endif  // UMAP_RUNTIME_FAULT_UFFD_COMPAT_H_
