#include "kernels/cpu/thread_communicator.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"

namespace blossom {

class ThreadCommunicatorGroup::RankCommunicator : public Communicator {
 public:
  RankCommunicator(ThreadCommunicatorGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  absl::Status AllReduceSum(Tensor inout) override { return group_->AllReduceSum(rank_, inout); }
  absl::Status AllGather(const Tensor& in, Tensor out) override {
    return group_->AllGather(rank_, in, out);
  }

 private:
  ThreadCommunicatorGroup* const group_;
  const int rank_;
};

ThreadCommunicatorGroup::ThreadCommunicatorGroup(int world_size, std::chrono::milliseconds timeout)
    : world_size_(std::max(1, world_size)), timeout_(timeout), slots_(world_size_) {
  for (int r = 0; r < world_size_; ++r)
    communicators_.push_back(std::make_unique<RankCommunicator>(this, r));
}

ThreadCommunicatorGroup::~ThreadCommunicatorGroup() = default;

Communicator* ThreadCommunicatorGroup::communicator(int rank) const {
  return communicators_[rank].get();
}

void ThreadCommunicatorGroup::AbortLocked(const absl::Status& reason) {
  if (!aborted_) {
    aborted_ = true;
    abort_reason_ = reason;
  }
  cv_.notify_all();
}

void ThreadCommunicatorGroup::Abort(const absl::Status& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  AbortLocked(reason.ok() ? absl::AbortedError("aborted") : reason);
}

bool ThreadCommunicatorGroup::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

void ThreadCommunicatorGroup::Reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  aborted_ = false;
  abort_reason_ = absl::OkStatus();
  arrived_ = 0;
  ++generation_;  // nobody waits now; a fresh generation for clarity in debugging
}

absl::Status ThreadCommunicatorGroup::Rendezvous(const char* op, int rank,
                                                 const std::function<void()>& on_complete) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto aborted_error = [&] {
    return absl::AbortedError(absl::StrCat(op, " on rank ", rank, " of ", world_size_,
                                           ": the communicator group was aborted: ",
                                           abort_reason_.message()));
  };
  if (aborted_) return aborted_error();
  const uint64_t generation = generation_;
  if (++arrived_ == world_size_) {
    arrived_ = 0;
    if (on_complete) on_complete();
    ++generation_;
    cv_.notify_all();
    return absl::OkStatus();
  }
  cv_.wait_for(lock, timeout_, [&] { return generation_ != generation || aborted_; });
  if (generation_ != generation) return absl::OkStatus();  // completed (even if aborted since)
  if (aborted_) return aborted_error();
  absl::Status timeout = absl::DeadlineExceededError(absl::StrCat(
      op, " on rank ", rank, " of ", world_size_, ": only ", arrived_, " of ", world_size_,
      " ranks arrived within ",
      std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count(),
      " ms (a rank failed or never called it); the communicator group is aborted"));
  AbortLocked(timeout);
  return timeout;
}

absl::Status ThreadCommunicatorGroup::CheckSlots(const char* op) const {
  const Slot& first = slots_[0];
  for (int r = 1; r < world_size_; ++r) {
    const Slot& s = slots_[r];
    if (s.op != first.op || s.dtype != first.dtype || s.numel != first.numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": ranks disagree on the collective: rank 0 called ",
          first.op == Op::kAllReduceSum ? "AllReduceSum" : "AllGather", " with ", first.numel,
          " ", DTypeName(first.dtype), " elements, rank ", r, " called ",
          s.op == Op::kAllReduceSum ? "AllReduceSum" : "AllGather", " with ", s.numel, " ",
          DTypeName(s.dtype), " elements"));
    }
  }
  return absl::OkStatus();
}

absl::Status ThreadCommunicatorGroup::AllReduceSum(int rank, Tensor inout) {
  static constexpr char kOp[] = "AllReduceSum";
  if (inout.device != DeviceKind::kHost || !IsFloat(inout.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": needs a host F32, F16 or BF16 tensor, got ", DTypeName(inout.dtype)));
  }
  const int64_t n = inout.numel();
  slots_[rank] = Slot{Op::kAllReduceSum, inout.data, inout.dtype, n};
  absl::Status s = Rendezvous(kOp, rank, [&] {
    int64_t most = 0;
    for (const Slot& slot : slots_) most = std::max(most, slot.numel);
    result_.resize(static_cast<size_t>(most));
  });
  if (!s.ok()) return s;
  absl::Status check = CheckSlots(kOp);
  if (check.ok()) {
    // This rank's chunk, summed over ranks in rank order: one fixed order for every element.
    const int64_t begin = n * rank / world_size_, end = n * (rank + 1) / world_size_;
    float* acc = result_.data();
    if (inout.dtype == DType::kF32) {
      std::memcpy(acc + begin, static_cast<const float*>(slots_[0].data) + begin,
                  (end - begin) * sizeof(float));
      for (int r = 1; r < world_size_; ++r) {
        const float* src = static_cast<const float*>(slots_[r].data);
        for (int64_t i = begin; i < end; ++i) acc[i] += src[i];
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        float sum = LoadAsFloat(slots_[0].data, inout.dtype, i);
        for (int r = 1; r < world_size_; ++r) sum += LoadAsFloat(slots_[r].data, inout.dtype, i);
        acc[i] = sum;
      }
    }
  }
  // Nobody writes its buffer until every rank has read all of them (and result_ is complete).
  s = Rendezvous(kOp, rank, nullptr);
  if (!check.ok()) return check;
  if (!s.ok()) return s;
  ConvertFromF32(result_.data(), inout.data, inout.dtype, static_cast<size_t>(n));
  return absl::OkStatus();
}

absl::Status ThreadCommunicatorGroup::AllGather(int rank, const Tensor& in, Tensor out) {
  static constexpr char kOp[] = "AllGather";
  if (in.device != DeviceKind::kHost || out.device != DeviceKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": needs host tensors"));
  }
  if (out.dtype != in.dtype || out.numel() != in.numel() * world_size_) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": output ", DTypeName(out.dtype), " ", out.ShapeString(), " cannot hold ",
        world_size_, " x ", DTypeName(in.dtype), " ", in.ShapeString()));
  }
  slots_[rank] = Slot{Op::kAllGather, in.data, in.dtype, in.numel()};
  absl::Status s = Rendezvous(kOp, rank, nullptr);
  if (!s.ok()) return s;
  absl::Status check = CheckSlots(kOp);
  if (check.ok()) {
    const size_t bytes = in.bytes();
    for (int r = 0; r < world_size_; ++r) {
      char* dst = static_cast<char*>(out.data) + r * bytes;
      if (dst != slots_[r].data) std::memcpy(dst, slots_[r].data, bytes);
    }
  }
  // Nobody may change its input until every rank has copied it.
  s = Rendezvous(kOp, rank, nullptr);
  if (!check.ok()) return check;
  return s;
}

}  // namespace blossom
