#include "recovery/recoverer.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/posix_error.h"
#include "base/status_macros.h"
#include "recovery/block_classifier.h"
#include "recovery/target_check.h"

namespace umap::recovery {

using journal::Contents;
using journal::MappingInfo;

Recoverer::Recoverer(journal::Journal& journal, const RecoverOptions& options, bool owned)
    : journal_(journal),
      options_(options),
      owned_(owned),
      env_(options.env != nullptr ? options.env : Env::Default()),
      start_(env_->NowMicros()),
      progress_(options, env_, start_) {
  engine_ = options.write_engine;
  if (engine_ == nullptr) {
    WriteEngineOptions wo;
    wo.depth = std::max(1u, options.io_depth);
    wo.max_io_bytes = std::max<uint64_t>(4096, options.io_max_bytes);
    wo.timeout_us = options.io_timeout_ms * 1000;
    own_engine_ = std::make_unique<WriteEngine>(wo, env_);
    engine_ = own_engine_.get();
  }
}

absl::StatusOr<Report> Recoverer::Run(Report report) {
  report.journal_dir = journal_.dir();
  report.mode = options_.mode;
  SelectMappings(&report);
  const uint64_t t0 = env_->NowMicros();
  RETURN_IF_ERROR(ScanHeaders(&report));
  report.timings.scan = env_->NowMicros() - t0;
  ProcessGroups(CheckAndGroup());
  if (options_.mode == Mode::kReplay) ForgetDrained(&report);
  report.timings.read = counters_.read_us.load();
  report.timings.write = counters_.write_us.load();
  report.timings.sync = counters_.sync_us.load();
  report.timings.mark = counters_.mark_us.load();
  report.duration_micros = env_->NowMicros() - start_;
  return report;
}

bool Recoverer::Included(const MappingInfo& m) const {
  const std::vector<uint64_t>& skip = options_.skip_mappings;
  if (std::find(skip.begin(), skip.end(), m.id) != skip.end()) return false;
  if (!options_.only_file.has_value()) return true;
  const FileIdentity& f = *options_.only_file;
  if (f.device == m.file.device && f.inode == m.file.inode && (f.device | f.inode) != 0) {
    return true;
  }
  return !f.path.empty() && f.path == m.file.path;
}

void Recoverer::SelectMappings(Report* report) {
  for (const MappingInfo& m : journal_.Mappings()) {
    if (!Included(m)) continue;
    MappingReport r;
    r.mapping = m;
    r.target_path = m.file.path;
    report->mappings.push_back(std::move(r));
  }
  // report->mappings no longer grows: pointers into it stay valid.
  for (MappingReport& r : report->mappings) work_[r.mapping.id].report = &r;
}

absl::Status Recoverer::ScanHeaders(Report* report) {
  const uint64_t pending = journal_.PendingLsns().size();
  report->pending_txns = pending;
  std::unique_ptr<journal::PendingReader> reader =
      journal_.NewPendingReader(journal::PendingReaderOptions());
  uint64_t done = 0;
  absl::Status s = reader->ForEachHeader([&](const journal::TxnHeader& h) {
    progress_.Update(Progress::Phase::kScan, std::min(done++, pending), pending, "");
    if (MappingWork* w = WorkOf(h.mapping_id)) AddHeader(w, h);  // else filtered out
    return absl::OkStatus();
  });
  if (absl::IsDataLoss(s)) {
    return absl::DataLossError(absl::StrCat(
        s.message(), "; nothing was written. The journal is damaged beyond its tolerated "
                     "tail: keep a copy of it and of the files for analysis"));
  }
  RETURN_IF_ERROR(s);
  progress_.Update(Progress::Phase::kScan, std::min(done, pending), pending, "",
                   /*force=*/true);
  return absl::OkStatus();
}

void Recoverer::AddHeader(MappingWork* w, const journal::TxnHeader& h) {
  MappingReport& r = *w->report;
  const MappingInfo& m = r.mapping;
  uint64_t bytes = 0;
  for (const journal::TxnBlock& b : h.blocks) {
    bytes += b.length;
    const uint64_t offset = b.block * m.block_size;
    const bool overflow = b.block != 0 && offset / b.block != m.block_size;
    if (!w->bad_txn && (b.length == 0 || b.length > m.block_size || overflow ||
                        offset + b.length > m.file.size)) {
      w->bad_txn = true;
      Refuse(w, Problem::kBadTransaction,
             absl::DataLossError(absl::StrCat(
                 "mapping ", m.id, ": transaction LSN ", h.lsn, " writes block ", b.block,
                 " (offset ", offset, ", ", b.length, " bytes) outside the journaled file ",
                 m.file.path, " of ", m.file.size, " bytes (block size ", m.block_size,
                 "); nothing written for this file")));
    }
  }
  w->plan.Add(h.lsn, 0, m.block_size, h.contents, h.blocks);
  if (r.first_lsn == 0) r.first_lsn = h.lsn;
  r.last_lsn = h.lsn;
  ++r.txns_pending;
  r.blocks_pending += h.blocks.size();
  r.bytes_pending += bytes;
}

std::vector<std::unique_ptr<FileGroup>> Recoverer::CheckAndGroup() {
  // Check each mapping with work, then group mappings by the file found at their target.
  std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<FileGroup>> by_file;
  for (auto& [id, w] : work_) {
    if (w.report->txns_pending == 0) continue;
    CheckTarget(&w, options_, env_);
    if (!w.stat_ok) continue;
    std::unique_ptr<FileGroup>& g = by_file[{w.found.device, w.found.inode}];
    if (g == nullptr) {
      g = std::make_unique<FileGroup>();
      g->path = w.report->target_path;
    }
    g->members.push_back(&w);
  }
  std::vector<std::unique_ptr<FileGroup>> out;
  for (auto& [file, g] : by_file) {
    if (!RefuseTogether(g.get())) out.push_back(std::move(g));
  }
  // The plans' rounds are cut to the buffers the replay will have.
  batch_bytes_ = BatchBytes(out.size());
  for (std::unique_ptr<FileGroup>& g : out) PlanGroup(g.get());
  return out;
}

size_t Recoverer::BatchBytes(size_t groups) const {
  const size_t workers = std::clamp<size_t>(options_.parallel_files, 1, std::max<size_t>(1, groups));
  const size_t buffers = std::max<size_t>(1, options_.read_threads) + 1;
  size_t bytes = std::max<uint64_t>(1 << 20, options_.buffer_bytes / (buffers * workers));
  if (options_.checkpoint_bytes != 0) {
    // A checkpoint falls between two buffers: no buffer is larger than the interval (the
    // prefetcher still makes room for its largest image).
    bytes = std::min<uint64_t>(bytes, options_.checkpoint_bytes);
  }
  return bytes;
}

bool Recoverer::RefuseTogether(FileGroup* g) {
  // Replaying the other mappings of a file with a refused one could apply their
  // transactions out of order with the refused one's.
  const MappingWork* refused = nullptr;
  for (const MappingWork* w : g->members) {
    if (w->report->state == MappingState::kRefused) refused = w;
  }
  if (refused == nullptr) return false;
  for (MappingWork* w : g->members) {
    if (w == refused) continue;
    Refuse(w, refused->report->problem,
           Reword(refused->report->status,
                        absl::StrCat("another mapping of the same file was refused: ",
                                     refused->report->status.message())));
  }
  return true;
}

void Recoverer::PlanGroup(FileGroup* g) {
  std::vector<ReplayPlan> parts;
  parts.reserve(g->members.size());
  for (MappingWork* w : g->members) parts.push_back(std::move(w->plan));
  g->plan = ReplayPlan::Merge(std::move(parts));
  const std::vector<PlanTxn>& txns = g->plan.txns();
  const bool intent = std::any_of(txns.begin(), txns.end(), [](const PlanTxn& t) {
    return t.contents == Contents::kIntent;
  });
  g->plan.Finish(/*keep_versions=*/intent || options_.mode == Mode::kVerify, batch_bytes_);
  for (const PlanTxn& t : txns) {
    if (t.contents != Contents::kData) continue;
    MappingReport& r = *g->members[t.member]->report;
    for (uint64_t e = t.first_entry; e < t.first_entry + t.entries; ++e) {
      if (!g->plan.newest(e)) continue;
      ++r.blocks_to_write;
      r.bytes_to_write += g->plan.entries()[e].length;
      g->bytes_to_write += g->plan.entries()[e].length;
    }
  }
  replay_total_ += g->bytes_to_write;
}

void Recoverer::ProcessGroups(const std::vector<std::unique_ptr<FileGroup>>& groups) {
  if (groups.empty()) return;
  const size_t workers = std::clamp<size_t>(options_.parallel_files, 1, groups.size());
  const Progress::Phase phase =
      options_.mode == Mode::kReplay ? Progress::Phase::kReplay : Progress::Phase::kCheck;
  const std::string path =
      groups.size() == 1 ? groups.front()->path : absl::StrCat(groups.size(), " files");
  auto report_progress = [&](bool force) {
    progress_.Update(counters_.syncing.load() > 0 ? Progress::Phase::kSync : phase,
                     counters_.bytes_done.load(), replay_total_, path, force);
  };
  std::atomic<size_t> next{0};
  absl::Mutex mu;
  size_t running = workers;
  std::vector<std::thread> threads;
  for (size_t k = 0; k < workers; ++k) {
    threads.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < groups.size();) ProcessGroup(groups[i].get());
      absl::MutexLock l(&mu);
      --running;
    });
  }
  // This thread reports progress (the callback runs on the caller's thread) until the
  // files are done.
  report_progress(/*force=*/true);
  while (true) {
    {
      absl::MutexLock l(&mu);
      if (mu.AwaitWithTimeout(absl::Condition(+[](size_t* n) { return *n == 0; }, &running),
                              absl::Microseconds(options_.progress_interval_micros))) {
        break;
      }
    }
    report_progress(/*force=*/false);
  }
  for (std::thread& t : threads) t.join();
  report_progress(/*force=*/true);
}

