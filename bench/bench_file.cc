#include "bench/bench_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "bench/posix_io.h"

namespace umap_bench {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void FillWords(uint64_t* dst, uint64_t first, size_t n, uint32_t tag) {
  if (tag == 0) {
    for (size_t i = 0; i < n; ++i) dst[i] = OriginalWord(first + i);
  } else {
    const uint64_t base = first + 1 + (static_cast<uint64_t>(tag) << kTagShift);
    for (size_t i = 0; i < n; ++i) {
      dst[i] = std::bit_cast<uint64_t>(-static_cast<double>(base + i));
    }
  }
}

absl::StatusOr<BenchFile> BenchFile::Open(const std::string& path, uint64_t size) {
  if (size == 0 || size % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("file size ", size, " must be a positive multiple of 4096"));
  }
  BenchFile f(path, size);
  struct stat st {};
  uint64_t have = 0;
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, " is not a regular file"));
    }
    have = static_cast<uint64_t>(st.st_size);
    if (have >= 8) {
      ASSIGN_OR_RETURN(Fd fd, OpenFile(path, O_RDONLY));
      uint64_t w0 = 0;
      absl::Status s = PreadFull(fd.get(), reinterpret_cast<char*>(&w0), 8, 0, path);
      if (!s.ok()) return s;
      if (w0 != OriginalWord(0)) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s exists but does not hold the benchmark pattern (first word 0x%016x, expected "
            "0x%016x); remove it or name another --file",
            path, w0, OriginalWord(0)));
      }
    }
  } else if (errno != ENOENT) {
    return Errno(errno, absl::StrCat("stat ", path));
  }
  if (have < size) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = f.Fill(have / 4096 * 4096);
    if (!s.ok()) return s;
    f.fill_seconds_ = SecondsSince(t0);
  }
  return f;
}

absl::Status BenchFile::Fill(uint64_t from) const {
  ASSIGN_OR_RETURN(Fd fd, OpenFile(path_, O_RDWR | O_CREAT));
  constexpr size_t kChunk = 4 << 20;
  std::vector<uint64_t> buf(kChunk / 8);
  for (uint64_t off = from; off < size_; off += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - off));
    FillWords(buf.data(), off / 8, n / 8, 0);
    absl::Status s = PwriteFull(fd.get(), reinterpret_cast<char*>(buf.data()), n, off, path_);
    if (!s.ok()) return s;
  }
  if (::fsync(fd.get()) != 0) return Errno(errno, absl::StrCat("fsync ", path_));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BenchFile::Repair() const {
  ASSIGN_OR_RETURN(Fd fd, OpenFile(path_, O_RDWR));
  constexpr size_t kChunk = 4 << 20;
  std::vector<uint64_t> buf(kChunk / 8);
  uint64_t wrong = 0;
  for (uint64_t off = 0; off < size_; off += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size_ - off));
    absl::Status s = PreadFull(fd.get(), reinterpret_cast<char*>(buf.data()), n, off, path_);
    if (!s.ok()) return s;
    bool bad = false;
    for (size_t i = 0; i < n / 8; ++i) {
      if (buf[i] != OriginalWord(off / 8 + i)) {
        wrong += 8;
        bad = true;
      }
    }
    if (bad) {
      FillWords(buf.data(), off / 8, n / 8, 0);
      s = PwriteFull(fd.get(), reinterpret_cast<char*>(buf.data()), n, off, path_);
      if (!s.ok()) return s;
    }
  }
  if (wrong > 0 && ::fsync(fd.get()) != 0) return Errno(errno, absl::StrCat("fsync ", path_));
  return wrong;
}

absl::Status BenchFile::DropCache(bool system_wide) const {
  ASSIGN_OR_RETURN(Fd fd, OpenFile(path_, O_RDONLY));
  // Dirty pages are not dropped by DONTNEED: make them clean first.
  if (::fdatasync(fd.get()) != 0) return Errno(errno, absl::StrCat("fdatasync ", path_));
  if (int err = ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED)) {
    return Errno(err, absl::StrCat("posix_fadvise(DONTNEED) ", path_));
  }
  if (system_wide) {
    ::sync();
    absl::Status s = WriteSmallFile("/proc/sys/vm/drop_caches", "3");
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat(s.message(), " (--drop-caches needs root)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BenchFile::CachedBytes() const {
  ASSIGN_OR_RETURN(Fd fd, OpenFile(path_, O_RDONLY));
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return Errno(errno, absl::StrCat("mmap (for mincore) ", path_));
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size_ + page - 1) / page);
  int r = ::mincore(p, size_, vec.data());
  int err = errno;
  ::munmap(p, size_);
  if (r != 0) return Errno(err, absl::StrCat("mincore ", path_));
  uint64_t n = 0;
  for (unsigned char c : vec) n += c & 1;
  return n * page;
}

