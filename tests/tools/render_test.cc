// Report rendering of umap-recover: JSON escaping and validity, text lines, exit meanings,
// progress formatting.
#include "tools/render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/tools/json_check.h"
#include "tools/json_writer.h"
#include "tools/progress.h"

namespace umap::tools {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using recovery::BlockClass;
using recovery::MappingReport;
using recovery::MappingState;
using recovery::Report;

TEST(JsonWriterTest, EscapesControlQuotesAndInvalidUtf8) {
  EXPECT_EQ(JsonWriter::Quote("a\"b\\c\n\t"), "\"a\\\"b\\\\c\\n\\t\"");
  EXPECT_EQ(JsonWriter::Quote(std::string("\x01", 1)), "\"\\u0001\"");
  EXPECT_EQ(JsonWriter::Quote("caf\xc3\xa9"), "\"caf\xc3\xa9\"");      // valid UTF-8 kept
  EXPECT_EQ(JsonWriter::Quote("bad\xff\xc3"), "\"bad\\u00ff\\u00c3\"");  // bytes as code points
  EXPECT_EQ(JsonWriter::Quote("\xed\xa0\x80"), "\"\\u00ed\\u00a0\\u0080\"");  // surrogate
}

TEST(JsonWriterTest, WritesNestedContainersWithCommas) {
  JsonWriter w;
  w.BeginObject();
  w.Field("a", uint64_t{1});
  w.Key("b");
  w.BeginArray();
  w.Uint(2);
  w.BeginObject();
  w.EndObject();
  w.Null();
  w.EndArray();
  w.Field("c", true);
  w.EndObject();
  EXPECT_EQ(w.str(), "{\"a\":1,\"b\":[2,{},null],\"c\":true}");
  EXPECT_TRUE(jsoncheck::IsValidJson(w.str()));
}

Report SampleReport() {
  Report r;
  r.journal_dir = "/j";
  r.pending_txns = 3;
  MappingReport m;
  m.mapping.id = 4;
  m.mapping.file = {"/data/f\xff", 1, 2, 65536};
  m.mapping.block_size = 4096;
  m.mapping.contents = journal::Contents::kIntent;
  m.target_path = m.mapping.file.path;
  m.state = MappingState::kReplayed;
  m.txns_pending = 3;
  m.txns_discarded = 3;
  m.first_lsn = 7;
  m.last_lsn = 9;
  m.blocks_verified = 5;
  m.blocks_torn = 1;
  recovery::BlockFinding f;
  f.lsn = 9;
  f.block = 3;
  f.offset = 12288;
  f.length = 4096;
  f.cls = BlockClass::kTorn;
  f.expected_crc = 0xabcdef01;
  f.found_crc = 0x12345678;
  m.findings.push_back(f);
  r.mappings.push_back(m);
  MappingReport refused;
  refused.mapping.id = 5;
  refused.mapping.file.path = "/data/g";
  refused.state = MappingState::kRefused;
  refused.problem = recovery::Problem::kMissingFile;
  refused.status = absl::NotFoundError("mapping 5: the journaled file /data/g is missing");
  r.mappings.push_back(refused);
  return r;
}

TEST(RenderTest, JsonIsValidAndCarriesEveryCounter) {
  const Report r = SampleReport();
  const std::string j = RenderJson(Command::kReplay, r, 2);
  EXPECT_TRUE(jsoncheck::IsValidJson(j)) << j;
  for (const char* key :
       {"\"exit_code\":2", "\"transactions\":{\"pending\":3,\"replayed\":0,\"discarded\":3}",
        "\"torn\":1", "\"verified\":5", "\"written\":0", "\"duration_us\"", "\"state\":\"refused\"",
        "\"problem\":\"missing_file\"", "\"class\":\"torn\"", "\"offset\":12288",
        "\"path\":\"/data/f\\u00ff\"", "\"staged_discarded\"", "\"findings_omitted\":0",
        "\"timings_us\":{\"open\":"}) {
    EXPECT_THAT(j, HasSubstr(key));
  }
  // A status run times nothing: its report is the same from run to run but for duration_us.
  EXPECT_THAT(RenderJson(Command::kStatus, r, 0), Not(HasSubstr("timings_us")));
}

TEST(RenderTest, ErrorJsonIsValid) {
  const std::string j =
      RenderErrorJson(Command::kVerify, "/j", absl::UnavailableError("in use by process 12"), 2);
  EXPECT_TRUE(jsoncheck::IsValidJson(j)) << j;
  EXPECT_THAT(j, HasSubstr("\"code\":\"UNAVAILABLE\""));
  EXPECT_THAT(j, HasSubstr("in use by process 12"));
}

TEST(RenderTest, TextNamesEachMappingStateAndFinding) {
  const std::string t = RenderText(Command::kReplay, SampleReport(), 2);
  EXPECT_THAT(t, HasSubstr("mapping 4 /data/f"));
  EXPECT_THAT(t, HasSubstr("3 transactions intent-only"));
  EXPECT_THAT(t, HasSubstr("torn: block 3 (offset 12288, 4096 bytes) of LSN 9: file crc 12345678, "
                           "journal crc abcdef01; cannot be repaired (intent mode)"));
  EXPECT_THAT(t, HasSubstr("mapping 5 /data/g: REFUSED (missing_file): mapping 5: the journaled"));
  EXPECT_THAT(t, HasSubstr("result: exit 2: refused"));
}

TEST(RenderTest, EveryExitCodeHasAMeaning) {
  Report empty;
  for (Command c : {Command::kReplay, Command::kDryRun, Command::kVerify, Command::kStatus}) {
    for (int code = 0; code <= 3; ++code) {
      EXPECT_NE(ExitMeaning(c, code, &empty), "unexpected exit code");
    }
  }
  EXPECT_EQ(ExitMeaning(Command::kReplay, 0, &empty), "nothing to do");
}

TEST(RenderTest, StatusCommandExitsZeroWhenTheJournalIsReadable) {
  EXPECT_EQ(ExitCodeFor(Command::kStatus, SampleReport()), 0);
  EXPECT_EQ(ExitCodeFor(Command::kReplay, SampleReport()), 2);
}

TEST(HumanBytesTest, Units) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(12 * 1024), "12.0 KiB");
  EXPECT_EQ(HumanBytes(3ull << 30), "3.0 GiB");
}

