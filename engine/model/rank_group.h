// How the ranks of a tensor-parallel group in one process reach each other (RankGroup): the
// in-process ThreadCommunicatorGroup for the CPU backend, NCCL for CUDA; and the wrapper that
// orders a rank's NCCL collectives with its compute stream (also used by the MPI launcher).
//
// StreamOrderedCommunicator and NcclRankGroup exist where BLOSSOM_HAVE_CUDA is set
// (engine/model/BUILD's RUNNER_CUDA_DEFINES, on this target and every target including it).
#ifndef BLOSSOM_ENGINE_MODEL_RANK_GROUP_H_
#define BLOSSOM_ENGINE_MODEL_RANK_GROUP_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "kernels/communicator.h"
#include "kernels/cpu/thread_communicator.h"
#include "kernels/status_macros.h"

#ifdef BLOSSOM_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/nccl/nccl_communicator.h"
#endif

namespace blossom {

// How the ranks of a MultiRankRunner reach each other: the communicators their models use, and
// how a group that a failed step aborted is made usable again.
// Thread-safety: communicator(r) is used by rank r's thread; Abort may be called from any
// thread; Rearm only while every rank is idle; ReleaseRank(r) on rank r's thread.
class RankGroup {
 public:
  virtual ~RankGroup() = default;
  virtual Communicator* communicator(int rank) = 0;
  // Wakes every rank waiting in a collective with an error; called by a rank that failed.
  virtual void Abort(const absl::Status& reason) = 0;
  // After an aborted step, once every rank has released its part: makes collectives usable
  // again.
  virtual absl::Status Rearm() = 0;
  // Frees what belongs to rank r, on its thread (where its GPU is the current device): at
  // teardown, after rank r's model is gone, and after an abort, before Rearm.
  virtual void ReleaseRank(int rank) { (void)rank; }
};

// CPU: one in-process ThreadCommunicatorGroup.
class ThreadRankGroup : public RankGroup {
 public:
  explicit ThreadRankGroup(int world) : group_(world) {}
  Communicator* communicator(int rank) override { return group_.communicator(rank); }
  void Abort(const absl::Status& reason) override { group_.Abort(reason); }
  absl::Status Rearm() override {
    group_.Reset();
    return absl::OkStatus();
  }

 private:
  ThreadCommunicatorGroup group_;
};

#ifdef BLOSSOM_HAVE_CUDA

// Rank r's communicator for BloomModel: its NcclCommunicator, ordered with the rank's compute
// stream. BloomModel calls a collective right after enqueueing the kernels that produce its
// input, and enqueues the kernels that read its output right after it returns. Two cases:
//  - the NcclCommunicator is asynchronous, on the backend's own stream: the stream orders
//    everything, so collectives are forwarded as they are and the step's Fence() waits for them
//    (no host wait per collective);
//  - it is synchronous, on a stream of its own: the backend's stream is drained before each
//    collective (otherwise NCCL could read a buffer the backend is still writing), and the
//    collective returns once it has completed: two host waits per collective.
// Thread-safety: used by rank r's thread; Bind only while that thread is idle.
class StreamOrderedCommunicator : public Communicator {
 public:
  StreamOrderedCommunicator(Backend* backend, int rank, int world)
      : backend_(backend), rank_(rank), world_(world) {}
  void Bind(NcclCommunicator* nccl) { nccl_ = nccl; }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  absl::Status AllReduceSum(Tensor inout) override {
    BLOSSOM_RETURN_IF_ERROR(Ready());
    if (nccl_->synchronous()) BLOSSOM_RETURN_IF_ERROR(backend_->Synchronize());
    return nccl_->AllReduceSum(inout);
  }
  absl::Status AllGather(const Tensor& in, Tensor out) override {
    BLOSSOM_RETURN_IF_ERROR(Ready());
    if (nccl_->synchronous()) BLOSSOM_RETURN_IF_ERROR(backend_->Synchronize());
    return nccl_->AllGather(in, out);
  }
  absl::Status Fence() override {
    BLOSSOM_RETURN_IF_ERROR(Ready());
    return nccl_->Fence();
  }

 private:
  absl::Status Ready() const {
    if (nccl_ != nullptr) return absl::OkStatus();
    // RankLoop prefixes the rank.
    return absl::FailedPreconditionError(
        "no NCCL communicator: rebuilding them after an earlier failure did not succeed (the "
        "next failed step tries again)");
  }

