// Requests whose bytes do not decode as the method's message: gRPC's own answer (the premise),
// and INVALID_ARGUMENT naming the message type (the interceptor's for unary methods,
// GenerateStream's own), behind authentication, counted for generation RPCs only, leaving
// decodable refusals and the server alone.
#include "server/undecodable_request.h"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"
#include "server/blossom_service.h"
#include "server/grpc_status.h"
#include "server/status_details.h"
#include "server/testing/in_process_server.h"

namespace blossom {
namespace {

// Not protobuf: field 31's tag with wire type 7, which does not exist.
const std::string kGarbage = "\xff\x01\x02";
// GenerateRequest.text (field 1, length-delimited) holding a byte that is not UTF-8.
const std::string kInvalidUtf8Text = std::string("\x0a\x02\xc3\x28", 4);

// Stands for "half-close without sending a message" in CallRaw.
const std::string kNoMessage = "<no message>";

// Sends `bytes` as the request of `method` (unary or server streaming: the wire is the same) and
// returns the call's status.
grpc::Status CallRaw(const std::string& address, const std::string& method,
                     const std::string& bytes, const std::string& api_key = "") {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
  grpc::CompletionQueue queue;
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  auto call = stub.PrepareCall(&context, method, &queue);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](void* want) {
    EXPECT_TRUE(queue.Next(&tag, &ok));
    EXPECT_EQ(tag, want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(reinterpret_cast<void*>(1));
  if (bytes == kNoMessage) {
    call->WritesDone(reinterpret_cast<void*>(2));
  } else {
    call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  }
  step(reinterpret_cast<void*>(2));
  grpc::ByteBuffer response;
  // Reads until the server ends the stream (a refusal sends no message).
  for (;;) {
    call->Read(&response, reinterpret_cast<void*>(3));
    if (!step(reinterpret_cast<void*>(3))) break;
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  step(reinterpret_cast<void*>(4));
  queue.Shutdown();
  while (queue.Next(&tag, &ok)) {
  }
  return status;
}

// Why the interceptor exists: gRPC's callback handler answers an undecodable request with
// UNIMPLEMENTED and no message, before the service sees it. If a gRPC upgrade changes this, the
// interceptor's rewrite (which only touches that answer) becomes dead code: remove it then.
TEST(UndecodableRequestTest, GrpcAloneAnswersUnimplementedWithNoMessage) {
  BlossomService service(ServiceOptions{}, nullptr);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  const grpc::Status status =
      CallRaw("127.0.0.1:" + std::to_string(port), "/blossom.v1.Blossom/Generate", kGarbage);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(status.error_message(), "");
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

double RequestsWithOutcome(testing::InProcessServer& server, const std::string& outcome) {
  const std::string text = server.registry().Render();
  const std::string series = "blossom_requests_total{model_name=\"bloom-tiny-h4\",outcome=\"" +
                             outcome + "\"} ";
  const size_t at = text.find(series);
  return at == std::string::npos ? 0.0 : std::stod(text.substr(at + series.size()));
}

TEST(UndecodableRequestTest, EveryMethodNamesItsRequestType) {
  testing::InProcessServer server;
  server.Load();
  struct Case {
    std::string method, type, bytes;
  };
  const Case cases[] = {
      {"Generate", "blossom.v1.GenerateRequest", kGarbage},
      {"Generate", "blossom.v1.GenerateRequest", kInvalidUtf8Text},
      {"Generate", "blossom.v1.GenerateRequest", kNoMessage},
      // GenerateStream parses its own bytes (a raw method); the rest through the interceptor.
      {"GenerateStream", "blossom.v1.GenerateStreamRequest", kGarbage},
      {"GenerateStream", "blossom.v1.GenerateStreamRequest", kInvalidUtf8Text},
      {"GenerateStream", "blossom.v1.GenerateStreamRequest", kNoMessage},
      {"BeamSearch", "blossom.v1.BeamSearchRequest", kGarbage},
      {"Tokenize", "blossom.v1.TokenizeRequest", kInvalidUtf8Text},
      {"Detokenize", "blossom.v1.DetokenizeRequest", kGarbage},
      {"GetModelInfo", "blossom.v1.GetModelInfoRequest", kGarbage},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.method);
    const grpc::Status status =
        CallRaw(server.address(), "/blossom.v1.Blossom/" + c.method, c.bytes);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(absl::StrContains(status.error_message(), "does not decode as " + c.type))
        << status.error_message();
    EXPECT_EQ(DetailsOf(FromGrpcStatus(status)).reason, error_reason::kInvalidRequest);
  }
  // The generation RPCs' refusals are counted as the service's own are; the others never are.
  EXPECT_EQ(RequestsWithOutcome(server, "invalid_argument"), 7.0);
  // The server is unharmed: a decodable request is served.
  v1::GenerateRequest request;
  request.set_text("Hello");
  request.mutable_stopping()->set_max_new_tokens(2);
  v1::GenerateResponse response;
  grpc::ClientContext context;
  auto stub = v1::Blossom::NewStub(
      grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials()));
  const grpc::Status served = stub->Generate(&context, request, &response);
  ASSERT_TRUE(served.ok()) << served.error_message();
  EXPECT_EQ(response.final().usage().generated_tokens(), 2);
}

// A request that decodes keeps the service's own answer: the rewrite is only for decode failures.
TEST(UndecodableRequestTest, DecodableRefusalsKeepTheServicesAnswer) {
  testing::InProcessServer server;
  server.Load();
  // An empty message decodes (every field at its default): the service names the missing prompt,
  // on the interceptor's path and on GenerateStream's own (an empty buffer, not a missing one).
  for (const std::string method :
       {"/blossom.v1.Blossom/Generate", "/blossom.v1.Blossom/GenerateStream"}) {
    const grpc::Status status = CallRaw(server.address(), method, "");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
    EXPECT_TRUE(absl::StrContains(status.error_message(), "prompt is missing"))
        << method << ": " << status.error_message();
  }
  // A method that does not exist stays gRPC's UNIMPLEMENTED.
  EXPECT_EQ(CallRaw(server.address(), "/blossom.v1.Blossom/NoSuchMethod", kGarbage).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

// With API keys, a caller without a valid key learns only that: UNAUTHENTICATED, as for any call.
TEST(UndecodableRequestTest, AuthenticationComesFirst) {
  ServiceOptions options;
  options.api_keys = auth::ApiKeys({"secret-key-1"});
  testing::InProcessServer server(options);
  server.Load();
  // The stream's own parse and the unary interceptor alike.
  for (const std::string method :
       {"/blossom.v1.Blossom/GenerateStream", "/blossom.v1.Blossom/Generate"}) {
    SCOPED_TRACE(method);
    grpc::Status status = CallRaw(server.address(), method, kGarbage);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(DetailsOf(FromGrpcStatus(status)).reason, error_reason::kMissingApiKey);
    status = CallRaw(server.address(), method, kGarbage, "wrong-key");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(DetailsOf(FromGrpcStatus(status)).reason, error_reason::kInvalidApiKey);
    status = CallRaw(server.address(), method, kGarbage, "secret-key-1");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(RequestsWithOutcome(server, "unauthenticated"), 4.0);
  EXPECT_EQ(RequestsWithOutcome(server, "invalid_argument"), 2.0);
}

// While the model loads, bytes that can never decode are still INVALID_ARGUMENT (no retry would
// help), on both paths; a decodable request gets the loading server's UNAVAILABLE.
TEST(UndecodableRequestTest, ALoadingServerStillNamesTheUndecodableRequest) {
  testing::InProcessServer server;  // not loaded
  for (const std::string method :
       {"/blossom.v1.Blossom/GenerateStream", "/blossom.v1.Blossom/Generate"}) {
    EXPECT_EQ(CallRaw(server.address(), method, kGarbage).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << method;
    EXPECT_EQ(CallRaw(server.address(), method, std::string("\x0a\x02hi", 4)).error_code(),
              grpc::StatusCode::UNAVAILABLE)
        << method;
  }
}

TEST(UndecodableRequestTest, StatusNamesTheTypeOnlyWhereKnown) {
  EXPECT_TRUE(absl::StrContains(UndecodableRequestStatus("/blossom.v1.Blossom/Tokenize").message(),
                                "blossom.v1.TokenizeRequest"));
  EXPECT_TRUE(absl::StrContains(UndecodableRequestStatus("/nope.Service/Method").message(),
                                "the method's request"));
  EXPECT_TRUE(absl::StrContains(UndecodableRequestStatus("garbage").message(),
                                "the method's request"));
  EXPECT_TRUE(IsGenerationMethod("/blossom.v1.Blossom/BeamSearch"));
  EXPECT_FALSE(IsGenerationMethod("/blossom.v1.Blossom/Tokenize"));
}

}  // namespace
}  // namespace blossom