TEST(ProgressTest, BarAndLineFormats) {
  recovery::Progress p;
  p.phase = recovery::Progress::Phase::kReplay;
  p.done = 512ull << 20;
  p.total = 1ull << 30;
  p.elapsed_micros = 2'000'000;
  p.path = "/data/f";
  ProgressPrinter::Options o;
  o.style = ProgressPrinter::Style::kBar;
  o.width = 10;
  EXPECT_EQ(ProgressPrinter(stderr, o).Format(p),
            "[#####     ] replay  50% 512.0 MiB/1.0 GiB 256.0 MiB/s /data/f 2.0 s");
  o.style = ProgressPrinter::Style::kLines;
  EXPECT_EQ(ProgressPrinter(stderr, o).Format(p),
            "replay  50% 512.0 MiB/1.0 GiB 256.0 MiB/s /data/f 2.0 s");
}

TEST(ProgressTest, TheRateOfThePhaseAndTheTimeLeftWhenTheRunKnowsThem) {
  recovery::Progress p;
  p.phase = recovery::Progress::Phase::kReplay;
  p.done = 512ull << 20;
  p.total = 1ull << 30;
  p.elapsed_micros = 4'000'000;
  p.rate_per_second = 1ull << 30;  // this phase ran at 1 GiB/s: 0.5 s left
  p.eta_micros = 500'000;
  p.path = "/data/f";
  ProgressPrinter::Options o;
  o.style = ProgressPrinter::Style::kLines;
  EXPECT_EQ(ProgressPrinter(stderr, o).Format(p),
            "replay  50% 512.0 MiB/1.0 GiB 1.0 GiB/s /data/f 4.0 s, ETA 0.5 s");
  const std::string json = ProgressPrinter::FormatJson(p);
  EXPECT_TRUE(jsoncheck::IsValidJson(json)) << json;
  EXPECT_EQ(json,
            "{\"progress\":{\"phase\":\"replay\",\"unit\":\"bytes\",\"done\":536870912,"
            "\"total\":1073741824,\"rate_per_second\":1073741824,\"eta_us\":500000,"
            "\"elapsed_us\":4000000,\"path\":\"/data/f\"}}");
}

}  // namespace
}  // namespace umap::tools
