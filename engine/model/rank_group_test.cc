// The rank groups' checks that need no GPU: the thread group's collectives complete in place (its
// Fence has nothing to wait for); asynchronous NCCL collectives are refused for a backend without
// a CUDA stream before any CUDA call; an unbound NCCL wrapper fails its fence like its
// collectives instead of crashing. The NCCL paths themselves need GPUs
// (kernels/nccl:nccl_communicator_test, engine/model:model_runner_test).
#include "engine/model/rank_group.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_backend.h"

namespace blossom {
namespace {

TEST(RankGroupTest, ThreadGroupCollectivesNeedNoFence) {
  ThreadRankGroup group(2);
  std::vector<std::vector<float>> data = {{1, 2}, {10, 20}};
  std::vector<absl::Status> status(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      status[r] = group.communicator(r)->AllReduceSum(Tensor(data[r].data(), DType::kF32, {2}));
      if (status[r].ok()) status[r] = group.communicator(r)->Fence();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(data[r], (std::vector<float>{11, 22})) << "rank " << r;
  }
}

#ifdef BLOSSOM_HAVE_CUDA

TEST(RankGroupTest, AsynchronousNcclNeedsACudaBackendOnEveryRank) {
  CpuBackend a(1), b(1);
  auto group = NcclRankGroup::Create({&a, &b}, /*asynchronous=*/true);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument) << group.status();
  EXPECT_NE(group.status().message().find("CUDA backend"), std::string::npos) << group.status();
  EXPECT_NE(group.status().message().find("rank 0 has backend cpu"), std::string::npos)
      << group.status();
}

TEST(RankGroupTest, UnboundNcclWrapperFailsItsFenceAndCollectives) {
  CpuBackend backend(1);
  StreamOrderedCommunicator comm(&backend, 1, 2);
  std::vector<float> x(2);
  EXPECT_EQ(comm.Fence().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(comm.AllReduceSum(Tensor(x.data(), DType::kF32, {2})).code(),
            absl::StatusCode::kFailedPrecondition);
}

#endif  // BLOSSOM_HAVE_CUDA

}  // namespace
}  // namespace blossom
