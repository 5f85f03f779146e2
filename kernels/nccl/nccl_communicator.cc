#include "kernels/nccl/nccl_communicator.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cuda_runtime.h"
#include "nccl.h"

namespace blossom {
namespace {

using Clock = std::chrono::steady_clock;

absl::StatusOr<ncclDataType_t> NcclType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF16:
      return ncclFloat16;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kI32:
      return ncclInt32;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL collectives do not support dtype ", DTypeName(dtype)));
  }
}

std::string CudaMessage(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

// Waits (spinning briefly, then sleeping) between polls, so a fast collective is not delayed by
// a sleep and a slow one does not burn a core.
class Poller {
 public:
  void Pause() {
    if (++polls_ < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  int polls_ = 0;
};

// Polls a non-blocking communicator until its pending operation (init, enqueue, finalize) is no
// longer in progress. Returns the final NCCL result, or ncclInProgress on timeout / abort.
ncclResult_t WaitNotInProgress(ncclComm_t comm, Clock::time_point deadline,
                               const std::atomic<bool>* abort_requested) {
  Poller poller;
  while (true) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (Clock::now() > deadline) return ncclInProgress;
    if (abort_requested != nullptr && abort_requested->load()) return ncclInProgress;
    poller.Pause();
  }
}

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once; we poll with a deadline instead
  return config;
}

}  // namespace

struct NcclCommunicator::Impl {
  int rank = 0, world = 1, device = 0;
  std::chrono::milliseconds timeout{0};
  bool synchronous = true;
  cudaStream_t stream = nullptr;
  bool owns_stream = false;
  // Asynchronous mode: recorded on the stream after every collective (created with the
  // communicator, destroyed with it).
  cudaEvent_t last_done = nullptr;
  std::atomic<bool> abort_requested{false};

  // Held by the owning thread for the whole of a collective (and by the destructor), so that
  // Abort() from another thread never frees the communicator under a running NCCL call: it
  // either takes the lock and aborts at once, or sets abort_requested for the poller.
  std::mutex mutex;
  ncclComm_t comm = nullptr;  // guarded by mutex; null once aborted or destroyed
  bool aborted = false;       // guarded by mutex
  // Asynchronous mode: collectives enqueued since the last completed Fence(), and the name of
  // the last one (what a Fence() that times out reports). Guarded by mutex.
  int64_t outstanding = 0;
  const char* last_op = "";

