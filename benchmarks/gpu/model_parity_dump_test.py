"""model-parity-dump on the CPU against the Hugging Face goldens (tests/fixtures/goldens).

The dump is what benchmarks/gpu/model_parity.py compares with transformers on the GPU machine,
so its layout and its numbers are checked here where no GPU or torch is: every prompt's logits
(all positions) within the golden test's 1e-4 of HF's, the greedy continuations token-identical
to HF's, step 0's logits equal to the prefill's last row. Standard library only (no numpy).
Usage (Bazel): model_parity_dump_test.py DUMP_BINARY MODEL_DIR GOLDEN_DIR
"""
import array
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

TOLERANCE = 1e-4


def read_f32(path):
    values = array.array("f")
    with open(path, "rb") as f:
        values.frombytes(f.read())
    return values


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", (name, meta["dtype"])
        begin, end = meta["data_offsets"]
        values = array.array("f")
        values.frombytes(data[begin:end])
        tensors[name] = (meta["shape"], values)
    return tensors


def max_abs_diff(a, b):
    assert len(a) == len(b), (len(a), len(b))
    worst = 0.0
    for x, y in zip(a, b):
        if not (math.isfinite(x) and math.isfinite(y)):
            return math.inf
        worst = max(worst, abs(x - y))
    return worst


def main():
    dump_bin, model_dir, golden_dir = sys.argv[1:4]
    golden = json.load(open(os.path.join(golden_dir, "golden.json")))
    golden_logits = read_safetensors(os.path.join(golden_dir, "golden.safetensors"))
    with tempfile.TemporaryDirectory() as tmp:
        # The logits prompts, then the greedy prompts (their continuations are golden too).
        items = golden["logits"]
        greedy = golden["greedy"]
        prompts = [i["input_ids"] for i in items] + [g["input_ids"] for g in greedy]
        new_tokens = min(len(g["new_ids"]) for g in greedy)
        ids_path = os.path.join(tmp, "ids.json")
        json.dump(prompts, open(ids_path, "w"))
        out = os.path.join(tmp, "out")
        subprocess.run([dump_bin, "--model", model_dir, "--prompts", ids_path, "--out", out,
                        "--new-tokens", str(new_tokens), "--threads", "2"], check=True)
        index = json.load(open(os.path.join(out, "index.json")))
        assert index["backend"] == "cpu" and index["new_tokens"] == new_tokens, index
        vocab = index["vocab"]
        assert len(index["prompts"]) == len(prompts)
        worst = 0.0
        for i, item in enumerate(items):
            entry = index["prompts"][i]
            assert entry["ids"] == item["input_ids"]
            assert entry["logits_shape"] == [len(item["input_ids"]), vocab], entry["logits_shape"]
            got = read_f32(os.path.join(out, entry["logits_file"]))
            shape, want = golden_logits[item["name"]]
            assert len(got) == len(want), (item["name"], len(got), len(want), shape)
            diff = max_abs_diff(got, want)
            worst = max(worst, diff)
            assert diff <= TOLERANCE, f"prompt {item['name']}: max |dump - HF| {diff} > {TOLERANCE}"
            steps = read_f32(os.path.join(out, entry["steps_file"]))
            assert len(steps) == new_tokens * vocab
            assert steps[:vocab] == got[-vocab:], f"prompt {item['name']}: step 0 is not the last prefill row"
        for j, g in enumerate(greedy):
            entry = index["prompts"][len(items) + j]
            assert entry["greedy"] == g["new_ids"][:new_tokens], (j, entry["greedy"], g["new_ids"][:new_tokens])
        print(f"dump matches HF: {len(items)} prompts, max |diff| {worst:.3g}; "
              f"{len(greedy)} greedy continuations identical")


if __name__ == "__main__":
    main()
