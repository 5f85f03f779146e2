#!/usr/bin/env python3
"""Blossom against llama.cpp, CTranslate2 and Hugging Face transformers on one checkpoint, on the
CPU, side by side in one run: alternating engines, medians over runs.

    benchmarks/cpu/peer_bench.py --blossom bazel-bin/benchmarks/cpu/cpu-step-bench \
        --peers WORK_DIR --f32-model DIR --bf16-model DIR --out-prefix benchmarks/results/NAME \
        [--dtypes fp32,bf16,int8] [--engines blossom,blossom-bf16,llama.cpp,ctranslate2,transformers] \
        [--runs 3] [--threads 2] [--prompt-tokens 128] [--long-prompt-tokens 512] \
        [--decode-tokens 32] [--batches 8,32] [--timeout-s 900] [--machine TEXT] [--commit SHA]
    benchmarks/cpu/peer_bench.py --rerender --out-prefix PREFIX   (md + svg again from PREFIX.json)

WORK_DIR comes from benchmarks/cpu/peers/setup_peers.sh (venv, llama.cpp tools, converted
models); benchmarks/cpu/run_peer_bench.sh does both steps in one command.

Points, the same for every engine (greedy, EOS ignored, fixed pseudo-random prompt ids):
  decode_ms        batch 1, ms per new token after a --prompt-tokens prompt
  prefill_ms       prompt -> first token, for --prompt-tokens and --long-prompt-tokens
  batch_tok_s      decode tokens/s of B sequences of 16-token prompts, for each B in --batches
  floor_ms         the weight bytes a Blossom decode step reads / read bandwidth, both from
                   cpu-step-bench (a read of a buffer as large as those weights, in every run)

Weights per dtype: fp32 = F32 checkpoint everywhere; bf16 = the BF16 checkpoint (gguf bf16,
CTranslate2 bfloat16, transformers bfloat16, Blossom's BF16 weights); int8 = from the F32
checkpoint: Blossom --quantize int8 --quantize-lm-head, llama.cpp q8_0, CTranslate2 int8 (transformers: none);
int4 (not in the default --dtypes) = Blossom --quantize int4 --quantize-lm-head, llama.cpp q4_0 made by
llama-quantize --pure (every tensor q4_0; CTranslate2 and transformers: none).
blossom-bf16 (bf16 rows only): Blossom on the BF16 checkpoint with --quantize bf16 --quantize-lm-head,
activations rounded to bf16 into each GEMM (vdpbf16ps) as llama.cpp's and transformers' bf16 do;
"blossom" keeps fp32 activations. Each Blossom row gets its own ratio to the fastest peer.
How each engine is timed: Blossom by cpu-step-bench; llama.cpp by its own llama-bench (prefill,
decode at depth --prompt-tokens; mean of its repetitions) and llama-batched-bench (batches);
CTranslate2 and transformers by peers/peer_runner.py (decode = (T(1 + n tokens) - T(1)) / n).
A point an engine cannot run is reported with the reason, never left out silently.
Standard library only (the peers run in their own venv).
"""
import argparse
import datetime
import json
import os
import shlex
import statistics
import subprocess
import sys

from cpu_bench import cpu_name  # beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
# blossom-bf16: Blossom with --quantize bf16 --quantize-lm-head (bf16 activations into each GEMM,
# vdpbf16ps), the numerics llama.cpp's and transformers' bf16 use; bf16 rows only.
BLOSSOMS = ("blossom", "blossom-bf16")
PEERS = ("llama.cpp", "ctranslate2", "transformers")
ENGINES = BLOSSOMS + PEERS
ONLY_FOR = {"blossom-bf16": ("bf16",)}  # engines measured for some dtypes only
GGUF = {"fp32": "gguf-f32.gguf", "bf16": "gguf-bf16.gguf", "int8": "gguf-q8_0.gguf",
        "int4": "gguf-q4_0.gguf"}
CT2 = {"fp32": ("ct2-float32", "float32"), "bf16": ("ct2-bfloat16", "bfloat16"),
       "int8": ("ct2-int8", "int8")}
HF = {"fp32": "float32", "bf16": "bfloat16"}


