#!/usr/bin/env python3
"""Blossom vs Hugging Face transformers on the same BLOOM checkpoint, in one run.

    python3 benchmarks/gpu/hf_side_by_side.py --model DIR --blossom-bench PATH/blossom-bench \
        --out-dir OUT [--device cuda|cpu] [--dtype bf16] [--batch-sizes 1,2,4,8,16,32,64] \
        [--max-new-tokens 100] [--warmup 1] [--cycles 5] [--commit SHA] [--machine TEXT]

DIR is any Hugging Face BLOOM directory (config.json, *.safetensors, tokenizer.json), e.g. one
written by `make-random-checkpoint --shape 7b1 --dtype bf16 --out DIR`: both sides then load the
same config and the same (random) weights.

Per batch size B (the seed's benchmark, bloom-ds-inference.py --benchmark): the seed's eight
prompts cycled to B; greedy; exactly --max-new-tokens new tokens per sequence (HF:
min_new_tokens = max_new_tokens, so EOS cannot end a sequence early; Blossom: --ignore-eos, its
default); --warmup untimed then --cycles timed generate() calls, each timed from before
tokenizing to after decoding the outputs to text (the seed's generate()), with
torch.cuda.synchronize() before reading the clock.

  (a) Blossom first: `blossom-bench sweep --backend B ... --json OUT/blossom_sweep.json` as a
      subprocess (its own process, so its GPU memory is free again before HF loads).
  (b) HF: BloomForCausalLM.from_pretrained(DIR, dtype) on --device, padded batch (left padding,
      as BLOOM's tokenizer config), model.generate.

Writes OUT/STEM.json ("blossom-hf-side-by-side/1"), OUT/STEM.md, OUT/STEM-throughput.svg, plus
Blossom's own OUT/blossom_sweep.{json,md,log} and OUT/blossom_sweep-*.svg. See
benchmarks/gpu/README.md. Exit status: 0 when every requested batch size ran on both sides
(minus those given up for --deadline-s), 1 otherwise.
"""

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side_report as report_lib  # noqa: E402  (stdlib-only, beside this script)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="HF BLOOM directory (config, safetensors, tokenizer)")
    p.add_argument("--out-dir", required=True)
    p.add_argument("--stem", default="side_by_side", help="report file names: STEM.json, STEM.md")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="where HF runs")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    p.add_argument("--max-new-tokens", type=int, default=100)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--cycles", type=int, default=5)
    p.add_argument("--blossom-bench", default="", help="path of the blossom-bench binary")
    p.add_argument("--blossom-backend", default="",
                   help="blossom-bench --backend (default: cuda for --device cuda, else cpu)")
    p.add_argument("--blossom-args", default="",
                   help="extra blossom-bench sweep flags, one shell-quoted string "
                        "(e.g. '--mem-bandwidth-gbs 3350 --threads 16')")
    p.add_argument("--blossom-json", default="",
                   help="use this existing blossom-bench sweep JSON instead of running blossom-bench")
    p.add_argument("--skip-blossom", action="store_true", help="HF only")
    p.add_argument("--skip-hf", action="store_true", help="Blossom only")
    p.add_argument("--blossom-timeout-s", type=float, default=0,
                   help="kill blossom-bench after this long (0: no limit but --deadline-s)")
    p.add_argument("--deadline-s", type=float, default=0,
                   help="wall-clock budget of the whole run; HF batch sizes that would not finish "
                        "in time are skipped and reported (0: none)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--commit", default="", help="git commit of the Blossom build (the device has no git)")
    p.add_argument("--machine", default="", help="machine description (default: GPU name, CPU cores)")
    return p.parse_args(argv)


def read_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    h = int(c.get("hidden_size", c.get("n_embed", 0)))
    n_layer = int(c.get("n_layer", c.get("num_hidden_layers", 0)))
    n_head = int(c.get("n_head", c.get("num_attention_heads", 0)))
    vocab = int(c.get("vocab_size", 0))
    params = n_layer * (12 * h * h + 13 * h) + vocab * h + 4 * h
    return {
        "dir": os.path.abspath(model_dir),
        "hidden_size": h, "n_layer": n_layer, "n_head": n_head, "vocab_size": vocab,
        "params": params,
        "description": f"hidden {h}, {n_layer} layers, {n_head} heads, vocab {vocab}, "
                       f"{params / 1e9:.3f}B parameters",
    }


