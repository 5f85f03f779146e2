// NCCL collectives on the visible GPUs. Tagged "gpu": without a GPU every test reports SKIPPED
// with the reason (the GPU suite counts a run where all skip as "no GPU seen"; the option checks
// that need no GPU are nccl_communicator_options_test). Multi-rank tests need as
// many GPUs as ranks (NCCL refuses two ranks of one communicator on one GPU); the init timeout
// test runs on a single GPU by leaving a rank out. The asynchronous mode is checked against the
// synchronous one, for ordering with CudaBackend kernels on the same stream, and for a missing
// rank turning into DeadlineExceeded from Fence().
#include "kernels/nccl/nccl_communicator.h"

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "cuda_runtime.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_backend.h"

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

// ---- Asynchronous mode ----

// One non-blocking stream per device, destroyed after the communicators that use them.
struct Streams {
  explicit Streams(const std::vector<int>& devices) {
    for (int d : devices) {
      cudaSetDevice(d);
      cudaStream_t s = nullptr;
      EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      streams.push_back(s);
      handles.push_back(s);
    }
  }
  ~Streams() {
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
  }
  std::vector<cudaStream_t> streams;
  std::vector<void*> handles;
};

NcclOptions Asynchronous() {
  NcclOptions options;
  options.synchronous = false;
  return options;
}

// Every rank all-reduces and all-gathers the same data in both modes; the asynchronous results
// are read only after Fence() (the copies back run on the legacy default stream, which a
// non-blocking stream does not wait for), and must be the synchronous ones bit for bit.
TEST(NcclCommunicatorAsyncTest, ResultsEqualTheSynchronousMode) {
  REQUIRE_GPUS(1);
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  const std::vector<int> devices = FirstDevices(gpus);
  const int world = gpus;
  const int64_t n = 4096;
  auto input = [](int r, int64_t i) { return 0.37f * static_cast<float>(i % 97) - r * 1.5f; };
  std::vector<std::vector<float>> reduced[2], gathered[2];
  for (int mode = 0; mode < 2; ++mode) {
    const bool async = mode == 1;
    Streams streams(devices);
    auto comms = async ? NcclCommunicator::CreateAll(devices, Asynchronous(), streams.handles)
                       : NcclCommunicator::CreateAll(devices);
    ASSERT_TRUE(comms.ok()) << comms.status();
    reduced[mode].resize(world);
    gathered[mode].resize(world);
    std::vector<absl::Status> status(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        std::vector<float> mine(n);
        for (int64_t i = 0; i < n; ++i) mine[i] = input(r, i);
        DeviceFloats buf(r, mine), in(r, mine), out(r, std::vector<float>(n * world));
        // cudaMemcpy from pageable memory may return before its DMA lands, and the collectives
        // run on a non-blocking stream: let the inputs arrive first.
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        NcclCommunicator& c = *(*comms)[r];
        EXPECT_EQ(c.synchronous(), !async);
        status[r] = c.AllReduceSum(buf.tensor());
        if (status[r].ok()) {
          status[r] = c.AllGather(in.tensor(), Tensor(out.data, DType::kF32, {world, n},
                                                      DeviceKind::kCuda));
        }
        if (status[r].ok()) status[r] = c.Fence();
        if (status[r].ok()) status[r] = c.Fence();  // nothing outstanding: OK at once
        reduced[mode][r] = buf.Read();
        gathered[mode][r] = out.Read();
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(status[r].ok()) << "mode " << mode << ": " << status[r];
    }
    comms->clear();  // before the streams go
  }
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(reduced[1][r].size(), static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(reduced[1][r][i], reduced[0][r][i]) << "rank " << r << " element " << i;
      for (int k = 0; k < world; ++k) {
        ASSERT_EQ(gathered[1][r][k * n + i], gathered[0][r][k * n + i]);
        ASSERT_EQ(gathered[1][r][k * n + i], input(k, i));
      }
    }
  }
}

