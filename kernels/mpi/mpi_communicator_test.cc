// MpiCommunicator between the processes of `mpirun -np N` (the sh_test uses N = 2; every case
// also passes as a world of one). Every rank runs every case, in the same order, so the
// collectives pair up.
#include "kernels/mpi/mpi_communicator.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dtype.h"

namespace blossom {
namespace {

std::unique_ptr<MpiCommunicator> MakeComm(
    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  MpiOptions options;
  options.timeout = timeout;
  auto comm = MpiCommunicator::Create(options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(*comm) : nullptr;
}

// Rank r's input element i: magnitudes that make the summation order visible in fp32.
float Input(int rank, int64_t i) {
  const float big = (rank % 2 == 0 ? 1.0f : -1.0f) * 1e7f * static_cast<float>(rank + 1);
  return big + 0.37f * static_cast<float>(i % 13) + 0.011f * static_cast<float>(rank);
}

TEST(MpiCommunicatorTest, WorldMatchesInitMpi) {
  auto process = InitMpi();
  ASSERT_TRUE(process.ok()) << process.status();
  auto comm = MakeComm();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), process->rank);
  EXPECT_EQ(comm->world_size(), process->world_size);
  EXPECT_GE(process->local_size, 1);
  EXPECT_LT(process->local_rank, process->local_size);
  std::printf("[mpi] rank %d of %d (local %d of %d)\n", process->rank, process->world_size,
              process->local_rank, process->local_size);
}

TEST(MpiCommunicatorTest, AllReduceSumIsTheRankOrderSumOnEveryRank) {
  auto comm = MakeComm();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size(), rank = comm->rank();
  const int64_t n = 100003;  // not a multiple of anything
  std::vector<float> data(n);
  for (int64_t i = 0; i < n; ++i) data[i] = Input(rank, i);
  ASSERT_TRUE(comm->AllReduceSum(Tensor(data.data(), DType::kF32, {n})).ok());
  for (int64_t i = 0; i < n; ++i) {
    float expected = Input(0, i);
    for (int r = 1; r < world; ++r) expected += Input(r, i);
    ASSERT_EQ(std::memcmp(&data[i], &expected, sizeof(float)), 0)
        << "element " << i << ": " << data[i] << " vs " << expected;
  }
  // Bit-identical on every rank: gather everyone's result and compare bytes.
  std::vector<float> all(n * world);
  ASSERT_TRUE(comm->AllGather(Tensor(data.data(), DType::kF32, {n}),
                              Tensor(all.data(), DType::kF32, {world, n}))
                  .ok());
  for (int r = 0; r < world; ++r)
    EXPECT_EQ(std::memcmp(all.data() + r * n, data.data(), n * sizeof(float)), 0) << "rank " << r;
}

TEST(MpiCommunicatorTest, AllReduceSumOfHalfTypesAddsInFp32AndRoundsOnce) {
  auto comm = MakeComm();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size(), rank = comm->rank();
  const int64_t n = 257;
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    std::vector<uint16_t> data(n);
    std::vector<float> wide(n);
    for (int64_t i = 0; i < n; ++i) wide[i] = 0.001f * static_cast<float>(i) + 0.25f * rank;
    ConvertFromF32(wide.data(), data.data(), dtype, n);
    ASSERT_TRUE(comm->AllReduceSum(Tensor(data.data(), dtype, {n})).ok());
    std::vector<float> expected(n);
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int r = 0; r < world; ++r) {
        const float v = 0.001f * static_cast<float>(i) + 0.25f * r;
        uint16_t narrow;
        float stored;
        ConvertFromF32(&v, &narrow, dtype, 1);  // each rank's input as stored
        ConvertToF32(&narrow, dtype, &stored, 1);
        acc = r == 0 ? stored : acc + stored;
      }
      expected[i] = acc;
    }
    std::vector<uint16_t> rounded(n);
    ConvertFromF32(expected.data(), rounded.data(), dtype, n);
    EXPECT_EQ(data, rounded) << DTypeName(dtype);
  }
}

