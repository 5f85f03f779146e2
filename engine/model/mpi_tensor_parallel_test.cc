// Tensor parallelism with one process per rank (launcher "mpi"), run by the sh_tests
// :mpi_tensor_parallel_test_np2 and _np4 as `mpirun -np N` on bloom-tiny-h4 (4 heads): every
// process creates the runner; rank 0 runs the test cases (the leader drives the runner, the
// scheduler side of the contract), the others serve its step plans in RunFollower until the
// leader's runner is destroyed at the end.
//
// Compared with TP = 1 in-process (launcher "threads") and the Hugging Face goldens, with the
// tolerances of tensor_parallel_test: the MPI all-reduce adds the ranks' partial sums in rank
// order, the same arithmetic as the in-process communicator, so logits agree with TP = 1 within
// 1e-5 and greedy continuations are token-identical.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/model_runner.h"
#include "engine/model/tp_test_util.h"
#include "gtest/gtest.h"
#include "kernels/mpi/mpi_communicator.h"
#include "tests/util/fixture_path.h"

namespace blossom {
namespace {

using tp_test::GreedyAll;
using tp_test::MaxAbsDiff;
using tp_test::PrefillAll;

constexpr char kModel[] = "bloom-tiny-h4";
constexpr float kTpTolerance = 1e-5f;      // vs TP = 1
// vs Hugging Face fp32: at least this, or twice HF fp32's own distance from an fp64 evaluation
// (both sides may be that far from it: bloom_model_test's kMinLogitTolerance).
constexpr double kMinGoldenTolerance = 1e-4;

ModelRunner* g_runner = nullptr;  // the leader's MPI runner, made by main()

ModelRunnerOptions Options(const std::string& launcher, int tp) {
  ModelRunnerOptions options;
  options.model_dir = FixturePath(std::string("models/") + kModel);
  options.launcher = launcher;
  options.tensor_parallel_size = tp;
  options.threads_per_rank = 1;
  options.prefetch = false;
  return options;
}

class MpiTensorParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(g_runner, nullptr);
    auto reference = ModelRunner::Create(Options("threads", 1));
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = std::move(*reference);
  }
  std::unique_ptr<ModelRunner> reference_;
};

