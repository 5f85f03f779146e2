#include "kernels/cpu/attention.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/dtype.h"

namespace blossom {
namespace {

// One head of one sequence: keys and values for `num_keys` positions (each row its own
// allocation, as the paged cache scatters them) and `num_queries` queries.
struct HeadCase {
  HeadCase(int64_t num_keys, int64_t num_queries, int64_t d, uint32_t seed) : d(d) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, size_t n) {
      v.resize(n);
      for (float& x : v) x = dist(rng);
    };
    key_rows.resize(num_keys);
    value_rows.resize(num_keys);
    for (int64_t j = 0; j < num_keys; ++j) {
      fill(key_rows[j], d);
      fill(value_rows[j], d);
      keys.push_back(key_rows[j].data());
      values.push_back(value_rows[j].data());
    }
    fill(q, num_queries * d);
    for (float& x : q) x *= 2.0f;  // sharper softmax than unit scores
  }
  int64_t d;
  std::vector<std::vector<float>> key_rows, value_rows;
  std::vector<const float*> keys, values;
  std::vector<float> q;
};

constexpr float kSlope = -0.0625f;

// The case's key and value rows rounded to bf16: the rounded fp32 rows in `c` (so the fp32 path
// sees the same values) and their bits in the returned rows, for AttentionQueries::bf16_keys.
struct Bf16Rows {
  std::vector<std::vector<uint16_t>> key_rows, value_rows;
  std::vector<const uint16_t*> keys, values;
};
Bf16Rows RoundRowsToBf16(HeadCase& c) {
  Bf16Rows r;
  auto round = [](std::vector<float>& row, std::vector<uint16_t>& bits) {
    bits.resize(row.size());
    ConvertFromF32(row.data(), bits.data(), DType::kBF16, row.size());
    ConvertToF32(bits.data(), DType::kBF16, row.data(), row.size());
  };
  r.key_rows.resize(c.key_rows.size());
  r.value_rows.resize(c.value_rows.size());
  for (size_t j = 0; j < c.key_rows.size(); ++j) {
    round(c.key_rows[j], r.key_rows[j]);
    round(c.value_rows[j], r.value_rows[j]);
    r.keys.push_back(r.key_rows[j].data());
    r.values.push_back(r.value_rows[j].data());
  }
  return r;
}

std::vector<float> Attend(const HeadCase& c, int64_t query, int64_t count, int64_t first_pos,
                          AttentionIsa isa, const Bf16Rows* bf16 = nullptr) {
  std::vector<float> out(count * c.d, -1.0f), scores;
  AttentionQueries a;
  a.q = c.q.data() + query * c.d;
  a.q_stride = c.d;
  a.out = out.data();
  a.out_stride = c.d;
  a.num_queries = count;
  a.first_pos = first_pos;
  if (bf16 != nullptr) {
    a.bf16_keys = bf16->keys.data();
    a.bf16_values = bf16->values.data();
  } else {
    a.keys = c.keys.data();
    a.values = c.values.data();
  }
  a.head_dim = c.d;
  a.slope = kSlope;
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  AttendQueries(a, isa, &scores);
  return out;
}

std::vector<AttentionIsa> Isas() {
  std::vector<AttentionIsa> isas = {AttentionIsa::kPortable};
  if (CpuHasAvx2Fma()) isas.push_back(AttentionIsa::kAvx2);
  if (CpuHasAvx512()) isas.push_back(AttentionIsa::kAvx512);
  return isas;
}

// Head dims: multiples of 16 (the AVX-512 block kernels), of 8 only (its dots but not its
// output), and neither (every vector path falls back); first positions around the 16-lane sum.
constexpr int64_t kDims[] = {8, 12, 16, 24, 64, 80, 128};
constexpr int64_t kFirstPos[] = {0, 1, 14, 15, 16, 37, 130};