  std::string Where(absl::string_view op) const {
    return absl::StrCat("NCCL ", op, " on rank ", rank, " of ", world, " (GPU ", device, ")");
  }
  void AbortLocked() {
    if (comm != nullptr) ncclCommAbort(comm);  // never blocks; frees the communicator
    comm = nullptr;
    aborted = true;
  }
  // A failed NCCL call: the communicator is unusable (a peer may be stuck), so abort it.
  absl::Status FailLocked(absl::string_view op, ncclResult_t r) {
    std::string detail = ncclGetErrorString(r);
    if (comm != nullptr) {
      const char* last = ncclGetLastError(comm);
      if (last != nullptr && last[0] != '\0') absl::StrAppend(&detail, " (", last, ")");
    }
    AbortLocked();
    return absl::InternalError(
        absl::StrCat(Where(op), " failed: ", detail, "; the communicator is aborted"));
  }
  absl::Status TimeoutOrAbortLocked(absl::string_view op) {
    const bool requested = abort_requested.load();
    AbortLocked();
    if (requested) {
      return absl::AbortedError(absl::StrCat(Where(op), ": the communicator was aborted"));
    }
    return absl::DeadlineExceededError(absl::StrCat(
        Where(op), " did not complete within ", timeout.count(),
        " ms (a rank died or never called it); the communicator is aborted"));
  }
  absl::Status Begin(absl::string_view op) {
    if (aborted) {
      return absl::AbortedError(
          absl::StrCat(Where(op), ": the communicator was aborted earlier"));
    }
    if (abort_requested.load()) return TimeoutOrAbortLocked(op);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) {
      return absl::InternalError(absl::StrCat(Where(op), ": cudaSetDevice: ", CudaMessage(e)));
    }
    return absl::OkStatus();
  }
  // After enqueueing: waits for the enqueue itself (a non-blocking communicator may report
  // ncclInProgress while it sets the operation up). Synchronous mode: then for the collective;
  // asynchronous: records the event that Fence() waits for, and returns.
  absl::Status FinishLocked(const char* op, ncclResult_t enqueued, Clock::time_point deadline) {
    if (enqueued == ncclInProgress) {
      enqueued = WaitNotInProgress(comm, deadline, &abort_requested);
      if (enqueued == ncclInProgress) return TimeoutOrAbortLocked(op);
    }
    if (enqueued != ncclSuccess) return FailLocked(op, enqueued);
    if (synchronous) return WaitLocked(op, /*event=*/nullptr, deadline);
    // A failure a peer has reported already fails this collective rather than the next Fence():
    // one non-blocking query, no wait.
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return FailLocked(op, r);
    if (state != ncclSuccess && state != ncclInProgress) return FailLocked(op, state);
    cudaError_t e = cudaEventRecord(last_done, stream);
    if (e != cudaSuccess) {
      AbortLocked();  // a peer may be inside the collective we can no longer track
      return absl::InternalError(absl::StrCat(Where(op), ": cudaEventRecord: ", CudaMessage(e),
                                              "; the communicator is aborted"));
    }
    ++outstanding;
    last_op = op;
    return absl::OkStatus();
  }
  // Polls until `event` (null: all work on the stream) has completed, checking for asynchronous
  // NCCL errors from any rank, an abort request and the deadline.
  absl::Status WaitLocked(absl::string_view op, cudaEvent_t event, Clock::time_point deadline) {
    Poller poller;
    while (true) {
      cudaError_t q = event != nullptr ? cudaEventQuery(event) : cudaStreamQuery(stream);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) {
        AbortLocked();
        return absl::InternalError(absl::StrCat(Where(op), ": CUDA error: ", CudaMessage(q),
                                                "; the communicator is aborted"));
      }
      ncclResult_t state = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm, &state);
      if (r != ncclSuccess) return FailLocked(op, r);
      if (state != ncclSuccess && state != ncclInProgress) return FailLocked(op, state);
      if (abort_requested.load() || Clock::now() > deadline) return TimeoutOrAbortLocked(op);
      poller.Pause();
    }
  }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->comm != nullptr) {
    // Finalize flushes outstanding work; bounded by the timeout, then abort (never hang).
    cudaSetDevice(impl_->device);
    ncclResult_t r = ncclCommFinalize(impl_->comm);
    if (r == ncclInProgress) {
      r = WaitNotInProgress(impl_->comm, Clock::now() + impl_->timeout, &impl_->abort_requested);
    }
    if (r == ncclSuccess) {
      ncclCommDestroy(impl_->comm);
    } else {
      ncclCommAbort(impl_->comm);
    }
    impl_->comm = nullptr;
  }
  if (impl_->last_done != nullptr) {
    cudaSetDevice(impl_->device);
    cudaEventDestroy(impl_->last_done);  // released once recorded work completes; no wait
  }
  if (impl_->owns_stream && impl_->stream != nullptr) cudaStreamDestroy(impl_->stream);
}

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::world_size() const { return impl_->world; }
int NcclCommunicator::device() const { return impl_->device; }
void* NcclCommunicator::stream() const { return impl_->stream; }
bool NcclCommunicator::synchronous() const { return impl_->synchronous; }

void NcclCommunicator::Abort() {
  impl_->abort_requested.store(true);
  std::unique_lock<std::mutex> lock(impl_->mutex, std::try_to_lock);
  if (lock.owns_lock()) impl_->AbortLocked();
  // Otherwise a collective is running: its poller sees abort_requested and aborts.
}

bool NcclCommunicator::aborted() const {
  if (impl_->abort_requested.load()) return true;
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->aborted;
}

absl::StatusOr<std::string> NcclCommunicator::NewUniqueId() {
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) {
    return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", ncclGetErrorString(r)));
  }
  static_assert(sizeof(id.internal) == kUniqueIdBytes, "NCCL unique id size changed");
  return std::string(id.internal, sizeof(id.internal));
}