TEST_F(MpiTensorParallelTest, LeaderDescribesTheWholeJob) {
  auto process = InitMpi();
  ASSERT_TRUE(process.ok()) << process.status();
  EXPECT_TRUE(g_runner->is_leader());
  EXPECT_EQ(g_runner->world_size(), process->world_size);
  EXPECT_EQ(g_runner->info().world_size, process->world_size);
  EXPECT_EQ(g_runner->info().rank, 0);
  EXPECT_EQ(g_runner->RunFollower().code(), absl::StatusCode::kFailedPrecondition);
  // The CPU backend has no device memory to size the KV cache from (decided without the
  // followers).
  EXPECT_EQ(g_runner->KvCacheBytesFromMemory().status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(MpiTensorParallelTest, LogitsMatchSingleRankAndTransformers) {
  const tp_test::Golden golden = tp_test::LoadGolden(kModel);
  ASSERT_GE(golden.logit_prompts.size(), 5u);
  std::vector<std::vector<float>> tp1 = PrefillAll(*reference_, golden.logit_prompts);
  std::vector<std::vector<float>> tpn = PrefillAll(*g_runner, golden.logit_prompts);
  float worst_tp = 0.0f, worst_golden = 0.0f;
  for (size_t i = 0; i < golden.logit_prompts.size(); ++i) {
    worst_tp = std::max(worst_tp, MaxAbsDiff(tpn[i], tp1[i]));
    worst_golden = std::max(worst_golden, MaxAbsDiff(tpn[i], golden.Tensor(golden.logit_names[i])));
  }
  EXPECT_LE(worst_tp, kTpTolerance);
  const double hf_fp32 = golden.json["fp64_reference"].value("hf_fp32_vs_fp64_max_abs_diff", 0.0);
  ASSERT_GT(hf_fp32, 0.0) << "golden.json lacks fp64_reference (tests/fixtures/generate.py)";
  EXPECT_LE(worst_golden, std::max(kMinGoldenTolerance, 2.0 * hf_fp32));
  std::printf("[mpi-tp] %s %d processes: max |logits - TP1| = %.3g, max |logits - HF| = %.3g\n",
              kModel, g_runner->world_size(), worst_tp, worst_golden);
  RecordProperty("max_abs_diff_vs_tp1", std::to_string(worst_tp));
  RecordProperty("max_abs_diff_vs_hf", std::to_string(worst_golden));
}

// Same partial sums, same rank-order reduction: processes and threads give the same bits.
TEST_F(MpiTensorParallelTest, LogitsAreBitIdenticalToTheInProcessRunnerOfTheSameSize) {
  auto threads = ModelRunner::Create(Options("threads", g_runner->world_size()));
  ASSERT_TRUE(threads.ok()) << threads.status();
  const tp_test::Golden golden = tp_test::LoadGolden(kModel);
  std::vector<std::vector<float>> in_process = PrefillAll(**threads, golden.logit_prompts);
  std::vector<std::vector<float>> processes = PrefillAll(*g_runner, golden.logit_prompts);
  ASSERT_EQ(in_process.size(), processes.size());
  for (size_t i = 0; i < processes.size(); ++i) EXPECT_EQ(processes[i], in_process[i]) << i;
}

TEST_F(MpiTensorParallelTest, GreedyContinuationsMatchTransformers) {
  const tp_test::Golden golden = tp_test::LoadGolden(kModel);
  ASSERT_GE(golden.greedy_prompts.size(), 4u);
  const int n = static_cast<int>(golden.greedy_new_ids[0].size());
  EXPECT_EQ(GreedyAll(*g_runner, golden.greedy_prompts, n), golden.greedy_new_ids);
  EXPECT_EQ(GreedyAll(*reference_, golden.greedy_prompts, n), golden.greedy_new_ids);
}

// The leader keeps the all-gathered logits on its backend (host memory here): the same bits as
// Forward into a host buffer and as the in-process runner of the same size, read in place by
// the host sampler or copied row by row.
TEST_F(MpiTensorParallelTest, KeptLogitsAreTheBitsForwardCopies) {
  auto threads = ModelRunner::Create(Options("threads", g_runner->world_size()));
  ASSERT_TRUE(threads.ok()) << threads.status();
  absl::StatusOr<std::unique_ptr<BatchSampler>> sampler = g_runner->MakeBatchSampler();
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  EXPECT_EQ((*sampler)->name(), "host");
  const int64_t vocab = g_runner->vocab_size();
  StepBatch batch;
  batch.max_blocks_per_seq = 2;
  const std::vector<int32_t> table = {1, 0};
  batch.AddSequence({5, 6, 7, 8, 9}, 0, table, true, /*all_logits=*/true);
  const int64_t rows = static_cast<int64_t>(batch.logit_rows.size());
  std::vector<float> host(rows * vocab), in_process(rows * vocab), copied(2 * vocab);
  for (ModelRunner* runner : {g_runner, threads->get()}) {
    ASSERT_TRUE(runner->AllocateKvCache(2, tp_test::kBlockSize).ok());
  }
  ASSERT_TRUE(g_runner->Forward(batch, host.data()).ok());
  ASSERT_TRUE((*threads)->Forward(batch, in_process.data()).ok());
  absl::StatusOr<Tensor> kept = g_runner->ForwardKeepLogits(batch);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->dim(0), rows);
  ASSERT_EQ(kept->dim(1), vocab);
  ASSERT_EQ(kept->device, DeviceKind::kHost);
  const float* data = static_cast<const float*>(kept->data);
  EXPECT_EQ(std::vector<float>(data, data + rows * vocab), host);
  EXPECT_EQ(host, in_process);
  ASSERT_TRUE(g_runner->CopyLogitsToHost(kept->Rows(2, 4), copied.data()).ok());
  EXPECT_EQ(copied, std::vector<float>(host.begin() + 2 * vocab, host.begin() + 4 * vocab));
}

TEST_F(MpiTensorParallelTest, BadStepFailsOnEveryRankAndTheNextStepWorks) {
  ASSERT_TRUE(g_runner->AllocateKvCache(4, tp_test::kBlockSize).ok());
  StepBatch bad;
  bad.max_blocks_per_seq = 2;
  std::vector<int32_t> table = {0, 1};
  bad.AddSequence({1, static_cast<int32_t>(g_runner->vocab_size())}, 0, table, true);
  std::vector<float> logits(g_runner->vocab_size());
  absl::Status s = g_runner->Forward(bad, logits.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s;
  // The leader refused the step before sending it to the other ranks: the group is in step.
  std::vector<std::vector<float>> tp1 = PrefillAll(*reference_, {{5, 6, 7}});
  std::vector<std::vector<float>> tpn = PrefillAll(*g_runner, {{5, 6, 7}});
  EXPECT_LE(MaxAbsDiff(tpn[0], tp1[0]), kTpTolerance);
}

TEST_F(MpiTensorParallelTest, KvAllocationFailureReachesTheLeaderAndARetryWorks) {
  // A pool no backend accepts: every rank fails, the leader reports the agreed error (the
  // first failing rank's); then a small pool works again on every rank.
  absl::Status s = g_runner->AllocateKvCache(0, tp_test::kBlockSize);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("rank 0 of "), std::string::npos) << s;
  std::vector<float> logits(g_runner->vocab_size());
  StepBatch batch;
  batch.max_blocks_per_seq = 1;
  std::vector<int32_t> table = {0};
  batch.AddSequence({5}, 0, table, true);
  EXPECT_EQ(g_runner->Forward(batch, logits.data()).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(g_runner->AllocateKvCache(2, tp_test::kBlockSize).ok());
  EXPECT_TRUE(g_runner->Forward(batch, logits.data()).ok());
}

TEST_F(MpiTensorParallelTest, LauncherOptionsAreValidated) {
  const int world = g_runner->world_size();
  // Refused from the options alone on whichever rank asks: no collective starts.
  auto mismatch = ModelRunner::Create(Options("mpi", world + 1));
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("must equal the MPI world size " +
                                             std::to_string(world)),
            std::string::npos)
      << mismatch.status();
  auto unknown = ModelRunner::Create(Options("slurm", world));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  // The one-process launcher has no followers.
  EXPECT_TRUE(reference_->is_leader());
  EXPECT_EQ(reference_->RunFollower().code(), absl::StatusCode::kFailedPrecondition);
  auto rank = ModelRunner::ProcessRank(Options("threads", 2));
  ASSERT_TRUE(rank.ok());
  EXPECT_EQ(*rank, 0);
}

}  // namespace
}  // namespace blossom

