#include "benchmarks/engine_overhead.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "benchmarks/batch_sweep.h"
#include "engine/loader/model_config.h"
#include "engine/model/model_runner.h"
#include "engine/sampling/batch_sampler.h"
#include "engine/serving/engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/status_macros.h"

namespace blossom {
namespace {

// Tokens for every row without reading logits, like a GPU sampler returning only ids. Ids below
// kFirstToken (BLOOM's special tokens) and EOS are never drawn, so requests end by length.
class InstantSampler : public BatchSampler {
 public:
  InstantSampler(int64_t num_tokens, int32_t eos, uint64_t seed)
      : num_tokens_(num_tokens), eos_(eos), rng_(seed) {}
  std::string name() const override { return "instant"; }
  absl::Status SampleBatch(const Tensor& logits, absl::Span<const SampleRow> rows,
                           std::vector<absl::StatusOr<SampleResult>>* results) override {
    BLOSSOM_RETURN_IF_ERROR(CheckSampleRows(logits, rows));
    results->clear();
    std::uniform_int_distribution<int32_t> pick(kFirstToken, static_cast<int32_t>(num_tokens_ - 1));
    for (size_t i = 0; i < rows.size(); ++i) {
      SampleResult r;
      do {
        r.token = pick(rng_);
      } while (r.token == eos_);
      results->push_back(std::move(r));
    }
    return absl::OkStatus();
  }
  absl::Status ScoreRows(const Tensor&, absl::Span<const ScoreRow>,
                         std::vector<absl::StatusOr<SampleResult>>*) override {
    return absl::UnimplementedError("the overhead benchmark asks for no prompt logprobs");
  }

 private:
  static constexpr int32_t kFirstToken = 4;
  int64_t num_tokens_;
  int32_t eos_;
  std::mt19937_64 rng_;
};

// A model that takes no time (or `forward_ms`): its logits are never read (tagged GPU memory).
class InstantRunner : public ModelRunner {
 public:
  // Tokens are drawn from [4, num_tokens): the ids the tokenizer knows (a test tokenizer may
  // cover fewer ids than the model's vocabulary).
  InstantRunner(BloomConfig config, int64_t num_tokens, double forward_ms, uint64_t seed)
      : config_(std::move(config)), num_tokens_(num_tokens), forward_ms_(forward_ms), seed_(seed) {
    info_.backend = "instant";
  }
  const BloomConfig& config() const override { return config_; }
  const ModelInfo& info() const override { return info_; }
  int world_size() const override { return 1; }
  size_t KvBytesPerBlock(int32_t) const override { return 1; }
  absl::Status AllocateKvCache(int32_t, int32_t) override { return absl::OkStatus(); }
  absl::Status Forward(const StepBatch&, float*) override {
    return absl::UnimplementedError("InstantRunner keeps its logits (device sampling only)");
  }
  absl::StatusOr<Tensor> ForwardKeepLogits(const StepBatch& batch) override {
    {
      std::unique_lock<std::mutex> lock(gate_mu_);
      gate_cv_.wait(lock, [&] { return gate_open_; });
    }
    if (forward_ms_ > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(forward_ms_));
    return Tensor(&dummy_, DType::kF32,
                  {static_cast<int64_t>(batch.logit_rows.size()), config_.vocab_size},
                  DeviceKind::kCuda);
  }
  // Until then every forward waits: the run starts with every request submitted (with a model
  // this fast, requests would otherwise finish as fast as they are submitted).
  void OpenGate() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    gate_open_ = true;
    gate_cv_.notify_all();
  }
  absl::Status CopyLogitsToHost(const Tensor&, float*) override {
    return absl::UnimplementedError("InstantRunner has no logits to copy");
  }
  absl::StatusOr<std::unique_ptr<BatchSampler>> MakeBatchSampler() override {
    return std::unique_ptr<BatchSampler>(
        new InstantSampler(num_tokens_, static_cast<int32_t>(config_.eos_token_id), seed_));
  }

 private:
  BloomConfig config_;
  ModelInfo info_;
  int64_t num_tokens_;
  double forward_ms_;
  uint64_t seed_;
  float dummy_ = 0.0f;
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool gate_open_ = false;
};

class StepRecorder : public EngineObserver {
 public:
  void OnStep(const StepStats& s) override {  // engine thread only
    steps.push_back(s);
    times.push_back(std::chrono::steady_clock::now());
  }
  std::vector<StepStats> steps;
  std::vector<std::chrono::steady_clock::time_point> times;  // when each step was reported
};

// The sweep's percentiles (numpy's interpolation), in ms.
PartStats Summarize(std::vector<double> seconds) {
  const Percentiles q = ComputePercentiles(std::move(seconds));
  return PartStats{1e3 * q.p50, 1e3 * q.p90};
}

}  // namespace

