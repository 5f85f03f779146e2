"""Blossom vs Hugging Face side-by-side report: merging, JSON, markdown and an SVG chart.

Standard library only, so it is unit-tested in CI (side_by_side_report_test.py) without torch;
hf_side_by_side.py (which needs torch and transformers) measures and calls into this module.

Both sides are measured the seed's way (bloom-ds-inference.py --benchmark): per batch size B,
`warmup` untimed generate() calls, then `cycles` timed ones, each tokenizing the prompts inside the
timed region; greedy; exactly max_new_tokens new tokens per sequence (EOS ignored). Then

    ms_per_token      = 1000 * (wall time of all timed cycles) / (new tokens of all sequences)
    tokens_per_second = (new tokens of all sequences) / (wall time of all timed cycles)

so ms_per_token * tokens_per_second = 1000 on both sides, and

    speedup = hf_ms_per_token / blossom_ms_per_token   (> 1: Blossom is faster)

Blossom's numbers are read from its `blossom-bench sweep --json` file ("blossom-bench-sweep/1":
results[].seed.throughput_ms_per_token and results[].tokens_per_second).
"""

import datetime
import json
import math
import os

SCHEMA = "blossom-hf-side-by-side/1"

# The seed's eight prompts (bloom-ds-inference.py), cycled to the batch size.
SEED_PROMPTS = [
    "DeepSpeed is a machine learning framework",
    "He is working on",
    "He has a",
    "He got all",
    "Everyone is happy and I can",
    "The new movie that got Oscar this year",
    "In the far far distance from our galaxy,",
    "Peace is the only way",
]


def prompts_for_batch(batch_size, prompts=SEED_PROMPTS):
    """The first `batch_size` prompts of `prompts` cycled (the seed's `inputs[:B]` after cycling)."""
    if batch_size <= 0:
        raise ValueError("batch size must be positive")
    return [prompts[i % len(prompts)] for i in range(batch_size)]


def parse_batch_sizes(text):
    """'1,2,4' -> [1, 2, 4]; positive, no duplicates (as blossom-bench's ParseBatchSizes)."""
    sizes = []
    for piece in text.split(","):
        piece = piece.strip()
        if not piece:
            continue
        value = int(piece)
        if value <= 0:
            raise ValueError(f"batch size {piece!r} is not a positive integer")
        if value in sizes:
            raise ValueError(f"batch size {value} is listed twice")
        sizes.append(value)
    if not sizes:
        raise ValueError("no batch sizes given")
    return sizes


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rate_pair(seconds, tokens):
    if seconds <= 0 or tokens <= 0:
        raise ValueError(f"need positive time and tokens, got {seconds} s, {tokens} tokens")
    return 1000.0 * seconds / tokens, tokens / seconds


def hf_batch_result(batch_size, max_new_tokens, cycle_seconds, padded_prompt_tokens=None):
    """One HF batch size from its timed cycles (seconds of each tokenize+generate+decode)."""
    if not cycle_seconds:
        raise ValueError("no timed cycles")
    tokens = len(cycle_seconds) * batch_size * max_new_tokens
    total = float(sum(cycle_seconds))
    ms, tps = _rate_pair(total, tokens)
    result = {
        "batch_size": batch_size,
        "cycle_s": [float(s) for s in cycle_seconds],
        "timed_s": total,
        "generated_tokens": tokens,
        "ms_per_token": ms,
        "tokens_per_second": tps,
        # The seed's "Tokenize and generate N (bs=B) tokens: X secs" (X = first timed cycle).
        "seed_generate_s": float(cycle_seconds[0]),
    }
    if padded_prompt_tokens is not None:
        result["padded_prompt_tokens"] = int(padded_prompt_tokens)
    return result


