// Keeps /openapi.json true: the routes it documents are exactly the routes the gateway serves,
// with the same methods, every $ref resolves, and the gateway serves it.
#include "clients/gateway/openapi.h"

#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "clients/gateway/gateway.h"
#include "clients/gateway/json_fields.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/test_client.h"

namespace blossom::gateway {
namespace {

Json Document() {
  absl::StatusOr<Json> parsed = ParseJsonObject(OpenApiJson());
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : Json::object();
}

TEST(OpenApiTest, DocumentsExactlyTheServedRoutes) {
  const Json doc = Document();
  EXPECT_EQ(doc["openapi"], "3.0.3");
  std::set<std::pair<std::string, std::string>> documented, served;
  for (const auto& [path, operations] : doc["paths"].items()) {
    for (const auto& [method, operation] : operations.items()) {
      documented.emplace(path, absl::AsciiStrToUpper(method));
      EXPECT_TRUE(operation.contains("responses")) << path << " " << method;
    }
  }
  for (const Gateway::RouteSpec& route : Gateway::Routes()) served.emplace(route.path, route.method);
  EXPECT_EQ(documented, served);
}

// Every "$ref" points at an existing "#/components/..." entry.
void CheckRefs(const Json& doc, const Json& node, const std::string& where) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "$ref") {
        ASSERT_TRUE(value.is_string()) << where;
        const std::string ref = value.get<std::string>();
        ASSERT_TRUE(absl::StartsWith(ref, "#/")) << ref;
        const Json* target = &doc;
        for (absl::string_view part : absl::StrSplit(ref.substr(2), '/')) {
          ASSERT_TRUE(target->is_object() && target->contains(std::string(part))) << ref;
          target = &(*target)[std::string(part)];
        }
      } else {
        CheckRefs(doc, value, where + "/" + key);
      }
    }
  } else if (node.is_array()) {
    for (const Json& item : node) CheckRefs(doc, item, where + "[]");
  }
}

TEST(OpenApiTest, EveryRefResolves) {
  const Json doc = Document();
  CheckRefs(doc, doc, "");
}

TEST(OpenApiTest, GatewayServesTheDocument) {
  // No backend is needed: the document is static.
  Gateway gateway(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()), {});
  auto server = http::Server::Start({}, [&gateway](const http::Request& r,
                                                   std::shared_ptr<http::ResponseWriter> w) {
    gateway.Handle(r, std::move(w));
  });
  ASSERT_TRUE(server.ok()) << server.status();
  http::testing::Client client((*server)->port());
  ASSERT_TRUE(client.Send("GET /openapi.json HTTP/1.1\r\n\r\n"));
  http::testing::Client::Reply reply;
  ASSERT_TRUE(client.ReadReply(&reply));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.headers["content-type"], "application/json");
  EXPECT_EQ(reply.body, OpenApiJson());
  (*server)->Stop();
}

}  // namespace
}  // namespace blossom::gateway
