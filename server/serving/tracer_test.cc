#include "server/serving/tracer.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gemmserve {
namespace {

using ::testing::HasSubstr;

class TracerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/gemmserve-tracer-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    file_ = dir_ + "/trace.json";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  std::unique_ptr<Tracer> Make(TraceSettings initial = {false, 1000, -1, 0}) {
    auto tracer = Tracer::Create(file_, initial);
    EXPECT_TRUE(tracer.ok()) << tracer.status();
    return tracer.ok() ? *std::move(tracer) : nullptr;
  }

  static absl::Status Set(Tracer& t, const std::string& model,
                          std::vector<std::pair<std::string, std::vector<std::string>>> settings,
                          inference::TraceSettingResponse* response = nullptr) {
    inference::TraceSettingRequest request;
    request.set_model_name(model);
    for (auto& [key, values] : settings) {
      auto& v = (*request.mutable_settings())[key];
      for (const std::string& value : values) v.add_value(value);
    }
    inference::TraceSettingResponse ignored;
    return t.Update(request, /*model_exists=*/model != "missing",
                    response != nullptr ? response : &ignored);
  }

  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  static bool IsLink(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
  }

  // The names in the test's directory that start with "trace.json.".
  std::vector<std::string> NumberedFiles() const {
    std::vector<std::string> names;
    DIR* dir = ::opendir(dir_.c_str());
    while (const dirent* entry = dir != nullptr ? ::readdir(dir) : nullptr) {
      if (std::string(entry->d_name).rfind("trace.json.", 0) == 0) names.push_back(entry->d_name);
    }
    if (dir != nullptr) ::closedir(dir);
    std::sort(names.begin(), names.end());
    return names;
  }

  std::string dir_, file_;
};

TEST_F(TracerTest, NothingIsSampledWhileOff) {
  auto t = Make();
  for (int i = 0; i < 5000; ++i) EXPECT_EQ(t->Sample("matmul"), 0u);
}

TEST_F(TracerTest, EveryRateThRequestUntilTheCountIsSpent) {
  auto t = Make();
  inference::TraceSettingResponse r;
  ASSERT_TRUE(Set(*t, "", {{"trace_level", {"TIMESTAMPS"}}, {"trace_rate", {"3"}},
                           {"trace_count", {"2"}}}, &r).ok());
  EXPECT_EQ(r.settings().at("trace_level").value(0), "TIMESTAMPS");
  EXPECT_EQ(r.settings().at("trace_file").value(0), file_);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(t->Sample("matmul"));
  EXPECT_EQ(ids, (std::vector<uint64_t>{0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0}));
  ASSERT_TRUE(Set(*t, "", {}, &r).ok());
  EXPECT_EQ(r.settings().at("trace_count").value(0), "0");  // what is left
}

TEST_F(TracerTest, AModelsOwnSettingsWinAndClearingFallsBack) {
  auto t = Make();
  ASSERT_TRUE(Set(*t, "grouped", {{"trace_level", {"TIMESTAMPS"}}, {"trace_rate", {"1"}}}).ok());
  EXPECT_NE(t->Sample("grouped"), 0u);
  EXPECT_EQ(t->Sample("matmul"), 0u);  // the global scope is still off
  inference::TraceSettingResponse r;
  ASSERT_TRUE(Set(*t, "grouped", {{"trace_level", {}}}, &r).ok());  // cleared: global's OFF
  EXPECT_EQ(r.settings().at("trace_level").value(0), "OFF");
  EXPECT_EQ(r.settings().at("trace_rate").value(0), "1");  // still its own
  EXPECT_EQ(t->Sample("grouped"), 0u);
  ASSERT_TRUE(Set(*t, "", {{"trace_rate", {"50"}}}).ok());
  ASSERT_TRUE(Set(*t, "grouped", {{"trace_rate", {}}}, &r).ok());
  EXPECT_EQ(r.settings().at("trace_rate").value(0), "50");
}

