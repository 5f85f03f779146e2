#include "kernels/mpi/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/dtype.h"

namespace blossom {
namespace {

std::mutex g_init_mutex;
bool g_we_initialized = false;  // guarded by g_init_mutex
bool g_finalized = false;       // guarded by g_init_mutex
// Requests an aborted communicator left pending. MPI_Finalize synchronises with every process
// (Open MPI), so it runs only if these have completed since (a late rank caught up); otherwise a
// peer may be gone and the process exits without it.
std::mutex g_leaked_mutex;
std::vector<MPI_Request>* g_leaked = new std::vector<MPI_Request>();  // guarded; never freed

void LeakRequest(MPI_Request request) {
  std::lock_guard<std::mutex> lock(g_leaked_mutex);
  g_leaked->push_back(request);
}

// True when every leaked request completed within `patience`.
bool LeakedRequestsDone(std::chrono::milliseconds patience) {
  std::lock_guard<std::mutex> lock(g_leaked_mutex);
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!g_leaked->empty()) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(g_leaked->size()), g_leaked->data(), &done,
                    MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      return false;
    }
    if (done) {
      g_leaked->clear();
      return true;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return absl::StrCat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

absl::Status MpiError(const char* op, int code) {
  return absl::UnavailableError(
      absl::StrCat(op, ": MPI error: ", MpiErrorString(code),
                   " (a peer process died or the network failed)"));
}

void FinalizeAtExit() { FinalizeMpi(); }

constexpr size_t kStatusRecordBytes = 1024;  // int32 code + message, NUL-terminated

}  // namespace

absl::StatusOr<MpiProcess> InitMpi() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  static MpiProcess* process = nullptr;  // the answer, computed once
  if (process != nullptr) return *process;
  if (g_finalized) return absl::FailedPreconditionError("InitMpi after FinalizeMpi");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) return MpiError("MPI_Init_thread", rc);
    g_we_initialized = true;
    std::atexit(FinalizeAtExit);
    if (provided < MPI_THREAD_SERIALIZED) {
      return absl::InternalError(
          "MPI does not provide MPI_THREAD_SERIALIZED (the runner calls MPI from the engine "
          "thread and the main thread, one at a time)");
    }
  }
  // Errors are returned to the caller (and become absl errors), never a job abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MpiProcess p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.world_size);
  MPI_Comm local;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, p.rank, MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS) return MpiError("MPI_Comm_split_type", rc);
  MPI_Comm_rank(local, &p.local_rank);
  MPI_Comm_size(local, &p.local_size);
  MPI_Comm_free(&local);
  process = new MpiProcess(p);
  return p;
}

void FinalizeMpi() {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  if (!g_we_initialized || g_finalized) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (!LeakedRequestsDone(std::chrono::seconds(2))) {
    std::fprintf(stderr,
                 "blossom: MPI operations of an aborted communicator never completed (a peer "
                 "process is gone or stuck); exiting without MPI_Finalize\n");
    return;
  }
  g_finalized = true;
  MPI_Finalize();
}

