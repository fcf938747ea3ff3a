#include "base/private_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/log.h"
#include "base/posix_error.h"

namespace umap {
namespace {

absl::Status Refuse(absl::string_view what) {
  return WithErrno(absl::PermissionDeniedError(what), EPERM);
}

std::string Mode(mode_t m) { return absl::StrFormat("%04o", m & 07777); }

// What to do about a directory of someone else (uid `other`).
std::string Remedy(const PrivateDirPolicy& p, uid_t other) {
  if (p.root_for_other) return "";
  if (::geteuid() == 0 && other != 0) {
    return absl::StrCat("; a replay as root writes wherever that user's journal says: to "
                        "confirm, run umap-recover --owner ", other,
                        " (a runtime never uses another user's journal)");
  }
  return "; use a directory of your own (UMAP_JOURNAL_DIR, umap-recover --journal)";
}

absl::StatusOr<std::string> Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) return PosixError(errno, "getcwd");
  return absl::StrCat(cwd, "/", path);
}

// "/a/b/c" -> "/", "/a", "/a/b", "/a/b/c".
std::vector<std::string> Prefixes(const std::string& abs) {
  std::vector<std::string> out = {"/"};
  for (size_t i = 1; i <= abs.size(); ++i) {
    if (i == abs.size() || abs[i] == '/') {
      if (abs[i - 1] != '/') out.push_back(abs.substr(0, i));
    }
  }
  return out;
}

// A symbolic link on the literal path, owned by someone who could re-point it.
absl::Status CheckLinks(const std::string& abs, const std::string& path,
                        const PrivateDirPolicy& p) {
  for (const std::string& prefix : Prefixes(abs)) {
    struct stat st;
    if (::lstat(prefix.c_str(), &st) != 0) return PosixError(errno, absl::StrCat("lstat ", prefix));
    if (S_ISLNK(st.st_mode) && st.st_uid != p.owner && st.st_uid != 0) {
      return Refuse(absl::StrCat("journal directory ", path, " is reached through the symbolic "
                                 "link ", prefix, " of uid ", st.st_uid,
                                 ", who could point it elsewhere", Remedy(p, st.st_uid)));
    }
  }
  return absl::OkStatus();
}

// A directory above the journal that someone else could change: rename the journal away and
// put another in its place.
absl::Status CheckAncestors(const std::string& real, const std::string& path,
                            const PrivateDirPolicy& p) {
  std::vector<std::string> prefixes = Prefixes(real);
  prefixes.pop_back();  // the journal directory itself: checked by the caller
  for (const std::string& prefix : prefixes) {
    struct stat st;
    if (::stat(prefix.c_str(), &st) != 0) return PosixError(errno, absl::StrCat("stat ", prefix));
    const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (others_write && (st.st_mode & S_ISVTX) == 0) {
      return Refuse(absl::StrCat("journal directory ", path, " is below ", prefix, " (mode ",
                                 Mode(st.st_mode), "), which others may write to without the "
                                 "sticky bit: they could replace the journal"));
    }
    if (st.st_uid != 0 && st.st_uid != p.owner) {
      return Refuse(absl::StrCat("journal directory ", path, " is below ", prefix,
                                 ", which belongs to uid ", st.st_uid,
                                 ": that user could replace the journal",
                                 Remedy(p, st.st_uid)));
    }
  }
  return absl::OkStatus();
}