def blossom_results_from_sweep(sweep):
    """Per batch size, Blossom's seed-equivalent numbers from a blossom-bench sweep JSON dict."""
    schema = sweep.get("schema", "")
    if not schema.startswith("blossom-bench-sweep/"):
        raise ValueError(f"not a blossom-bench sweep JSON (schema {schema!r})")
    out = []
    for r in sweep.get("results", []):
        row = {
            "batch_size": int(r["batch_size"]),
            "ms_per_token": float(r["seed"]["throughput_ms_per_token"]),
            "tokens_per_second": float(r["tokens_per_second"]),
            "generated_tokens": int(r.get("generated_tokens", 0)),
            "timed_s": float(r.get("timed_s", 0.0)),
        }
        decode = r.get("decode_ms_per_token")
        if decode:
            row["decode_ms_p50"] = float(decode.get("p50", 0.0))
        roof = r.get("roofline")
        if roof:
            row["roofline_fraction"] = float(roof.get("fraction", 0.0))
            row["roofline_bound"] = roof.get("bound", "")
        out.append(row)
    return out


def merge_rows(hf_results, blossom_results):
    """One row per batch size present on either side, in ascending batch size.

    A side that lacks a batch size (not run, out of memory, out of time) gets None there and the
    speedup is None.
    """
    hf = {r["batch_size"]: r for r in hf_results}
    bl = {r["batch_size"]: r for r in blossom_results}
    rows = []
    for b in sorted(set(hf) | set(bl)):
        h, o = hf.get(b), bl.get(b)
        row = {
            "batch_size": b,
            "hf_ms_per_token": h["ms_per_token"] if h else None,
            "hf_tokens_per_second": h["tokens_per_second"] if h else None,
            "blossom_ms_per_token": o["ms_per_token"] if o else None,
            "blossom_tokens_per_second": o["tokens_per_second"] if o else None,
            "speedup": None,
        }
        if h and o and o["ms_per_token"] > 0:
            row["speedup"] = h["ms_per_token"] / o["ms_per_token"]
        rows.append(row)
    return rows


def build_report(meta, hf, blossom_sweep, blossom_meta=None):
    """The whole report.

    meta: date_utc, gpu, device, commit, machine, model (dict), dtype, settings (dict), commands
      (dict), versions (dict), notes (list) -- copied as given.
    hf: {"load_s": float, "results": [hf_batch_result(...)], "errors": {batch: text}} or None.
    blossom_sweep: the parsed blossom-bench sweep JSON, or None when Blossom did not run.
    blossom_meta: extra fields for the "blossom" section (json path, return code, errors).
    """
    hf = hf or {"results": []}
    blossom = dict(blossom_meta or {})
    blossom_results = []
    if blossom_sweep is not None:
        blossom_results = blossom_results_from_sweep(blossom_sweep)
        blossom.update({
            "backend": blossom_sweep.get("backend"),
            "start_to_ready_s": blossom_sweep.get("start_to_ready_s"),
            "hardware": blossom_sweep.get("hardware"),
            "command": blossom_sweep.get("command"),
            "results": blossom_results,
        })
    report = {"schema": SCHEMA}
    report.update(meta)
    report.setdefault("date_utc", utc_now())
    report["hf"] = hf
    report["blossom"] = blossom
    report["rows"] = merge_rows(hf.get("results", []), blossom_results)
    return report


def _fmt(value, digits):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value:.{digits}f}"