def nvidia_smi():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.SubprocessError):
        return ""


class Clock:
    def __init__(self, deadline_s):
        self.start = time.monotonic()
        self.deadline_s = deadline_s

    def left(self):
        if self.deadline_s <= 0:
            return float("inf")
        return self.deadline_s - (time.monotonic() - self.start)


# ---------------------------------------------------------------------------------------------
# (a) Blossom
# ---------------------------------------------------------------------------------------------

def blossom_has_flag(binary, flag):
    """Whether blossom-bench defines --FLAG (absl's --helpfull lists every flag, then exits 1)."""
    try:
        out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return re.search(r"^\s*--%s\b" % re.escape(flag), out.stdout + out.stderr, re.M) is not None


def run_blossom(args, backend, clock, notes):
    """Runs the sweep; returns (parsed sweep JSON or None, section metadata for the report)."""
    out_json = os.path.join(args.out_dir, "blossom_sweep.json")
    log_path = os.path.join(args.out_dir, "blossom_sweep.log")
    binary = os.path.abspath(args.blossom_bench)
    cmd = [binary, "sweep", "--model", os.path.abspath(args.model),
           "--batch-sizes", args.batch_sizes, "--max-new-tokens", str(args.max_new_tokens),
           "--warmup", str(args.warmup), "--cycles", str(args.cycles),
           "--json", out_json, "--markdown", os.path.join(args.out_dir, "blossom_sweep.md"),
           "--svg-prefix", os.path.join(args.out_dir, "blossom_sweep")]
    if args.commit:
        cmd += ["--commit", args.commit]
    if args.machine:
        cmd += ["--machine", args.machine]
    if blossom_has_flag(binary, "backend"):
        cmd += ["--backend", backend]
    elif backend == "cpu":
        notes.append("this blossom-bench has no --backend flag; it ran on its only backend, cpu")
    else:
        meta = {"errors": {"all": f"{binary} has no --backend flag, so it cannot run on '{backend}' "
                                  "(wire it in: benchmarks/gpu/README.md)"}}
        return None, meta
    cmd += shlex.split(args.blossom_args)
    meta = {"json": os.path.basename(out_json), "log": os.path.basename(log_path),
            "command": shlex.join(cmd)}
    timeout = args.blossom_timeout_s if args.blossom_timeout_s > 0 else None
    if clock.left() != float("inf"):
        timeout = min(timeout or clock.left(), max(clock.left(), 1.0))
    print(f"[side-by-side] Blossom: {shlex.join(cmd)}", flush=True)
    t0 = time.monotonic()
    killed = threading.Event()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def kill():
            killed.set()
            proc.kill()

        # A watchdog, since a silent hang would never return from the read loop below.
        watchdog = threading.Timer(timeout, kill) if timeout is not None else None
        if watchdog:
            watchdog.start()
        try:
            # Stream the seed-format lines as they come (a sweep can take minutes).
            for line in proc.stdout:
                sys.stdout.write(line)
                log.write(line)
            proc.wait()
        finally:
            if watchdog:
                watchdog.cancel()
    if killed.is_set():
        meta["errors"] = {"all": f"blossom-bench killed after {timeout:.0f} s (time budget)"}
    meta["returncode"] = proc.returncode
    meta["wall_s"] = time.monotonic() - t0
    if proc.returncode != 0:
        meta.setdefault("errors", {})["all"] = meta.get("errors", {}).get(
            "all", f"blossom-bench exited with {proc.returncode} (see {meta['log']})")
        return None, meta
    with open(out_json) as f:
        return json.load(f), meta


# ---------------------------------------------------------------------------------------------
# (b) Hugging Face
# ---------------------------------------------------------------------------------------------

