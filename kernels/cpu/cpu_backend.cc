#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/bf16_panel_gemm.h"
#include "kernels/cpu/bf16_panel_tile.h"
#include "kernels/cpu/cpu_backend_util.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_amx.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/quant_panel_tile.h"
#include "kernels/cpu/weight_pairs.h"
#include "kernels/status_macros.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace blossom {
namespace {

using cpu_internal::Check;
using cpu_internal::IsF32;
using cpu_internal::Scratch;

// fp32 weights of a small vector (layernorm gamma/beta, a bias), converted once per op.
const float* AsF32(const Tensor& t, int slot) {
  if (t.dtype == DType::kF32) return t.as<const float>();
  std::vector<float>& v = Scratch<float>(slot, static_cast<size_t>(t.numel()));
  ConvertToF32(t.data, t.dtype, v.data(), v.size());
  return v.data();
}


// LayerNorm's row sums in double over 8 interleaved accumulators (element i into i % 8), reduced
// in a fixed order, then a scalar tail: the same order for every row and batch. One sequential
// double chain waits on the add's latency per element (4 cycles): the two passes over a
// 1,024-wide row were about 5% of a 512-token int8 prefill.
double SumF64(const float* v, int64_t n) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) a[j] += v[i + j];
  double s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (; i < n; ++i) s += v[i];
  return s;
}

// sum (v[i] - mean)^2 in double, in SumF64's order.
double SumSquaredDeviationsF64(const float* v, int64_t n, double mean) {
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) {
      const double d = v[i + j] - mean;
      a[j] += d * d;
    }
  double s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (; i < n; ++i) {
    const double d = v[i] - mean;
    s += d * d;
  }
  return s;
}

// o[i] = (in[i] - mean) * inv_std * g[i] + b[i], and res[i] += x[i] before it: the same IEEE
// operations per element 4 at a time (SSE, baseline x86-64; -O2 left these loops scalar).
void AddInPlace(float* res, const float* x, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4)
    _mm_storeu_ps(res + i, _mm_add_ps(_mm_loadu_ps(res + i), _mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) res[i] += x[i];
}

void NormalizeRow(const float* in, float mean, float inv_std, const float* g, const float* b,
                  float* o, int64_t n) {
  int64_t i = 0;
#if defined(__SSE2__)
  const __m128 m4 = _mm_set1_ps(mean), s4 = _mm_set1_ps(inv_std);
  for (; i + 4 <= n; i += 4) {
    const __m128 t = _mm_mul_ps(_mm_mul_ps(_mm_sub_ps(_mm_loadu_ps(in + i), m4), s4),
                                _mm_loadu_ps(g + i));
    _mm_storeu_ps(o + i, _mm_add_ps(t, _mm_loadu_ps(b + i)));
  }
#endif
  for (; i < n; ++i) o[i] = (in[i] - mean) * inv_std * g[i] + b[i];
}

}  // namespace

CpuBackend::CpuBackend(int num_threads, bool spin_wait)
    : pool_(std::make_unique<ThreadPool>(num_threads, spin_wait)) {}
CpuBackend::~CpuBackend() = default;

absl::StatusOr<DeviceBuffer> CpuBackend::Allocate(size_t bytes) {
  BLOSSOM_RETURN_IF_ERROR(recorder_.RefuseWhileCapturing("Allocate"));
  if (bytes == 0) return DeviceBuffer(this, nullptr, 0);
  // 64-byte alignment for vector loads.
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cpu backend: cannot allocate ", bytes, " bytes of host memory"));
  }
  return DeviceBuffer(this, p, bytes);
}

void CpuBackend::Free(void* data, size_t) { std::free(data); }