def to_markdown(report):
    """A commit-ready markdown page (benchmarks/results/ convention: context first, then the table)."""
    s = report.get("settings", {})
    m = report.get("model", {})
    lines = [
        "# Blossom vs Hugging Face transformers: BLOOM generate, side by side",
        "",
        f"- date (UTC): {report.get('date_utc', '')}",
        f"- GPU / device: {report.get('gpu') or report.get('device', '')}",
        f"- machine: {report.get('machine', '')}",
        f"- commit: {report.get('commit') or 'not given'}",
        f"- model: `{m.get('dir', '')}` ({m.get('description', '')})",
        f"- dtype: {report.get('dtype', '')}; greedy; {s.get('max_new_tokens', '')} new tokens per "
        f"sequence (EOS ignored); {s.get('warmup', '')} warm-up + {s.get('cycles', '')} timed "
        "generate() calls per batch size; the seed's eight prompts cycled",
    ]
    versions = report.get("versions", {})
    if versions:
        lines.append("- versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())))
    commands = report.get("commands", {})
    for name in sorted(commands):
        lines.append(f"- command ({name}): `{commands[name]}`")
    lines += [
        "",
        "ms/token = wall time of the timed generate() calls (tokenize + generate + decode) / new "
        "tokens of all sequences (the seed's \"Throughput per token including tokenize\"); "
        "speedup = HF ms/token / Blossom ms/token (> 1: Blossom is faster).",
        "",
        "| batch | HF ms/token | HF tokens/s | Blossom ms/token | Blossom tokens/s | speedup |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report.get("rows", []):
        lines.append(
            f"| {r['batch_size']} | {_fmt(r['hf_ms_per_token'], 2)} | "
            f"{_fmt(r['hf_tokens_per_second'], 1)} | {_fmt(r['blossom_ms_per_token'], 2)} | "
            f"{_fmt(r['blossom_tokens_per_second'], 1)} | "
            f"{_fmt(r['speedup'], 2)}{'x' if r['speedup'] is not None else ''} |")
    hf = report.get("hf", {})
    bl = report.get("blossom", {})
    extra = []
    if hf.get("load_s") is not None:
        extra.append(f"- HF load (from_pretrained + to device): {hf['load_s']:.1f} s")
    if bl.get("start_to_ready_s") is not None:
        extra.append(f"- Blossom start to ready: {bl['start_to_ready_s']:.1f} s")
    hw = bl.get("hardware") or {}
    if hw:
        extra.append(
            f"- Blossom roofline rates: {hw.get('mem_bandwidth_gbs', 0):.4g} GB/s "
            f"({hw.get('mem_bandwidth_source', '')}), {hw.get('gemm_tflops', 0):.4g} TFLOP/s "
            f"({hw.get('gemm_tflops_source', '')})")
    for side, errors in (("HF", hf.get("errors") or {}), ("Blossom", bl.get("errors") or {})):
        for key in sorted(errors, key=str):
            extra.append(f"- {side} error at {key}: {errors[key]}")
    for note in report.get("notes", []):
        extra.append(f"- note: {note}")
    if extra:
        lines += [""] + extra
    return "\n".join(lines) + "\n"


def to_svg(report, width=640, height=400):
    """Tokens/s against batch size (log2 x, linear y), one polyline per side; standalone SVG 1.1."""
    rows = report.get("rows", [])
    series = [
        ("Hugging Face", "hf_tokens_per_second", "#d62728"),
        ("Blossom", "blossom_tokens_per_second", "#1f77b4"),
    ]
    points = [(r["batch_size"], r[k]) for r in rows for _, k, _ in series if r[k] is not None]
    left, right, top, bottom = 70, 20, 40, 50
    pw, ph = width - left - right, height - top - bottom
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">'
        'Generate throughput (tokens/s) vs batch size</text>',
        f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>',
    ]
    if points:
        xs = [math.log2(b) for b, _ in points]
        x0, x1 = min(xs), max(xs)
        if x1 == x0:
            x1 = x0 + 1
        y1 = max(v for _, v in points) * 1.1 or 1.0

        def px(b):
            return left + pw * (math.log2(b) - x0) / (x1 - x0)

        def py(v):
            return top + ph * (1 - v / y1)

        for b in sorted({b for b, _ in points}):
            out.append(f'<text x="{px(b):.1f}" y="{top + ph + 16}" text-anchor="middle">{b}</text>')
        for i in range(5):
            v = y1 * i / 4
            out.append(f'<text x="{left - 6}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
        for idx, (name, key, color) in enumerate(series):
            pts = [(r["batch_size"], r[key]) for r in rows if r[key] is not None]
            if pts:
                coords = " ".join(f"{px(b):.1f},{py(v):.1f}" for b, v in pts)
                out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                           f'points="{coords}"/>')
            out.append(f'<text x="{left + 10}" y="{top + 16 + 16 * idx}" fill="{color}">{name}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 10}" text-anchor="middle">batch size</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_report(report, out_dir, stem="side_by_side"):
    """Writes STEM.json, STEM.md and STEM-throughput.svg under out_dir; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, f"{stem}.json"), os.path.join(out_dir, f"{stem}.md"),
             os.path.join(out_dir, f"{stem}-throughput.svg")]
    with open(paths[0], "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    with open(paths[1], "w") as f:
        f.write(to_markdown(report))
    with open(paths[2], "w") as f:
        f.write(to_svg(report))
    return paths
