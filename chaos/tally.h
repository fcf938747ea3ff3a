// Tally: the counts one umap-chaos run reports (docs/chaos.md, "Output"): per
// fault class, per crash point (armed, fired) and per fault draw (armed, fired).
//
// Thread safety: none; owned by one harness. Lanes of a parallel run each keep their own
// and the parent adds them up (Merge), through the text form (Serialize / Parse).
#ifndef UMAP_CHAOS_TALLY_H_
#define UMAP_CHAOS_TALLY_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace chaos {

struct ClassStats {
  uint64_t iterations = 0, fired = 0, recoveries = 0, violations = 0, crashes = 0;
  uint64_t skipped = 0;
  std::string skip_reason;
  uint64_t max_rss_growth_kib = 0, max_rss_kib = 0;
  std::map<int, uint64_t> crash_signals;  // signal -> crashes
  // "3 (SIGBUS 2, SIGABRT 1)"
  std::string CrashText() const;
};

struct ArmedFired {
  uint64_t armed = 0, fired = 0;
};

class Tally {
 public:
  ClassStats& of(const std::string& cls) { return classes_[cls]; }
  const std::map<std::string, ClassStats>& classes() const { return classes_; }

  // A crash point (or a timed kill of umap-recover) armed for one process run, and fired.
  void PointArmed(const std::string& point) { points_[point].armed++; }
  void PointFired(const std::string& point) { points_[point].fired++; }
  const std::map<std::string, ArmedFired>& points() const { return points_; }

  // A kind of fault drawn for one worker run ("class/kind"), and whether it happened.
  void DrawArmed(const std::string& draw) { draws_[draw].armed++; }
  void DrawFired(const std::string& draw) { draws_[draw].fired++; }
  const std::map<std::string, ArmedFired>& draws() const { return draws_; }

  // Adds `other`'s counts to these (maxima for the memory columns).
  void Merge(const Tally& other);
  // One line per count; Parse(Serialize()) equals the tally.
  std::string Serialize() const;
  static absl::StatusOr<Tally> Parse(const std::string& text);

 private:
  std::map<std::string, ClassStats> classes_;
  std::map<std::string, ArmedFired> points_, draws_;
};

}  // namespace chaos

#endif  // UMAP_CHAOS_TALLY_H_