namespace {

// Creates the communicator's stream (or adopts the caller's) on the current device, and in
// asynchronous mode the event that marks the last collective.
absl::Status SetUpStream(int device, void* stream, bool synchronous, cudaStream_t* out,
                         bool* owns, cudaEvent_t* last_done) {
  if (stream != nullptr) {
    *out = static_cast<cudaStream_t>(stream);
    *owns = false;
  } else {
    cudaError_t e = cudaStreamCreateWithFlags(out, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      return absl::InternalError(
          absl::StrCat("NCCL: cannot create a stream on GPU ", device, ": ", CudaMessage(e)));
    }
    *owns = true;
  }
  if (!synchronous) {
    cudaError_t e = cudaEventCreateWithFlags(last_done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      return absl::InternalError(
          absl::StrCat("NCCL: cannot create an event on GPU ", device, ": ", CudaMessage(e)));
    }
  }
  return absl::OkStatus();
}

// The asynchronous mode orders collectives on the caller's stream; without one there is nothing
// to order them with (and no stream a Fence() could stand for).
absl::Status CheckMode(const NcclOptions& options, bool has_streams) {
  if (!options.synchronous && !has_streams) {
    return absl::InvalidArgumentError(
        "NCCL asynchronous collectives need the stream the caller's kernels run on "
        "(e.g. CudaBackend::stream()); none was given");
  }
  return absl::OkStatus();
}

absl::Status CheckDevice(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("NCCL: no usable CUDA device: ", CudaMessage(e)));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL: GPU ", device, " does not exist (", count, " visible)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const std::string& unique_id, int rank, int world_size, int device,
    const NcclOptions& options) {
  if (unique_id.size() != kUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL unique id must be ", kUniqueIdBytes,
                                                   " bytes, got ", unique_id.size()));
  }
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL: rank ", rank, " is outside a world of ", world_size));
  }
  if (absl::Status s = CheckMode(options, options.stream != nullptr); !s.ok()) return s;
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->world = world_size;
  impl->device = device;
  impl->timeout = options.timeout;
  impl->synchronous = options.synchronous;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat(impl->Where("init"), ": cudaSetDevice: ",
                                            CudaMessage(e)));
  }
  // From here the destructor cleans up the stream and event (and the communicator, once it
  // exists).
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(std::move(impl)));
  Impl& m = *comm->impl_;
  if (absl::Status s = SetUpStream(device, options.stream, m.synchronous, &m.stream,
                                   &m.owns_stream, &m.last_done);
      !s.ok()) {
    return s;
  }
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), kUniqueIdBytes);
  ncclConfig_t config = NonBlockingConfig();
  std::lock_guard<std::mutex> lock(m.mutex);
  ncclResult_t r = ncclCommInitRankConfig(&m.comm, world_size, id, rank, &config);
  if (r == ncclInProgress || (r == ncclSuccess && m.comm != nullptr)) {
    r = WaitNotInProgress(m.comm, Clock::now() + options.timeout, &m.abort_requested);
    if (r == ncclInProgress) return m.TimeoutOrAbortLocked("init");
  }
  if (r != ncclSuccess) return m.FailLocked("init", r);
  return comm;
}

