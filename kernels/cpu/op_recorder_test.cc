#include "kernels/cpu/op_recorder.h"

#include <vector>

#include "gtest/gtest.h"

namespace blossom {
namespace {

TEST(OpRecorderTest, RunsNothingUntilReplayThenEveryOpInOrderOnEachReplay) {
  OpRecorder recorder;
  std::vector<int> trace;
  EXPECT_FALSE(recorder.Record([&] {
    trace.push_back(0);
    return absl::OkStatus();
  }));  // not capturing: the caller runs it
  ASSERT_TRUE(recorder.Begin().ok());
  EXPECT_TRUE(recorder.capturing());
  for (int i = 1; i <= 3; ++i) {
    EXPECT_TRUE(recorder.Record([&trace, i] {
      trace.push_back(i);
      return absl::OkStatus();
    }));
  }
  EXPECT_TRUE(trace.empty());
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = recorder.End();
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_FALSE(recorder.capturing());
  ASSERT_TRUE((*graph)->Replay().ok());
  ASSERT_TRUE((*graph)->Replay().ok());
  EXPECT_EQ(trace, (std::vector<int>{1, 2, 3, 1, 2, 3}));
}

TEST(OpRecorderTest, ReplayStopsAtTheFirstFailingOpAndReturnsItsError) {
  OpRecorder recorder;
  int ran_after = 0;
  ASSERT_TRUE(recorder.Begin().ok());
  recorder.Record([] { return absl::InvalidArgumentError("slot 9 outside the pool"); });
  recorder.Record([&] {
    ++ran_after;
    return absl::OkStatus();
  });
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = recorder.End();
  ASSERT_TRUE(graph.ok());
  const absl::Status status = (*graph)->Replay();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "slot 9 outside the pool");
  EXPECT_EQ(ran_after, 0);
}

TEST(OpRecorderTest, RefusesNestedBeginsAndAnEndWithoutBegin) {
  OpRecorder recorder;
  EXPECT_EQ(recorder.End().status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(recorder.Begin().ok());
  EXPECT_EQ(recorder.Begin().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(recorder.End().ok());
  // A new capture starts empty: the first graph's ops are not carried over.
  int runs = 0;
  ASSERT_TRUE(recorder.Begin().ok());
  recorder.Record([&] {
    ++runs;
    return absl::OkStatus();
  });
  absl::StatusOr<std::unique_ptr<StepGraph>> graph = recorder.End();
  ASSERT_TRUE(graph.ok());
  ASSERT_TRUE((*graph)->Replay().ok());
  EXPECT_EQ(runs, 1);
}

TEST(OpRecorderTest, RefusesOnlyWhileCapturingAndNamesWhat) {
  OpRecorder recorder;
  EXPECT_TRUE(recorder.RefuseWhileCapturing("CopyToDevice").ok());
  ASSERT_TRUE(recorder.Begin().ok());
  const absl::Status refused = recorder.RefuseWhileCapturing("CopyToDevice");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("CopyToDevice inside a step capture"), std::string::npos)
      << refused.message();
  ASSERT_TRUE(recorder.End().ok());
  EXPECT_TRUE(recorder.RefuseWhileCapturing("CopyToDevice").ok());
}

}  // namespace
}  // namespace blossom