struct MpiCommunicator::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int world = 1;
  std::chrono::milliseconds timeout{0};
  // Set when an operation was left pending: MPI may still read or write the buffers below (and
  // the communicator), so the destructor leaks this whole Impl instead of freeing them.
  bool request_pending = false;
  std::atomic<bool> aborted{false};
  std::mutex reason_mutex;
  absl::Status abort_reason;  // guarded by reason_mutex
  // MPI-owned-while-pending buffers: every operation works on these, never on a caller's memory.
  std::vector<char> buffer;
  int64_t size = 0;

  absl::Status AbortedError(const char* op) {
    std::lock_guard<std::mutex> lock(reason_mutex);
    return absl::AbortedError(absl::StrCat(op, " on MPI rank ", rank, " of ", world,
                                           ": the communicator was aborted: ",
                                           abort_reason.message()));
  }

  void SetAborted(const absl::Status& reason) {
    {
      std::lock_guard<std::mutex> lock(reason_mutex);
      if (!aborted.load()) abort_reason = reason;
    }
    aborted.store(true);
  }

  // The operation on `request` stays pending: MPI owns the buffers from now on.
  void Leave(MPI_Request request) {
    request_pending = true;
    LeakRequest(request);
  }

  // Polls `request` until it completes, fails, times out or the communicator is aborted. Yields
  // for the first milliseconds (a collective inside a step usually completes by then), then
  // sleeps with a growing interval (at most 1 ms) so an idle follower costs no CPU.
  absl::Status Wait(MPI_Request* request, const char* op, std::chrono::milliseconds limit) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    while (true) {
      int done = 0;
      const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        Leave(*request);
        absl::Status error = MpiError(op, rc);
        SetAborted(error);
        return error;
      }
      if (done) return absl::OkStatus();
      if (aborted.load()) {
        Leave(*request);
        return AbortedError(op);
      }
      const auto elapsed = Clock::now() - start;
      if (limit != std::chrono::milliseconds::max() && elapsed > limit) {
        Leave(*request);
        absl::Status error = absl::DeadlineExceededError(absl::StrCat(
            op, " on MPI rank ", rank, " of ", world, ": not complete after ", limit.count(),
            " ms (a rank died, hangs or never called it); the communicator is aborted"));
        SetAborted(error);
        return error;
      }
      if (elapsed < std::chrono::milliseconds(5)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::min<Clock::duration>(elapsed / 16,
                                                               std::chrono::milliseconds(1)));
      }
    }
  }

  absl::Status Ready(const char* op) {
    if (aborted.load()) return AbortedError(op);
    return absl::OkStatus();
  }

  // All-gathers `bytes` per rank: this rank's part must already be at buffer[rank * bytes].
  absl::Status GatherInPlace(const char* op, int64_t bytes, std::chrono::milliseconds limit) {
    if (bytes > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", bytes,
                                                     " bytes per rank exceed MPI's int count"));
    }
    MPI_Request request;
    const int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer.data(),
                                  static_cast<int>(bytes), MPI_BYTE, comm, &request);
    if (rc != MPI_SUCCESS) {
      absl::Status error = MpiError(op, rc);
      SetAborted(error);
      return error;
    }
    return Wait(&request, op, limit);
  }
};

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiCommunicator::~MpiCommunicator() {
  if (impl_->request_pending) {
    (void)impl_.release();  // MPI may still touch its buffers: leaked on purpose
    return;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(
    const MpiOptions& options) {
  static constexpr char kOp[] = "MPI_Comm_idup";
  absl::StatusOr<MpiProcess> process = InitMpi();
  if (!process.ok()) return process.status();
  auto impl = std::make_unique<Impl>();
  impl->rank = process->rank;
  impl->world = process->world_size;
  impl->timeout = options.timeout;
  // Non-blocking, so a process that never joins is a timeout rather than a hang.
  MPI_Request request;
  int rc = MPI_Comm_idup(MPI_COMM_WORLD, &impl->comm, &request);
  if (rc != MPI_SUCCESS) return MpiError(kOp, rc);
  absl::Status s = impl->Wait(&request, kOp, impl->timeout);
  if (!s.ok()) {
    (void)impl.release();  // the pending duplicate may still write impl->comm
    return s;
  }
  rc = MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return MpiError("MPI_Comm_set_errhandler", rc);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl)));
}

int MpiCommunicator::rank() const { return impl_->rank; }
int MpiCommunicator::world_size() const { return impl_->world; }

