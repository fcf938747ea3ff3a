// StatsSegment: the small per-runtime shared-memory file that umap-stat reads
// (docs/operations.md, "Watching a running job").
//
// File: /dev/shm/umap-stat.<pid>.<n>, one per runtime of process <pid> (n = 0, 1, ...),
// created with O_EXCL and mode 0600, so only its owner (and root) can read it. readers
// check owner, mode, magic, version, pid and the process's start time before trusting it.
// Segments left by processes that died (SIGKILL) are removed by the next runtime this user
// creates, and ignored by umap-stat.
//
// Layout: StatsLayout below, host byte order, fixed-size fields only, versioned
// (kStatsVersion: bump it on any change). Consistency: a sequence number (seqlock) is odd
// while the publisher writes; a reader copies the whole layout and retries unless it saw
// the same even number before and after.
//
// Thread safety: one writer (the runtime's StatsPublisher); any number of readers in other
// processes.
#ifndef UMAP_RUNTIME_STATS_STATS_SEGMENT_H_
#define UMAP_RUNTIME_STATS_STATS_SEGMENT_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "absl/status/statusor.h"

namespace umap::runtime {

inline constexpr char kStatsMagic[8] = {'U', 'M', 'A', 'P', 'S', 'T', 'A', 'T'};
inline constexpr uint32_t kStatsVersion = 2;
inline constexpr int kStatsMaxMappings = 256;  // more are counted, not listed
inline constexpr int kStatsPathBytes = 256;    // longer paths keep their last bytes
inline constexpr int kStatsSizeBuckets = 12;   // as umap_stats.io_size_hist

enum StatsState : uint32_t { kStatsRunning = 1, kStatsClosed = 2 };
enum StatsIoKind : uint32_t { kStatsIoNone = 0, kStatsIoRead = 1, kStatsIoWrite = 2 };
inline constexpr uint32_t kStatsInlineRead = 0xffffffffu;

// The oldest I/O request of one kind still in flight.
struct StatsRequest {
  uint32_t kind;               // StatsIoKind; kStatsIoNone: nothing in flight
  uint32_t attempt;            // reads: 0 = first try, n = n-th retry after a timeout;
                               // kStatsInlineRead: read by the faulting thread itself
                               // (signal fault mode), which waits without a deadline
  uint64_t offset;             // byte offset in the file
  uint64_t length;             // bytes
  uint64_t age_us;             // time in flight when published
  char path[kStatsPathBytes];  // the file ("" if its mapping went away meanwhile)
};

struct StatsMapping {
  uint32_t writable;
  uint32_t direct_io;  // reads bypass the page cache (O_DIRECT)
  char path[kStatsPathBytes];
  uint64_t length;        // bytes mapped
  uint64_t file_offset;   // file offset of the first byte
  uint64_t faults;        // page faults taken (missing pages)
  uint64_t hits;          // faults served without a new read of the file
  uint64_t misses;        // faults that read the file
  uint64_t first_writes;  // write-protect faults (first write to a clean block)
  uint64_t resident_bytes;
  uint64_t dirty_blocks;
  uint64_t bytes_read;
  uint64_t reads;  // merged reads
  uint64_t prefetched_blocks;
  uint64_t umsyncs;        // umsync calls finished
  uint64_t umsync_age_us;  // the running umsync's age; 0 when none runs
  // Cache sizing (this mapping's part of the cache; 0 when lazy sizing is off).
  uint64_t virtual_bytes;      // its virtual capacity
  uint64_t max_bytes;          // the most it may hold now (its share)
  uint64_t remisses;           // misses of blocks it had before
  uint64_t working_set_bytes;  // 99% of its reuses are within this
  uint64_t sampled_hits;       // accesses to its parked sample blocks
};

struct StatsLayout {
  // Written once, at creation.
  char magic[8];
  uint32_t version;
  uint32_t layout_bytes;  // sizeof(StatsLayout)
  int32_t pid;
  uint32_t runtime_index;        // n in the file name
  uint64_t process_start_ticks;  // field 22 of /proc/<pid>/stat: tells a reused pid apart
  uint64_t created_unix_us;
  // Seqlock: odd while the publisher writes.
  uint64_t seq;
  // Everything below is rewritten every period.
  uint64_t published_unix_us;
  uint64_t published_mono_us;  // CLOCK_MONOTONIC (machine-wide): readers compute staleness
  uint32_t period_ms;
  uint32_t state;        // StatsState
  char fault_mode[8];    // who resolves faults: "signal" (the faulting thread), "handler"
  char uffd_access[24];  // how userfaultfd was reached: "syscall", "/dev/userfaultfd",
                         // "user-mode-only"
  char io_engine[8];     // "uring", "posix"
  char policy[8];        // "atomic", "relaxed"
  char journal_mode[8];  // "data", "intent", "off"
  char journal_dir[kStatsPathBytes];
  uint64_t block_size;
  uint64_t io_timeout_ms;  // deadline of one I/O attempt
  uint64_t io_retries;     // retries after a timeout
  // Cache (all mappings of the runtime together).
  uint64_t cache_bytes_used, cache_bytes_peak, cache_bytes_limit;  // limit: the hard cap
  uint64_t cache_bytes_virtual;  // virtual capacity (0: not known, or lazy sizing off)
  // Cache sizing.
  uint32_t lazy_sizing;          // 1 when the cache sizes itself
  uint32_t board_runtimes;       // runtimes sharing the memory cgroup's room (0: no board)
  uint64_t cache_bytes_capacity; // the capacity now
  uint64_t cache_bytes_ceiling;  // the most it may grow to now
  uint64_t memory_limit_bytes, memory_used_bytes;  // the budget's source (cgroup or machine)
  uint64_t cache_remisses, cache_grows, cache_shrunk_blocks, memory_pressure_events;
  uint64_t sampled_hits;
  char memory_source[kStatsPathBytes];  // where the memory figures come from
  // Counters (umap_stats).
  uint64_t faults_missing, faults_wp, evictions, dirty_evictions, sigbus, io_errors;
  uint64_t io_reads, io_bytes, io_writes, io_write_bytes, io_timeouts, io_retries_done,
      io_read_failures, io_write_timeouts, io_queue_wait_us, prefetched_blocks, umsyncs_shared;
  uint64_t io_size_hist[kStatsSizeBuckets];
  // I/O now.
  uint64_t reads_in_flight, writes_in_flight, fills_queued;
  StatsRequest oldest_read, oldest_write;
  // Journal (all mappings): as of journal_age_us ago (the journal's figures are taken
  // only when its locks are free, so that a stuck journal cannot stall the publisher).
  uint32_t journal_open;   // 0: no journal opened yet (no writable mapping, or journal off)
  uint32_t journal_known;  // 0: never read
  uint64_t journal_age_us;
  uint64_t journal_pending_txns, journal_unapplied_txns, journal_staged_bytes,
      journal_staged_blocks, journal_commits, journal_bytes_written;
  // Mappings.
  uint32_t mappings_total;
  uint32_t mappings_listed;  // entries of mappings[] in use (<= kStatsMaxMappings)
  StatsMapping mappings[kStatsMaxMappings];
};
static_assert(std::is_trivially_copyable_v<StatsLayout> && std::is_standard_layout_v<StatsLayout>);

class StatsSegment {
 public:
  static constexpr const char* kDefaultDir = "/dev/shm";