absl::StatusOr<std::vector<std::unique_ptr<NcclCommunicator>>> NcclCommunicator::CreateAll(
    const std::vector<int>& devices, const NcclOptions& options,
    const std::vector<void*>& streams) {
  if (devices.empty()) return absl::InvalidArgumentError("NCCL CreateAll: no devices");
  if (options.stream != nullptr) {
    return absl::InvalidArgumentError(
        "NCCL CreateAll: each rank needs its own stream (pass one per device in `streams`)");
  }
  if (!streams.empty() && streams.size() != devices.size()) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL CreateAll: ", streams.size(),
                                                   " streams for ", devices.size(), " devices"));
  }
  for (void* stream : streams) {
    if (stream == nullptr) return absl::InvalidArgumentError("NCCL CreateAll: a null stream");
  }
  if (absl::Status s = CheckMode(options, !streams.empty()); !s.ok()) return s;
  for (int d : devices)
    if (absl::Status s = CheckDevice(d); !s.ok()) return s;
  absl::StatusOr<std::string> id_bytes = NewUniqueId();
  if (!id_bytes.ok()) return id_bytes.status();
  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes->data(), kUniqueIdBytes);
  const int world = static_cast<int>(devices.size());

  std::vector<std::unique_ptr<NcclCommunicator>> comms;
  for (int r = 0; r < world; ++r) {
    auto impl = std::make_unique<Impl>();
    impl->rank = r;
    impl->world = world;
    impl->device = devices[r];
    impl->timeout = options.timeout;
    impl->synchronous = options.synchronous;
    cudaSetDevice(devices[r]);
    comms.push_back(std::unique_ptr<NcclCommunicator>(new NcclCommunicator(std::move(impl))));
    Impl& m = *comms.back()->impl_;
    if (absl::Status s = SetUpStream(devices[r], streams.empty() ? nullptr : streams[r],
                                     m.synchronous, &m.stream, &m.owns_stream, &m.last_done);
        !s.ok()) {
      return s;
    }
  }
  // One thread initialises every rank inside a group, as ncclCommInitAll does internally;
  // non-blocking so a failure cannot hang us.
  ncclResult_t r = ncclGroupStart();
  for (int i = 0; i < world && (r == ncclSuccess || r == ncclInProgress); ++i) {
    cudaSetDevice(devices[i]);
    ncclConfig_t config = NonBlockingConfig();
    r = ncclCommInitRankConfig(&comms[i]->impl_->comm, world, id, i, &config);
  }
  ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess || r == ncclInProgress) r = end;
  const Clock::time_point deadline = Clock::now() + options.timeout;
  for (int i = 0; i < world && (r == ncclSuccess || r == ncclInProgress); ++i) {
    Impl& m = *comms[i]->impl_;
    if (m.comm == nullptr) break;
    r = WaitNotInProgress(m.comm, deadline, nullptr);
  }
  if (r != ncclSuccess) {
    absl::Status error;
    for (auto& c : comms) {
      std::lock_guard<std::mutex> lock(c->impl_->mutex);
      absl::Status s = r == ncclInProgress ? c->impl_->TimeoutOrAbortLocked("init (all ranks)")
                                           : c->impl_->FailLocked("init (all ranks)", r);
      if (error.ok()) error = s;
    }
    return error;
  }
  return comms;
}

absl::Status NcclCommunicator::AllReduceSum(Tensor inout) {
  static constexpr char kOp[] = "AllReduceSum";
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (absl::Status s = m.Begin(kOp); !s.ok()) return s;
  if (inout.device != DeviceKind::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(m.Where(kOp), ": needs a CUDA tensor"));
  }
  absl::StatusOr<ncclDataType_t> type = NcclType(inout.dtype);
  if (!type.ok()) return type.status();
  const Clock::time_point deadline = Clock::now() + m.timeout;
  ncclResult_t r = ncclAllReduce(inout.data, inout.data, static_cast<size_t>(inout.numel()),
                                 *type, ncclSum, m.comm, m.stream);
  return m.FinishLocked(kOp, r, deadline);
}

absl::Status NcclCommunicator::AllGather(const Tensor& in, Tensor out) {
  static constexpr char kOp[] = "AllGather";
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (absl::Status s = m.Begin(kOp); !s.ok()) return s;
  if (in.device != DeviceKind::kCuda || out.device != DeviceKind::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(m.Where(kOp), ": needs CUDA tensors"));
  }
  if (out.dtype != in.dtype || out.numel() != in.numel() * m.world) {
    return absl::InvalidArgumentError(absl::StrCat(m.Where(kOp), ": output ", out.ShapeString(),
                                                   " cannot hold ", m.world, " x ",
                                                   in.ShapeString()));
  }
  absl::StatusOr<ncclDataType_t> type = NcclType(in.dtype);
  if (!type.ok()) return type.status();
  const Clock::time_point deadline = Clock::now() + m.timeout;
  ncclResult_t r = ncclAllGather(in.data, out.data, static_cast<size_t>(in.numel()), *type,
                                 m.comm, m.stream);
  return m.FinishLocked(kOp, r, deadline);
}

absl::Status NcclCommunicator::Fence() {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (m.synchronous) return absl::OkStatus();  // every collective completed before it returned
  if (m.outstanding == 0) return absl::OkStatus();  // an aborted one fails its next collective
  // Errors name the collective the stream has not passed (the last one issued, or one before it).
  const std::string what =
      absl::StrCat(m.last_op, " (the last of ", m.outstanding, " collectives since the previous "
                   "fence)");
  if (absl::Status s = m.Begin(what); !s.ok()) return s;
  const Clock::time_point deadline = Clock::now() + m.timeout;
  if (absl::Status s = m.WaitLocked(what, m.last_done, deadline); !s.ok()) return s;
  m.outstanding = 0;
  return absl::OkStatus();
}

}  // namespace blossom