// Every process makes the runner; followers serve the leader's plans, the leader runs the cases.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  using blossom::ModelRunner;
  absl::StatusOr<blossom::MpiProcess> process = blossom::InitMpi();
  if (!process.ok()) {
    std::fprintf(stderr, "InitMpi: %s\n", process.status().ToString().c_str());
    return 1;
  }
  auto runner = ModelRunner::Create(blossom::Options("mpi", process->world_size));
  if (!runner.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", process->rank, runner.status().ToString().c_str());
    return 1;
  }
  if (!(*runner)->is_leader()) {
    // The leader's methods are refused here; then serve until the leader's runner is gone.
    std::vector<float> logits((*runner)->vocab_size());
    blossom::StepBatch batch;
    const absl::Status forward = (*runner)->Forward(batch, logits.data());
    const absl::Status kept = (*runner)->ForwardKeepLogits(batch).status();
    const absl::Status sampler = (*runner)->MakeBatchSampler().status();
    const absl::Status allocate = (*runner)->AllocateKvCache(1, 4);
    for (const absl::Status& s : {forward, kept, sampler, allocate}) {
      if (s.code() != absl::StatusCode::kFailedPrecondition) {
        std::fprintf(stderr, "rank %d: a follower accepted a leader call: %s\n", process->rank,
                     s.ToString().c_str());
        return 1;
      }
    }
    const absl::Status served = (*runner)->RunFollower();
    const absl::Status again = (*runner)->RunFollower();
    runner->reset();
    if (!served.ok() || again.code() != absl::StatusCode::kFailedPrecondition) {
      std::fprintf(stderr, "rank %d: RunFollower: %s, then %s\n", process->rank,
                   served.ToString().c_str(), again.ToString().c_str());
      return 1;
    }
    return 0;
  }
  blossom::g_runner = runner->get();
  const int result = RUN_ALL_TESTS();
  blossom::g_runner = nullptr;
  runner->reset();  // tells the followers to stop
  return result;
}
