// HttpService against a real Serving (built-in models, no ports): routing,
// status codes and bodies. The sockets are tested through a real server
// process (tests/integration/test_http*.py).
#include "server/http/http_service.h"

#include <cstring>
#include <memory>
#include <string>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/common/allocation.h"
#include "server/root/serving_assembly.h"

namespace gemmserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class HttpServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServingOptions options;
    options.engine.compute_threads = 1;
    ASSERT_TRUE(CheckServingOptions(options).ok());
    auto s = AssembleServing(options);
    ASSERT_TRUE(s.ok()) << s.status();
    serving_ = *std::move(s);
    service_ = std::make_unique<HttpService>(serving_.get());
  }

  HttpReply Call(const std::string& method, const std::string& target, std::string body = "",
                 std::optional<std::string> header_length = std::nullopt) {
    HttpCall call;
    call.method = method;
    call.target = target;
    call.body = std::move(body);
    call.header_length = std::move(header_length);
    absl::Notification done;
    HttpReply out;
    service_->Handle(std::move(call), [&](HttpReply r) {
      out = std::move(r);
      done.Notify();
    });
    done.WaitForNotification();
    return out;
  }

  std::unique_ptr<Serving> serving_;
  std::unique_ptr<HttpService> service_;
};

TEST_F(HttpServiceTest, HealthAndMetadata) {
  EXPECT_EQ(Call("GET", "/v2/health/live").status, 200);
  EXPECT_EQ(Call("GET", "/v2/health/ready").status, 200);
  EXPECT_EQ(Call("GET", "/v2/health/live").body, "");
  HttpReply meta = Call("GET", "/v2");
  EXPECT_EQ(meta.status, 200);
  EXPECT_THAT(meta.body, HasSubstr(R"("name":"gemmserve")"));
  EXPECT_THAT(meta.body, HasSubstr("binary_tensor_data"));
  EXPECT_EQ(Call("GET", "/v2/models/matmul/ready").status, 200);
  EXPECT_EQ(Call("GET", "/v2/models/nope/ready").status, 400);
  HttpReply model = Call("GET", "/v2/models/grouped_matmul");
  EXPECT_EQ(model.status, 200);
  EXPECT_THAT(model.body, HasSubstr(R"("name":"group_indices")"));
  HttpReply config = Call("GET", "/v2/models/grouped_matmul/config");
  EXPECT_THAT(config.body, AllOf(HasSubstr(R"("backend":"gemmserve")"), HasSubstr(R"("max_batch_size":0,)"),
                                 HasSubstr(R"("dims":[-1,-1,-1])")));
  EXPECT_THAT(config.body, HasSubstr(R"("dynamic_batching":{)"));
  EXPECT_THAT(Call("GET", "/v2/models/stats").body, HasSubstr(R"("model_stats":[)"));
  EXPECT_EQ(Call("GET", "/v2/models/nope").status, 404);
  EXPECT_EQ(Call("GET", "/v2/models/matmul/versions/9").status, 404);
  EXPECT_EQ(Call("GET", "/v2/nothing/here").status, 404);
  EXPECT_EQ(Call("POST", "/v2/health/live").status, 405);
  EXPECT_EQ(Call("GET", "/v2/models/matmul/infer").status, 405);
  EXPECT_EQ(Call("GET", "/v2/models/bad%zz").status, 400);
  EXPECT_THAT(Call("POST", "/v2/repository/index").body, HasSubstr(R"("name":"matmul")"));
}

TEST_F(HttpServiceTest, DrainingTurnsReadyOffAndRefusesWork) {
  serving_->StartDraining();
  EXPECT_EQ(Call("GET", "/v2/health/ready").status, 400);
  EXPECT_EQ(Call("GET", "/v2/health/live").status, 200);
  HttpReply r = Call("POST", "/v2/models/matmul/infer",
                     R"({"inputs":[{"name":"A","shape":[1,1],"datatype":"FP32","data":[1]},
                                   {"name":"B","shape":[1,1],"datatype":"FP32","data":[1]}]})");
  EXPECT_EQ(r.status, 503);
  EXPECT_THAT(r.body, HasSubstr("shutting down"));
}

TEST_F(HttpServiceTest, InferJsonAndErrors) {
  HttpReply r = Call("POST", "/v2/models/matmul/infer",
                     R"({"id":"x","inputs":[
                        {"name":"A","shape":[2,2],"datatype":"FP32","data":[[1,2],[3,4]]},
                        {"name":"B","shape":[2,1],"datatype":"FP32","data":[1,1]}]})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_THAT(r.body, HasSubstr(R"("data":[3,7])"));
  EXPECT_THAT(r.body, HasSubstr(R"("id":"x")"));
  HttpReply bad =
      Call("POST", "/v2/models/matmul/infer",
           R"({"inputs":[{"name":"A","shape":[2,3],"datatype":"FP32","data":[1,2,3,4,5,6]},
                          {"name":"B","shape":[4,1],"datatype":"FP32","data":[1,1,1,1]}]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_THAT(bad.body, HasSubstr(R"({"error":)"));
  EXPECT_EQ(Call("POST", "/v2/models/nope/infer", R"({"inputs":[]})").status, 404);
  EXPECT_EQ(Call("POST", "/v2/models/matmul/infer", "{").status, 400);
  EXPECT_EQ(Call("POST", "/v2/models/matmul/infer", "{}", "x").status, 400);
}

TEST_F(HttpServiceTest, BinaryInferRequestAndResponse) {
  const std::string header =
      R"({"inputs":[{"name":"A","shape":[1,2],"datatype":"FP32","parameters":{"binary_data_size":8}},
          {"name":"B","shape":[2,1],"datatype":"FP32","parameters":{"binary_data_size":8}}],
          "outputs":[{"name":"Y","parameters":{"binary_data":true}}]})";
  const float a[2] = {2, 3}, b[2] = {4, 5};
  std::string body = header;
  body.append(reinterpret_cast<const char*>(a), 8);
  body.append(reinterpret_cast<const char*>(b), 8);
  HttpReply r = Call("POST", "/v2/models/matmul/infer", body, std::to_string(header.size()));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(r.header_length);
  ASSERT_EQ(r.body.size(), *r.header_length + 4);
  float y;
  std::memcpy(&y, r.body.data() + *r.header_length, 4);
  EXPECT_EQ(y, 23.0f);
}

// RESOURCE_EXHAUSTED is told apart by its mark, never by its text: memory
// the server could not get is 429 (retry), a limit the request passes 413.
TEST(HttpStatusOfTest, OutOfMemoryIsToldByItsMarkNotItsText) {
  EXPECT_EQ(HttpStatusOf(AllocationFailure("the batch")), 429);
  EXPECT_EQ(HttpStatusOf(OutOfMemoryError("any words")), 429);
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("out of memory, says only the text")), 413);
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("over --max_message_bytes")), 413);
  EXPECT_FALSE(IsOutOfMemory(absl::UnavailableError("out of memory")));
}

}  // namespace
}  // namespace gemmserve
