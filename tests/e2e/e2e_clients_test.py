"""End-to-end tests over loopback with real clients against the real blossom-server (CPU backend,
fixture model) and blossom-gateway: OpenAI's `openai` package, Hugging Face's `text-generation`,
the project's Python gRPC client, curl and the `blossom` CLI.
"""
import asyncio
import json
import subprocess
import unittest
import urllib.error
import urllib.request

import blossom_client
import openai
import text_generation
from blossom_client import errors as blossom_errors

import e2e_common
from e2e_common import API_KEY, CLI, MODEL, auth, grpc_greedy
from procs import runfile


def setUpModule():
    global SRV, GW
    SRV, GW = e2e_common.start_shared()


def tearDownModule():
    e2e_common.stop_shared()


class OpenAIClientTest(unittest.TestCase):
    def setUp(self):
        self.client = openai.OpenAI(base_url=GW.url + "/v1", api_key=API_KEY, max_retries=0)

    def test_completion_matches_grpc_greedy(self):
        expected = grpc_greedy("The server reads", 12)
        r = self.client.completions.create(model=MODEL, prompt="The server reads", max_tokens=12,
                                           temperature=0)
        self.assertEqual(r.choices[0].text, expected.text)
        self.assertEqual(r.usage.completion_tokens, len(expected.tokens))
        self.assertEqual(r.usage.prompt_tokens, expected.usage.prompt_tokens)
        self.assertEqual(r.choices[0].finish_reason,
                         "length" if expected.finish_reason == "length" else "stop")

    def test_logit_bias_allowed_tokens_and_bad_words(self):
        """OpenAI's logit_bias and vLLM's allowed_token_ids and bad_words through the openai SDK
        (extra_body for vLLM's), against the gRPC client's tokens and the server's tokenizer."""
        prompt = "The server reads"
        base = grpc_greedy(prompt, 8, logprobs=0)
        texts = {t.id: t.text for t in base.tokens}
        first, second = base.tokens[0].id, base.tokens[1].id
        # +100 makes greedy emit that token every time; the same over gRPC and HTTP.
        r = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=6,
                                           temperature=0, logprobs=0,
                                           logit_bias={str(second): 100})
        self.assertEqual(r.choices[0].logprobs.tokens, [texts[second]] * 6)
        # Only the allowed tokens come out.
        r = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                           temperature=0, logprobs=0,
                                           extra_body={"allowed_token_ids": [first, second]})
        self.assertTrue(set(r.choices[0].logprobs.tokens) <= {texts[first], texts[second]},
                        r.choices[0].logprobs.tokens)
        # A bad word never ends the output, in any of the server's tokenizations of it.
        word = texts[first].strip() or texts[second].strip()
        banned = grpc_greedy(prompt, 8, bad_words=[word])
        with blossom_client.BlossomClient(SRV.grpc, timeout=30) as c:
            spellings = [c.tokenize(word).ids, c.tokenize(" " + word).ids]
        ids = [t.id for t in banned.tokens]
        for end in range(1, len(ids) + 1):
            self.assertNotEqual(ids[end - len(spellings[0]):end], spellings[0], ids)
            if (len(spellings[1]) == len(spellings[0]) and spellings[1][0] != spellings[0][0]):
                self.assertNotEqual(ids[end - len(spellings[1]):end], spellings[1], ids)
        self.assertNotEqual(ids, [t.id for t in base.tokens])
        r = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                           temperature=0, extra_body={"bad_words": [word]})
        self.assertEqual(r.choices[0].text, banned.text)
        # An id outside the vocabulary is the client's error, naming the field.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=2,
                                           logit_bias={"10000000": 5})
        self.assertEqual(cm.exception.param, "logit_bias")
        # Masks that leave no first token: refused before the prompt runs, with a 400 whose code
        # says why (only EOS allowed, but min_tokens forbids it yet).
        with blossom_client.BlossomClient(SRV.grpc, timeout=30) as c:
            eos = c.model_info().eos_token_id
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(
                model=MODEL, prompt=prompt, max_tokens=4,
                extra_body={"allowed_token_ids": [eos], "min_tokens": 2})
        self.assertEqual(cm.exception.code, "no_token_possible")
        self.assertIn("min_new_tokens", str(cm.exception))

    def test_guided_choice(self):
        """vLLM's guided_choice through the openai SDK: the text is one of the choices, ended by
        EOS ("stop"), sampled or greedy, completions and chat."""
        choices = ["yes", "no", "The server reads the cache"]
        for temperature in (0, 1.0):
            r = self.client.completions.create(model=MODEL, prompt="Answer:", max_tokens=20,
                                               temperature=temperature, seed=4,
                                               extra_body={"guided_choice": choices})
            self.assertIn(r.choices[0].text, choices)
            self.assertEqual(r.choices[0].finish_reason, "stop")
        r = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Well?"}], max_tokens=20, n=3,
            temperature=1.0, seed=1, extra_body={"structured_outputs": {"choice": choices}})
        for choice in r.choices:
            self.assertIn(choice.message.content, choices)
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(model=MODEL, prompt="x", max_tokens=4,
                                           extra_body={"guided_choice": choices,
                                                       "ignore_eos": True})
        self.assertEqual(cm.exception.param, "guided_choice")

    def test_several_prompts_and_n(self):
        # The openai SDK's list prompt and n: choices in order, each prompt n times; greedy
        # choices equal the single-prompt answers, seeded samples are reproducible.
        prompts = ["The server reads", "Once upon"]
        r = self.client.completions.create(model=MODEL, prompt=prompts, n=2, max_tokens=8,
                                           temperature=0)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2, 3])
        for k, choice in enumerate(r.choices):
            alone = grpc_greedy(prompts[k // 2], 8)
            self.assertEqual(choice.text, alone.text, f"choice {k}")
        sampled = [self.client.completions.create(model=MODEL, prompt="Once upon", n=3,
                                                  max_tokens=8, temperature=1.0, seed=5)
                   for _ in range(2)]
        self.assertEqual([c.text for c in sampled[0].choices],
                         [c.text for c in sampled[1].choices])
        self.assertEqual(len(sampled[0].choices), 3)
        # Streamed: chunks carry their choice's index; the texts equal the unary choices.
        texts = {}
        for chunk in self.client.completions.create(model=MODEL, prompt=prompts, n=2,
                                                    max_tokens=8, temperature=0, stream=True):
            for c in chunk.choices:
                texts[c.index] = texts.get(c.index, "") + c.text
        self.assertEqual(texts, {c.index: c.text for c in r.choices})

    def test_best_of_keeps_the_best_n(self):
        """OpenAI's best_of: the n of best_of candidates with the highest mean token logprob.
        Candidate i of a seeded request draws with seed + i, as choice i of n = best_of does,
        so the answer is the best two of those four samples."""
        kw = dict(model=MODEL, prompt="Once upon", max_tokens=8, temperature=1.0, seed=11)
        every = self.client.completions.create(n=4, logprobs=0, **kw)
        mean = lambda c: sum(c.logprobs.token_logprobs) / len(c.logprobs.token_logprobs)
        ranked = sorted(every.choices, key=lambda c: (-mean(c), c.index))
        best = self.client.completions.create(n=2, best_of=4, **kw)
        self.assertEqual([c.text for c in best.choices], [c.text for c in ranked[:2]])
        self.assertEqual([c.index for c in best.choices], [0, 1])
        self.assertEqual(best.usage.completion_tokens,
                         sum(len(c.logprobs.token_logprobs) for c in ranked[:2]))

    def test_streaming_completion_equals_unary(self):
        unary = self.client.completions.create(model=MODEL, prompt="Once upon", max_tokens=16,
                                               temperature=0)
        text, finish = "", None
        stream = self.client.completions.create(model=MODEL, prompt="Once upon", max_tokens=16,
                                                temperature=0, stream=True)
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].text
                finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(text, unary.choices[0].text)
        self.assertEqual(finish, unary.choices[0].finish_reason)

    def test_chat_streaming_with_usage(self):
        stream = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Say something."}],
            max_tokens=10, temperature=0, stream=True, stream_options={"include_usage": True})
        content, finish, usage = "", None, None
        for chunk in stream:
            if chunk.choices:
                content += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        self.assertIn(finish, ("length", "stop"))
        self.assertIsNotNone(usage)
        self.assertGreaterEqual(usage.completion_tokens, 1)
        self.assertLessEqual(usage.completion_tokens, 10)
        self.assertIsInstance(content, str)

    def test_continuous_usage_stats(self):
        """vLLM's continuous_usage_stats: every chunk carries its usage so far, its prompt count
        (the gateway's Tokenize call) the one the server reports at the end."""
        stream = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Say something."}],
            max_tokens=6, temperature=0, stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True})
        chunks = list(stream)
        self.assertTrue(all(c.usage is not None for c in chunks))
        final = chunks[-1].usage
        self.assertEqual(chunks[-1].choices, [])
        completion = [c.usage.completion_tokens for c in chunks[:-1]]
        self.assertEqual(completion[0], 0)  # the role chunk
        self.assertEqual(completion, sorted(completion))
        self.assertEqual(completion[-1], final.completion_tokens)
        for c in chunks[:-1]:
            self.assertEqual(c.usage.prompt_tokens, final.prompt_tokens)
            self.assertEqual(c.usage.total_tokens,
                             c.usage.prompt_tokens + c.usage.completion_tokens)

    def test_top_logprobs_come_in_vllm_order(self):
        """Each top_logprobs map: the token first, then the alternatives most likely first."""
        r = self.client.completions.create(model=MODEL, prompt="The server reads", max_tokens=6,
                                           temperature=0, logprobs=3)
        lp = r.choices[0].logprobs
        for token, top in zip(lp.tokens, lp.top_logprobs):
            keys = list(top)
            self.assertEqual(keys[0], token, top)
            rest = list(top.values())[1:]
            self.assertEqual(rest, sorted(rest, reverse=True), top)

    def test_chat_unary(self):
        r = self.client.chat.completions.create(
            model=MODEL, messages=[{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": "Hello"}],
            max_tokens=6, temperature=0, seed=3)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertLessEqual(r.usage.completion_tokens, 6)

    def test_models(self):
        ids = [m.id for m in self.client.models.list()]
        self.assertIn(MODEL, ids)
        self.assertEqual(self.client.models.retrieve(MODEL).id, MODEL)
        with self.assertRaises(openai.NotFoundError):
            self.client.models.retrieve("not-" + MODEL)

    def test_wrong_key_is_401(self):
        bad = openai.OpenAI(base_url=GW.url + "/v1", api_key="nope", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            bad.completions.create(model=MODEL, prompt="x", max_tokens=1)

    def test_bad_parameter_is_400_naming_it(self):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(model=MODEL, prompt="x", max_tokens=4, top_p=7.0)
        self.assertIn("top_p", str(cm.exception))
        self.assertEqual(cm.exception.param, "top_p")

    def test_fingerprint_and_default_lengths(self):
        messages = [{"role": "user", "content": "Count"}]
        a = self.client.completions.create(model=MODEL, prompt="x", max_tokens=2)
        b = self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
        self.assertTrue(a.system_fingerprint.startswith("blossom-"), a.system_fingerprint)
        self.assertEqual(a.system_fingerprint, b.system_fingerprint)
        # Completions keep OpenAI's default of 16; chat runs to the context limit
        # (--max_total_tokens 1024 here), finishing with "length".
        c = self.client.completions.create(model=MODEL, prompt="x", temperature=0,
                                           extra_body={"ignore_eos": True})
        self.assertEqual(c.usage.completion_tokens, 16)
        d = self.client.chat.completions.create(model=MODEL, messages=messages, temperature=0,
                                                extra_body={"ignore_eos": True})
        self.assertEqual(d.usage.prompt_tokens + d.usage.completion_tokens, 1024)
        self.assertEqual(d.choices[0].finish_reason, "length")
        # An explicit null is vLLM's None: the context limit on completions too.
        e = self.client.completions.create(model=MODEL, prompt="x", temperature=0,
                                           extra_body={"ignore_eos": True, "max_tokens": None})
        self.assertEqual(e.usage.prompt_tokens + e.usage.completion_tokens, 1024)

    def test_server_refusals_carry_param_and_code(self):
        """The server's google.rpc details (BadRequest field, ErrorInfo reason) reach the
        openai client as the error's param and code, in OpenAI's field names."""
        # Over max_input_tokens: refused by the server, not the gateway.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(model=MODEL, prompt="word " * 400, max_tokens=1)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.param, "prompt")
        self.assertEqual(cm.exception.code, "context_length_exceeded")
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "word " * 400}], max_tokens=1)
        self.assertEqual(cm.exception.param, "messages")
        self.assertEqual(cm.exception.code, "context_length_exceeded")
        # Within max_input_tokens but past max_total_tokens with max_tokens: max_tokens is named.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(model=MODEL, prompt="x", max_tokens=100000)
        self.assertEqual(cm.exception.param, "max_tokens")
        self.assertEqual(cm.exception.code, "context_length_exceeded")
        # A range the engine checks, named in the OpenAI spelling.
        with self.assertRaises(openai.BadRequestError) as cm:
            self.client.completions.create(model=MODEL, prompt="x", max_tokens=2,
                                           extra_body={"min_tokens": 5})
        self.assertEqual(cm.exception.param, "min_tokens")
        self.assertEqual(cm.exception.code, "invalid_stopping_params")
        # The same details through this repository's Python client, decoded.
        client = blossom_client.BlossomClient(SRV.grpc, timeout=30)
        self.addCleanup(client.close)
        with self.assertRaises(blossom_errors.InvalidArgumentError) as cm:
            client.generate("x", max_new_tokens=100000)
        self.assertEqual(cm.exception.field, "stopping.max_new_tokens")
        self.assertEqual(cm.exception.reason, "CONTEXT_LENGTH_EXCEEDED")
        self.assertIsNone(cm.exception.retry_delay)