TEST_F(TracerTest, BadSettingsChangeNothing) {
  auto t = Make();
  const std::vector<std::pair<std::vector<std::pair<std::string, std::vector<std::string>>>,
                              std::string>>
      cases = {
          {{{"trace_level", {"TENSORS"}}}, "not served"},
          {{{"trace_rate", {"0"}}}, "at least 1"},
          {{{"trace_rate", {"x"}}}, "one integer"},
          {{{"trace_rate", {"1", "2"}}}, "one integer"},
          {{{"trace_count", {"-2"}}}, "-1"},
          {{{"log_frequency", {"-1"}}}, "negative"},
          {{{"trace_file", {"/tmp/elsewhere"}}}, "--trace_file"},
          {{{"trace_mode", {"opentelemetry"}}}, "triton"},
          {{{"trace_levels", {"OFF"}}}, "unknown trace setting"},
          // One bad key among good ones: none of them applies.
          {{{"trace_level", {"TIMESTAMPS"}}, {"trace_rate", {"0"}}}, "at least 1"},
      };
  for (const auto& [settings, message] : cases) {
    absl::Status s = Set(*t, "", settings);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  }
  EXPECT_EQ(Set(*t, "missing", {{"trace_rate", {"1"}}}).code(), absl::StatusCode::kNotFound);
  inference::TraceSettingResponse r;
  ASSERT_TRUE(Set(*t, "", {{"trace_file", {file_}}}, &r).ok());  // as it is: fine
  EXPECT_EQ(r.settings().at("trace_level").value(0), "OFF");
  EXPECT_EQ(r.settings().at("trace_rate").value(0), "1000");
  EXPECT_EQ(t->Sample("matmul"), 0u);
}

