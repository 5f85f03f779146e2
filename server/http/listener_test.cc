#include "server/http/listener.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/http/http_server.h"
#include "server/http/test_client.h"

namespace blossom::http::internal {
namespace {

using ::blossom::http::testing::Client;

TEST(ListenerTest, ConnectionCapLeavesDescriptorsForTheRestOfTheProcess) {
  EXPECT_EQ(ConnectionCapForFdLimit(4096, 0), 4096);         // unlimited
  EXPECT_EQ(ConnectionCapForFdLimit(4096, 1 << 20), 4096);   // far within the limit
  EXPECT_EQ(ConnectionCapForFdLimit(4096, 1024), 1024 - 128);  // the usual soft limit
  EXPECT_EQ(ConnectionCapForFdLimit(100, 1024), 100);
  EXPECT_EQ(ConnectionCapForFdLimit(4096, 256), 256 - 64);
  EXPECT_EQ(ConnectionCapForFdLimit(4096, 64), 1);  // nothing to spare: still one
  EXPECT_EQ(ConnectionCapForFdLimit(0, 1024), 0);   // left as configured
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec +
         (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Out of file descriptors, accept() fails with EMFILE while the connection stays queued: the
// server must wait for descriptors to free up (not spin its I/O thread), then serve the client.
TEST(ListenerTest, OutOfDescriptorsTheServerWaitsThenServes) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 256);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  {
    auto server = Server::Start({}, [](const Request&, std::shared_ptr<ResponseWriter> writer) {
      writer->Send(Response{200, {}, "ok"});
    });
    ASSERT_TRUE(server.ok()) << server.status();
    // Fill the descriptor table, keeping one for the client.
    std::vector<int> filler;
    for (int fd; (fd = open("/dev/null", O_RDONLY)) >= 0;) filler.push_back(fd);
    ASSERT_EQ(errno, EMFILE);
    ASSERT_FALSE(filler.empty());
    close(filler.back());
    filler.pop_back();
    Client client((*server)->port());
    ASSERT_TRUE(client.connected());  // queued in the backlog: the server cannot accept it
    ASSERT_TRUE(client.Send("GET / HTTP/1.1\r\n\r\n"));
    const double cpu_before = CpuSeconds();
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double cpu = CpuSeconds() - cpu_before;
    EXPECT_LT(cpu, 0.3) << "the I/O thread spins on the failing accept";
    for (int fd : filler) close(fd);
    Client::Reply reply;
    ASSERT_TRUE(client.ReadReply(&reply));
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body, "ok");
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
}

}  // namespace
}  // namespace blossom::http::internal