absl::Status MpiCommunicator::AllReduceSum(Tensor inout) {
  static constexpr char kOp[] = "AllReduceSum";
  if (inout.device != DeviceKind::kHost || !IsFloat(inout.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": needs a host F32, F16 or BF16 tensor, got ", DTypeName(inout.dtype)));
  }
  if (impl_->world == 1) return absl::OkStatus();
  absl::Status s = impl_->Ready(kOp);
  if (!s.ok()) return s;
  const int64_t n = inout.numel();
  const int64_t bytes = static_cast<int64_t>(inout.bytes());
  impl_->buffer.resize(static_cast<size_t>(bytes * impl_->world));
  std::memcpy(impl_->buffer.data() + bytes * impl_->rank, inout.data, static_cast<size_t>(bytes));
  s = impl_->GatherInPlace(kOp, bytes, impl_->timeout);
  if (!s.ok()) return s;
  // Rank order, in fp32, one rounding at the end: ThreadCommunicatorGroup's exact arithmetic.
  const char* parts = impl_->buffer.data();
  if (inout.dtype == DType::kF32) {
    float* out = static_cast<float*>(inout.data);
    std::memcpy(out, parts, static_cast<size_t>(bytes));
    for (int r = 1; r < impl_->world; ++r) {
      const float* src = reinterpret_cast<const float*>(parts + r * bytes);
      for (int64_t i = 0; i < n; ++i) out[i] += src[i];
    }
    return absl::OkStatus();
  }
  std::vector<float> sum(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float acc = LoadAsFloat(parts, inout.dtype, i);
    for (int r = 1; r < impl_->world; ++r) acc += LoadAsFloat(parts + r * bytes, inout.dtype, i);
    sum[static_cast<size_t>(i)] = acc;
  }
  ConvertFromF32(sum.data(), inout.data, inout.dtype, static_cast<size_t>(n));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllGather(const Tensor& in, Tensor out) {
  static constexpr char kOp[] = "AllGather";
  if (in.device != DeviceKind::kHost || out.device != DeviceKind::kHost) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": needs host tensors"));
  }
  if (out.dtype != in.dtype || out.numel() != in.numel() * impl_->world) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": output ", DTypeName(out.dtype), " ", out.ShapeString(), " cannot hold ",
        impl_->world, " x ", DTypeName(in.dtype), " ", in.ShapeString()));
  }
  absl::Status s = impl_->Ready(kOp);
  if (!s.ok()) return s;
  const int64_t bytes = static_cast<int64_t>(in.bytes());
  if (impl_->world == 1) {
    if (out.data != in.data) std::memcpy(out.data, in.data, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  impl_->buffer.resize(static_cast<size_t>(bytes * impl_->world));
  std::memcpy(impl_->buffer.data() + bytes * impl_->rank, in.data, static_cast<size_t>(bytes));
  s = impl_->GatherInPlace(kOp, bytes, impl_->timeout);
  if (!s.ok()) return s;
  std::memcpy(out.data, impl_->buffer.data(), static_cast<size_t>(bytes * impl_->world));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Broadcast(int root, std::string* bytes) {
  return Broadcast(root, bytes, impl_->timeout);
}

absl::Status MpiCommunicator::Broadcast(int root, std::string* bytes,
                                        std::chrono::milliseconds timeout) {
  static constexpr char kOp[] = "Broadcast";
  if (root < 0 || root >= impl_->world) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": root ", root, " outside the world of ",
                                                   impl_->world));
  }
  absl::Status s = impl_->Ready(kOp);
  if (!s.ok()) return s;
  if (impl_->world == 1) return absl::OkStatus();
  const bool is_root = impl_->rank == root;
  if (is_root && bytes->size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": ", bytes->size(), " bytes exceed MPI's int count"));
  }
  // The size first, then the payload: receivers cannot know the size in advance.
  impl_->size = is_root ? static_cast<int64_t>(bytes->size()) : 0;
  MPI_Request request;
  int rc = MPI_Ibcast(&impl_->size, 1, MPI_INT64_T, root, impl_->comm, &request);
  if (rc != MPI_SUCCESS) {
    s = MpiError(kOp, rc);
    impl_->SetAborted(s);
    return s;
  }
  s = impl_->Wait(&request, kOp, timeout);
  if (!s.ok()) return s;
  if (impl_->size == 0) {
    bytes->clear();
    return absl::OkStatus();
  }
  if (impl_->size < 0 || impl_->size > INT_MAX) {
    return absl::InternalError(absl::StrCat(kOp, ": bad payload size ", impl_->size));
  }
  impl_->buffer.resize(static_cast<size_t>(impl_->size));
  if (is_root) std::memcpy(impl_->buffer.data(), bytes->data(), bytes->size());
  rc = MPI_Ibcast(impl_->buffer.data(), static_cast<int>(impl_->size), MPI_BYTE, root,
                  impl_->comm, &request);
  if (rc != MPI_SUCCESS) {
    s = MpiError(kOp, rc);
    impl_->SetAborted(s);
    return s;
  }
  // The payload follows its size at once: the communicator's own timeout, not `timeout` (which
  // may be unlimited for an idle follower).
  s = impl_->Wait(&request, kOp, impl_->timeout);
  if (!s.ok()) return s;
  if (!is_root) bytes->assign(impl_->buffer.data(), static_cast<size_t>(impl_->size));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AgreeOnStatus(const absl::Status& mine) {
  return AgreeOnStatus(mine, impl_->timeout);
}

absl::Status MpiCommunicator::AgreeOnStatus(const absl::Status& mine,
                                            std::chrono::milliseconds timeout) {
  static constexpr char kOp[] = "AgreeOnStatus";
  absl::Status s = impl_->Ready(kOp);
  if (!s.ok()) return s;
  const int world = impl_->world;
  impl_->buffer.assign(kStatusRecordBytes * static_cast<size_t>(world), '\0');
  char* record = impl_->buffer.data() + kStatusRecordBytes * static_cast<size_t>(impl_->rank);
  const int32_t code = static_cast<int32_t>(mine.code());
  std::memcpy(record, &code, sizeof(code));
  const size_t room = kStatusRecordBytes - sizeof(code) - 1;
  // An OK status's message is an empty string_view whose data() is null, and memcpy from null is
  // undefined even for 0 bytes (UBSan: "null pointer passed as argument 2").
  if (!mine.message().empty()) {
    std::memcpy(record + sizeof(code), mine.message().data(),
                std::min(room, mine.message().size()));
  }
  if (world > 1) {
    s = impl_->GatherInPlace(kOp, kStatusRecordBytes, timeout);
    if (!s.ok()) return s;
  }
  for (int r = 0; r < world; ++r) {
    const char* rec = impl_->buffer.data() + kStatusRecordBytes * static_cast<size_t>(r);
    int32_t c = 0;
    std::memcpy(&c, rec, sizeof(c));
    if (c == 0) continue;
    return absl::Status(static_cast<absl::StatusCode>(c),
                        absl::StrCat("rank ", r, " of ", world, ": ", rec + sizeof(c)));
  }
  return absl::OkStatus();
}

void MpiCommunicator::Abort(const absl::Status& reason) {
  impl_->SetAborted(reason.ok() ? absl::AbortedError("aborted") : reason);
}

bool MpiCommunicator::aborted() const { return impl_->aborted.load(); }

}  // namespace blossom