absl::StatusOr<EngineOverheadReport> RunEngineOverhead(const EngineOverheadOptions& o) {
  if (o.batch < 1 || o.prompt_tokens < 1 || o.new_tokens < 2 || o.stop_strings < 0) {
    return absl::InvalidArgumentError(
        "batch, prompt_tokens >= 1, new_tokens >= 2, stop_strings >= 0");
  }
  BLOSSOM_ASSIGN_OR_RETURN(BloomConfig config, LoadBloomConfig(o.model_dir));
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                           Tokenizer::FromFile(o.model_dir + "/tokenizer.json"));
  const int64_t num_tokens = std::min<int64_t>(config.vocab_size, tokenizer->vocab_size());
  InstantRunner runner(config, num_tokens, o.forward_ms, o.seed);
  EngineConfig engine_config;
  SchedulerConfig& sc = engine_config.scheduler;
  sc.max_num_seqs = o.batch;
  sc.max_num_batched_tokens = std::max(2048, o.batch);
  sc.max_total_tokens = o.prompt_tokens + o.new_tokens;
  sc.max_waiting_requests = o.batch;
  const int32_t blocks_per_seq =
      (o.prompt_tokens + o.new_tokens + sc.block_size - 1) / sc.block_size;
  sc.num_blocks = o.batch * blocks_per_seq + 16;
  StepRecorder recorder;
  BLOSSOM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           Engine::Create(&runner, tokenizer.get(), engine_config, &recorder));

  std::mutex mu;
  std::condition_variable done_cv;
  int32_t finished = 0;
  std::atomic<int64_t> tokens{0};
  // One text buffer per request, appended to by its sink on the engine's delivery thread.
  std::vector<std::string> texts(o.batch);
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> prompt_token(4, static_cast<int32_t>(num_tokens - 1));
  const auto start = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < o.batch; ++i) {
    EngineRequest request;
    for (int32_t t = 0; t < o.prompt_tokens; ++t)
      request.prompt_tokens.push_back(prompt_token(rng));
    request.sampling.temperature = 0.0f;
    request.stopping.max_new_tokens = o.new_tokens;
    for (int32_t k = 0; k < o.stop_strings; ++k)
      request.stopping.stop_strings.push_back(absl::StrCat("@@@@STOP", k, "@@@@"));
    std::string* text = &texts[i];
    auto sink = [&, text](const EngineEvent& event) {
      if (event.has_token) {
        text->append(event.token.text_delta);
        tokens.fetch_add(1, std::memory_order_relaxed);
      }
      if (event.finished) {
        std::lock_guard<std::mutex> lock(mu);
        ++finished;
        done_cv.notify_all();
      }
    };
    BLOSSOM_RETURN_IF_ERROR(engine->Submit(std::move(request), sink).status());
  }
  runner.OpenGate();
  {
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return finished == o.batch; });
  }
  engine.reset();  // joins the engine thread: the recorder is complete
  EngineOverheadReport report;
  report.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report.generated_tokens = tokens.load();
  report.steps = static_cast<int64_t>(recorder.steps.size());
  std::vector<double> schedule, sample, output, deliver, host, iteration;
  for (size_t i = 0; i < recorder.steps.size(); ++i) {
    const StepStats& s = recorder.steps[i];
    if (s.prefill_tokens != 0 || s.decode_tokens != o.batch) continue;
    if (i > 0) {
      iteration.push_back(
          std::chrono::duration<double>(recorder.times[i] - recorder.times[i - 1]).count());
    }
    schedule.push_back(s.schedule_seconds);
    sample.push_back(s.sample_seconds);
    output.push_back(s.output_seconds);
    deliver.push_back(s.deliver_seconds);
    host.push_back(s.schedule_seconds + s.sample_seconds + s.output_seconds + s.deliver_seconds);
  }
  report.full_decode_steps = static_cast<int64_t>(host.size());
  report.schedule = Summarize(schedule);
  report.sample = Summarize(sample);
  report.output = Summarize(output);
  report.deliver = Summarize(deliver);
  report.host = Summarize(host);
  report.iteration = Summarize(iteration);
  return report;
}

std::string EngineOverheadJson(const EngineOverheadOptions& o, const EngineOverheadReport& r) {
  auto part = [](const PartStats& p) {
    return absl::StrFormat("{\"median_ms\": %.4f, \"p90_ms\": %.4f}", p.median_ms, p.p90_ms);
  };
  return absl::StrFormat(
      "{\"batch\": %d, \"prompt_tokens\": %d, \"new_tokens\": %d, \"stop_strings\": %d, "
      "\"forward_ms\": %g, "
      "\"steps\": %d, \"full_decode_steps\": %d, \"generated_tokens\": %d, \"wall_seconds\": %.3f, "
      "\"schedule\": %s, \"sample\": %s, \"output\": %s, \"deliver\": %s, \"host\": %s, "
      "\"iteration\": %s}",
      o.batch, o.prompt_tokens, o.new_tokens, o.stop_strings, o.forward_ms, r.steps,
      r.full_decode_steps, r.generated_tokens, r.wall_seconds, part(r.schedule), part(r.sample),
      part(r.output), part(r.deliver), part(r.host), part(r.iteration));
}

}  // namespace blossom