// On each rank's CudaBackend stream, with no host wait between them: a backend kernel writes
// the collective's input, the all-reduce runs, a backend kernel reads its output. Repeated with
// fresh inputs so a collective that ran early (on the old input) or a kernel that ran before the
// collective finished would show.
TEST(NcclCommunicatorAsyncTest, OrderedWithKernelsOnTheBackendStream) {
  REQUIRE_GPUS(1);
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  const int world = gpus;
  const int64_t n = 1 << 20;  // large enough that each kernel takes a while
  std::vector<std::unique_ptr<CudaBackend>> backends(world);
  std::vector<void*> streams(world);
  for (int r = 0; r < world; ++r) {
    CudaBackend::Options options;
    options.device = r;
    auto backend = CudaBackend::Create(options);
    if (!backend.ok()) GTEST_SKIP() << "no CUDA backend on GPU " << r << ": " << backend.status();
    backends[r] = std::move(*backend);
    streams[r] = backends[r]->stream();
  }
  auto comms = NcclCommunicator::CreateAll(FirstDevices(world), Asynchronous(), streams);
  ASSERT_TRUE(comms.ok()) << comms.status();
  constexpr int kRounds = 5;
  std::vector<absl::Status> status(world);
  std::vector<std::vector<float>> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      CudaBackend& b = *backends[r];
      NcclCommunicator& c = *(*comms)[r];
      auto run = [&]() -> absl::Status {
        auto x = b.AllocateTensor(DType::kF32, {1, n});
        auto add = b.AllocateTensor(DType::kF32, {1, n});
        auto acc = b.AllocateTensor(DType::kF32, {1, n});
        if (!x.ok()) return x.status();
        if (!add.ok()) return add.status();
        if (!acc.ok()) return acc.status();
        std::vector<float> zeros(n, 0.0f), ones(n, 1.0f);
        if (auto s = b.CopyToDevice(zeros.data(), acc->tensor); !s.ok()) return s;
        for (int round = 0; round < kRounds; ++round) {
          std::vector<float> mine(n);
          for (int64_t i = 0; i < n; ++i) mine[i] = static_cast<float>(r + round + (i % 7));
          if (auto s = b.CopyToDevice(mine.data(), x->tensor); !s.ok()) return s;
          if (auto s = b.CopyToDevice(ones.data(), add->tensor); !s.ok()) return s;
          // x = x + 1 (written by a kernel right before the collective)
          if (auto s = b.AddBiasResidual(x->tensor, Tensor(), add->tensor); !s.ok()) return s;
          if (auto s = c.AllReduceSum(x->tensor); !s.ok()) return s;
          // acc += x (read by a kernel right after it)
          if (auto s = b.AddBiasResidual(acc->tensor, Tensor(), x->tensor); !s.ok()) return s;
        }
        if (auto s = c.Fence(); !s.ok()) return s;
        results[r].resize(n);
        return b.CopyToHost(acc->tensor, results[r].data());  // synchronises the stream
      };
      status[r] = run();
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    for (int64_t i = 0; i < n; ++i) {
      float expected = 0;  // small integers: exact in fp32 in any order
      for (int round = 0; round < kRounds; ++round)
        for (int k = 0; k < world; ++k) expected += static_cast<float>(k + round + (i % 7) + 1);
      ASSERT_EQ(results[r][i], expected) << "rank " << r << " element " << i;
    }
  }
  comms->clear();  // before the backends and their streams
}

// Rank 1 joins a first collective (so connections are set up and enqueueing cannot wait for
// it), then never calls the second: rank 0's enqueue returns, and its Fence() times out with
// DeadlineExceeded naming the collective and aborts, instead of hanging.
TEST(NcclCommunicatorAsyncTest, MissingRankBecomesDeadlineExceededFromFence) {
  REQUIRE_GPUS(2);
  const std::vector<int> devices = FirstDevices(2);
  Streams streams(devices);
  NcclOptions options = Asynchronous();
  options.timeout = std::chrono::seconds(3);
  auto comms = NcclCommunicator::CreateAll(devices, options, streams.handles);
  ASSERT_TRUE(comms.ok()) << comms.status();
  DeviceFloats buf0(0, std::vector<float>(1024, 1.0f)), buf1(1, std::vector<float>(1024, 2.0f));
  std::thread peer([&] {
    cudaSetDevice(1);
    EXPECT_TRUE((*comms)[1]->AllReduceSum(buf1.tensor()).ok());
    EXPECT_TRUE((*comms)[1]->Fence().ok());
  });
  ASSERT_TRUE((*comms)[0]->AllReduceSum(buf0.tensor()).ok());
  ASSERT_TRUE((*comms)[0]->Fence().ok());
  peer.join();
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE((*comms)[0]->AllReduceSum(buf0.tensor()).ok());  // enqueued; rank 1 never joins
  absl::Status s = (*comms)[0]->Fence();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("AllReduceSum"), std::string::npos) << s;
  EXPECT_LT(seconds, 30.0);
  EXPECT_TRUE((*comms)[0]->aborted());
  EXPECT_EQ((*comms)[0]->AllReduceSum(buf0.tensor()).code(), absl::StatusCode::kAborted);
  (*comms)[1]->Abort();
  // The aborted collective leaves the stream (polled with a bound, so this test cannot hang).
  cudaError_t drained = cudaErrorNotReady;
  const auto drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (drained == cudaErrorNotReady && std::chrono::steady_clock::now() < drain_deadline) {
    drained = cudaStreamQuery(streams.streams[0]);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(drained, cudaSuccess) << cudaGetErrorName(drained);
  comms->clear();
}

TEST(NcclCommunicatorAsyncTest, AbortFromAnotherThreadEndsAPendingFence) {
  REQUIRE_GPUS(2);
  const std::vector<int> devices = FirstDevices(2);
  Streams streams(devices);
  auto comms = NcclCommunicator::CreateAll(devices, Asynchronous(), streams.handles);
  ASSERT_TRUE(comms.ok()) << comms.status();  // default timeout: 300 s
  DeviceFloats buf(0, std::vector<float>(1024, 1.0f));
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (*comms)[0]->Abort();
  });
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = (*comms)[0]->AllReduceSum(buf.tensor());
  if (s.ok()) s = (*comms)[0]->Fence();
  aborter.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
  (*comms)[1]->Abort();
  comms->clear();
}

}  // namespace
}  // namespace blossom