class Unsupported(Exception):
    """An engine/dtype pair that cannot be measured; the message says why."""


class TooSlow(Exception):
    """A measurement that ran past --timeout-s: reported, and not tried again in later runs."""


def run_json_lines(args, cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s)
    except subprocess.TimeoutExpired as e:
        raise TooSlow("%s took over %d s (--timeout-s)" % (os.path.basename(cmd[0]),
                                                           args.timeout_s)) from e
    if out.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (shlex.join(cmd), out.returncode,
                                                     (out.stderr or out.stdout)[-1500:]))
    text = out.stdout.strip()
    if text.startswith("["):  # llama-bench -o json: one array over several lines
        try:
            return [json.loads(text)]
        except ValueError:
            pass  # log lines ("[date] [info] ...") before JSON lines
    return [json.loads(l) for l in text.splitlines() if l.startswith("{")]


def blossom_points(args, dtype, extra=None):
    model = args.bf16_model if dtype == "bf16" else args.f32_model
    # int8: the LM head too, as llama.cpp's q8_0 and CTranslate2's int8 do.
    if extra is None:
        extra = ["--quantize", dtype, "--quantize-lm-head"] if dtype in ("int8", "int4") else []
    base = [args.blossom, "--model", model, "--threads", str(args.threads),
            "--decode-tokens", str(args.decode_tokens)] + extra
    points = {}
    for i, batch in enumerate(args.batches):
        prompt = args.prompt_tokens if i == 0 else args.long_prompt_tokens
        try:
            r = run_json_lines(args, base + ["--prompt-tokens", str(prompt), "--batch", str(batch),
                                       "--bandwidth-mib", "-1" if i == 0 else "0"])[-1]
        except RuntimeError as e:
            if extra and "quantize" in str(e):
                raise Unsupported("this cpu-step-bench has no --quantize") from e
            raise
        points["prefill_ms@%d" % prompt] = r["prefill_ms"]
        points["batch_tok_s@%d" % batch] = r["batch_tokens_per_s"]
        if i == 0:
            points["decode_ms"] = r["decode_ms_per_token"]
            if r["read_bandwidth_gbs"] > 0:
                points["floor_ms"] = r["decode_read_bytes"] / (r["read_bandwidth_gbs"] * 1e9) * 1e3
            points["weight_bytes"] = r["weight_bytes"]
    if len(args.batches) == 1:  # the long prompt still gets its prefill point
        r = run_json_lines(args, base + ["--prompt-tokens", str(args.long_prompt_tokens), "--batch", "1",
                                   "--bandwidth-mib", "0"])[-1]
        points["prefill_ms@%d" % args.long_prompt_tokens] = r["prefill_ms"]
    return points


def blossom_bf16_points(args, dtype):
    return blossom_points(args, dtype, ["--quantize", "bf16", "--quantize-lm-head"])


def llama_points(args, dtype):
    gguf = os.path.join(args.peers, "models", GGUF[dtype])
    tools = os.path.join(args.peers, "llama.cpp", "build", "bin")
    if not os.path.exists(gguf):
        raise Unsupported("no %s (run setup_peers.sh)" % gguf)
    t = ["-t", str(args.threads)]
    bench = [os.path.join(tools, "llama-bench"), "-m", gguf, "-r", "1", "-o", "json"] + t
    points = {}
    prompts = "%d,%d" % (args.prompt_tokens, args.long_prompt_tokens)
    for row in run_json_lines(args, bench + ["-p", prompts, "-n", "0"])[0]:
        points["prefill_ms@%d" % row["n_prompt"]] = row["n_prompt"] / row["avg_ts"] * 1e3
    tg = run_json_lines(args, bench + ["-p", "0", "-n", str(args.decode_tokens), "-d",
                                 str(args.prompt_tokens)])[0][0]
    points["decode_ms"] = 1e3 / tg["avg_ts"]
    batched = [os.path.join(tools, "llama-batched-bench"), "-m", gguf, "-c",
               str(max(args.batches) * (16 + args.decode_tokens) + 64), "-npp", "16", "-ntg",
               str(args.decode_tokens), "-npl", ",".join(map(str, args.batches)),
               "--output-format", "jsonl"] + t
    for row in run_json_lines(args, batched):
        points["batch_tok_s@%d" % row["pl"]] = row["speed_tg"]
    return points