absl::StatusOr<OwnedTensor> CpuBackend::ImportWeight(const Tensor& host) {
  if (!IsFloat(host.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu backend: weights must be f32, f16 or bf16, got ", DTypeName(host.dtype)));
  }
  OwnedTensor owned;
  owned.tensor = host;  // zero copy: the mapping outlives the model
  return owned;
}

absl::StatusOr<OwnedTensor> CpuBackend::ImportEmbeddingAndLinearWeight(
    const Tensor& host, const HostRowsDone& rows_done) {
  return ImportLinearWeight(host, WeightQuant::kNone, rows_done);
}

void CpuBackend::CopyInSlices(int64_t rows, size_t row_bytes, int64_t row_multiple, const HostRowsDone& rows_done,
                              const std::function<void(int64_t, int64_t)>& copy_rows) {
  constexpr size_t kSliceBytes = size_t{32} << 20;
  const int64_t slice = std::max<int64_t>(
      row_multiple, static_cast<int64_t>(kSliceBytes / std::max<size_t>(1, row_bytes)) & ~(row_multiple - 1));
  for (int64_t begin = 0; begin < rows; begin += slice) {
    const int64_t end = std::min(rows, begin + slice);
    copy_rows(begin, end);
    if (rows_done) rows_done(begin, end);
  }
}

absl::StatusOr<OwnedTensor> CpuBackend::ImportLinearWeight(const Tensor& host, WeightQuant quant,
                                                           const HostRowsDone& rows_done) {
  if (quant == WeightQuant::kNone) {
    if (host.rank != 2 || BestGemmIsa() != GemmIsa::kAvx512 ||
        !CanPackPairs(host.dtype, host.dim(0), host.dim(1)))
      return ImportWeight(host);
    // A copy instead of a view: 512-token prefill 1.12x (f32) / 1.04x (bf16), decode 1.04x /
    // 1.07x on bloom-560m (benchmarks/results/2026-11-25-cpu-weight-pairs.md). BloomModel gives
    // the checkpoint's pages behind it back.
    const int64_t n = host.dim(0), k = host.dim(1);
    absl::StatusOr<OwnedTensor> packed = AllocateTensor(PairsOf(host.dtype), {n, k});
    if (!packed.ok()) return packed.status();
    CopyInSlices(n, DTypeBytes(host.dtype, k), 2, rows_done, [&](int64_t first, int64_t last) {
      const int64_t pairs = (last - first + 1) / 2;
      pool_->ParallelFor(pairs, 64, [&](int64_t begin, int64_t end) {
        PackPairRows(host.data, host.dtype, n, k, first + 2 * begin,
                     std::min(last, first + 2 * end), packed->tensor.data);
      });
    });
    return packed;
  }
  if (!IsFloat(host.dtype) || host.rank != 2) {
    return absl::InvalidArgumentError(absl::StrCat("cpu backend: --quantize ", WeightQuantName(quant),
                                                   " needs a 2-D float weight, got ",
                                                   DTypeName(host.dtype), " ", host.ShapeString()));
  }
  if (quant == WeightQuant::kBf16) return ImportBf16Panels(host, rows_done);
  const int64_t rows = host.dim(0), k = host.dim(1);
  // int8 on AVX512-VNNI without AMX: panels (quant_panel_tile.h; on bloom-560m on a 2-core Zen 4,
  // 2.45x on a 128-token prefill, 1.70x on batch-1 decode, 2.69x at batch 8:
  // benchmarks/results/2026-11-27-cpu-int8-panels.md).
  // int4 on any AVX512-VNNI CPU (AMX has no int4 tiles): panels too, the same codes
  // (benchmarks/results/2026-11-27-cpu-int4-panels.md).
  const bool vnni_panels = rows % kQ8PanelRows == 0 && BestGemmIsa() != GemmIsa::kPortable &&
                           QuantPanelTileAvx512VnniUsable();
  const bool panels = vnni_panels && (quant == WeightQuant::kInt4 || !AmxInt8Usable());
  const DType dtype = !panels ? QuantizedDType(quant)
                      : quant == WeightQuant::kInt4 ? DType::kQ4G32Panel16
                                                    : DType::kQ8G32Panel16;
  if (k % kQuantBlock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu backend: --quantize ", WeightQuantName(quant), " cannot pack a weight of shape ",
        host.ShapeString(), ": its rows must be a multiple of ", kQuantBlock, " long"));
  }
  absl::StatusOr<OwnedTensor> packed = AllocateTensor(dtype, {rows, k});
  if (!packed.ok()) return packed.status();
  // Rows (panels) are independent: pack them in parallel (a 560m model has ~300M weights to pack).
  const size_t in_row = DTypeBytes(host.dtype, k), out_row = DTypeBytes(dtype, k);
  const int64_t unit = panels ? kQ8PanelRows : 1;  // rows per work item
  absl::Status status;
  std::mutex status_mutex;
  CopyInSlices(rows, in_row, panels ? kQ8PanelRows : 2, rows_done, [&](int64_t first, int64_t last) {
    pool_->ParallelFor((last - first) / unit, std::max<int64_t>(1, 16 / unit), [&](int64_t begin, int64_t end) {
      begin = first + begin * unit;
      end = first + end * unit;
      absl::Status s = QuantizeWeightRows(static_cast<const char*>(host.data) + begin * in_row,
                                          host.dtype, end - begin, k, dtype,
                                          static_cast<char*>(packed->tensor.data) + begin * out_row);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(status_mutex);
        status.Update(s);
      }
    });
  });
  if (!status.ok()) return status;
  return packed;
}