absl::Status BenchFile::VerifyAndRestore(const std::vector<uint64_t>& written, uint64_t item_size,
                                         uint32_t tag) const {
  // Read what the storage holds, not what this host's page cache remembers.
  absl::Status s = DropCache(false);
  if (!s.ok()) return s;
  ASSIGN_OR_RETURN(Fd fd, OpenFile(path_, O_RDWR));
  const uint64_t chunk = std::max<uint64_t>(item_size, (4u << 20) / item_size * item_size);
  std::vector<uint64_t> buf(chunk / 8);
  const size_t words = item_size / 8;
  uint64_t wrong_items = 0, written_items = 0;
  std::string where;
  for (uint64_t off = 0; off < size_; off += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, size_ - off);
    s = PreadFull(fd.get(), reinterpret_cast<char*>(buf.data()), n, off, path_);
    if (!s.ok()) return s;
    // Items to rewrite with the original: written ones and wrong ones.
    uint64_t run_start = ~0ull;
    auto flush = [&](uint64_t end_item) -> absl::Status {
      if (run_start == ~0ull) return absl::OkStatus();
      const uint64_t a = run_start * item_size, b = end_item * item_size;
      uint64_t* p = buf.data() + (a - off) / 8;
      FillWords(p, a / 8, (b - a) / 8, 0);
      run_start = ~0ull;
      return PwriteFull(fd.get(), reinterpret_cast<char*>(p), b - a, a, path_);
    };
    const uint64_t first_item = off / item_size;
    const uint64_t end_item = (off + n) / item_size;
    for (uint64_t item = first_item; item < end_item; ++item) {
      const bool w = (written[item >> 6] >> (item & 63)) & 1;
      written_items += w;
      const uint64_t* p = buf.data() + (item - first_item) * words;
      const uint64_t k0 = item * words;
      bool bad = false;
      for (size_t i = 0; i < words; ++i) {
        const uint64_t want = w ? WrittenWord(k0 + i, tag) : OriginalWord(k0 + i);
        if (p[i] != want) {
          if (wrong_items < 8) {
            absl::StrAppendFormat(
                &where,
                "\n  item %u (%s), file offset %u: holds 0x%016x (%g), expected 0x%016x (%g)", item,
                w ? "written in this run" : "not written", (k0 + i) * 8, p[i],
                std::bit_cast<double>(p[i]), want, std::bit_cast<double>(want));
          }
          bad = true;
          break;
        }
      }
      wrong_items += bad;
      if (w || bad) {
        if (run_start == ~0ull) run_start = item;
      } else {
        s = flush(item);
        if (!s.ok()) return s;
      }
    }
    s = flush(end_item);
    if (!s.ok()) return s;
  }
  if (::fsync(fd.get()) != 0) return Errno(errno, absl::StrCat("fsync ", path_));
  if (wrong_items > 0) {
    return absl::DataLossError(absl::StrFormat(
        "VERIFY FAILED: %u of %u items (%u bytes each) of %s hold wrong bytes after the run "
        "(%u items were written); first ones:%s",
        wrong_items, size_ / item_size, item_size, path_, written_items, where));
  }
  return absl::OkStatus();
}

absl::Status BenchFile::TEST_WriteWord(uint64_t word, uint64_t value) const {
  ASSIGN_OR_RETURN(Fd fd, OpenFile(path_, O_RDWR));
  RETURN_IF_ERROR(PwriteFull(fd.get(), reinterpret_cast<const char*>(&value), 8, word * 8, path_));
  if (::fsync(fd.get()) != 0) return Errno(errno, absl::StrCat("fsync ", path_));
  return absl::OkStatus();
}

}  // namespace umap_bench