def golden_prompt_logprobs(index=1):
    """Text, token ids and HF's log_softmax of each prompt token after the first (generate.py)."""
    with open(runfile("tests/fixtures/goldens/bloom-tiny-h4/golden.json")) as f:
        item = json.load(f)["logits"][index]
    return item["text"], item["input_ids"], item["prompt_logprobs"]


class PromptLogprobsTest(unittest.TestCase):
    """Prompt logprobs through the gateway with unmodified third-party clients, against Hugging
    Face's log_softmax (what evaluation harnesses score: echo + logprobs, decoder_input_details)."""

    def test_openai_echo_logprobs_match_transformers(self):
        text, ids, want = golden_prompt_logprobs()
        client = openai.OpenAI(base_url=GW.url + "/v1", api_key=API_KEY, max_retries=0)
        r = client.completions.create(model=MODEL, prompt=text, max_tokens=1, temperature=0,
                                      echo=True, logprobs=2)
        choice = r.choices[0]
        self.assertTrue(choice.text.startswith(text))
        lp = choice.logprobs
        self.assertEqual(len(lp.tokens), len(ids) + 1)
        self.assertIsNone(lp.token_logprobs[0])
        self.assertIsNone(lp.top_logprobs[0])
        for got, expected in zip(lp.token_logprobs[1:len(ids)], want):
            self.assertAlmostEqual(got, expected, delta=2e-4)
        # The 2 most likely tokens, and the token itself when it is not one of them (OpenAI's
        # "up to logprobs+1", as vLLM).
        self.assertIn(len(lp.top_logprobs[1]), (2, 3))
        self.assertAlmostEqual(lp.top_logprobs[1][lp.tokens[1]], lp.token_logprobs[1], delta=1e-6)
        self.assertEqual(r.usage.prompt_tokens, len(ids))
        # The same prompt again (now in the prefix cache) still scores every token.
        again = client.completions.create(model=MODEL, prompt=ids, max_tokens=1, temperature=0,
                                          echo=True, logprobs=0)
        self.assertEqual(again.choices[0].logprobs.token_logprobs[:len(ids)],
                         lp.token_logprobs[:len(ids)])
        # Streamed (vLLM allows echo with stream): the chunks join to the unary answer.
        for prompt in (text, ids):
            unary = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4,
                                              temperature=0, echo=True, logprobs=2)
            chunks = list(client.completions.create(model=MODEL, prompt=prompt, max_tokens=4,
                                                    temperature=0, echo=True, logprobs=2,
                                                    stream=True))
            self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices),
                             unary.choices[0].text)
            streamed = [t for c in chunks if c.choices and c.choices[0].logprobs
                        for t in c.choices[0].logprobs.tokens]
            self.assertEqual(streamed, unary.choices[0].logprobs.tokens)
            offsets = [o for c in chunks if c.choices and c.choices[0].logprobs
                       for o in c.choices[0].logprobs.text_offset]
            self.assertEqual(offsets, unary.choices[0].logprobs.text_offset)

    def test_vllm_prompt_logprobs_match_transformers(self):
        """vLLM's prompt_logprobs through the openai SDK (extra_body): each prompt token's logprob
        against HF's log_softmax, its rank against HF's top 5 there, and the alternatives."""
        with open(runfile("tests/fixtures/goldens/bloom-tiny-h4/golden.json")) as f:
            item = json.load(f)["logits"][1]
        ids, want = item["input_ids"], item["prompt_logprobs"]
        client = openai.OpenAI(base_url=GW.url + "/v1", api_key=API_KEY, max_retries=0)
        r = client.completions.create(model=MODEL, prompt=item["text"], max_tokens=1,
                                      temperature=0, extra_body={"prompt_logprobs": 2})
        plp = r.choices[0].model_extra["prompt_logprobs"]
        self.assertEqual(len(plp), len(ids))
        self.assertIsNone(plp[0])
        for p in range(1, len(ids)):
            entry = plp[p]
            token = entry[str(ids[p])]
            self.assertAlmostEqual(token["logprob"], want[p - 1], delta=2e-4)
            top_ids = item["prompt_top5_ids"][p - 1]
            top_lp = item["prompt_top5_logprobs"][p - 1]
            if ids[p] in top_ids:
                j = top_ids.index(ids[p])
                tied = any(abs(v - top_lp[j]) < 2e-4 for k, v in enumerate(top_lp) if k != j)
                if not tied:
                    self.assertEqual(token["rank"], j + 1, f"position {p}")
            elif top_lp[-1] - want[p - 1] > 2e-4:
                self.assertGreater(token["rank"], 5, f"position {p}")
            # The alternatives: ranks 1 and 2, HF's two most likely ids (unless near-tied).
            alts = {int(k): v for k, v in entry.items() if v["rank"] <= 2 and int(k) != ids[p]}
            for k, v in alts.items():
                if abs(top_lp[0] - top_lp[1]) > 2e-4 and abs(top_lp[1] - top_lp[2]) > 2e-4:
                    self.assertEqual(k, top_ids[v["rank"] - 1], f"position {p}")
        # Not with stream (vLLM's 400, naming the field).
        with self.assertRaises(openai.BadRequestError) as cm:
            client.completions.create(model=MODEL, prompt="x", max_tokens=1, stream=True,
                                      extra_body={"prompt_logprobs": 1})
        self.assertEqual(cm.exception.param, "prompt_logprobs")

    def test_tgi_decoder_input_details_and_top_n_tokens(self):
        text, ids, want = golden_prompt_logprobs()
        client = text_generation.Client(GW.url, headers=auth(), timeout=30)
        r = client.generate(text, max_new_tokens=2, decoder_input_details=True, top_n_tokens=3)
        prefill = r.details.prefill
        self.assertEqual([t.id for t in prefill], ids)
        self.assertIsNone(prefill[0].logprob)
        for token, expected in zip(prefill[1:], want):
            self.assertAlmostEqual(token.logprob, expected, delta=2e-4)
        self.assertEqual(len(r.details.top_tokens), 2)
        self.assertEqual([len(t) for t in r.details.top_tokens], [3, 3])
        # Greedy: the chosen token is the most likely alternative.
        self.assertEqual(r.details.top_tokens[0][0].id, r.details.tokens[0].id)