absl::StatusOr<OwnedTensor> CpuBackend::ImportBf16Panels(const Tensor& host,
                                                          const HostRowsDone& rows_done) {
  const int64_t n = host.dim(0), k = host.dim(1);
  if (k % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cpu backend: --quantize bf16 cannot pack a weight of shape ", host.ShapeString(),
        ": its rows must have an even length (vdpbf16ps multiplies element pairs)"));
  }
  absl::StatusOr<DeviceBuffer> storage = Allocate(Bf16PanelStorageBytes(n, k));
  if (!storage.ok()) return storage.status();
  OwnedTensor packed{Tensor(storage->data(), DType::kBF16Panel16, {n, k}), std::move(*storage)};
  absl::Status status;
  std::mutex status_mutex;
  CopyInSlices(n, DTypeBytes(host.dtype, k), kBf16PanelRows, rows_done, [&](int64_t first, int64_t last) {
    const int64_t panels = (last - first + kBf16PanelRows - 1) / kBf16PanelRows;
    pool_->ParallelFor(panels, 4, [&](int64_t begin, int64_t end) {
      absl::Status s = PackBf16Panels(host.data, host.dtype, n, k, first + begin * kBf16PanelRows,
                                      std::min(last, first + end * kBf16PanelRows), packed.tensor.data);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(status_mutex);
        status.Update(s);
      }
    });
  });
  if (!status.ok()) return status;
  return packed;
}

