// `mpirun -np N bazel-bin/kernels/nccl/nccl_mpi_check`: one process per GPU; checks that an
// all-reduce and an all-gather over NCCL (id broadcast by MPI) give the exact expected values.
// Exit code 0 on every rank when they do.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "cuda_runtime.h"
#include "kernels/nccl/nccl_mpi_bootstrap.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  blossom::NcclOptions options;
  options.timeout = std::chrono::seconds(60);
  auto comm = blossom::CreateNcclCommunicatorWithMpi(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, comm.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const int64_t n = 4096;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[i] = static_cast<float>(rank * 10000 + i);
  float *buf = nullptr, *gathered = nullptr;
  cudaMalloc(&buf, n * sizeof(float));
  cudaMalloc(&gathered, n * world * sizeof(float));
  cudaMemcpy(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  blossom::Tensor t(buf, blossom::DType::kF32, {n}, blossom::DeviceKind::kCuda);
  absl::Status s = (*comm)->AllGather(t, blossom::Tensor(gathered, blossom::DType::kF32,
                                                          {world, n}, blossom::DeviceKind::kCuda));
  if (s.ok()) s = (*comm)->AllReduceSum(t);
  int bad = s.ok() ? 0 : 1;
  if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
  std::vector<float> reduced(n), all(n * world);
  cudaMemcpy(reduced.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaMemcpy(all.data(), gathered, n * world * sizeof(float), cudaMemcpyDeviceToHost);
  for (int64_t i = 0; i < n && s.ok(); ++i) {
    float expected = 0;
    for (int r = 0; r < world; ++r) {
      expected += static_cast<float>(r * 10000 + i);
      if (all[r * n + i] != static_cast<float>(r * 10000 + i)) bad = 1;
    }
    if (reduced[i] != expected) bad = 1;
  }
  std::printf("rank %d of %d (GPU %d): %s\n", rank, world, (*comm)->device(),
              bad ? "MISMATCH" : "all-reduce and all-gather OK");
  cudaFree(buf);
  cudaFree(gathered);
  comm->reset();
  int any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_bad;
}