def run_hf(args, clock, notes):
    import torch
    import transformers
    from transformers import AutoTokenizer
    try:
        from transformers import BloomForCausalLM as model_class
    except ImportError:  # a transformers without the class by name still maps model_type bloom
        from transformers import AutoModelForCausalLM as model_class

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda but torch sees no GPU")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    tokenizer.padding_side = "left"  # decoder-only batch generation (BLOOM's own config says so)
    if tokenizer.pad_token_id is None:
        raise SystemExit("the tokenizer has no pad token; a padded batch needs one")

    # transformers renamed from_pretrained's torch_dtype to dtype (4.56); an unknown keyword would
    # be swallowed into the config and silently load fp32, so pick by version and check below.
    version = tuple(int(x) for x in re.findall(r"\d+", transformers.__version__)[:2])
    kwargs = {"dtype" if version >= (4, 56) else "torch_dtype": dtype}
    if device.type == "cuda":
        try:
            import accelerate  # noqa: F401  (device_map needs it in transformers 4.x)
            kwargs["device_map"] = {"": device.index or 0}  # weights straight to the GPU
        except ImportError:
            pass
    sync()
    t0 = time.perf_counter()
    model = model_class.from_pretrained(args.model, **kwargs)
    if "device_map" not in kwargs:  # moving an accelerate-dispatched model can warn or fail
        model.to(device)
    model.eval()
    sync()
    load_s = time.perf_counter() - t0
    got = next(model.parameters()).dtype
    if got != dtype:
        raise SystemExit(f"HF loaded {got}, wanted {dtype}")
    print(f"[side-by-side] HF: loaded in {load_s:.1f} s ({got}, {device})", flush=True)

    n = args.max_new_tokens
    gen_kwargs = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, num_beams=1,
                      use_cache=True, pad_token_id=tokenizer.pad_token_id)

    def generate_once(prompts):
        """The seed's generate(): tokenize, generate, decode; seconds, padded prompt length."""
        sync()
        t = time.perf_counter()
        inputs = tokenizer(prompts, return_tensors="pt", padding=True).to(device)
        with torch.inference_mode():
            out = model.generate(**inputs, **gen_kwargs)
        tokenizer.batch_decode(out, skip_special_tokens=True)
        sync()
        seconds = time.perf_counter() - t
        prompt_len = inputs["input_ids"].shape[1]
        if out.shape[0] != len(prompts) or out.shape[1] - prompt_len != n:
            raise RuntimeError(f"generate returned {tuple(out.shape)} for {len(prompts)} prompts of "
                               f"{prompt_len} tokens; expected {n} new tokens each")
        return seconds, prompt_len

    results, errors = [], {}
    last_cycle_s = None
    for b in report_lib.parse_batch_sizes(args.batch_sizes):
        prompts = report_lib.prompts_for_batch(b)
        # Decode cost grows slowly with B on a GPU; 1.5x the last size's time is a safe guess.
        if last_cycle_s is not None:
            needed = 1.5 * last_cycle_s * (args.warmup + args.cycles) + 5
            if needed > clock.left():
                errors[str(b)] = (f"skipped: about {needed:.0f} s needed, {clock.left():.0f} s left "
                                  "of --deadline-s")
                print(f"[side-by-side] HF bs={b}: {errors[str(b)]}", flush=True)
                continue
        try:
            for _ in range(args.warmup):
                generate_once(prompts)
            cycles, prompt_len = [], 0
            for _ in range(args.cycles):
                s, prompt_len = generate_once(prompts)
                cycles.append(s)
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
            errors[str(b)] = str(e).splitlines()[0][:300]
            print(f"[side-by-side] HF bs={b}: {errors[str(b)]}", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        res = report_lib.hf_batch_result(b, n, cycles, padded_prompt_tokens=prompt_len)
        results.append(res)
        last_cycle_s = max(cycles)
        # The seed's four lines, so the log reads like bloom-ds-inference.py's.
        print(f"[side-by-side] HF bs={b}\n*** Performance stats:\n"
              f"Throughput per token including tokenize: {res['ms_per_token']:.2f} msecs\n"
              f"Start to ready to generate: {load_s:.3f} secs\n"
              f"Tokenize and generate {res['generated_tokens']} (bs={b}) tokens: "
              f"{res['seed_generate_s']:.3f} secs\n"
              f"Start to finish: {load_s + res['seed_generate_s']:.3f} secs\n", flush=True)

    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "python": platform.python_version()}
    if device.type == "cuda":
        versions["cuda (torch)"] = torch.version.cuda
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    hf = {"load_s": load_s, "dtype": str(got), "device": str(device),
          "padding_side": "left", "results": results, "errors": errors,
          "command": f"{model_class.__name__}.from_pretrained(DIR, {list(kwargs)[0]}={dtype}).generate("
                     f"max_new_tokens={n}, min_new_tokens={n}, do_sample=False) in this process"}
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return hf, versions, gpu


