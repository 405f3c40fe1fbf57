// Serving as every front end uses it, built as the process builds it
// (AssembleServing): its parts, and Infer's one path (drain, tokens, the
// front end's decode error, the engine's answer), each answer recorded once.
#include "server/serving/serving.h"

#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/root/serving_assembly.h"

namespace gemmserve {
namespace {

// Checked, then assembled, as Server::Start does.
absl::StatusOr<std::unique_ptr<Serving>> Start(const ServingOptions& o) {
  if (absl::Status s = CheckServingOptions(o); !s.ok()) return s;
  return AssembleServing(o);
}

// Answers of one code for `model`, as a scrape shows them.
double Answers(Serving& s, const std::string& model, const std::string& code) {
  for (const auto& f : s.metrics().registry().Collect()) {
    if (f.name != "gemmserve_requests_total") continue;
    for (const auto& m : f.metric) {
      bool labels = true;
      for (const auto& l : m.label) {
        labels &= (l.name != "model" || l.value == model) && (l.name != "code" || l.value == code);
      }
      if (labels) return m.counter.value;
    }
  }
  return -1;
}

// A 1x1 FP32 matmul call, its tensors owned here.
struct MatMulCall {
  float a = 2, b = 3;
  Shape shape = {1, 1};
  Serving::InferCall call(std::optional<absl::string_view> authorization = std::nullopt) {
    Serving::InferCall c;
    c.model_name = "matmul";
    c.authorization = authorization;
    InferRequestView view;
    view.model_name = "matmul";
    view.inputs.push_back({"A", "FP32", shape, ContentsKind::kRaw, &a, 4});
    view.inputs.push_back({"B", "FP32", shape, ContentsKind::kRaw, &b, 4});
    c.request = std::move(view);
    return c;
  }
};

// Runs one call to its end; returns the status `done` saw.
absl::Status RunCall(Serving& s, Serving::InferCall call, float* y = nullptr) {
  absl::Notification finished;
  absl::Status seen;
  int calls = 0;
  s.Infer(std::move(call), [&](absl::StatusOr<InferResult> r) {
    ++calls;
    seen = r.status();
    if (r.ok() && y != nullptr) *y = r->outputs.at(0).tensor.data<float>()[0];
    finished.Notify();
    return seen;
  });
  finished.WaitForNotification();
  EXPECT_EQ(calls, 1);
  return seen;
}

TEST(ServingTest, AssemblyBuildsTheEngineWithTheBuiltInModels) {
  auto s = Start(ServingOptions());
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<std::string> names;
  for (const ModelStatus& m : (*s)->engine().States()) {
    EXPECT_EQ(m.state, ModelState::kReady);
    names.push_back(m.name);
  }
  EXPECT_THAT(names, ::testing::ElementsAre("grouped_matmul", "matmul"));
  EXPECT_GE((*s)->engine().options().compute_threads, 1);  // 0 became one per core
}

TEST(ServingTest, OptionsOutOfRangeAreRefused) {
  for (auto set : {+[](ServingOptions& o) { o.engine.max_output_bytes = -1; },
                   +[](ServingOptions& o) { o.engine.max_message_bytes = 0; },
                   +[](ServingOptions& o) { o.engine.max_inflight_bytes = 0; },
                   +[](ServingOptions& o) { o.engine.compute_threads = -2; },
                   +[](ServingOptions& o) { o.shm.max_registered_bytes = -1; },
                   +[](ServingOptions& o) { o.builtin_batching.max_batch_rows = -1; },
                   +[](ServingOptions& o) { o.trace_bounds.max_files = 0; },
                   +[](ServingOptions& o) { o.auth_token_file = "/nonexistent/tokens"; }}) {
    ServingOptions o;
    set(o);
    EXPECT_EQ(Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ServingTest, InferAnswersOnceAndRecordsEveryAnswer) {
  auto s = Start(ServingOptions());
  ASSERT_TRUE(s.ok()) << s.status();
  MatMulCall mm;
  float y = 0;
  EXPECT_TRUE(RunCall(**s, mm.call(), &y).ok());
  EXPECT_EQ(y, 6.0f);
  EXPECT_EQ(Answers(**s, "matmul", "OK"), 1);
  // The front end's own decode error is answered and counted like any other.
  Serving::InferCall bad = mm.call();
  bad.request = absl::InvalidArgumentError("envelope");
  EXPECT_EQ(RunCall(**s, std::move(bad)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Answers(**s, "matmul", "INVALID_ARGUMENT"), 1);
  // A name no model has counts under _unknown.
  Serving::InferCall unknown = mm.call();
  unknown.model_name = "nobody";
  unknown.request->model_name = "nobody";
  EXPECT_EQ(RunCall(**s, std::move(unknown)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Answers(**s, "_unknown", "NOT_FOUND"), 1);
}

TEST(ServingTest, TokensAreCheckedBeforeAnythingElse) {
  const std::string path = ::testing::TempDir() + "/serving_tokens.txt";
  {
    std::ofstream f(path);
    f << "right\n";
  }
  ServingOptions o;
  o.auth_token_file = path;
  auto s = Start(o);
  std::remove(path.c_str());
  ASSERT_TRUE(s.ok()) << s.status();
  MatMulCall mm;
  EXPECT_EQ(RunCall(**s, mm.call()).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(RunCall(**s, mm.call("Bearer wrong")).code(), absl::StatusCode::kUnauthenticated);
  Serving::InferCall bad = mm.call();
  bad.request = absl::InvalidArgumentError("envelope");
  EXPECT_EQ(RunCall(**s, std::move(bad)).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(RunCall(**s, mm.call("Bearer right")).ok());
  EXPECT_TRUE((*s)->Authenticate("Bearer right").ok());
  EXPECT_EQ((*s)->Authenticate(std::nullopt).code(), absl::StatusCode::kUnauthenticated);
}

// Every API method authenticates itself: front ends cannot forget to.
TEST(ServingTest, EveryMethodButHealthNeedsTheToken) {
  const std::string path = ::testing::TempDir() + "/serving_api_tokens.txt";
  {
    std::ofstream f(path);
    f << "right\n";
  }
  ServingOptions o;
  o.auth_token_file = path;
  auto started = Start(o);
  std::remove(path.c_str());
  ASSERT_TRUE(started.ok()) << started.status();
  Serving& s = **started;
  for (const std::optional<absl::string_view> token :
       {std::optional<absl::string_view>(), std::optional<absl::string_view>("Bearer wrong")}) {
    inference::ServerMetadataResponse server;
    EXPECT_TRUE(absl::IsUnauthenticated(s.ServerMetadata(token, &server)));
    inference::ModelMetadataRequest metadata;
    metadata.set_name("matmul");
    inference::ModelMetadataResponse metadata_response;
    EXPECT_TRUE(absl::IsUnauthenticated(s.ModelMetadata(token, metadata, &metadata_response)));
    inference::ModelConfigRequest config;
    config.set_name("matmul");
    inference::ModelConfigResponse config_response;
    EXPECT_TRUE(absl::IsUnauthenticated(s.ModelConfig(token, config, &config_response)));
    inference::ModelStatisticsResponse stats;
    EXPECT_TRUE(absl::IsUnauthenticated(s.ModelStatistics(token, {}, &stats)));
    inference::RepositoryIndexResponse index;
    EXPECT_TRUE(absl::IsUnauthenticated(s.RepositoryIndex(token, {}, &index)));
    inference::SystemSharedMemoryStatusResponse shm;
    EXPECT_TRUE(absl::IsUnauthenticated(s.SystemSharedMemoryStatus(token, {}, &shm)));
    EXPECT_TRUE(absl::IsUnauthenticated(s.SystemSharedMemoryRegister(token, {})));
    EXPECT_TRUE(absl::IsUnauthenticated(s.SystemSharedMemoryUnregister(token, {})));
    inference::LogSettingsResponse log;
    EXPECT_TRUE(absl::IsUnauthenticated(s.LogSettings(token, {}, &log)));
    inference::TraceSettingResponse trace;
    EXPECT_TRUE(absl::IsUnauthenticated(s.TraceSetting(token, {}, &trace)));
    for (bool load : {true, false}) {
      absl::Status seen;
      auto done = [&seen](absl::Status status) { seen = status; };
      if (load) {
        s.RepositoryModelLoad(token, {}, Reservation(), done);
      } else {
        s.RepositoryModelUnload(token, {}, done);
      }
      EXPECT_TRUE(absl::IsUnauthenticated(seen)) << seen;  // refused before it is queued
    }
  }
  inference::ModelReadyRequest ready;
  ready.set_name("matmul");
  inference::ModelReadyResponse ready_response;
  s.ModelReady(ready, &ready_response);
  EXPECT_TRUE(ready_response.ready());
  inference::ServerReadyResponse server_ready;
  s.ServerReady(&server_ready);
  EXPECT_TRUE(server_ready.ready());
  inference::ModelConfigRequest config;
  config.set_name("matmul");
  inference::ModelConfigResponse config_response;
  ASSERT_TRUE(s.ModelConfig("Bearer right", config, &config_response).ok());
  EXPECT_EQ(config_response.config().name(), "matmul");
  EXPECT_EQ(config_response.config().parameters().at("max_batch_rows").string_value(), "4096");
}

// A client that has its answer may unregister the region the answer went to
// at once: the server releases its regions before it answers.
TEST(ServingTest, RegionsAreReleasedBeforeTheAnswerGoes) {
  const std::string key = "/gemmserve-serving-test-" + std::to_string(getpid());
  const int fd = shm_open(key.c_str(), O_CREAT | O_RDWR | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 64), 0);
  close(fd);
  ServingOptions o;
  o.shm.allow_client_shm = true;
  auto started = Start(o);
  ASSERT_TRUE(started.ok()) << started.status();
  Serving& s = **started;
  inference::SystemSharedMemoryRegisterRequest reg;
  reg.set_name("out");
  reg.set_key(key);
  reg.set_byte_size(64);
  ASSERT_TRUE(s.SystemSharedMemoryRegister(std::nullopt, reg).ok());
  MatMulCall mm;
  Serving::InferCall call = mm.call();
  call.request->requested_outputs.push_back("Y");
  call.request->output_shm.push_back({"Y", SharedMemoryRef{"out", 0, 4}});
  absl::Notification finished;
  absl::Status answered, unregistered;
  s.Infer(std::move(call), [&](absl::StatusOr<InferResult> r) {
    answered = r.status();
    // What a client does once it has the answer.
    inference::SystemSharedMemoryUnregisterRequest unreg;
    unreg.set_name("out");
    unregistered = s.SystemSharedMemoryUnregister(std::nullopt, unreg);
    finished.Notify();
    return answered;
  });
  finished.WaitForNotification();
  shm_unlink(key.c_str());
  EXPECT_TRUE(answered.ok()) << answered;
  EXPECT_TRUE(unregistered.ok()) << unregistered;
}

TEST(ServingTest, DrainingRefusesNewCallsAndIsIdleOnceAllAreAnswered) {
  auto s = Start(ServingOptions());
  ASSERT_TRUE(s.ok()) << s.status();
  MatMulCall mm;
  EXPECT_TRUE(RunCall(**s, mm.call()).ok());
  (*s)->StartDraining();
  absl::Status refused = RunCall(**s, mm.call());
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("shutting down"));
  EXPECT_TRUE((*s)->WaitUntilIdle(absl::InfiniteFuture()));
  EXPECT_EQ(Answers(**s, "matmul", "UNAVAILABLE"), 0);  // a refusal at the door is not counted
}

}  // namespace
}  // namespace gemmserve