def runner_points(args, engine, model, compute_type):
    python = os.path.join(args.peers, "venv", "bin", "python")
    if not os.access(python, os.X_OK):
        raise Unsupported("no %s (run setup_peers.sh)" % python)
    points = {}
    for i, batch in enumerate(args.batches):
        prompt = args.prompt_tokens if i == 0 else args.long_prompt_tokens
        r = run_json_lines(args, [python, os.path.join(HERE, "peers", "peer_runner.py"), "--engine",
                            engine, "--model", model, "--compute-type", compute_type,
                            "--threads", str(args.threads), "--prompt-tokens", str(prompt),
                            "--decode-tokens", str(args.decode_tokens), "--batch", str(batch)],
                           )[-1]
        points["prefill_ms@%d" % prompt] = r["prefill_ms"]
        points["batch_tok_s@%d" % batch] = r["batch_tokens_per_s"]
        if i == 0:
            points["decode_ms"] = r["decode_ms_per_token"]
    return points


def ct2_points(args, dtype):
    if dtype not in CT2:
        raise Unsupported("CTranslate2 has no int4 CPU path")
    folder, compute_type = CT2[dtype]
    model = os.path.join(args.peers, "models", folder)
    if not os.path.exists(os.path.join(model, "model.bin")):
        raise Unsupported("no %s (run setup_peers.sh)" % model)
    return runner_points(args, "ct2", model, compute_type)


def hf_points(args, dtype):
    if dtype not in HF:
        raise Unsupported("transformers has no %s CPU path comparable to the others" % dtype)
    model = args.bf16_model if dtype == "bf16" else args.f32_model
    return runner_points(args, "hf", model, HF[dtype])


MEASURE = {"blossom": blossom_points, "blossom-bf16": blossom_bf16_points,
           "llama.cpp": llama_points, "ctranslate2": ct2_points, "transformers": hf_points}


def point_names(args):
    return (["decode_ms"] + ["prefill_ms@%d" % p for p in (args.prompt_tokens,
                                                           args.long_prompt_tokens)] +
            ["batch_tok_s@%d" % b for b in args.batches])


def summarize(args, runs):
    """Per dtype and engine: median and range of each point over runs, or the reason it is absent."""
    out = {}
    for dtype, engines in runs.items():
        out[dtype] = {}
        for engine, results in engines.items():
            ok = [r for r in results if "error" not in r]
            if not ok:
                out[dtype][engine] = {"error": results[0]["error"] if results else "not run"}
                continue
            entry = {"median": {}, "range": {}, "runs": len(ok)}
            for name in point_names(args) + ["floor_ms"]:
                values = [r[name] for r in ok if name in r]
                if values:
                    entry["median"][name] = statistics.median(values)
                    entry["range"][name] = [min(values), max(values)]
            out[dtype][engine] = entry
    return out


def short_reason(error):
    """One table-cell line: the last line of a failure (a traceback ends with the exception)."""
    last = [l.strip() for l in error.replace("\\n", "\n").splitlines() if l.strip()][-1]
    return last.replace("|", "/")[:240]


def is_rate(point):
    return point.startswith("batch_tok_s")