  // Creates the next free <dir>/umap-stat.<pid>.<n> (0600), after removing this user's
  // segments whose process is gone. Fails with the errno of the file operation.
  static absl::StatusOr<std::unique_ptr<StatsSegment>> Create(const std::string& dir = kDefaultDir);
  // Marks the segment closed and removes the file.
  ~StatsSegment();
  StatsSegment(const StatsSegment&) = delete;
  StatsSegment& operator=(const StatsSegment&) = delete;

  // Writer: Begin() makes the sequence number odd and returns the layout to fill; End()
  // makes it even again. Only one thread writes.
  StatsLayout* Begin();
  void End();

  const std::string& path() const { return path_; }

  // "umap-stat.<pid>." : the names of one process's segments start with it.
  static std::string NamePrefix(pid_t pid);
  // Field 22 of /proc/<pid>/stat, 0 when the process does not exist.
  static uint64_t ProcessStartTicks(pid_t pid);
  // CLOCK_MONOTONIC and CLOCK_REALTIME in microseconds.
  static uint64_t MonotonicMicros();
  static uint64_t UnixMicros();
  // Copies s into a fixed field, keeping its tail when it is too long (paths).
  static void CopyField(char* field, size_t size, const std::string& s);

 private:
  StatsSegment(std::string path, StatsLayout* layout) : path_(std::move(path)), layout_(layout) {}
  static void RemoveStale(const std::string& dir);

  const std::string path_;
  StatsLayout* const layout_;
};

}  // namespace umap::runtime

#endif  // UMAP_RUNTIME_STATS_STATS_SEGMENT_H_