class TextGenerationClientTest(unittest.TestCase):
    def setUp(self):
        self.client = text_generation.Client(GW.url, headers=auth(), timeout=30)

    def test_generate_matches_grpc_greedy(self):
        expected = grpc_greedy("The server reads", 10)
        r = self.client.generate("The server reads", max_new_tokens=10)
        self.assertEqual(r.generated_text, expected.text)
        self.assertEqual(r.details.generated_tokens, len(expected.tokens))

    def test_generate_stream(self):
        expected = grpc_greedy("The library", 9)
        tokens, final = [], None
        for response in self.client.generate_stream("The library", max_new_tokens=9):
            # A number, as TGI's (this client's streams ask for details).
            self.assertIsInstance(response.token.logprob, float)
            if not response.token.special:
                tokens.append(response.token)
            if response.generated_text is not None:
                final = response
        self.assertEqual(len(tokens), len(expected.tokens))
        self.assertEqual([t.id for t in tokens], [t.id for t in expected.tokens])
        self.assertIsNotNone(final)
        self.assertEqual(final.generated_text, expected.text)
        # The tokens' texts join to the text, as TGI's incremental decode does.
        self.assertEqual("".join(t.text for t in tokens), final.generated_text)

    def test_sampling_with_seed_is_reproducible(self):
        a = self.client.generate("Once", max_new_tokens=8, do_sample=True, temperature=0.9,
                                 top_p=0.9, seed=42)
        b = self.client.generate("Once", max_new_tokens=8, do_sample=True, temperature=0.9,
                                 top_p=0.9, seed=42)
        self.assertEqual(a.generated_text, b.generated_text)

    def test_validation_error_is_422(self):
        with self.assertRaises(text_generation.errors.ValidationError):
            self.client.generate("x", max_new_tokens=4, top_p=1.5)

    def test_best_of_returns_the_best_candidate(self):
        """TGI's best_of: the candidate with the highest mean token logprob, the others in
        details.best_of_sequences; a seed would make every candidate the same sample."""
        mean = lambda tokens: sum(t.logprob for t in tokens) / len(tokens)
        r = self.client.generate("Once", max_new_tokens=8, do_sample=True, best_of=3)
        others = r.details.best_of_sequences
        self.assertEqual(len(others), 2)
        for other in others:
            self.assertGreaterEqual(mean(r.details.tokens), mean(other.tokens))
        # The gateway's own check (text-generation refuses it client-side too).
        status, body = post_json("/generate", {"inputs": "Once", "parameters": {
            "best_of": 2, "do_sample": True, "seed": 3, "max_new_tokens": 4}})
        self.assertEqual(status, 422, body)
        self.assertIn("seed", body["error"])
        status, body = post_json("/generate_stream", {"inputs": "Once", "parameters": {
            "best_of": 2, "do_sample": True, "max_new_tokens": 4}})
        self.assertEqual(status, 422, body)
        self.assertIn("best_of", body["error"])

    def test_over_long_prompt_is_422(self):
        # TGI answers an input over its limit with 422 (a validation error), not 413.
        with self.assertRaises(text_generation.errors.ValidationError) as cm:
            self.client.generate("word " * 400, max_new_tokens=1)
        self.assertIn("too long", str(cm.exception))


