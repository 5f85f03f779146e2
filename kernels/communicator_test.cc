// The Communicator contract's defaults: a communicator whose collectives complete before they
// return has nothing to fence, so Fence() is OK at once (the forward calls it every step).
#include "kernels/communicator.h"

#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// A communicator that only implements the pure virtuals, as the thread and MPI ones do.
class CompletesInPlace : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  absl::Status AllReduceSum(Tensor) override { return absl::OkStatus(); }
  absl::Status AllGather(const Tensor&, Tensor) override { return absl::OkStatus(); }
};

TEST(CommunicatorTest, FenceDefaultsToOkWithOrWithoutCollectivesIssued) {
  CompletesInPlace comm;
  EXPECT_TRUE(comm.Fence().ok());
  std::vector<float> x(4, 1.0f);
  ASSERT_TRUE(comm.AllReduceSum(Tensor(x.data(), DType::kF32, {4})).ok());
  EXPECT_TRUE(comm.Fence().ok());
  EXPECT_TRUE(comm.Fence().ok());  // and again: nothing outstanding
}

TEST(CommunicatorTest, SingleRankFenceIsOkAndAllGatherStillCopies) {
  SingleRankCommunicator comm;
  std::vector<float> in = {1, 2, 3}, out(3, 0.0f);
  ASSERT_TRUE(comm.AllGather(Tensor(in.data(), DType::kF32, {3}),
                             Tensor(out.data(), DType::kF32, {1, 3}))
                  .ok());
  EXPECT_EQ(out, in);
  EXPECT_TRUE(comm.Fence().ok());
}

}  // namespace
}  // namespace blossom