// The directory itself (open as `fd`) and every entry in it.
absl::Status CheckContents(int fd, const std::string& path, const PrivateDirPolicy& p) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return PosixError(errno, absl::StrCat("fstat ", path));
  if (st.st_uid != p.owner) {
    return Refuse(absl::StrCat("journal directory ", path, " belongs to uid ", st.st_uid,
                               ", not to uid ", p.owner, Remedy(p, st.st_uid)));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Refuse(absl::StrCat("journal directory ", path, " has mode ", Mode(st.st_mode),
                               ": others may write to it (they could plant or replace "
                               "journal files); make it 0700 after checking its contents"));
  }
  const bool mine = p.owner == ::geteuid();
  if (mine && (st.st_mode & 077) != 0 && ::fchmod(fd, 0700) != 0) {
    return PosixError(errno, absl::StrCat("chmod 0700 ", path));
  }
  const int list_fd = ::dup(fd);
  if (list_fd < 0) return PosixError(errno, absl::StrCat("dup ", path));
  DIR* d = ::fdopendir(list_fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(list_fd);
    return PosixError(err, absl::StrCat("opendir ", path));
  }
  absl::Cleanup close_dir = [d] { ::closedir(d); };
  ::rewinddir(d);
  errno = 0;
  while (struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat fst;
    if (::fstatat(fd, name.c_str(), &fst, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile (by its owner: the directory is ours)
      return PosixError(errno, absl::StrCat("stat ", path, "/", name));
    }
    if (S_ISLNK(fst.st_mode) || fst.st_uid != p.owner) {
      return Refuse(absl::StrCat("journal directory ", path, " holds ", name,
                                 S_ISLNK(fst.st_mode) ? ", a symbolic link"
                                                      : absl::StrCat(" of uid ", fst.st_uid),
                                 ": not a journal of uid ", p.owner, "'s own"));
    }
    if (mine && S_ISREG(fst.st_mode) && (fst.st_mode & 077) != 0) {
      const int f = ::openat(fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
      if (f < 0) return PosixError(errno, absl::StrCat("open ", path, "/", name));
      const int rc = ::fchmod(f, 0600);
      const int err = errno;
      ::close(f);
      if (rc != 0) return PosixError(err, absl::StrCat("chmod 0600 ", path, "/", name));
    }
    errno = 0;
  }
  if (errno != 0) return PosixError(errno, absl::StrCat("readdir ", path));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPrivateDir(const std::string& path, const PrivateDirPolicy& policy) {
  absl::StatusOr<std::string> abs = Absolute(path);
  if (!abs.ok()) return abs.status();
  if (absl::Status s = CheckLinks(*abs, path, policy); !s.ok()) return s;
  char real[PATH_MAX];
  if (::realpath(abs->c_str(), real) == nullptr) {
    return PosixError(errno, absl::StrCat("resolve journal directory ", path));
  }
  if (absl::Status s = CheckAncestors(real, path, policy); !s.ok()) return s;
  // Opened without following a link in its last component: what is checked is what was
  // resolved above, and no link can be swapped in meanwhile (the ancestors are safe).
  const int fd = ::open(real, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return PosixError(errno, absl::StrCat("open journal directory ", path));
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  return CheckContents(fd, path, policy);
}

absl::Status MakePrivateDir(const std::string& path, const PrivateDirPolicy& policy) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return PosixError(errno, absl::StrCat("create journal directory ", path));
  }
  return CheckPrivateDir(path, policy);
}

namespace {

// "a regular file of uid 1000, mode 0644", for the warning.
std::string DescribeObject(const struct stat& st) {
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISLNK(st.st_mode)  ? "a symbolic link"
                     : S_ISREG(st.st_mode)  ? "a regular file"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "a device or other special file";
  return absl::StrCat(kind, " of uid ", st.st_uid, ", mode ", Mode(st.st_mode));
}

}  // namespace

absl::StatusOr<std::string> AutomaticJournalRoot(const std::string& base) {
  const uid_t uid = ::geteuid();
  const std::string root = absl::StrCat(base, "/umap-journal-", uid);
  absl::Status s = MakePrivateDir(root, PrivateDirPolicy{uid});
  if (s.ok()) return root;
  // Whatever stands at that name and is not a private directory of this user (another
  // user's directory, link, regular file or FIFO: anyone may create it first in /var/tmp)
  // must not deny this user Umap. With nothing there, the error is the disk's (a missing or
  // read-only /var/tmp, a full disk), and a fresh name would meet it too.
  struct stat st;
  if (::lstat(root.c_str(), &st) != 0) return s;
  std::string tmpl = absl::StrCat(root, ".XXXXXX");
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return PosixError(errno, absl::StrCat("create a private journal root from ", tmpl));
  }
  UMAP_LOG(kWarn, "automatic journal: ", root, " is ", DescribeObject(st), " (", s.message(),
           "); using ", tmpl, " instead");
  if (absl::Status again = CheckPrivateDir(tmpl, PrivateDirPolicy{uid}); !again.ok()) {
    return again;
  }
  return tmpl;
}

absl::Status RestrictToOwner(const std::string& path, std::optional<uid_t> give_to) {
  if (::chmod(path.c_str(), 0600) != 0) return PosixError(errno, absl::StrCat("chmod 0600 ", path));
  if (give_to.has_value() && ::chown(path.c_str(), *give_to, static_cast<gid_t>(-1)) != 0) {
    return PosixError(errno, absl::StrCat("chown ", *give_to, " ", path));
  }
  return absl::OkStatus();
}

}  // namespace umap
