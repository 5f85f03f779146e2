#include "kernels/cpu/thread_communicator.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

// Runs fn(rank) on `world` threads and returns each rank's status.
std::vector<absl::Status> RunRanks(int world, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> status(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back([&, r] { status[r] = fn(r); });
  for (std::thread& t : threads) t.join();
  return status;
}

std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(ThreadCommunicatorTest, AllReduceSumAddsInRankOrderAndIsIdenticalOnEveryRank) {
  for (int world : {1, 2, 3, 4}) {
    ThreadCommunicatorGroup group(world);
    const int64_t n = 1001;  // not a multiple of any world size: uneven reduction chunks
    std::vector<std::vector<float>> data(world);
    for (int r = 0; r < world; ++r) data[r] = RandomFloats(n, 17 + r);
    // The reference: every element summed over ranks 0..N-1 in order, in fp32.
    std::vector<float> expected = data[0];
    for (int r = 1; r < world; ++r)
      for (int64_t i = 0; i < n; ++i) expected[i] += data[r][i];
    std::vector<absl::Status> status = RunRanks(world, [&](int r) {
      return group.communicator(r)->AllReduceSum(Tensor(data[r].data(), DType::kF32, {n}));
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      EXPECT_EQ(0, std::memcmp(data[r].data(), expected.data(), n * sizeof(float)))
          << "world " << world << " rank " << r;
    }
  }
}

TEST(ThreadCommunicatorTest, AllReduceSumIsDeterministicOverManyRuns) {
  const int world = 4;
  const int64_t n = 4096;
  ThreadCommunicatorGroup group(world);
  std::vector<float> first;
  for (int run = 0; run < 20; ++run) {
    std::vector<std::vector<float>> data(world);
    for (int r = 0; r < world; ++r) data[r] = RandomFloats(n, 99 + r);  // same inputs every run
    std::vector<absl::Status> status = RunRanks(world, [&](int r) -> absl::Status {
      // Several collectives back to back, ranks racing ahead of each other.
      for (int k = 0; k < 3; ++k) {
        absl::Status s = group.communicator(r)->AllReduceSum(Tensor(data[r].data(), DType::kF32, {n}));
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : status) ASSERT_TRUE(s.ok()) << s;
    if (run == 0) first = data[0];
    for (int r = 0; r < world; ++r)
      ASSERT_EQ(0, std::memcmp(data[r].data(), first.data(), n * sizeof(float))) << "run " << run;
  }
}

TEST(ThreadCommunicatorTest, AllReduceSumOfHalfPrecisionAccumulatesInFp32) {
  const int world = 3;
  ThreadCommunicatorGroup group(world);
  // big + 1 + 1 rounded after each add stays big (the spacing there is 2, ties go to even);
  // summed in fp32 and rounded once it is big + 2, which the half type represents.
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const float big = dtype == DType::kBF16 ? 256.0f : 2048.0f;
    const float values[3] = {big, 1.0f, 1.0f};
    std::vector<std::vector<uint16_t>> data(world, std::vector<uint16_t>(2));
    for (int r = 0; r < world; ++r) {
      const float v[2] = {values[r], -0.5f * (r + 1)};
      ConvertFromF32(v, data[r].data(), dtype, 2);
    }
    std::vector<absl::Status> status = RunRanks(world, [&](int r) {
      return group.communicator(r)->AllReduceSum(Tensor(data[r].data(), dtype, {2}));
    });
    for (int r = 0; r < world; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      float out[2];
      ConvertToF32(data[r].data(), dtype, out, 2);
      EXPECT_EQ(out[0], big + 2.0f) << DTypeName(dtype);
      EXPECT_EQ(out[1], -3.0f) << DTypeName(dtype);
    }
  }
}

TEST(ThreadCommunicatorTest, AllGatherConcatenatesInRankOrder) {
  const int world = 4;
  const int64_t n = 5;
  ThreadCommunicatorGroup group(world);
  std::vector<std::vector<float>> in(world), out(world, std::vector<float>(world * n));
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < n; ++i) in[r].push_back(100.0f * r + i);
  std::vector<absl::Status> status = RunRanks(world, [&](int r) {
    return group.communicator(r)->AllGather(Tensor(in[r].data(), DType::kF32, {n}),
                                            Tensor(out[r].data(), DType::kF32, {world, n}));
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    for (int src = 0; src < world; ++src)
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[r][src * n + i], 100.0f * src + i);
  }
}

TEST(ThreadCommunicatorTest, AllGatherRefusesAnOutputOfTheWrongSize) {
  ThreadCommunicatorGroup group(2);
  std::vector<float> in(4), out(6);
  absl::Status s = group.communicator(0)->AllGather(Tensor(in.data(), DType::kF32, {4}),
                                                    Tensor(out.data(), DType::kF32, {6}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST(ThreadCommunicatorTest, RanksThatDisagreeOnTheCollectiveAllGetInvalidArgument) {
  const int world = 2;
  ThreadCommunicatorGroup group(world, std::chrono::seconds(10));
  std::vector<std::vector<float>> data = {std::vector<float>(8), std::vector<float>(6)};
  std::vector<absl::Status> status = RunRanks(world, [&](int r) {
    return group.communicator(r)->AllReduceSum(
        Tensor(data[r].data(), DType::kF32, {static_cast<int64_t>(data[r].size())}));
  });
  for (const absl::Status& s : status) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("ranks disagree"), std::string::npos) << s;
  }
}

TEST(ThreadCommunicatorTest, MissingRankTimesOutNamingTheCollective) {
  const int world = 3;
  ThreadCommunicatorGroup group(world, std::chrono::milliseconds(200));
  std::vector<float> a(16), b(16);
  const auto start = std::chrono::steady_clock::now();
  // Ranks 0 and 1 call; rank 2 never does (it "died").
  std::vector<absl::Status> status = RunRanks(2, [&](int r) {
    return group.communicator(r)->AllReduceSum(
        Tensor((r == 0 ? a : b).data(), DType::kF32, {16}));
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0) << "must not hang";
  // The first rank to give up reports the deadline; the other may see the abort it caused.
  int deadline = 0;
  for (const absl::Status& s : status) {
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("AllReduceSum"), std::string::npos) << s;
    EXPECT_TRUE(s.code() == absl::StatusCode::kDeadlineExceeded ||
                s.code() == absl::StatusCode::kAborted)
        << s;
    if (s.code() == absl::StatusCode::kDeadlineExceeded) ++deadline;
  }
  EXPECT_GE(deadline, 1);
  EXPECT_TRUE(group.aborted());
  // Later collectives fail at once instead of waiting for the timeout again.
  absl::Status again = group.communicator(0)->AllGather(Tensor(a.data(), DType::kF32, {1}),
                                                        Tensor(b.data(), DType::kF32, {3}));
  EXPECT_EQ(again.code(), absl::StatusCode::kAborted) << again;
  EXPECT_NE(again.message().find("AllGather"), std::string::npos) << again;
}

TEST(ThreadCommunicatorTest, AbortWakesEveryWaiterAndResetRearms) {
  const int world = 4;
  ThreadCommunicatorGroup group(world, std::chrono::seconds(600));  // only Abort can end the wait
  std::vector<std::vector<float>> data(world, std::vector<float>(8, 1.0f));
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    group.Abort(absl::InternalError("rank 3 failed: out of memory"));
  });
  const auto start = std::chrono::steady_clock::now();
  std::vector<absl::Status> status = RunRanks(world - 1, [&](int r) {  // rank 3 never arrives
    return group.communicator(r)->AllReduceSum(Tensor(data[r].data(), DType::kF32, {8}));
  });
  aborter.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
  for (const absl::Status& s : status) {
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_NE(s.message().find("rank 3 failed: out of memory"), std::string::npos) << s;
  }
  // After Reset (nobody inside a collective) the group works again.
  group.Reset();
  EXPECT_FALSE(group.aborted());
  status = RunRanks(world, [&](int r) {
    return group.communicator(r)->AllReduceSum(Tensor(data[r].data(), DType::kF32, {8}));
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(data[r][0], 4.0f);
  }
}

}  // namespace
}  // namespace blossom
