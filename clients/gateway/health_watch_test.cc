#include "clients/gateway/health_watch.h"

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "clients/gateway/backend_channel.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "proto/blossom/v1/blossom.grpc.pb.h"

namespace blossom::gateway {
namespace {

using Status = HealthWatch::Status;

constexpr char kService[] = "blossom.v1.Blossom";
// Generous: these bound a wait on a loaded machine, they are not latency targets.
const absl::Duration kBound = absl::Seconds(20);

// A backend whose grpc.health.v1 service is gRPC's own (Check and Watch), with `kService`'s
// status set by the test as blossom-server sets it; `port` 0 picks a free one.
std::unique_ptr<grpc::Server> StartBackend(int port, int* bound, bool with_health = true) {
  grpc::EnableDefaultHealthCheckService(with_health);
  // A server needs a service of its own to start; every method of this one is unimplemented.
  static auto* blossom = new blossom::v1::Blossom::CallbackService;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), bound);
  builder.RegisterService(blossom);
  return builder.BuildAndStart();
}

void SetServing(grpc::Server* server, bool serving) {
  server->GetHealthCheckService()->SetServingStatus(kService, serving);
}

std::shared_ptr<grpc::Channel> ChannelTo(int port) {
  BackendChannelOptions options;
  options.target = absl::StrCat("127.0.0.1:", port);
  auto channel = MakeBackendChannel(options);
  EXPECT_TRUE(channel.ok()) << channel.status();
  return *channel;
}

// Waits (bounded) until the watch reports `want`, through any statuses on the way; returns
// the last status seen.
Status WaitFor(const HealthWatch& watch, Status want) {
  const absl::Time deadline = absl::Now() + kBound;
  Status now = watch.status();
  while (now != want && absl::Now() < deadline) now = watch.WaitForChange(now, absl::Milliseconds(200));
  return now;
}

TEST(HealthWatchTest, FollowsEveryChangeOfTheServingStatus) {
  int port = 0;
  auto server = StartBackend(0, &port);
  ASSERT_NE(server, nullptr);
  SetServing(server.get(), true);
  HealthWatch watch(ChannelTo(port), {kService});
  EXPECT_EQ(WaitFor(watch, Status::kServing), Status::kServing);
  SetServing(server.get(), false);  // blossom-server on SIGTERM
  EXPECT_EQ(WaitFor(watch, Status::kNotServing), Status::kNotServing);
  SetServing(server.get(), true);
  EXPECT_EQ(WaitFor(watch, Status::kServing), Status::kServing);
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(HealthWatchTest, ABrokenStreamIsUnknownUntilTheRestartedServerAnswers) {
  int port = 0;
  auto server = StartBackend(0, &port);
  ASSERT_NE(server, nullptr);
  SetServing(server.get(), true);
  HealthWatch watch(ChannelTo(port), {kService});
  ASSERT_EQ(WaitFor(watch, Status::kServing), Status::kServing);
  server->Shutdown(std::chrono::system_clock::now());
  server.reset();
  // gRPC's health service may report NOT_SERVING as it shuts down; then the stream breaks.
  EXPECT_EQ(WaitFor(watch, Status::kUnknown), Status::kUnknown);
  int rebound = 0;
  server = StartBackend(port, &rebound);
  ASSERT_EQ(rebound, port);
  SetServing(server.get(), true);
  EXPECT_EQ(WaitFor(watch, Status::kServing), Status::kServing);
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(HealthWatchTest, ABackendWithoutTheHealthServiceIsUnimplemented) {
  int port = 0;
  auto server = StartBackend(0, &port, /*with_health=*/false);
  ASSERT_NE(server, nullptr);
  HealthWatch watch(ChannelTo(port), {kService, "", absl::Milliseconds(100)});
  EXPECT_EQ(WaitFor(watch, Status::kUnimplemented), Status::kUnimplemented);
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(HealthWatchTest, DestructionEndsAWatchWaitingForADownBackend) {
  // Nothing listens on port 1: the watch waits for the channel until it is destroyed.
  auto watch = std::make_unique<HealthWatch>(ChannelTo(1), HealthWatch::Options{kService});
  EXPECT_EQ(watch->WaitForChange(Status::kUnknown, absl::Milliseconds(300)), Status::kUnknown);
  watch.reset();  // returns: the destructor cancels the waiting call
}

}  // namespace
}  // namespace blossom::gateway
