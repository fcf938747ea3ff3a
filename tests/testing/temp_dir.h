// A fresh directory under $TMPDIR (default /tmp) removed with everything in it at scope exit.
#ifndef UMAP_TESTS_TESTING_TEMP_DIR_H_
#define UMAP_TESTS_TESTING_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>

// In its own top-level namespace so that tests of the C API (which see the function umap()
// and therefore cannot see namespace umap) can use it too.
namespace umaptest {

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/umap-test-XXXXXX";
    char* p = ::mkdtemp(tmpl.data());
    path_ = p ? std::string(p) : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace umaptest

#ifndef UMAPTEST_NO_UMAP_NAMESPACE
namespace umap::testing {
using ::umaptest::TempDir;
}  // namespace umap::testing
#endif

#endif  // UMAP_TESTS_TESTING_TEMP_DIR_H_