def markdown(report, args):
    lines = ["# CPU engines side by side, %s" % report["date_utc"], "",
             "- machine: %s (%s), %d threads" % (report["machine"], report["cpu"], args.threads),
             "- commit: %s; peers: %s" % (report["commit"], report["peer_versions"]),
             "- command: `%s`" % report["command"],
             "- %d runs, engines alternating (order reversed every other run); medians, "
             "[min to max]; ratio = Blossom's speed / the faster peer's (> 1: Blossom faster)"
             % args.runs, ""]
    labels = {"decode_ms": "decode ms/token, batch 1 (after %d)" % args.prompt_tokens}
    for p in point_names(args)[1:]:
        labels[p] = ("%s-token prefill, ms" % p.split("@")[1] if p.startswith("prefill")
                     else "batch %s tokens/s" % p.split("@")[1])
    for dtype, engines in report["summary"].items():
        lines += ["## %s" % dtype, "",
                  "| engine | " + " | ".join(labels[p] for p in point_names(args)) + " |",
                  "|---|" + "---|" * len(point_names(args))]
        for engine in ENGINES:
            e = engines.get(engine)
            if e is None:
                continue
            if "error" in e:
                lines.append("| %s | not measured: %s |" % (engine, short_reason(e["error"])))
                continue
            cells = []
            for p in point_names(args):
                if p not in e["median"]:
                    cells.append("-")
                    continue
                m, (lo, hi) = e["median"][p], e["range"][p]
                fmt = "%.1f" if m < 100 else "%.0f"
                cells.append((fmt + " [" + fmt + " to " + fmt + "]") % (m, lo, hi))
            lines.append("| %s | %s |" % (engine, " | ".join(cells)))
        for own in BLOSSOMS:
            if own not in engines or "median" not in engines[own]:
                continue
            ratios = []
            blossom = engines[own]["median"]
            for p in point_names(args):
                peers = [engines[e]["median"][p] for e in PEERS
                         if e in engines and p in engines[e].get("median", {})]
                if p in blossom and peers:
                    best = max(peers) if is_rate(p) else min(peers)
                    ratios.append("%.2f" % (blossom[p] / best if is_rate(p) else best / blossom[p]))
                else:
                    ratios.append("-")
            lines.append("| **ratio%s** | %s |" % ("" if own == "blossom" else ", " + own,
                                                   " | ".join(ratios)))
        for own in BLOSSOMS:
            # Each Blossom row against its own floor (blossom-bf16 reads other bytes).
            decode = engines.get(own, {}).get("median", {}).get("decode_ms")
            floor = engines.get(own, {}).get("median", {}).get("floor_ms")
            if floor and decode:
                lines += ["", "Decode floor (the weight bytes a Blossom decode step reads / the "
                          "read bandwidth of a buffer that large, median over runs): "
                          "%.1f ms; %s at %.2fx the floor." % (floor, own, decode / floor)]
        lines.append("")
    return "\n".join(lines)


def svg(report, args, width=760, row_height=18):
    """Horizontal bars: each engine's speed relative to Blossom (1.0) per dtype and point."""
    rows = []
    for dtype, engines in report["summary"].items():
        blossom = engines.get("blossom", {}).get("median", {})
        for p in point_names(args):
            if p not in blossom:
                continue
            for engine in ENGINES:
                m = engines.get(engine, {}).get("median", {})
                if p in m:
                    rel = m[p] / blossom[p] if is_rate(p) else blossom[p] / m[p]
                    rows.append(("%s %s %s" % (dtype, p, engine), rel, engine == "blossom"))
    top = max([r[1] for r in rows] + [1.0])
    height = 40 + row_height * len(rows)
    x0, span = 300, width - 320
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="11">' % (width, height),
           '<text x="10" y="16" font-size="13">Speed relative to Blossom (1.0 = Blossom; '
           'longer = faster)</text>',
           '<line x1="%.1f" y1="24" x2="%.1f" y2="%d" stroke="#888" stroke-dasharray="3,3"/>'
           % (x0 + span / top, x0 + span / top, height)]
    for i, (label, rel, own) in enumerate(rows):
        y = 28 + i * row_height
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>' % (x0 - 6, y + 12, label))
        out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>' % (
            x0, y + 2, span * rel / top, row_height - 4, "#2a7" if own else "#88a"))
        out.append('<text x="%.1f" y="%d">%.2f</text>' % (x0 + span * rel / top + 4, y + 12, rel))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def llama_build_mode(args):
    """' (no-amx build)' when setup_peers.sh built llama.cpp without its AMX code, else ''."""
    try:
        with open(os.path.join(args.peers, "llama.cpp", "build", "blossom-mode")) as f:
            mode = f.read().strip()
    except OSError:
        return ""
    return " (%s build)" % mode if mode and mode != "native" else ""