void Recoverer::ProcessGroup(FileGroup* g) {
  const uint64_t t0 = env_->NowMicros();
  // Every member passed its own checks (else the group was refused before this).
  if (OpenTarget(g, options_.mode, env_).ok() && Classify(g)) {
    FileReplay::Context c;
    c.journal = &journal_;
    c.engine = engine_;
    c.env = env_;
    c.options = &options_;
    c.batch_bytes = batch_bytes_;
    c.counters = &counters_;
    if (FileReplay(c, g).Run().ok()) {  // else the members' reports carry the error
      const MappingState done = options_.mode == Mode::kReplay   ? MappingState::kReplayed
                                : options_.mode == Mode::kDryRun ? MappingState::kWouldReplay
                                                                 : MappingState::kVerified;
      for (MappingWork* w : g->members) w->report->state = done;
    }
  }
  g->file.reset();
  const uint64_t us = env_->NowMicros() - t0;
  for (MappingWork* w : g->members) w->report->duration_micros += us;
}

bool Recoverer::Classify(FileGroup* g) {
  const bool all = options_.mode == Mode::kVerify;
  const std::vector<PlanTxn>& txns = g->plan.txns();
  const bool intent = std::any_of(txns.begin(), txns.end(), [](const PlanTxn& t) {
    return t.contents == Contents::kIntent;
  });
  if (!all && !intent) return true;
  absl::Status s = ClassifyBlocks(g, all, options_.max_findings);
  g->plan.DropVersions();
  if (!s.ok()) {
    FailGroup(g, Problem::kIo,
              Reword(s, absl::StrCat("read ", g->path, ": ", s.message(),
                                                  "; nothing written; safe to rerun")));
    return false;
  }
  return true;
}

void Recoverer::ForgetDrained(Report* report) {
  // Forget the mappings that have nothing pending any more. This also drops their
  // uncommitted staged blocks.
  for (MappingReport& r : report->mappings) {
    if (r.state != MappingState::kClean && r.state != MappingState::kReplayed) continue;
    const uint64_t staged_before = journal_.stats().staged_blocks;
    absl::Status s = journal_.UnregisterMapping(r.mapping.id);
    if (s.ok()) {
      r.unregistered = true;
      if (owned_) r.staged_discarded = staged_before - journal_.stats().staged_blocks;
    } else if (!absl::IsFailedPrecondition(s) || !journal_.poisoned().ok()) {
      if (report->journal_status.ok()) report->journal_status = s;
    } else {
      // Still pending (kept by the deletion rule): harmless; the next run forgets it.
      UMAP_LOG(kInfo, "mapping ", r.mapping.id, " kept: ", s.message());
    }
  }
}

}  // namespace umap::recovery
