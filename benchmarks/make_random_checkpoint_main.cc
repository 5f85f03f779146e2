// `make-random-checkpoint`: writes a random-weight BLOOM checkpoint of a real shape, for
// benchmarking without downloading anything.
//
//   make-random-checkpoint --shape 560m|1b1|1b7|3b|7b1|176b|176b-<N>layers|custom --out DIR
//       [--dtype bf16|f16|f32] [--layers N] [--seed S] [--max-shard-gb G] [--threads N]
//       [--tokenizer-dir DIR]            (default tests/fixtures/tokenizer)
//       [--hidden H --heads N --vocab V] (with --shape custom; --layers is then required)
//
// The tokenizer is the 2,002-token test tokenizer, not BLOOM's 250,680-token one: its ids are a
// subset of the model's 250,880 rows, so prompts encode to fewer, shorter tokens than with the
// real tokenizer, but every id is valid for the model. Exit code 1 on errors, 2 on usage errors.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "benchmarks/bloom_shapes.h"
#include "benchmarks/random_checkpoint.h"

ABSL_FLAG(std::string, shape, "",
          "Model shape: 560m, 1b1, 1b7, 3b, 7b1, 176b, 176b-<N>layers, custom.");
ABSL_FLAG(std::string, out, "", "Output directory (created; must not hold weights yet).");
ABSL_FLAG(std::string, dtype, "bf16", "Weight dtype: bf16, f16 or f32.");
ABSL_FLAG(int64_t, layers, 0, "Override the layer count (required with --shape custom).");
ABSL_FLAG(int64_t, hidden, 0, "Hidden size (--shape custom).");
ABSL_FLAG(int64_t, heads, 0, "Attention heads (--shape custom).");
ABSL_FLAG(int64_t, vocab, 250880, "Vocabulary rows (--shape custom).");
ABSL_FLAG(uint64_t, seed, 0, "Generator seed; the same seed gives the same bytes.");
ABSL_FLAG(double, max_shard_gb, 5.0, "Largest shard in GB (10^9 bytes), as transformers' 5GB.");
ABSL_FLAG(int32_t, threads, 0, "Generator threads (0 = all cores).");
ABSL_FLAG(
    std::string, tokenizer_dir, "tests/fixtures/tokenizer",
    "Directory whose tokenizer.json (+ tokenizer_config.json, special_tokens_map.json) is copied.");

namespace blossom {
namespace {

int Fail(const absl::Status& status) {
  std::cerr << "make-random-checkpoint: error: " << status.message() << std::endl;
  return 1;
}

int Run() {
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string shape_name = absl::GetFlag(FLAGS_shape);
  if (out.empty() || shape_name.empty()) {
    std::cerr << "usage: " << absl::ProgramUsageMessage() << std::endl;
    return 2;
  }
  BloomShape shape;
  if (shape_name == "custom") {
    shape = BloomShape{"custom", absl::GetFlag(FLAGS_hidden), absl::GetFlag(FLAGS_layers),
                       absl::GetFlag(FLAGS_heads), absl::GetFlag(FLAGS_vocab)};
  } else {
    absl::StatusOr<BloomShape> named = BloomShapeByName(shape_name);
    if (!named.ok()) return Fail(named.status());
    shape = *named;
    if (absl::GetFlag(FLAGS_layers) > 0) shape.layers = absl::GetFlag(FLAGS_layers);
  }
  absl::Status valid = ValidateBloomShape(shape);
  if (!valid.ok()) return Fail(valid);
  absl::StatusOr<DType> dtype = ParseDType(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) return Fail(dtype.status());

  RandomCheckpointOptions options;
  options.shape = shape;
  options.dtype = *dtype;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.max_shard_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_max_shard_gb) * 1e9);
  options.tokenizer_dir = absl::GetFlag(FLAGS_tokenizer_dir);
  options.threads = absl::GetFlag(FLAGS_threads);
  const bool tty = isatty(fileno(stderr));
  options.progress = [tty](uint64_t done, uint64_t total) {
    if (tty) {
      std::fprintf(stderr, "\r  %.2f / %.2f GB", done / 1e9, total / 1e9);
      if (done == total) std::fprintf(stderr, "\n");
    }
  };
  std::cerr << absl::StrFormat(
      "writing BLOOM shape %s (hidden %d, %d layers, %d heads, vocab %d): %d parameters, %s, "
      "%.2f GB -> %s\n",
      shape.name, shape.hidden, shape.layers, shape.heads, shape.vocab, shape.ParamCount(),
      DTypeName(*dtype), shape.ParamCount() * DTypeSize(*dtype) / 1e9, out);
  absl::StatusOr<RandomCheckpointInfo> info = WriteRandomCheckpoint(out, options);
  if (!info.ok()) return Fail(info.status());
  std::cerr << absl::StrFormat("wrote %s, config.json, tokenizer.json\n",
                               absl::StrJoin(info->weight_files, ", "));
  return 0;
}

}  // namespace
}  // namespace blossom

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "make-random-checkpoint --shape 560m|1b1|1b7|3b|7b1|176b|176b-<N>layers|custom --out DIR "
      "[--dtype bf16] [--layers N] [--seed S] [--max-shard-gb 5] "
      "[--hidden H --heads N --vocab V with --shape custom]");
  // Accept the documented dashed spellings (--max-shard-gb) as well as absl's underscores.
  std::vector<std::string> args(argv, argv + argc);
  for (std::string& a : args) {
    if (a.rfind("--", 0) != 0) continue;
    const size_t end = std::min(a.find('='), a.size());
    for (size_t i = 2; i < end; ++i)
      if (a[i] == '-') a[i] = '_';
  }
  std::vector<char*> argv2;
  for (std::string& a : args) argv2.push_back(a.data());
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(argv2.size()), argv2.data());
  if (positional.size() > 1) {
    std::cerr << "make-random-checkpoint: unexpected argument '" << positional[1] << "'\n"
              << "usage: " << absl::ProgramUsageMessage() << std::endl;
    return 2;
  }
  return blossom::Run();
}