TEST_F(TracerTest, WithoutAFileTracingCannotBeTurnedOn) {
  auto t = Tracer::Create("", {false, 1, -1, 0});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(Set(**t, "", {{"trace_level", {"TIMESTAMPS"}}}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Tracer::Create("", {true, 1, -1, 0}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

RequestTrace Computed(uint64_t id) {
  RequestTrace t;
  t.id = id;
  t.model_name = "matmul";
  t.model_version = "1";
  t.request_start = absl::FromUnixNanos(1000);
  t.queue_start = absl::FromUnixNanos(2000);
  t.compute_start = absl::FromUnixNanos(3000);
  t.compute_end = absl::FromUnixNanos(4000);
  t.request_end = absl::FromUnixNanos(5000);
  t.batch_rows = 12;
  t.computed = true;
  return t;
}

TEST_F(TracerTest, TraceJsonIsTritonsWithOurTwoFields) {
  RequestTrace t = Computed(7);
  t.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  EXPECT_EQ(Tracer::TraceJson(t),
            "{\"id\":7,\"model_name\":\"matmul\",\"model_version\":1,\"batch_size\":12,"
            "\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\","
            "\"timestamps\":[{\"name\":\"REQUEST_START\",\"ns\":1000},"
            "{\"name\":\"QUEUE_START\",\"ns\":2000},{\"name\":\"COMPUTE_START\",\"ns\":3000},"
            "{\"name\":\"COMPUTE_INPUT_END\",\"ns\":3000},"
            "{\"name\":\"COMPUTE_OUTPUT_START\",\"ns\":4000},"
            "{\"name\":\"COMPUTE_END\",\"ns\":4000},{\"name\":\"REQUEST_END\",\"ns\":5000}]}");
  RequestTrace refused;
  refused.id = 8;
  refused.model_name = "no\"such";
  EXPECT_THAT(Tracer::TraceJson(refused), HasSubstr("\"model_name\":\"no\\\"such\""));
  EXPECT_THAT(Tracer::TraceJson(refused), ::testing::Not(HasSubstr("COMPUTE")));
  refused.model_name = std::string("a\\b\n\xff", 5);
  EXPECT_THAT(Tracer::TraceJson(refused), HasSubstr("\"model_name\":\"a\\\\b\\u000a\\u00ff\""));
}

TEST_F(TracerTest, TraceparentMustBeW3cs) {
  EXPECT_TRUE(Tracer::ValidTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
  for (const char* bad : {"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0",
                          "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                          "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
                          "00-0af7651916cd43dd8448eb211c80319c\"b7ad6b7169203331-01"}) {
    EXPECT_FALSE(Tracer::ValidTraceparent(bad)) << bad;
  }
}

TEST_F(TracerTest, LogFrequencyRotatesFilesAsTritonNamesThem) {
  auto t = Make({true, 1, -1, 2});
  for (uint64_t id = 1; id <= 5; ++id) t->Record(Computed(id));
  t->Flush();  // the fifth, alone, into the third file
  const std::string first = Read(file_ + ".0");
  EXPECT_EQ(std::count(first.begin(), first.end(), '{'), 2 * 8);  // two traces of 8 objects
  EXPECT_THAT(Read(file_ + ".1"), HasSubstr("\"id\":4"));
  EXPECT_THAT(Read(file_ + ".2"), HasSubstr("\"id\":5"));
  EXPECT_EQ(Read(file_ + ".2").front(), '[');
  EXPECT_EQ(access(file_.c_str(), F_OK), -1);  // no un-numbered file with a frequency
}

TEST_F(TracerTest, FrequencyZeroWritesOneFileWithEveryTrace) {
  {
    auto t = Make({true, 1, -1, 0});
    t->Record(Computed(1));
    t->Flush();
    t->Record(Computed(2));
  }  // the destructor writes what was collected
  const std::string text = Read(file_);
  EXPECT_THAT(text, HasSubstr("\"id\":1"));
  EXPECT_THAT(text, HasSubstr("\"id\":2"));
  EXPECT_EQ(text.substr(text.size() - 2), "]\n");
}

TEST_F(TracerTest, ChangingLogFrequencyWritesWhatWasCollectedFirst) {
  auto t = Make({true, 1, -1, 0});
  t->Record(Computed(1));
  ASSERT_TRUE(Set(*t, "", {{"log_frequency", {"1"}}}).ok());  // trace 1 to FILE.0
  t->Record(Computed(2));                                      // FILE.1
  ASSERT_TRUE(Set(*t, "", {{"log_frequency", {"0"}}}).ok());
  t->Record(Computed(3));
  t->Flush();
  EXPECT_THAT(Read(file_ + ".0"), HasSubstr("\"id\":1"));
  EXPECT_THAT(Read(file_ + ".1"), HasSubstr("\"id\":2"));
  EXPECT_EQ(Read(file_).find("\"id\":1,"), std::string::npos);
  EXPECT_THAT(Read(file_), HasSubstr("\"id\":3"));
  for (uint64_t id = 4; id < 4 + 1000; ++id) t->Record(Computed(id));  // room freed each time
  t->Flush();
  const std::string all = Read(file_);
  EXPECT_THAT(all, HasSubstr("\"id\":1003"));
}

// Issue 50, finding 4: a name someone else put where the next trace file
// goes (a symbolic link, a hard link to another file) is left as it is, and
// what it leads to is never written; the traces take the next free name.
TEST_F(TracerTest, ALinkAtTheNextFilesNameIsLeftAndItsTargetKept) {
  const std::string target = dir_ + "/precious";
  Write(target, "precious\n");
  ASSERT_EQ(::symlink(target.c_str(), (file_ + ".0").c_str()), 0);
  ASSERT_EQ(::link(target.c_str(), (file_ + ".1").c_str()), 0);
  {
    auto t = Make({true, 1, -1, 1});
    t->Record(Computed(1));
    t->Flush();
  }
  EXPECT_EQ(Read(target), "precious\n");
  EXPECT_TRUE(IsLink(file_ + ".0"));
  EXPECT_THAT(Read(file_ + ".2"), HasSubstr("\"id\":1"));
}

TEST_F(TracerTest, ALinkAtTheFileOfFrequencyZeroIsLeftAndItsTargetKept) {
  const std::string target = dir_ + "/precious";
  Write(target, "precious\n");
  ASSERT_EQ(::symlink(target.c_str(), file_.c_str()), 0);
  {
    auto t = Make({true, 1, -1, 0});
    t->Record(Computed(1));
  }  // the destructor writes what was collected: not through the link
  EXPECT_EQ(Read(target), "precious\n");
  EXPECT_TRUE(IsLink(file_));
}

// A trace file of an earlier run (a regular file of the server's user, with
// no other name) is replaced, as Triton replaces it.
TEST_F(TracerTest, AnEarlierRunsTraceFilesAreReplaced) {
  Write(file_ + ".0", "an earlier run's traces");
  Write(file_, "an earlier run's traces");
  {
    auto t = Make({true, 1, -1, 1});
    t->Record(Computed(1));
  }
  {
    auto t = Make({true, 1, -1, 0});
    t->Record(Computed(2));
  }
  EXPECT_THAT(Read(file_ + ".0"), HasSubstr("\"id\":1"));
  EXPECT_THAT(Read(file_), HasSubstr("\"id\":2"));
  EXPECT_EQ(Read(file_).find("earlier"), std::string::npos);
}

TEST_F(TracerTest, TheDefaultBoundKeepsTheNewestSixteenFiles) {
  const int kept = 16;
  ASSERT_EQ(TraceFileBounds().max_files, kept);
  auto t = Make({true, 1, -1, 1});
  for (uint64_t id = 1; id <= 40; ++id) t->Record(Computed(id));
  t->Flush();
  std::vector<std::string> expected;
  for (int k = 40 - kept; k < 40; ++k) expected.push_back("trace.json." + std::to_string(k));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(NumberedFiles(), expected);
}

// A file of 64 KiB holds some 150 of Computed's traces (of ids 1000 to 1999,
// all as long).
TEST_F(TracerTest, FilesAndBytesStayWithinTheBoundsTheOldestRemoved) {
  const int64_t one = static_cast<int64_t>(Tracer::TraceJson(Computed(1000)).size()) + 2;
  const int64_t bytes = kMinTraceFileBytes;
  {
    auto t = Tracer::Create(file_, {true, 1, -1, 1000}, {3, 3 * bytes});
    ASSERT_TRUE(t.ok()) << t.status();
    for (uint64_t id = 1000; id < 2000; ++id) (*t)->Record(Computed(id));  // cut at `bytes`
  }
  // 1000 traces, at most (bytes - 1) / one a file ("[" and each with ",\n"):
  // the newest three files are kept.
  const int64_t per_file = (bytes - 1) / one;
  const int64_t files = (1000 + per_file - 1) / per_file;
  EXPECT_EQ(NumberedFiles().size(), 3u);
  int64_t total = 0;
  for (int64_t k = files - 3; k < files; ++k) {
    const std::string text = Read(file_ + "." + std::to_string(k));
    EXPECT_LE(static_cast<int64_t>(text.size()), bytes);
    EXPECT_EQ(text.front(), '[');
    total += static_cast<int64_t>(text.size());
  }
  EXPECT_LE(total, 3 * bytes);
  EXPECT_THAT(Read(file_ + "." + std::to_string(files - 1)), HasSubstr("\"id\":1999"));
  EXPECT_EQ(access((file_ + "." + std::to_string(files - 4)).c_str(), F_OK), -1);
}

TEST_F(TracerTest, TheFileOfFrequencyZeroIsCutAtItsBoundAndCounted) {
  const int64_t bytes = kMinTraceFileBytes;
  {
    auto t = Tracer::Create(file_, {true, 1, -1, 0}, {2, 2 * bytes});
    ASSERT_TRUE(t.ok()) << t.status();
    // What is left after the last cut goes to FILE at the end.
    for (uint64_t id = 1000; id < 2000; ++id) (*t)->Record(Computed(id));
  }
  EXPECT_EQ(NumberedFiles().size(), 1u);  // FILE counts as one of the two
  EXPECT_THAT(Read(file_), HasSubstr("\"id\":1999"));
  EXPECT_LE(static_cast<int64_t>(Read(file_).size()), bytes);
}

TEST_F(TracerTest, OnlyTheFilesItWroteAreRemoved) {
  auto t = Tracer::Create(file_, {true, 1, -1, 1}, {2, 2 * kMinTraceFileBytes});
  ASSERT_TRUE(t.ok()) << t.status();
  (*t)->Record(Computed(1));
  (*t)->Flush();
  // Someone replaces FILE.0 with a file of their own (a new file, though it
  // may reuse the inode number).
  ASSERT_EQ(::unlink((file_ + ".0").c_str()), 0);
  Write(file_ + ".0", "someone else's");
  for (uint64_t id = 2; id <= 4; ++id) (*t)->Record(Computed(id));
  (*t)->Flush();
  EXPECT_EQ(Read(file_ + ".0"), "someone else's");
  EXPECT_EQ(NumberedFiles(),
            (std::vector<std::string>{"trace.json.0", "trace.json.2", "trace.json.3"}));
}

TEST_F(TracerTest, BoundsOutOfRangeAreRefusedAtStart) {
  for (const TraceFileBounds& bounds :
       {TraceFileBounds{0, kMinTraceFileBytes}, TraceFileBounds{-1, kMinTraceFileBytes},
        TraceFileBounds{kMaxTraceFiles + 1, int64_t{1} << 62},
        TraceFileBounds{2, 2 * kMinTraceFileBytes - 1}, TraceFileBounds{1, 0}}) {
    absl::Status s = Tracer::Create(file_, {false, 1, -1, 0}, bounds).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bounds.max_files;
    EXPECT_THAT(std::string(s.message()), HasSubstr("--trace_max_"));
  }
  EXPECT_TRUE(Tracer::Create(file_, {false, 1, -1, 0}, {1, kMinTraceFileBytes}).ok());
  EXPECT_EQ(Tracer::Create(dir_ + "/none/trace.json", {false, 1, -1, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gemmserve
