#include "runtime/writeback/write_back.h"

#include <cstring>
#include <string>

#include "base/status_macros.h"
#include "runtime/io/io_manager.h"

namespace umap::runtime {

absl::Status WriteBack::WriteImages(File* file, uint64_t block_size,
                                    absl::Span<const BlockImage> images,
                                    absl::FunctionRef<void()> before_each,
                                    bool one_at_a_time) {
  std::vector<io::WritePiece> pieces;
  pieces.reserve(images.size());
  for (const BlockImage& im : images) {
    pieces.push_back({im.block * block_size, im.data.data(), im.data.size()});
  }
  if (unsynced_bound_ == 0) return WritePieces(file, pieces, before_each, one_at_a_time);
  if (file_failed_.load(std::memory_order_relaxed)) {
    // The client may still hold writes of ours that failed, and only an fdatasync makes it
    // retry them: retry them first, and write more only once the file takes them again.
    // (Writing on instead would fill its window behind them, and then a write waits for
    // good: it can no longer be followed by the fdatasync that would drain the window.)
    RETURN_IF_ERROR(SyncFile(file));
  }
  // In groups that keep the unsynced bytes within the bound, an fdatasync between them.
  size_t first = 0;
  uint64_t group = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const uint64_t before = unsynced_bytes_.load(std::memory_order_relaxed) + group;
    if (before > 0 && before + pieces[i].len > unsynced_bound_) {
      RETURN_IF_ERROR(NoteWrite(WritePieces(
          file, absl::MakeConstSpan(pieces).subspan(first, i - first), before_each,
          one_at_a_time)));
      RETURN_IF_ERROR(SyncFile(file));
      first = i;
      group = 0;
    }
    group += pieces[i].len;
  }
  unsynced_bytes_.fetch_add(group, std::memory_order_relaxed);
  return NoteWrite(
      WritePieces(file, absl::MakeConstSpan(pieces).subspan(first), before_each, one_at_a_time));
}

absl::Status WriteBack::NoteWrite(absl::Status s) {
  if (!s.ok()) file_failed_.store(true, std::memory_order_relaxed);
  return s;
}

absl::Status WriteBack::SyncFile(File* file) {
  unsynced_bytes_.store(0, std::memory_order_relaxed);
  absl::Status s = file->Sync();
  file_failed_.store(!s.ok(), std::memory_order_relaxed);
  return s;
}

absl::Status WriteBack::WritePieces(File* file, absl::Span<const WritePiece> pieces,
                                    absl::FunctionRef<void()> before_each, bool one_at_a_time) {
  if (pieces.empty()) return absl::OkStatus();
  if (io_ != nullptr && !one_at_a_time) {
    auto write = [&](File* f, absl::Span<const WritePiece> p) {
      return io_->Write(f, p, before_each);
    };
    if (direct_ != nullptr && direct_->file() == file) return direct_->Write(pieces, write);
    return write(file, pieces);
  }
  // One write per run of adjacent blocks, copied into one buffer.
  std::string run;
  size_t i = 0;
  while (i < pieces.size()) {
    size_t j = i + 1;
    while (j < pieces.size() && pieces[j].offset == pieces[j - 1].offset + pieces[j - 1].len) ++j;
    before_each();
    size_t bytes = pieces[i].len;
    if (j - i == 1) {
      RETURN_IF_ERROR(file->WriteAt(pieces[i].offset, absl::MakeConstSpan(pieces[i].data, pieces[i].len)));
    } else {
      run.clear();
      for (size_t k = i; k < j; ++k) run.append(pieces[k].data, pieces[k].len);
      bytes = run.size();
      RETURN_IF_ERROR(file->WriteAt(pieces[i].offset, run));
    }
    if (io_ != nullptr) {  // counted with the engine's writes (umap_stats.io_writes)
      io_->writer().counters().writes.fetch_add(1, std::memory_order_relaxed);
      io_->writer().counters().write_bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
    i = j;
  }
  return absl::OkStatus();
}

WriteBackResult DirectWriteBack::Evicted(absl::Span<const BlockImage> images) {
  return {WriteImages(file_, block_size_, images, [] {})};
}

WriteBackResult DirectWriteBack::Sync(absl::Span<const BlockImage> images, uint64_t, uint64_t) {
  absl::Status s = WriteImages(file_, block_size_, images, [] {});
  if (s.ok()) s = SyncFile(file_);
  return {std::move(s)};
}

}  // namespace umap::runtime
