"""Runs in the lm_eval venv (BLOSSOM_LM_EVAL_PYTHON) for tests/e2e/lm_eval_test.py: for each
(context, continuation) pair that lm_eval scored, the token ids lm_eval sent and the
loglikelihood that Hugging Face transformers computes for them on the same checkpoint.

    python lm_eval_reference.py MODEL_ARGS MODEL_DIR < pairs.json > reference.json

MODEL_ARGS is the --model_args string of the lm_eval run: the ids come from lm_eval's own
local-completions model (its tokenizer and its context/continuation split), not from a
re-implementation that could drift from what it sends. The transformers loglikelihood is the
independent oracle: it is what the gateway's prompt logprobs must add up to.
"""
import json
import sys

import torch
from lm_eval.api.registry import get_model
from transformers import BloomForCausalLM


def continuation_loglikelihood(model, context_ids, continuation_ids):
    ids = torch.tensor([context_ids + continuation_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    # The token at position i is predicted by the logits at position i - 1.
    return sum(logprobs[len(context_ids) + k - 1, token].item()
               for k, token in enumerate(continuation_ids))


def main():
    model_args, model_dir = sys.argv[1], sys.argv[2]
    pairs = json.load(sys.stdin)
    torch.set_num_threads(1)
    lm = get_model("local-completions").create_from_arg_string(model_args)
    model = BloomForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    out = []
    for context, continuation in pairs:
        context_ids, continuation_ids = lm._encode_pair(context, continuation)
        out.append({"context_ids": context_ids, "continuation_ids": continuation_ids,
                    "hf_loglikelihood": continuation_loglikelihood(model, context_ids,
                                                                   continuation_ids)})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
