// The BatchSampler a ModelRunner hands out for the logits it keeps on its leader's backend
// (ModelRunner::MakeBatchSampler, ForwardKeepLogits): HostBatchSampler when that backend's memory
// is host memory (cpu), CudaBatchSampler on a CudaBackend (in builds with the CUDA backend,
// BLOSSOM_HAVE_CUDA; engine/model/BUILD's RUNNER_CUDA_DEFINES).
//
// A device sampler calls its backend (copies, kernels on its stream), so it must run on the
// thread that drives that backend. Runners whose ranks have threads of their own (threads, mpi)
// build it there and wrap it (BindSamplerToThread) so that every SampleBatch, and its
// destruction, is handed to that thread; a host sampler touches no backend and is not wrapped.
//
// The same header in every build.
#ifndef BLOSSOM_ENGINE_MODEL_RUNNER_SAMPLER_H_
#define BLOSSOM_ENGINE_MODEL_RUNNER_SAMPLER_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/sampling/batch_sampler.h"
#include "kernels/backend.h"

namespace blossom {

// Runs a task on the thread that drives a backend and waits for its status.
using RunOnBackendThread = std::function<absl::Status(const std::function<absl::Status()>&)>;

// The sampler for logits in `backend`'s memory, created on the calling thread. `backend` must
// outlive it. Unimplemented for a device backend this build has no sampler for; a CUDA
// sampler's own error (FailedPrecondition without a usable GPU) otherwise.
absl::StatusOr<std::unique_ptr<BatchSampler>> MakeSamplerForBackend(Backend* backend);

// `inner` whose SampleBatch calls and destruction go through `run`. `run` must stay callable
// until the returned sampler is destroyed.
std::unique_ptr<BatchSampler> BindSamplerToThread(std::unique_ptr<BatchSampler> inner,
                                                  RunOnBackendThread run);

// MakeSamplerForBackend for a backend driven by another thread: for host memory, the host sampler
// as is; otherwise created through `run` and bound to it (BindSamplerToThread).
absl::StatusOr<std::unique_ptr<BatchSampler>> MakeSamplerOnBackendThread(Backend* backend,
                                                                         RunOnBackendThread run);

}  // namespace blossom

#endif  // BLOSSOM_ENGINE_MODEL_RUNNER_SAMPLER_H_
