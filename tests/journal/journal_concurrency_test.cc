// Concurrent use of one Journal, and the group-commit measurement.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "journal/journal.h"
#include "tests/journal/journal_test_util.h"

namespace umap::journal {
namespace {

using ::testing::IsEmpty;

// 8 threads commit at once on one mapping: each its own blocks, one block shared by all, and
// a staged block taken by a range commit. Every LSN is distinct and every transaction reads
// back exactly as Commit returned it; then all are applied concurrently in random order.
TEST(JournalConcurrency, EightThreadsCommitConcurrently) {
  JournalFixture fx;
  fx.OpenJournal();
  ASSERT_NE(fx.journal_, nullptr);
  const uint64_t m = fx.AddMapping();
  constexpr int kThreads = 8, kCommits = 60;
  constexpr uint64_t kShared = 1000000;

  absl::Mutex mu;
  std::vector<Transaction> all;  // guarded by mu
  std::atomic<int> failures{0};
  auto worker = [&](int t) {
    std::vector<Transaction> mine;
    for (int i = 0; i < kCommits; ++i) {
      const uint64_t own = static_cast<uint64_t>(t) * 1000 + static_cast<uint64_t>(i % 10);
      const uint64_t staged = own + 500;
      const std::string a = Image(static_cast<char>('a' + t), 4096 - i);
      const std::string b = Image(static_cast<char>('A' + t));
      if (!fx.journal_->Stage(m, staged, b).ok()) ++failures;
      std::vector<BlockWrite> writes = {{own, a}};
      if (i % 3 == 0) writes.push_back({kShared, b});
      absl::StatusOr<Transaction> txn = fx.journal_->Commit(m, writes, staged, staged + 1);
      if (!txn.ok() || txn->blocks.size() != writes.size() + 1) {
        ++failures;
        continue;
      }
      mine.push_back(*std::move(txn));
    }
    absl::MutexLock l(&mu);
    for (Transaction& txn : mine) all.push_back(std::move(txn));
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kCommits));

  std::set<uint64_t> lsns;
  for (const Transaction& txn : all) {
    EXPECT_TRUE(lsns.insert(txn.lsn).second) << "LSN " << txn.lsn << " handed out twice";
    absl::StatusOr<Transaction> read = fx.journal_->ReadTransaction(txn.lsn);
    ASSERT_OK(read.status());
    EXPECT_EQ(*read, txn);
  }
  EXPECT_EQ(fx.journal_->PendingLsns(), std::vector<uint64_t>(lsns.begin(), lsns.end()));
  const Journal::Stats st = fx.journal_->stats();
  EXPECT_EQ(st.commits, all.size());
  EXPECT_EQ(st.staged_blocks, 0u);
  std::printf("%llu commits, %llu WAL syncs\n", static_cast<unsigned long long>(st.commits),
              static_cast<unsigned long long>(st.wal_syncs));

  std::shuffle(all.begin(), all.end(), std::mt19937(42));
  threads.clear();
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < all.size(); i += kThreads) {
        if (!fx.journal_->MarkApplied(all[i].lsn).ok()) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_THAT(fx.Pending(), IsEmpty());
  fx.Reopen();
  EXPECT_THAT(fx.Pending(), IsEmpty());
}

}  // namespace
}  // namespace umap::journal
