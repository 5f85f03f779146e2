"""lm-evaluation-harness (`lm_eval`, PyPI) scores a local multiple-choice task through the
gateway's /v1/completions with its `local-completions` model: loglikelihood requests, i.e.
token-id prompts with echo + logprobs, the way evaluation tools use prompt logprobs.

The task (lm_eval_task/) asks bloom-demo for the true ending of sentences of the corpus it was
trained on. Offline: the dataset is a local JSONL and HF_*_OFFLINE are set, so any download
fails the run. Besides lm_eval's own verdict, every loglikelihood it logged is checked against
the prompt logprobs the gateway returns for the same token ids, and against Hugging Face
transformers on the same checkpoint (lm_eval_reference.py), so garbage logprobs cannot pass.

Needs two interpreters: BLOSSOM_E2E_PYTHON runs this file (blossom-client for the server's
health), BLOSSOM_LM_EVAL_PYTHON runs lm_eval (tests/e2e/setup_lm_eval_venv.sh); run_lm_eval.sh
reports SKIPPED without them.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.request

from procs import OUT_DIR, runfile, start_gateway, start_server

LM_EVAL_PYTHON = os.environ.get("BLOSSOM_LM_EVAL_PYTHON", "")
DEMO_DIR = runfile("tests/fixtures/models/bloom-demo")
TASK_DIR = os.path.dirname(runfile("tests/e2e/lm_eval_task/blossom_corpus_endings.yaml"))
TASK = "blossom_corpus_endings"
MODEL = "bloom-demo"  # the served name: the model directory's name
# bloom-demo scored acc 1.0 (16/16) when this was written: every true ending beat the best other
# choice by 9.4 nats or more, so the bound has margin for other CPUs and BLAS builds.
MIN_ACCURACY = 0.75
# The gateway's sums against lm_eval's (the same floats through JSON: measured equal) and against
# transformers' fp32 forward pass (another implementation: the goldens agree to ~1e-4 per logit).
GATEWAY_TOLERANCE = 1e-4
TRANSFORMERS_TOLERANCE = 1e-3
# Per lm_eval subprocess (about 10 s here, mostly imports and indexing lm_eval's built-in tasks);
# twice this stays inside the large test's 900 s.
LM_EVAL_TIMEOUT_S = 300


def offline_env(home):
    env = dict(os.environ, HF_HOME=os.path.join(home, "hf"),
               XDG_CACHE_HOME=os.path.join(home, "cache"),
               HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env.pop("OPENAI_API_KEY", None)
    return env


def post_json(url, body, timeout=30):
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


class LmEvalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Class cleanups run even when setUpClass fails (e.g. lm_eval times out).
        cls.server = start_server("lm_eval_server", model_dir=DEMO_DIR)
        cls.addClassCleanup(cls.server.stop)
        cls.gateway = start_gateway("lm_eval_gateway", cls.server)
        cls.addClassCleanup(cls.gateway.stop)
        cls.completions_url = cls.gateway.url + "/v1/completions"
        cls.model_args = (f"base_url={cls.completions_url},model={MODEL},tokenizer={DEMO_DIR},"
                          "tokenizer_backend=huggingface,num_concurrent=1,max_retries=1")
        # Caches in a fresh folder (nothing pre-downloaded to lean on); results kept as outputs.
        cls.env = offline_env(tempfile.mkdtemp(prefix="lm_eval_home_",
                                               dir=os.environ.get("TEST_TMPDIR")))
        cls.output_dir = tempfile.mkdtemp(prefix="lm_eval_results_", dir=OUT_DIR)
        cls.log_path = os.path.join(OUT_DIR, "lm_eval.log")
        # data_files in the task YAML is relative: lm_eval runs in the task's folder.
        with open(cls.log_path, "wb") as log:
            cls.returncode = subprocess.run(
                [LM_EVAL_PYTHON, "-m", "lm_eval", "run", "--model", "local-completions",
                 "--model_args", cls.model_args, "--tasks", TASK, "--include_path", TASK_DIR,
                 # Four token-id prompts per request (vLLM's batch form), one choice each, as
                 # lm_eval's users run it against vLLM.
                 "--batch_size", "4",
                 "--output_path", cls.output_dir, "--log_samples"],
                cwd=TASK_DIR, env=cls.env, stdout=log, stderr=subprocess.STDOUT,
                timeout=LM_EVAL_TIMEOUT_S).returncode
        with open(cls.log_path, encoding="utf-8", errors="replace") as f:
            cls.log = f.read()

    def output_file(self, pattern):
        matches = glob.glob(os.path.join(self.output_dir, "**", pattern), recursive=True)
        self.assertEqual(len(matches), 1, f"{pattern} under {self.output_dir}: {matches}")
        return matches[0]

    def samples(self):
        with open(self.output_file(f"samples_{TASK}_*.jsonl"), encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def test_run_succeeds_without_failed_requests(self):
        self.assertEqual(self.returncode, 0,
                         f"lm_eval failed; see {self.log_path}:\n{self.log[-4000:]}")
        # lm_eval logs a refused request ("API request failed ...") and each retry before it
        # gives up; with max_retries=1 a refusal would also fail the run, but say which.
        for symptom in ("API request failed", "Retry attempt", "Traceback"):
            self.assertNotIn(symptom, self.log, f"see {self.log_path}")

    def test_every_item_is_scored(self):
        samples = self.samples()
        with open(os.path.join(TASK_DIR, "corpus_endings.jsonl"), encoding="utf-8") as f:
            items = [json.loads(line) for line in f]
        self.assertEqual(len(samples), len(items))
        for sample in samples:
            # One loglikelihood request per choice, each answered with a finite number.
            self.assertEqual(len(sample["resps"]), len(sample["doc"]["choices"]))
            for (loglikelihood, _is_greedy), in sample["resps"]:
                self.assertLess(float(loglikelihood), 0.0)  # a log-probability; NaN fails too

    def test_accuracy(self):
        with open(self.output_file("results_*.json"), encoding="utf-8") as f:
            results = json.load(f)["results"][TASK]
        accuracy = results["acc,none"]
        self.assertIsInstance(accuracy, float)
        self.assertTrue(0.0 <= accuracy <= 1.0, accuracy)
        self.assertGreaterEqual(accuracy, MIN_ACCURACY)
        # The aggregate is the mean of the per-item verdicts lm_eval logged.
        per_item = [sample["acc"] for sample in self.samples()]
        self.assertAlmostEqual(accuracy, sum(per_item) / len(per_item))

    def scored_requests(self):
        """(context, continuation, lm_eval's loglikelihood) of every request lm_eval logged."""
        scored = []
        for sample in self.samples():
            # The sample log stores each request's arguments as gen_args_<i> and every response
            # value as a string (lm_eval's sanitize_list): [[["-0.22", "True"]], ...].
            for i, response in enumerate(sample["resps"]):
                arguments = sample["arguments"][f"gen_args_{i}"]
                (loglikelihood, _is_greedy), = response
                scored.append((arguments["arg_0"], arguments["arg_1"], float(loglikelihood)))
        return scored

    def gateway_loglikelihood(self, context_ids, continuation_ids):
        """The sum of the prompt logprobs the gateway echoes for the continuation's tokens."""
        ids = context_ids + continuation_ids
        body = post_json(self.completions_url, {"model": MODEL, "prompt": ids, "max_tokens": 1,
                                                "echo": True, "logprobs": 0, "temperature": 0})
        token_logprobs = body["choices"][0]["logprobs"]["token_logprobs"]
        self.assertEqual(len(token_logprobs), len(ids) + 1)  # the prompt, then one new token
        return sum(token_logprobs[len(context_ids):len(ids)])

    def test_loglikelihoods_match_gateway_and_transformers(self):
        scored = self.scored_requests()
        self.assertGreater(len(scored), 0)
        reference = subprocess.run(
            [LM_EVAL_PYTHON, runfile("tests/e2e/lm_eval_reference.py"), self.model_args, DEMO_DIR],
            input=json.dumps([[context, continuation] for context, continuation, _ in scored]),
            env=self.env, capture_output=True, text=True, check=True, timeout=LM_EVAL_TIMEOUT_S)
        worst_gateway = worst_transformers = 0.0
        for (context, continuation, lm_eval_ll), ref in zip(scored, json.loads(reference.stdout),
                                                             strict=True):
            with self.subTest(context=context, continuation=continuation):
                self.assertGreater(len(ref["continuation_ids"]), 0)
                gateway_ll = self.gateway_loglikelihood(ref["context_ids"], ref["continuation_ids"])
                self.assertAlmostEqual(lm_eval_ll, gateway_ll, delta=GATEWAY_TOLERANCE)
                self.assertAlmostEqual(gateway_ll, ref["hf_loglikelihood"],
                                       delta=TRANSFORMERS_TOLERANCE)
                worst_gateway = max(worst_gateway, abs(lm_eval_ll - gateway_ll))
                worst_transformers = max(worst_transformers,
                                         abs(gateway_ll - ref["hf_loglikelihood"]))
        print(f"{len(scored)} loglikelihoods: max |lm_eval - gateway| = {worst_gateway:.2e}, "
              f"max |gateway - transformers| = {worst_transformers:.2e}", file=sys.stderr)