def peer_versions(args):
    python = os.path.join(args.peers, "venv", "bin", "python")
    try:
        return subprocess.run([python, "-c", "import ctranslate2, transformers, torch; print("
                               "'ctranslate2 %s, transformers %s, torch %s' % (ctranslate2."
                               "__version__, transformers.__version__, torch.__version__))"],
                              capture_output=True, text=True, timeout=120).stdout.strip() + \
            ", llama.cpp from " + os.path.basename(os.path.realpath(
                os.path.join(args.peers, "llama.cpp", "..", ".."))) + llama_build_mode(args)
    except (OSError, subprocess.SubprocessError) as e:
        return "unknown (%s)" % e


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blossom", help="cpu-step-bench binary")
    p.add_argument("--peers", help="WORK_DIR of setup_peers.sh")
    p.add_argument("--f32-model")
    p.add_argument("--bf16-model")
    p.add_argument("--dtypes", default="fp32,bf16,int8")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--long-prompt-tokens", type=int, default=512)
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--batches", default="8,32")
    p.add_argument("--out-prefix", required=True, help="writes PREFIX.json, .md and .svg")
    p.add_argument("--timeout-s", type=int, default=900,
                   help="per engine process; an engine past it is reported and not run again")
    p.add_argument("--machine", default="")
    p.add_argument("--commit", default="")
    p.add_argument("--rerender", action="store_true",
                   help="only rewrite PREFIX.md and PREFIX.svg from an existing PREFIX.json")
    args = p.parse_args()
    if args.rerender:
        with open(args.out_prefix + ".json") as f:
            report = json.load(f)
        for k, v in report["settings"].items():
            setattr(args, k, v)
        write_text_reports(report, args)
        return
    for name in ("blossom", "peers", "f32_model", "bf16_model"):
        if not getattr(args, name):
            p.error("--%s is required (except with --rerender)" % name.replace("_", "-"))
    args.batches = [int(b) for b in args.batches.split(",") if b]
    dtypes = [d for d in args.dtypes.split(",") if d]
    engines = [e for e in args.engines.split(",") if e]
    for d in dtypes:
        if d not in GGUF:
            p.error("--dtypes: unknown %r (fp32, bf16, int8, int4)" % d)
    for e in engines:
        if e not in MEASURE:
            p.error("--engines: unknown %r (%s)" % (e, ", ".join(ENGINES)))
    if args.decode_tokens < 2 or not args.batches:
        p.error("--decode-tokens must be >= 2 and --batches non-empty")

    runs = {d: {e: [] for e in engines if d in ONLY_FOR.get(e, (d,))} for d in dtypes}
    for i in range(args.runs):
        for dtype in dtypes:
            for engine in (engines if i % 2 == 0 else engines[::-1]):
                if engine not in runs[dtype]:
                    continue
                previous = runs[dtype][engine]
                if previous and "error" in previous[0] and previous[0].get("final"):
                    continue
                try:
                    r = MEASURE[engine](args, dtype)
                except (Unsupported, TooSlow) as e:
                    r = {"error": str(e), "final": True}
                except (RuntimeError, subprocess.SubprocessError, KeyError, IndexError,
                        ValueError) as e:
                    r = {"error": "%s: %s" % (type(e).__name__, e)}
                runs[dtype][engine].append(r)
                print("run %d %s %s: %s" % (i + 1, dtype, engine, json.dumps(r)), file=sys.stderr)
    report = {
        "schema": "blossom-cpu-peer-bench/1",
        "date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(sys.argv),
        "commit": args.commit,
        "machine": args.machine,
        "cpu": cpu_name(),
        "peer_versions": peer_versions(args),
        "settings": {k: getattr(args, k) for k in ("f32_model", "bf16_model", "runs", "threads",
                                                   "prompt_tokens", "long_prompt_tokens",
                                                   "decode_tokens", "batches")},
        "runs": runs,
    }
    report["summary"] = summarize(args, runs)
    with open(args.out_prefix + ".json", "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    write_text_reports(report, args)


def write_text_reports(report, args):
    md = markdown(report, args)
    with open(args.out_prefix + ".md", "w") as f:
        f.write(md)
    with open(args.out_prefix + ".svg", "w") as f:
        f.write(svg(report, args))
    print(md)


if __name__ == "__main__":
    main()