absl::Status CpuBackend::CopyToDevice(const void* host, Tensor dst) {
  BLOSSOM_RETURN_IF_ERROR(recorder_.RefuseWhileCapturing("CopyToDevice"));
  if (dst.bytes() > 0) std::memcpy(dst.data, host, dst.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::CopyToHost(const Tensor& src, void* host) {
  BLOSSOM_RETURN_IF_ERROR(recorder_.RefuseWhileCapturing("CopyToHost"));
  if (src.bytes() > 0) std::memcpy(host, src.data, src.bytes());
  return absl::OkStatus();
}

absl::Status CpuBackend::Embedding(const Tensor& table, const Tensor& ids, int64_t vocab_begin,
                                   Tensor out) {
  if (recorder_.Record([=, this] { return Embedding(table, ids, vocab_begin, out); }))
    return absl::OkStatus();
  const int64_t rows = table.dim(0), hidden = table.dim(1), n = ids.numel();
  const bool paired = IsRowPaired(table.dtype);  // a tied LM head (ImportEmbeddingAndLinearWeight)
  if (auto s = Check(IsF32(out) && out.dim(0) == n && out.dim(1) == hidden &&
                         ids.dtype == DType::kI32 &&
                         (IsFloat(table.dtype) || (paired && hidden % 8 == 0)),
                     "Embedding", "bad shapes or dtypes");
      !s.ok())
    return s;
  const int32_t* id = ids.as<const int32_t>();
  const size_t row_bytes = hidden * DTypeSize(table.dtype);
  pool_->ParallelFor(n, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      int64_t local = static_cast<int64_t>(id[t]) - vocab_begin;
      float* dst = out.as<float>() + t * hidden;
      if (local < 0 || local >= rows) {
        std::fill(dst, dst + hidden, 0.0f);
      } else if (paired) {
        PairedRowToF32(table.data, PairedElementDType(table.dtype), rows, hidden, local, dst);
      } else {
        ConvertToF32(static_cast<const char*>(table.data) + local * row_bytes, table.dtype, dst,
                     hidden);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::LayerNorm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   float eps, Tensor residual, Tensor out) {
  if (recorder_.Record([=, this] { return LayerNorm(x, gamma, beta, eps, residual, out); }))
    return absl::OkStatus();
  const int64_t rows = x.dim(0), hidden = x.dim(-1);
  if (auto s = Check(IsF32(x) && IsF32(out) && out.numel() == x.numel() &&
                         gamma.numel() == hidden && beta.numel() == hidden &&
                         (residual.empty() || (IsF32(residual) && residual.numel() == x.numel())),
                     "LayerNorm", "bad shapes or dtypes");
      !s.ok())
    return s;
  const float* g = AsF32(gamma, 0);
  const float* bt = AsF32(beta, 1);
  pool_->ParallelFor(rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* in = x.as<const float>() + r * hidden;
      if (!residual.empty()) {
        float* res = residual.as<float>() + r * hidden;
        AddInPlace(res, in, hidden);
        in = res;
      }
      // Two passes in double: the mean and biased variance as exact as fp32 inputs allow.
      const double mean = SumF64(in, hidden) / hidden;
      const double var = SumSquaredDeviationsF64(in, hidden, mean) / hidden;
      const float inv_std = static_cast<float>(1.0 / std::sqrt(var + eps));
      NormalizeRow(in, static_cast<float>(mean), inv_std, g, bt, out.as<float>() + r * hidden,
                   hidden);
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::Linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                Activation activation, Tensor out) {
  if (recorder_.Record([=, this] { return Linear(x, weight, bias, activation, out); }))
    return absl::OkStatus();
  const int64_t m = x.dim(0), k = x.dim(-1), n = weight.dim(0);
  const bool quantized = IsBlockQuantized(weight.dtype);
  // Block-quantized rows are whole blocks; panel-packed ones also fill whole panels.
  const bool panel_packed = weight.dtype == DType::kQ8G32Panel16 || weight.dtype == DType::kQ4G32Panel16;
  const bool quantized_ok = quantized && k % kQuantBlock == 0 && (!panel_packed || n % kQ8PanelRows == 0);
  const bool bf16_panels = weight.dtype == DType::kBF16Panel16;
  if (auto s = Check(IsF32(x) && IsF32(out) && weight.rank == 2 && weight.dim(1) == k &&
                         (IsFloat(weight.dtype) || quantized_ok || (bf16_panels && k % 2 == 0) ||
                          (IsRowPaired(weight.dtype) && k % 8 == 0)) &&
                         out.numel() == m * n &&
                         (bias.empty() || bias.numel() == n),
                     "Linear",
                     absl::StrCat("bad shapes: x ", x.ShapeString(), " weight ",
                                  weight.ShapeString(), " out ", out.ShapeString()));
      !s.ok())
    return s;
  GemmArgs args;
  args.x = x.as<const float>();
  args.w = weight.data;
  args.w_dtype = weight.dtype;
  args.bias = bias.empty() ? nullptr : bias.data;
  args.bias_dtype = bias.dtype;
  args.out = out.as<float>();
  args.m = m;
  args.n = n;
  args.k = k;
  args.activation = activation;
  if (quantized) {
    QuantGemmNT(args, pool_.get());
  } else if (bf16_panels) {
    Bf16PanelGemmNT(args, pool_.get());
  } else {
    GemmNT(args, pool_.get());
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::AddBiasResidual(Tensor x, const Tensor& bias, const Tensor& residual) {
  if (recorder_.Record([=, this] { return AddBiasResidual(x, bias, residual); }))
    return absl::OkStatus();
  const int64_t rows = x.dim(0), cols = x.numel() / std::max<int64_t>(1, x.dim(0));
  if (auto s = Check(IsF32(x) && IsF32(residual) && residual.numel() == x.numel() &&
                         (bias.empty() || bias.numel() == cols),
                     "AddBiasResidual", "bad shapes or dtypes");
      !s.ok())
    return s;
  const bool has_bias = !bias.empty();
  const float* b = has_bias ? AsF32(bias, 0) : nullptr;
  pool_->ParallelFor(rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* v = x.as<float>() + r * cols;
      const float* res = residual.as<const float>() + r * cols;
      for (int64_t i = 0; i < cols; ++i) v[i] = (has_bias ? v[i] + b[i] : v[i]) + res[i];
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::GatherRows(const Tensor& x, const Tensor& rows, Tensor out) {
  if (recorder_.Record([=, this] { return GatherRows(x, rows, out); })) return absl::OkStatus();
  const int64_t n = rows.numel(), cols = x.numel() / std::max<int64_t>(1, x.dim(0));
  if (auto s = Check(x.dtype == out.dtype && rows.dtype == DType::kI32 && out.numel() == n * cols,
                     "GatherRows", "bad shapes or dtypes");
      !s.ok())
    return s;
  const size_t row_bytes = cols * DTypeSize(x.dtype);
  for (int64_t r = 0; r < n; ++r) {
    int32_t src = rows.as<const int32_t>()[r];
    if (src < 0 || src >= x.dim(0))
      return absl::InvalidArgumentError(absl::StrCat("GatherRows: row ", src, " out of range"));
    std::memcpy(static_cast<char*>(out.data) + r * row_bytes,
                static_cast<const char*>(x.data) + src * row_bytes, row_bytes);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::Softmax(const Tensor& x, Tensor out) {
  if (recorder_.Record([=, this] { return Softmax(x, out); })) return absl::OkStatus();
  const int64_t rows = x.dim(0), cols = x.numel() / std::max<int64_t>(1, rows);
  if (auto s = Check(IsF32(x) && IsF32(out) && out.numel() == x.numel(), "Softmax",
                     "bad shapes or dtypes");
      !s.ok())
    return s;
  pool_->ParallelFor(rows, 1, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* in = x.as<const float>() + r * cols;
      float* o = out.as<float>() + r * cols;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < cols; ++i) mx = std::max(mx, in[i]);
      double sum = 0.0;
      for (int64_t i = 0; i < cols; ++i) {
        o[i] = std::exp(in[i] - mx);
        sum += o[i];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < cols; ++i) o[i] *= inv;
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::Argmax(const Tensor& x, Tensor out) {
  if (recorder_.Record([=, this] { return Argmax(x, out); })) return absl::OkStatus();
  const int64_t rows = x.dim(0), cols = x.numel() / std::max<int64_t>(1, rows);
  if (auto s = Check(IsF32(x) && out.dtype == DType::kI32 && out.numel() == rows, "Argmax",
                     "bad shapes or dtypes");
      !s.ok())
    return s;
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.as<const float>() + r * cols;
    int64_t best = 0;
    for (int64_t i = 1; i < cols; ++i)
      if (in[i] > in[best]) best = i;  // strict: ties keep the lowest index
    out.as<int32_t>()[r] = static_cast<int32_t>(best);
  }
  return absl::OkStatus();
}

}  // namespace blossom