def post_json(path, body):
    """(status, parsed JSON body) of a POST to the shared gateway."""
    request = urllib.request.Request(GW.url + path, data=json.dumps(body).encode(),
                                     headers={**auth(), "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class VllmTokenizerRoutesTest(unittest.TestCase):
    """vLLM's /tokenize and /detokenize bodies over HTTP, against the gRPC client's Tokenize."""

    def test_tokenize_and_detokenize_round_trip(self):
        text = "The server reads é"
        with blossom_client.BlossomClient(SRV.grpc, timeout=30) as c:
            want = c.tokenize(text)
            info = c.model_info()
        status, body = post_json("/tokenize", {"model": MODEL, "prompt": text,
                                               "return_token_strs": True})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["tokens"], want.ids)
        self.assertEqual(body["count"], len(want.ids))
        self.assertEqual(body["token_strs"], want.tokens)
        self.assertEqual(body["max_model_len"], info.limits.max_total_tokens)
        status, back = post_json("/detokenize", {"model": MODEL, "tokens": body["tokens"]})
        self.assertEqual((status, back), (200, {"prompt": text}))
        # A text longer than the model takes is counted, as vLLM does, for the client to compare
        # with max_model_len; its ids detokenize back.
        status, long = post_json("/tokenize", {"prompt": "word " * 2000})
        self.assertEqual(status, 200, long)
        self.assertGreater(long["count"], long["max_model_len"])
        status, back = post_json("/detokenize", {"tokens": long["tokens"]})
        self.assertEqual((status, back), (200, {"prompt": "word " * 2000}))
        # The chat form counts the rendered template: more tokens than the message alone.
        status, chat = post_json("/tokenize", {"messages": [{"role": "user", "content": text}]})
        self.assertEqual(status, 200, chat)
        self.assertGreater(chat["count"], len(want.ids))
        self.assertIsNone(chat["token_strs"])
        # TGI's body on the same route keeps TGI's answer.
        status, tgi = post_json("/tokenize", {"inputs": text})
        self.assertEqual(status, 200, tgi)
        self.assertEqual([t["id"] for t in tgi], want.ids)
        # Ids outside the vocabulary: a 400 in OpenAI's shape naming the field.
        status, error = post_json("/detokenize", {"tokens": [1, info.vocab_size]})
        self.assertEqual(status, 400, error)
        self.assertEqual(error["error"]["param"], "tokens")


class GrpcClientTest(unittest.TestCase):
    def test_generate_stream_tokenize_info_health(self):
        with blossom_client.BlossomClient(SRV.grpc, timeout=30) as c:
            self.assertEqual(c.health(), "SERVING")
            info = c.model_info()
            self.assertEqual(info.model_id, MODEL)
            self.assertEqual(info.model_dir, MODEL)  # the base name, not the server's path
            self.assertEqual(info.num_heads, 4)
            r = c.generate("The server reads", max_new_tokens=8, temperature=0.0, ignore_eos=True)
            self.assertEqual(r.usage.generated_tokens, 8)
            self.assertEqual(r.finish_reason, "length")
            chunks = list(c.generate_stream("The server reads", max_new_tokens=8,
                                            temperature=0.0, ignore_eos=True))
            self.assertEqual("".join(ch.text_delta for ch in chunks), r.text)
            self.assertEqual(chunks[-1].final.usage.generated_tokens, 8)
            tok = c.tokenize("Hello world")
            self.assertEqual(len(tok.ids), len(tok.tokens))
            self.assertEqual(c.detokenize(tok.ids), "Hello world")
            with self.assertRaises(blossom_errors.InvalidArgumentError):
                c.generate("x", temperature=-1.0)

    def test_async_streaming(self):
        async def run():
            async with blossom_client.AsyncBlossomClient(SRV.grpc, timeout=30) as c:
                n = 0
                async for chunk in c.generate_stream("Async", max_new_tokens=7, temperature=0.0,
                                                     ignore_eos=True):
                    n += chunk.token is not None
                return n
        self.assertEqual(asyncio.run(run()), 7)


class CurlAndCliTest(unittest.TestCase):
    def test_curl_completion(self):
        body = json.dumps({"model": MODEL, "prompt": "The server reads", "max_tokens": 5,
                           "temperature": 0})
        out = subprocess.run(["curl", "-sS", "-X", "POST", GW.url + "/v1/completions",
                              "-H", "Content-Type: application/json",
                              "-H", f"Authorization: Bearer {API_KEY}", "-d", body],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        r = json.loads(out)
        self.assertEqual(r["object"], "text_completion")
        self.assertEqual(r["choices"][0]["text"], grpc_greedy("The server reads", 5).text)

    def test_curl_sse_ends_with_done(self):
        body = json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 4, "stream": True})
        out = subprocess.run(["curl", "-sS", "-N", "-X", "POST", GW.url + "/v1/completions",
                              "-H", "Content-Type: application/json",
                              "-H", f"Authorization: Bearer {API_KEY}", "-d", body],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        events = [l for l in out.splitlines() if l.startswith("data: ")]
        self.assertEqual(events[-1], "data: [DONE]")
        self.assertGreaterEqual(len(events), 2)

    def test_cli_server_mode(self):
        run = lambda *a: subprocess.run([CLI, *a, "--server", SRV.grpc], capture_output=True,
                                        text=True, timeout=60)
        self.assertEqual(run("health").stdout.strip(), "SERVING")
        info = json.loads(run("info").stdout)
        self.assertEqual(info["model_id"], MODEL)
        streamed = run("stream", "--prompt", "The server reads", "--max_new_tokens", "6",
                       "--ignore_eos")
        self.assertEqual(streamed.returncode, 0, streamed.stderr)
        self.assertEqual(streamed.stdout.rstrip("\n"),
                         grpc_greedy("The server reads", 6, ignore_eos=True).text)
        self.assertIn("generated_tokens=6", streamed.stderr)
        self.assertRegex(streamed.stderr, r"seed=\d+")  # a sampled run can be repeated
        # A flag of the in-process mode would be ignored with --server: refused, naming it.
        local_only = run("generate", "--prompt", "x", "--quantize", "int8")
        self.assertEqual(local_only.returncode, 2)
        self.assertIn("--quantize configures the in-process model", local_only.stderr)
        # A CA file without --tls would connect in plaintext, the API key in the clear.
        plain = run("health", "--tls_ca", "/dev/null")
        self.assertEqual(plain.returncode, 2)
        self.assertIn("--tls_ca is set without --tls", plain.stderr)
        # A value that starts with dashes is a value, not a flag (front matter, a stop string):
        # the server tokenizes exactly what was given.
        dashes = run("tokenize", "--prompt", "--a-b--")
        self.assertEqual(dashes.returncode, 0, dashes.stderr)
        with blossom_client.BlossomClient(SRV.grpc, timeout=30) as c:
            want = c.tokenize("--a-b--").ids
        self.assertEqual([int(line.split("\t")[0]) for line in dashes.stdout.splitlines()], want)
        year = run("generate", "--prompt", "Year:", "--regex", "[0-9]{4}", "--max_new_tokens", "10")
        self.assertEqual(year.returncode, 0, year.stderr)
        self.assertRegex(year.stdout.strip(), r"^[0-9]{4}$")
        # A GBNF grammar, here and in-process (--model): the same greedy text either way.
        grammar = 'root ::= "(" [0-9]{1,3} ("," [0-9]{1,3}){0,2} ")"'
        args = ("generate", "--prompt", "List:", "--grammar", grammar, "--max_new_tokens", "20")
        remote = run(*args)
        self.assertEqual(remote.returncode, 0, remote.stderr)
        self.assertRegex(remote.stdout.strip(), r"^\([0-9]{1,3}(,[0-9]{1,3}){0,2}\)$")
        local = subprocess.run([CLI, *args, "--model", runfile(f"tests/fixtures/models/{MODEL}")],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(local.returncode, 0, local.stderr)
        self.assertEqual(local.stdout.strip(), "List:" + remote.stdout.strip())  # prompt first
        both = run("generate", "--prompt", "x", "--grammar", grammar, "--regex", "a")
        self.assertEqual(both.returncode, 1)
        self.assertIn("give one of", both.stderr)
        record = run("generate", "--prompt", "Record:", "--max_new_tokens", "200", "--json_compact",
                     "--json_schema", json.dumps({"type": "object", "properties": {
                         "ok": {"type": "boolean"}}, "required": ["ok"]}))
        self.assertEqual(record.returncode, 0, record.stderr)
        self.assertIsInstance(json.loads(record.stdout.strip())["ok"], bool)
        bad = run("generate", "--prompt", "x", "--top_p", "2")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("INVALID_ARGUMENT", bad.stderr)
        self.assertIn("top_p", bad.stderr)



if __name__ == "__main__":
    unittest.main()