TEST(AttentionTest, MatchesFp64Reference) {
  for (int64_t d : kDims) {
    for (int64_t first_pos : kFirstPos) {
      HeadCase c(first_pos + 4, 4, d, static_cast<uint32_t>(d * 1000 + first_pos));
      for (AttentionIsa isa : Isas()) {
        const std::vector<float> got = Attend(c, 0, 4, first_pos, isa);
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t n = first_pos + i + 1;
          std::vector<double> w(n);
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            double dot = 0;
            for (int64_t k = 0; k < d; ++k) dot += double(c.q[i * d + k]) * c.keys[j][k];
            w[j] = kSlope * double(j) + dot / std::sqrt(double(d));
            mx = std::max(mx, w[j]);
          }
          for (double& x : w) sum += (x = std::exp(x - mx));
          for (int64_t k = 0; k < d; ++k) {
            double want = 0, mag = 0;
            for (int64_t j = 0; j < n; ++j) {
              want += w[j] / sum * c.values[j][k];
              mag += std::fabs(w[j] / sum * c.values[j][k]);
            }
            // fp32 scores of unit-scale rows, ~1 ulp exp, fp32 sums: a few 1e-6 of the
            // magnitude. NaN fails the comparison.
            EXPECT_NEAR(got[i * d + k], want, 2e-5 * mag + 1e-6)
                << "d " << d << " first_pos " << first_pos << " query " << i << " col " << k
                << " isa " << static_cast<int>(isa);
          }
        }
      }
    }
  }
}

TEST(AttentionTest, EveryPathGivesTheSameBits) {
  if (Isas().size() == 1) GTEST_SKIP() << "this CPU runs only the portable path";
  for (int64_t d : kDims) {
    for (int64_t first_pos : kFirstPos) {
      for (int64_t count = 1; count <= kAttentionQueryBlock; ++count) {
        HeadCase c(first_pos + count, count, d, static_cast<uint32_t>(7 + d + first_pos));
        const std::vector<float> want = Attend(c, 0, count, first_pos, AttentionIsa::kPortable);
        for (AttentionIsa isa : Isas()) {
          const std::vector<float> got = Attend(c, 0, count, first_pos, isa);
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
              << "d " << d << " first_pos " << first_pos << " count " << count << " isa "
              << static_cast<int>(isa);
        }
      }
    }
  }
}

// Batch invariance: a query's output has the same bits whether it is attended alone or inside a
// block of 4 (a prefill chunk, a batch with other sequences' tokens).
TEST(AttentionTest, AQueryDoesNotDependOnItsBlock) {
  for (AttentionIsa isa : Isas()) {
    for (int64_t d : kDims) {
      const int64_t first_pos = 37;
      HeadCase c(first_pos + 4, 4, d, static_cast<uint32_t>(d));
      const std::vector<float> block = Attend(c, 0, 4, first_pos, isa);
      for (int64_t i = 0; i < 4; ++i) {
        const std::vector<float> alone = Attend(c, i, 1, first_pos + i, isa);
        EXPECT_EQ(0, std::memcmp(alone.data(), block.data() + i * d, d * sizeof(float)))
            << "d " << d << " query " << i << " isa " << static_cast<int>(isa);
      }
    }
  }
}

// bf16 key and value rows (a bf16 KV cache), widened in registers, give on every path the bits
// of fp32 rows holding the same values: every head size (vector and fallback paths), position
// and block size.
TEST(AttentionTest, Bf16RowsGiveTheBitsOfTheirFp32Values) {
  for (int64_t d : kDims) {
    for (int64_t first_pos : kFirstPos) {
      for (int64_t count = 1; count <= kAttentionQueryBlock; ++count) {
        HeadCase c(first_pos + count, count, d, static_cast<uint32_t>(11 + d + first_pos));
        const Bf16Rows bf16 = RoundRowsToBf16(c);
        for (AttentionIsa isa : Isas()) {
          const std::vector<float> want = Attend(c, 0, count, first_pos, isa);
          const std::vector<float> got = Attend(c, 0, count, first_pos, isa, &bf16);
          EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
              << "d " << d << " first_pos " << first_pos << " count " << count << " isa "
              << static_cast<int>(isa);
        }
      }
    }
  }
}

TEST(AttentionTest, NaNInAQueryReachesItsOutputOnly) {
  for (AttentionIsa isa : Isas()) {
    HeadCase c(20, 4, 64, 3);
    c.q[2 * 64 + 5] = std::nanf("");
    const std::vector<float> out = Attend(c, 0, 4, 16, isa);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t k = 0; k < 64; ++k)
        EXPECT_EQ(std::isnan(out[i * 64 + k]), i == 2) << i << " " << k;
  }
}

}  // namespace
}  // namespace blossom
