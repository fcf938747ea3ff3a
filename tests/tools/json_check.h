// A strict little JSON syntax checker for the --json tests (no JSON library in the deps).
#ifndef UMAP_TESTS_TOOLS_JSON_CHECK_H_
#define UMAP_TESTS_TOOLS_JSON_CHECK_H_

#include <cctype>
#include <string>

namespace jsoncheck {

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  // True if s is exactly one JSON value (plus whitespace).
  bool Valid() {
    Ws();
    if (!Value()) return false;
    Ws();
    return i_ == s_.size();
  }

 private:
  void Ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool Lit(const char* w) {
    const std::string x(w);
    if (s_.compare(i_, x.size(), x) != 0) return false;
    i_ += x.size();
    return true;
  }
  bool Value() {
    if (i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{': return Object();
      case '[': return Array();
      case '"': return String();
      case 't': return Lit("true");
      case 'f': return Lit("false");
      case 'n': return Lit("null");
      default: return Number();
    }
  }
  bool Object() {
    ++i_;
    Ws();
    if (i_ < s_.size() && s_[i_] == '}') return ++i_, true;
    for (;;) {
      Ws();
      if (!String()) return false;
      Ws();
      if (i_ >= s_.size() || s_[i_++] != ':') return false;
      Ws();
      if (!Value()) return false;
      Ws();
      if (i_ >= s_.size()) return false;
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      return s_[i_++] == '}';
    }
  }
  bool Array() {
    ++i_;
    Ws();
    if (i_ < s_.size() && s_[i_] == ']') return ++i_, true;
    for (;;) {
      Ws();
      if (!Value()) return false;
      Ws();
      if (i_ >= s_.size()) return false;
      if (s_[i_] == ',') {
        ++i_;
        continue;
      }
      return s_[i_++] == ']';
    }
  }
  bool String() {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    ++i_;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c == '\\') {
        if (i_ >= s_.size()) return false;
        const char e = s_[i_++];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k) {
            if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_++]))) return false;
          }
        } else if (std::string("\"\\/bfnrt").find(e) == std::string::npos) {
          return false;
        }
      }
    }
    return false;
  }
  bool Number() {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              s_[i_] == 'e' || s_[i_] == 'E' || s_[i_] == '+' || s_[i_] == '-')) {
      ++i_;
    }
    return i_ > start;
  }

  const std::string& s_;
  size_t i_ = 0;
};

inline bool IsValidJson(const std::string& s) { return Parser(s).Valid(); }

}  // namespace jsoncheck

#endif  // UMAP_TESTS_TOOLS_JSON_CHECK_H_
