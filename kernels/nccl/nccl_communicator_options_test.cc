// NcclCommunicator's option checks, which come before any CUDA call: they run (and must pass) on
// every machine where CUDA is built, GPU or not. Not tagged "gpu": the GPU suite expects its
// binaries to skip everything without a GPU (kernels/nccl/nccl_communicator_test.cc has the rest).
#include <string>

#include "gtest/gtest.h"
#include "kernels/nccl/nccl_communicator.h"

namespace blossom {
namespace {

NcclOptions Asynchronous() {
  NcclOptions options;
  options.synchronous = false;
  return options;
}

TEST(NcclOptionsTest, AsynchronousModeNeedsTheCallersStreams) {
  const std::string id(NcclCommunicator::kUniqueIdBytes, '\0');
  absl::Status s = NcclCommunicator::Create(id, 0, 1, 0, Asynchronous()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("stream"), std::string::npos) << s;
  s = NcclCommunicator::CreateAll({0, 1}, Asynchronous()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("stream"), std::string::npos) << s;
  int dummy = 0;
  s = NcclCommunicator::CreateAll({0, 1}, Asynchronous(), {&dummy}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("1 streams for 2 devices"), std::string::npos) << s;
  s = NcclCommunicator::CreateAll({0, 1}, Asynchronous(), {&dummy, nullptr}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  NcclOptions both = Asynchronous();
  both.stream = &dummy;
  s = NcclCommunicator::CreateAll({0}, both, {&dummy}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(NcclOptionsTest, SynchronousIsTheDefault) {
  EXPECT_TRUE(NcclOptions().synchronous);
  EXPECT_EQ(NcclOptions().stream, nullptr);
}

}  // namespace
}  // namespace blossom