  Backend* const backend_;
  const int rank_, world_;
  NcclCommunicator* nccl_ = nullptr;  // null between ReleaseRank and a successful Rearm
};

// CUDA: NCCL communicators over GPUs 0..world-1, created together by CreateAll. An aborted NCCL
// communicator cannot be reused, so Rearm builds a new set and rebinds every rank to it.
// Asynchronous (the default, --nccl_async_collectives): rank r's communicator enqueues on rank r's
// CudaBackend stream; synchronous: on a stream of its own (see StreamOrderedCommunicator).
// Invariant: wrappers_[r] forwards to comms_[r], or to nothing (failing every collective) when
// that was released and not rebuilt; every set of comms_ has the same mode and streams.
class NcclRankGroup : public RankGroup {
 public:
  // `backends[r]`: rank r's backend (a CudaBackend on GPU r); must outlive the group.
  // InvalidArgument when `asynchronous` and a backend is not a CudaBackend (no stream to order
  // collectives on), before any CUDA call.
  static absl::StatusOr<std::unique_ptr<RankGroup>> Create(const std::vector<Backend*>& backends,
                                                           bool asynchronous) {
    std::unique_ptr<NcclRankGroup> group(new NcclRankGroup());
    const int world = static_cast<int>(backends.size());
    group->options_.synchronous = !asynchronous;
    for (int r = 0; r < world; ++r) {
      group->wrappers_.push_back(
          std::make_unique<StreamOrderedCommunicator>(backends[r], r, world));
      if (!asynchronous) continue;
      const auto* cuda = dynamic_cast<const CudaBackend*>(backends[r]);
      if (cuda == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "asynchronous NCCL collectives need a CUDA backend on every rank; rank ", r,
            " has backend ", backends[r]->name()));
      }
      group->streams_.push_back(cuda->stream());
    }
    BLOSSOM_RETURN_IF_ERROR(group->Build());
    return std::unique_ptr<RankGroup>(std::move(group));
  }

  Communicator* communicator(int rank) override { return wrappers_[rank].get(); }

  void Abort(const absl::Status&) override {
    // comms_ does not change during a step (ReleaseRank and Rearm run only between steps).
    // NcclCommunicator::Abort is safe from any thread; an idle communicator is freed at once.
    for (const auto& comm : comms_)
      if (comm != nullptr) comm->Abort();
  }

  absl::Status Rearm() override {
    // The old set was aborted and released (ReleaseRank) by the ranks already.
    absl::Status built = Build();
    if (!built.ok()) {
      return absl::Status(built.code(), absl::StrCat("cannot rebuild the NCCL communicators "
                                                     "after a failed step: ",
                                                     built.message()));
    }
    return absl::OkStatus();
  }

  void ReleaseRank(int rank) override {
    // On the rank's thread, all ranks at once: finalizing a healthy communicator (teardown) may
    // wait for its peers to finalize theirs; an aborted one only destroys its own stream or
    // event, on the GPU that is current there. It runs before rank r's backend goes, whose
    // stream an asynchronous communicator enqueues on.
    wrappers_[rank]->Bind(nullptr);
    if (rank < static_cast<int>(comms_.size())) comms_[rank].reset();
  }

 private:
  NcclRankGroup() = default;

  absl::Status Build() {
    std::vector<int> devices(wrappers_.size());
    for (size_t r = 0; r < devices.size(); ++r) devices[r] = static_cast<int>(r);
    // On a thread of its own: CreateAll leaves the calling thread's current CUDA device at the
    // last GPU, which must not leak into the engine thread or a rank thread.
    absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> comms =
        absl::InternalError("NCCL CreateAll did not run");
    std::thread([&] { comms = NcclCommunicator::CreateAll(devices, options_, streams_); }).join();
    if (!comms.ok()) return comms.status();
    comms_ = std::move(*comms);
    for (size_t r = 0; r < wrappers_.size(); ++r) wrappers_[r]->Bind(comms_[r].get());
    return absl::OkStatus();
  }

  NcclOptions options_;
  std::vector<void*> streams_;  // rank r's CudaBackend stream (asynchronous), or empty
  std::vector<std::unique_ptr<StreamOrderedCommunicator>> wrappers_;
  std::vector<std::unique_ptr<NcclCommunicator>> comms_;
};
#endif  // BLOSSOM_HAVE_CUDA

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_RANK_GROUP_H_
