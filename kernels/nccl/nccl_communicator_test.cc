// NCCL collectives on the visible GPUs. Tagged "gpu": without a GPU every test reports SKIPPED
// with the reason. Multi-rank tests need as many GPUs as ranks (NCCL refuses two ranks of one
// communicator on one GPU); the timeout and abort tests run on a single GPU by leaving a rank out.
#include "kernels/nccl/nccl_communicator.h"

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "cuda_runtime.h"
#include "gtest/gtest.h"

namespace blossom {
namespace {

int VisibleGpus(std::string* reason) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    *reason = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return 0;
  }
  if (count == 0) *reason = "no CUDA device is visible";
  return count;
}

#define REQUIRE_GPUS(n)                                                               \
  do {                                                                                \
    std::string reason;                                                               \
    const int gpus = VisibleGpus(&reason);                                            \
    if (gpus == 0) GTEST_SKIP() << "no GPU: " << reason;                              \
    if (gpus < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, " << gpus << " visible"; \
  } while (0)

// A device buffer of floats, freed on destruction.
struct DeviceFloats {
  explicit DeviceFloats(int device, const std::vector<float>& host) : n(host.size()) {
    cudaSetDevice(device);
    EXPECT_EQ(cudaMalloc(&data, n * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(data); }
  std::vector<float> Read() const {
    std::vector<float> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  Tensor tensor() const { return Tensor(data, DType::kF32, {static_cast<int64_t>(n)}, DeviceKind::kCuda); }
  void* data = nullptr;
  size_t n;
};

std::vector<int> FirstDevices(int n) {
  std::vector<int> d(n);
  std::iota(d.begin(), d.end(), 0);
  return d;
}

TEST(NcclCommunicatorTest, AllReduceAndAllGatherOverEveryVisibleGpu) {
  REQUIRE_GPUS(1);
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  auto comms = NcclCommunicator::CreateAll(FirstDevices(gpus));
  ASSERT_TRUE(comms.ok()) << comms.status();
  const int world = gpus;
  const int64_t n = 1000;
  std::vector<std::vector<float>> reduced(world), gathered(world);
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> mine(n);
      for (int64_t i = 0; i < n; ++i) mine[i] = static_cast<float>(r * 1000 + i);  // exact sums
      DeviceFloats buf(r, mine), in(r, mine), out(r, std::vector<float>(n * world));
      NcclCommunicator& c = *(*comms)[r];
      status[r] = c.AllReduceSum(buf.tensor());
      if (status[r].ok()) {
        status[r] = c.AllGather(in.tensor(), Tensor(out.data, DType::kF32, {world, n},
                                                    DeviceKind::kCuda));
      }
      reduced[r] = buf.Read();
      gathered[r] = out.Read();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    for (int64_t i = 0; i < n; ++i) {
      float expected = 0;
      for (int k = 0; k < world; ++k) expected += static_cast<float>(k * 1000 + i);
      ASSERT_EQ(reduced[r][i], expected) << "rank " << r << " element " << i;
      for (int k = 0; k < world; ++k)
        ASSERT_EQ(gathered[r][k * n + i], static_cast<float>(k * 1000 + i));
    }
  }
}

TEST(NcclCommunicatorTest, MissingRankAtInitTimesOutInsteadOfHanging) {
  REQUIRE_GPUS(1);
  auto id = NcclCommunicator::NewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  NcclOptions options;
  options.timeout = std::chrono::seconds(3);
  const auto start = std::chrono::steady_clock::now();
  // Rank 0 of 2; rank 1 never comes.
  auto comm = NcclCommunicator::Create(*id, 0, 2, 0, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_NE(comm.status().message().find("init"), std::string::npos) << comm.status();
  EXPECT_LT(seconds, 30.0);
}

TEST(NcclCommunicatorTest, MissingRankInACollectiveTimesOut) {
  REQUIRE_GPUS(2);
  NcclOptions options;
  options.timeout = std::chrono::seconds(3);
  auto comms = NcclCommunicator::CreateAll(FirstDevices(2), options);
  ASSERT_TRUE(comms.ok()) << comms.status();
  DeviceFloats buf(0, std::vector<float>(1024, 1.0f));
  absl::Status s = (*comms)[0]->AllReduceSum(buf.tensor());  // rank 1 never joins
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("AllReduceSum"), std::string::npos) << s;
  EXPECT_TRUE((*comms)[0]->aborted());
  // Later calls fail at once.
  EXPECT_EQ((*comms)[0]->AllReduceSum(buf.tensor()).code(), absl::StatusCode::kAborted);
  (*comms)[1]->Abort();
}

TEST(NcclCommunicatorTest, AbortFromAnotherThreadEndsAPendingCollective) {
  REQUIRE_GPUS(2);
  auto comms = NcclCommunicator::CreateAll(FirstDevices(2));  // default timeout: 300 s
  ASSERT_TRUE(comms.ok()) << comms.status();
  DeviceFloats buf(0, std::vector<float>(1024, 1.0f));
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (*comms)[0]->Abort();
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = (*comms)[0]->AllReduceSum(buf.tensor());
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
  (*comms)[1]->Abort();
}

TEST(NcclCommunicatorTest, RefusesHostTensorsAndBadIds) {
  REQUIRE_GPUS(1);
  EXPECT_EQ(NcclCommunicator::Create("short", 0, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto comms = NcclCommunicator::CreateAll({0});
  ASSERT_TRUE(comms.ok()) << comms.status();
  std::vector<float> host(4);
  absl::Status s = (*comms)[0]->AllReduceSum(Tensor(host.data(), DType::kF32, {4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

}  // namespace
}  // namespace blossom