TEST(MpiCommunicatorTest, AllGatherIsInRankOrder) {
  auto comm = MakeComm();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size(), rank = comm->rank();
  const int64_t n = 37;
  std::vector<int32_t> in(n);
  for (int64_t i = 0; i < n; ++i) in[i] = rank * 1000 + static_cast<int32_t>(i);
  std::vector<int32_t> out(n * world, -1);
  ASSERT_TRUE(comm->AllGather(Tensor(in.data(), DType::kI32, {n}),
                              Tensor(out.data(), DType::kI32, {world, n}))
                  .ok());
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(out[r * n + i], r * 1000 + i);
}

TEST(MpiCommunicatorTest, BadArgumentsAreRefusedBeforeAnyCommunication) {
  auto comm = MakeComm();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size();
  std::vector<float> in(4), out(4 * world + 1);
  absl::Status s = comm->AllGather(Tensor(in.data(), DType::kF32, {4}),
                                   Tensor(out.data(), DType::kF32, {4 * world + 1}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  std::vector<int32_t> ints(4);
  s = comm->AllReduceSum(Tensor(ints.data(), DType::kI32, {4}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = comm->AllReduceSum(Tensor(in.data(), DType::kF32, {4}, DeviceKind::kCuda));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  std::string bytes;
  EXPECT_EQ(comm->Broadcast(world, &bytes).code(), absl::StatusCode::kInvalidArgument);
  // Still usable: the refusals sent nothing.
  std::vector<float> one = {1.0f};
  ASSERT_TRUE(comm->AllReduceSum(Tensor(one.data(), DType::kF32, {1})).ok());
  EXPECT_EQ(one[0], static_cast<float>(world));
}

TEST(MpiCommunicatorTest, BroadcastCarriesAnySizeFromAnyRoot) {
  auto comm = MakeComm();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size(), rank = comm->rank();
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  for (const std::string& payload : {std::string("plan"), std::string(), big}) {
    for (int root : {0, world - 1}) {
      std::string bytes = rank == root ? payload : std::string("stale");
      ASSERT_TRUE(comm->Broadcast(root, &bytes).ok());
      EXPECT_EQ(bytes.size(), payload.size());
      EXPECT_TRUE(bytes == payload) << "root " << root;
    }
  }
  // An unlimited wait works like any other.
  std::string bytes = rank == 0 ? "x" : "";
  ASSERT_TRUE(comm->Broadcast(0, &bytes, std::chrono::milliseconds::max()).ok());
  EXPECT_EQ(bytes, "x");
}

TEST(MpiCommunicatorTest, AgreeOnStatusGivesTheFirstFailureInRankOrderEverywhere) {
  auto comm = MakeComm();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size(), rank = comm->rank();
  EXPECT_TRUE(comm->AgreeOnStatus(absl::OkStatus()).ok());
  const absl::Status mine = rank == world - 1
                                ? absl::ResourceExhaustedError("no memory for the KV cache")
                                : absl::OkStatus();
  absl::Status agreed = comm->AgreeOnStatus(mine);
  EXPECT_EQ(agreed.code(), absl::StatusCode::kResourceExhausted) << agreed;
  EXPECT_EQ(agreed.message(), "rank " + std::to_string(world - 1) + " of " +
                                  std::to_string(world) + ": no memory for the KV cache");
  // Every rank fails: rank 0's wins; a long message is cut, not overflowed.
  agreed = comm->AgreeOnStatus(absl::InternalError(std::string(5000, 'a' + rank)));
  EXPECT_EQ(agreed.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(agreed.message().substr(0, 11), "rank 0 of " + std::to_string(world));
  EXPECT_LT(agreed.message().size(), 1100u);
}

// A rank that does not reach a collective in time: the waiting ranks get DeadlineExceeded (not
// a hang), the communicator is aborted, and other communicators keep working. The late rank
// then joins, so the abandoned operation completes and MPI can be finalized cleanly.
TEST(MpiCommunicatorTest, AStalledRankIsADeadlineNotAHang) {
  auto stalled = MakeComm(std::chrono::milliseconds(500));
  auto healthy = MakeComm();
  ASSERT_NE(stalled, nullptr);
  ASSERT_NE(healthy, nullptr);
  const int world = stalled->world_size(), rank = stalled->rank();
  if (world < 2) GTEST_SKIP() << "needs 2 processes (run under mpirun -np 2)";
  std::vector<float> data(1000, 1.0f);
  const Tensor t(data.data(), DType::kF32, {1000});
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = stalled->AllReduceSum(t);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank != 1) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("AllReduceSum"), std::string::npos) << s;
    EXPECT_LT(waited, 1.4);
    EXPECT_TRUE(stalled->aborted());
    EXPECT_EQ(stalled->AllGather(t, t).code(), absl::StatusCode::kInvalidArgument);
    absl::Status again = stalled->AllReduceSum(t);
    EXPECT_EQ(again.code(), absl::StatusCode::kAborted) << again;
    EXPECT_NE(again.message().find("not complete after 500 ms"), std::string::npos) << again;
  } else {
    // Its partners gave up; their contributions were posted, so it still completes.
    EXPECT_TRUE(s.ok()) << s;
  }
  // Another communicator is unaffected (and its polling lets the abandoned operation finish).
  EXPECT_TRUE(healthy->AgreeOnStatus(absl::OkStatus()).ok());
  std::vector<float> one = {1.0f};
  ASSERT_TRUE(healthy->AllReduceSum(Tensor(one.data(), DType::kF32, {1})).ok());
  EXPECT_EQ(one[0], static_cast<float>(world));
}

// An agreement given its own, longer timeout waits for a rank later than the communicator's
// timeout (a slow model load) and leaves the communicator usable.
TEST(MpiCommunicatorTest, AnAgreementWithItsOwnTimeoutWaitsLongerThanTheCommunicators) {
  auto comm = MakeComm(std::chrono::milliseconds(300));
  ASSERT_NE(comm, nullptr);
  if (comm->world_size() < 2) GTEST_SKIP() << "needs 2 processes (run under mpirun -np 2)";
  if (comm->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(900));
  absl::Status agreed = comm->AgreeOnStatus(absl::OkStatus(), std::chrono::seconds(20));
  EXPECT_TRUE(agreed.ok()) << agreed;
  EXPECT_FALSE(comm->aborted());
  EXPECT_TRUE(comm->AgreeOnStatus(absl::OkStatus()).ok());
}

TEST(MpiCommunicatorTest, AbortFromAnotherThreadWakesAWaitingRank) {
  auto comm = MakeComm(std::chrono::seconds(60));
  auto sync = MakeComm();
  ASSERT_NE(comm, nullptr);
  ASSERT_NE(sync, nullptr);
  if (comm->world_size() < 2) GTEST_SKIP() << "needs 2 processes (run under mpirun -np 2)";
  std::string bytes;
  if (comm->rank() == 0) {
    // Rank 0 waits for a broadcast from rank 1 that rank 1 only sends after the abort.
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm->Abort(absl::CancelledError("shutting down"));
    });
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = comm->Broadcast(1, &bytes, std::chrono::milliseconds::max());
    aborter.join();
    EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
    EXPECT_NE(s.message().find("shutting down"), std::string::npos) << s;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              5.0);
  }
  EXPECT_TRUE(sync->AgreeOnStatus(absl::OkStatus()).ok());  // rank 0 has given up by now
  if (comm->rank() != 0) {
    bytes = "late";
    EXPECT_TRUE(comm->Broadcast(1, &bytes).ok());  // completes rank 0's abandoned receive
  }
  EXPECT_TRUE(sync->AgreeOnStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace blossom
