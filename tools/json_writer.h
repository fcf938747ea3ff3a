// A minimal streaming JSON writer for umap-recover's --json report (no JSON library in the
// dependency set). Strings are bytes: valid UTF-8 passes through, control characters are
// escaped as \uXXXX, and every byte that is not part of valid UTF-8 (paths are bytes, not
// necessarily UTF-8) is written as \u00XX, i.e. as the code point of the same value.
#ifndef UMAP_TOOLS_JSON_WRITER_H_
#define UMAP_TOOLS_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace umap::tools {

class JsonWriter {
 public:
  // Containers. Inside an object, call Key() before each value.
  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(absl::string_view key);

  void String(absl::string_view s);
  void Uint(uint64_t v);
  void Int(int64_t v);
  void Bool(bool v);
  void Null();

  // Key + value shorthands.
  void Field(absl::string_view key, absl::string_view v) { Key(key), String(v); }
  void Field(absl::string_view key, const char* v) { Key(key), String(v); }
  void Field(absl::string_view key, uint64_t v) { Key(key), Uint(v); }
  void Field(absl::string_view key, bool v) { Key(key), Bool(v); }

  const std::string& str() const { return out_; }

  // The quoted, escaped form of s (also used by tests).
  static std::string Quote(absl::string_view s);

 private:
  void Open(char c);
  void Close(char c);
  void BeforeValue();

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace umap::tools

#endif  // UMAP_TOOLS_JSON_WRITER_H_
