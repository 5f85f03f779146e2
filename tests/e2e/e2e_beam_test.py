"""End-to-end beam search over loopback, against the real blossom-server (CPU backend, fixture
model) and blossom-gateway: vLLM's use_beam_search through OpenAI's `openai` package, the
project's Python gRPC client and the `blossom` CLI, each against Hugging Face's
generate(num_beams=...) on the same checkpoint (tests/fixtures/goldens/bloom-tiny-h4/
beam_search.json, written by tests/fixtures/fixture_beam.py).
"""
import json
import subprocess
import unittest

import blossom_client
import openai

import e2e_common
from e2e_common import API_KEY, CLI, MODEL
from procs import runfile

EOS = 2


def setUpModule():
    global SRV, GW
    SRV, GW = e2e_common.start_shared()


def tearDownModule():
    e2e_common.stop_shared()


def golden_cases():
    with open(runfile("tests/fixtures/goldens/bloom-tiny-h4/beam_search.json")) as f:
        return json.load(f)["cases"]


def early_stopping(case):
    return case["early_stopping"]  # false, true or "never": vLLM's (and HF's) spelling


class BeamSearchTest(unittest.TestCase):
    def setUp(self):
        self.client = openai.OpenAI(base_url=GW.url + "/v1", api_key=API_KEY, max_retries=0)
        self.grpc = blossom_client.BlossomClient(SRV.grpc, timeout=60)

    def tearDown(self):
        self.grpc.close()
        e2e_common.wait_idle(SRV)

    def text_of(self, ids):
        return self.grpc.detokenize(ids, skip_special_tokens=True)

    def test_openai_completions_are_transformers_beams(self):
        """Every golden case through the openai SDK: n beams as n choices, best first, each the
        text of HF's sequence (an end token's text left out), finish reason and usage."""
        for i, case in enumerate(golden_cases()):
            if case["num_return_sequences"] != case["num_beams"]:
                continue  # vLLM returns every beam: n is the width and the count
            ends = case["end_token_ids"]
            extra = {"use_beam_search": True, "length_penalty": case["length_penalty"],
                     "early_stopping": early_stopping(case), "min_tokens": case["min_new_tokens"],
                     "stop_token_ids": [t for t in ends if t != EOS],
                     "ignore_eos": EOS not in ends}
            r = self.client.completions.create(
                model=MODEL, prompt=case["prompt_ids"], n=case["num_beams"],
                max_tokens=case["max_new_tokens"], logprobs=0, extra_body=extra)
            self.assertEqual(len(r.choices), case["num_beams"], i)
            for choice, seq in zip(sorted(r.choices, key=lambda c: c.index), case["sequences"]):
                ended = seq[-1] in ends  # HF shows end_token_ids[0] for whichever ended it
                self.assertEqual(choice.text, self.text_of(seq[:-1] if ended else seq), (i, seq))
                self.assertEqual(choice.finish_reason, "stop" if ended else "length", (i, seq))
                self.assertEqual(len(choice.logprobs.tokens), len(seq), (i, seq))
            self.assertEqual(r.usage.completion_tokens, sum(len(s) for s in case["sequences"]))
            self.assertEqual(r.usage.prompt_tokens, len(case["prompt_ids"]))

    def test_grpc_client_returns_hf_sequences_and_scores(self):
        for case in golden_cases()[:7]:
            ends = case["end_token_ids"]
            r = self.grpc.beam_search(
                case["prompt_ids"], case["num_beams"],
                num_return_sequences=case["num_return_sequences"],
                length_penalty=case["length_penalty"], early_stopping=early_stopping(case),
                max_new_tokens=case["max_new_tokens"], min_new_tokens=case["min_new_tokens"],
                stop_token_ids=[t for t in ends if t != EOS], ignore_eos=EOS not in ends,
                logprobs=True)
            self.assertEqual(len(r.beams), len(case["sequences"]))
            for beam, seq, score in zip(r.beams, case["sequences"], case["scores"]):
                got = [t.id for t in beam.tokens]
                if beam.finish_reason != "length":
                    self.assertIn(got[-1], ends)
                    got[-1] = ends[0]  # HF shows end_token_ids[0] for whichever end token
                self.assertEqual(got, seq)
                n = len(seq)
                self.assertAlmostEqual(beam.score, score,
                                       delta=1e-5 * n ** (1 - case["length_penalty"]))
                self.assertAlmostEqual(sum(t.logprob for t in beam.tokens),
                                       beam.cumulative_logprob, delta=1e-4)

    def test_chat_beams(self):
        r = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hello"}], n=3, max_tokens=10,
            temperature=0, extra_body={"use_beam_search": True, "early_stopping": "never",
                                       "length_penalty": 0.5})
        self.assertEqual(len(r.choices), 3)
        self.assertEqual(len({c.message.content for c in r.choices}), 3)  # distinct beams
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        self.assertGreater(r.usage.completion_tokens, 0)
        self.assertLessEqual(r.usage.completion_tokens, 30)

    def test_refusals_name_the_field(self):
        for extra, kwargs, param in (
                ({"use_beam_search": True}, {"stream": True}, "stream"),
                ({"use_beam_search": True}, {"temperature": 0.7}, "temperature"),
                ({"use_beam_search": True}, {"n": 11}, "n"),
                ({"use_beam_search": True}, {"stop": ["."]}, "stop"),
                ({"use_beam_search": True, "stop_token_ids": [5, 6, 7]}, {"n": 6},
                 "stop_token_ids"),  # 6 beams x (1 + 4 end tokens) candidates > 20
                ({"length_penalty": 2.0}, {}, "length_penalty")):
            with self.assertRaises(openai.BadRequestError) as e:
                self.client.completions.create(model=MODEL, prompt="Hi", max_tokens=4,
                                               extra_body=extra, **kwargs)
            self.assertEqual(e.exception.body.get("param"), param, e.exception.body)

    def test_cli_server_and_local_agree(self):
        prompt = "The server reads"
        want = self.grpc.beam_search(prompt, 3, num_return_sequences=2, max_new_tokens=8)
        args = ["generate", "--prompt", prompt, "--num_beams", "3", "--num_return_sequences", "2",
                "--max_new_tokens", "8"]
        remote = subprocess.run([CLI, *args, "--server", SRV.grpc], capture_output=True,
                                text=True, timeout=60)
        self.assertEqual(remote.returncode, 0, remote.stderr)
        lines = remote.stdout.splitlines()
        self.assertEqual(len(lines), 4, remote.stdout)
        self.assertTrue(lines[0].startswith("# beam 1: score="), lines[0])
        self.assertEqual([lines[1], lines[3]], [b.text for b in want.beams])
        local = subprocess.run([CLI, *args, "--model", runfile(f"tests/fixtures/models/{MODEL}")],
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(local.returncode, 0, local.stderr)
        self.assertEqual(local.stdout.splitlines()[1::2], [prompt + b.text for b in want.beams])
        bad = subprocess.run([CLI, *args[:-2], "--num_beams", "11", "--server", SRV.grpc],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("beam_width", bad.stderr)
        # A sampling flag would be ignored by beam search: refused, not dropped.
        sampled = subprocess.run([CLI, *args, "--temperature", "0.5", "--server", SRV.grpc],
                                 capture_output=True, text=True, timeout=60)
        self.assertEqual(sampled.returncode, 1)
        self.assertIn("--temperature is not supported with --num_beams", sampled.stderr)


if __name__ == "__main__":
    unittest.main()