def main(argv):
    args = parse_args(argv)
    clock = Clock(args.deadline_s)
    os.makedirs(args.out_dir, exist_ok=True)
    batch_sizes = report_lib.parse_batch_sizes(args.batch_sizes)
    model = read_config(args.model)
    backend = args.blossom_backend or ("cuda" if args.device == "cuda" else "cpu")
    notes = []
    if args.device == "cpu" and backend == "cuda" and not args.skip_hf:
        notes.append("HF ran on the CPU and Blossom on the GPU: not a like-for-like comparison")

    blossom_sweep, blossom_meta = None, {}
    if args.blossom_json:
        with open(args.blossom_json) as f:
            blossom_sweep = json.load(f)
        blossom_meta = {"json": os.path.abspath(args.blossom_json), "reused": True,
                        "command": blossom_sweep.get("command", "")}
        notes.append(f"Blossom results read from {args.blossom_json} (a blossom-bench sweep run "
                     "before this script, same checkpoint and settings: see its command)")
    elif not args.skip_blossom:
        if not args.blossom_bench:
            raise SystemExit("--blossom-bench is required (or --blossom-json / --skip-blossom)")
        blossom_sweep, blossom_meta = run_blossom(args, backend, clock, notes)

    if blossom_sweep is not None:
        blossom_dtype = blossom_sweep.get("model", {}).get("weight_dtype", "")
        if blossom_dtype and blossom_dtype != args.dtype:
            notes.append(f"Blossom ran the checkpoint's {blossom_dtype} weights, HF --dtype "
                         f"{args.dtype}: not a like-for-like comparison")
        if blossom_sweep.get("backend") and blossom_sweep["backend"] != backend:
            notes.append(f"Blossom ran on backend {blossom_sweep['backend']}, not {backend}")

    hf, versions, gpu = None, {"python": platform.python_version()}, ""
    if not args.skip_hf:
        hf, versions, gpu = run_hf(args, clock, notes)

    smi = nvidia_smi() if args.device == "cuda" or backend == "cuda" else ""
    gpu = smi or gpu
    machine = args.machine or ", ".join(
        x for x in [f"1x {gpu}" if gpu else "", f"{os.cpu_count()} CPU cores",
                    platform.processor() or platform.machine()] if x)
    meta = {
        "date_utc": report_lib.utc_now(),
        "gpu": gpu,
        "device": args.device,
        "commit": args.commit,
        "machine": machine,
        "dtype": args.dtype,
        "model": model,
        "settings": {"batch_sizes": batch_sizes, "max_new_tokens": args.max_new_tokens,
                     "warmup": args.warmup, "cycles": args.cycles, "greedy": True,
                     "ignore_eos": True, "prompts": report_lib.SEED_PROMPTS,
                     "blossom_backend": backend},
        "commands": {"side_by_side": shlex.join([sys.executable] + [os.path.abspath(__file__)] + argv)},
        "versions": versions,
        "notes": notes,
    }
    if blossom_meta.get("command"):
        meta["commands"]["blossom"] = blossom_meta["command"]
    if hf:
        meta["commands"]["hf"] = hf["command"]
    report = report_lib.build_report(meta, hf, blossom_sweep, blossom_meta)
    paths = report_lib.write_report(report, args.out_dir, args.stem)
    print(report_lib.to_markdown(report), flush=True)
    for p in paths:
        print(f"[side-by-side] wrote {p}")

    skipped = {k for k, v in (hf or {}).get("errors", {}).items() if v.startswith("skipped:")}
    wanted = {b for b in batch_sizes if str(b) not in skipped}
    ok = True
    for r in report["rows"]:
        if r["batch_size"] not in wanted:
            continue
        if not args.skip_hf and r["hf_ms_per_token"] is None:
            ok = False
        if not (args.skip_blossom and not args.blossom_json) and r["blossom_ms_per_token"] is None:
            ok = False
    if len(report["rows"]) == 0 or blossom_meta.get("errors"):
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
