"""Unit tests of side_by_side_report (stdlib only; run by //benchmarks/gpu:side_by_side_report_test)."""

import json
import os
import tempfile
import unittest
import xml.dom.minidom

import side_by_side_report as r


def sweep_json(rows):
    """A minimal blossom-bench-sweep/1 document with (batch, ms/token) rows."""
    return {
        "schema": "blossom-bench-sweep/1",
        "backend": "cuda",
        "start_to_ready_s": 12.5,
        "command": "blossom-bench sweep --model /tmp/m",
        "hardware": {"mem_bandwidth_gbs": 3000.0, "mem_bandwidth_source": "measured: x",
                     "gemm_tflops": 700.0, "gemm_tflops_source": "measured: y"},
        "results": [{
            "batch_size": b,
            "seed": {"throughput_ms_per_token": ms},
            "tokens_per_second": 1000.0 / ms,
            "generated_tokens": 5 * b * 100,
            "timed_s": 5 * b * 100 * ms / 1000.0,
            "decode_ms_per_token": {"mean": 1.0, "p50": 0.9, "p90": 1.1, "p99": 1.2},
            "roofline": {"fraction": 0.5, "bound": "memory"},
        } for b, ms in rows],
    }


class PromptsAndParsingTest(unittest.TestCase):
    def test_prompts_cycle_like_the_seed(self):
        self.assertEqual(len(r.SEED_PROMPTS), 8)
        p = r.prompts_for_batch(10)
        self.assertEqual(p[:8], r.SEED_PROMPTS)
        self.assertEqual(p[8:], r.SEED_PROMPTS[:2])
        self.assertEqual(r.prompts_for_batch(1), ["DeepSpeed is a machine learning framework"])
        with self.assertRaises(ValueError):
            r.prompts_for_batch(0)

    def test_batch_sizes(self):
        self.assertEqual(r.parse_batch_sizes("1, 2,4,"), [1, 2, 4])
        for bad in ("", "0", "1,1", "x"):
            with self.assertRaises(ValueError):
                r.parse_batch_sizes(bad)


class ResultsTest(unittest.TestCase):
    def test_hf_batch_result_is_the_seed_arithmetic(self):
        # 2 cycles of bs=4 x 100 tokens in 1.0 + 3.0 s: 800 tokens in 4 s.
        res = r.hf_batch_result(4, 100, [1.0, 3.0], padded_prompt_tokens=7)
        self.assertEqual(res["generated_tokens"], 800)
        self.assertAlmostEqual(res["ms_per_token"], 5.0)
        self.assertAlmostEqual(res["tokens_per_second"], 200.0)
        self.assertAlmostEqual(res["ms_per_token"] * res["tokens_per_second"], 1000.0)
        self.assertEqual(res["seed_generate_s"], 1.0)
        self.assertEqual(res["padded_prompt_tokens"], 7)
        with self.assertRaises(ValueError):
            r.hf_batch_result(4, 100, [])

    def test_blossom_results_read_the_sweep_schema(self):
        rows = r.blossom_results_from_sweep(sweep_json([(1, 10.0), (2, 6.0)]))
        self.assertEqual([x["batch_size"] for x in rows], [1, 2])
        self.assertAlmostEqual(rows[1]["ms_per_token"], 6.0)
        self.assertAlmostEqual(rows[1]["tokens_per_second"], 1000.0 / 6.0)
        self.assertAlmostEqual(rows[0]["decode_ms_p50"], 0.9)
        self.assertEqual(rows[0]["roofline_bound"], "memory")
        with self.assertRaises(ValueError):
            r.blossom_results_from_sweep({"schema": "something-else/1"})

    def test_merge_keeps_every_batch_and_computes_speedup(self):
        hf = [r.hf_batch_result(1, 10, [0.2]), r.hf_batch_result(4, 10, [0.4])]  # 20 and 10 ms/token
        bl = r.blossom_results_from_sweep(sweep_json([(1, 5.0), (2, 4.0)]))
        rows = r.merge_rows(hf, bl)
        self.assertEqual([x["batch_size"] for x in rows], [1, 2, 4])
        self.assertAlmostEqual(rows[0]["speedup"], 4.0)  # HF 20 ms / Blossom 5 ms
        self.assertIsNone(rows[1]["hf_ms_per_token"])
        self.assertIsNone(rows[1]["speedup"])
        self.assertIsNone(rows[2]["blossom_ms_per_token"])
        self.assertAlmostEqual(rows[2]["hf_tokens_per_second"], 100.0)


class ReportTest(unittest.TestCase):
    def make(self, blossom=True):
        meta = {
            "date_utc": "2026-11-21T22:00:00Z", "gpu": "NVIDIA H100 80GB HBM3", "device": "cuda",
            "commit": "abc1234", "machine": "1x H100", "dtype": "bf16",
            "model": {"dir": "/tmp/bloom-7b1-random", "description": "bloom-7b1 shape"},
            "settings": {"batch_sizes": [1, 2], "max_new_tokens": 10, "warmup": 1, "cycles": 2},
            "commands": {"side_by_side": "python3 hf_side_by_side.py --model /tmp/m"},
            "versions": {"torch": "2.11.0"},
            "notes": ["a note"],
        }
        hf = {"load_s": 3.25, "results": [r.hf_batch_result(1, 10, [0.1, 0.1]),
                                          r.hf_batch_result(2, 10, [0.3, 0.3])],
              "errors": {"64": "CUDA out of memory"}}
        sweep = sweep_json([(1, 5.0), (2, 3.0)]) if blossom else None
        return r.build_report(meta, hf, sweep, {"json": "blossom_sweep.json", "returncode": 0})

    def test_report_fields(self):
        rep = self.make()
        self.assertEqual(rep["schema"], r.SCHEMA)
        self.assertEqual(rep["commit"], "abc1234")
        self.assertEqual(rep["blossom"]["backend"], "cuda")
        self.assertEqual(rep["blossom"]["json"], "blossom_sweep.json")
        self.assertEqual(len(rep["rows"]), 2)
        self.assertAlmostEqual(rep["rows"][0]["speedup"], 2.0)  # 10 ms vs 5 ms
        json.dumps(rep)  # serializable

    def test_markdown_table(self):
        md = r.to_markdown(self.make())
        self.assertIn("| batch | HF ms/token | HF tokens/s | Blossom ms/token | Blossom tokens/s | speedup |", md)
        self.assertIn("| 1 | 10.00 | 100.0 | 5.00 | 200.0 | 2.00x |", md)
        self.assertIn("| 2 | 15.00 | 66.7 | 3.00 | 333.3 | 5.00x |", md)
        self.assertIn("NVIDIA H100 80GB HBM3", md)
        self.assertIn("abc1234", md)
        self.assertIn("HF error at 64: CUDA out of memory", md)
        self.assertIn("`python3 hf_side_by_side.py --model /tmp/m`", md)

    def test_markdown_without_blossom_shows_dashes(self):
        md = r.to_markdown(self.make(blossom=False))
        self.assertIn("| 1 | 10.00 | 100.0 | — | — | — |", md)

    def test_write_report_files_parse(self):
        with tempfile.TemporaryDirectory() as d:
            paths = r.write_report(self.make(), d, stem="run")
            self.assertEqual([os.path.basename(p) for p in paths],
                             ["run.json", "run.md", "run-throughput.svg"])
            with open(paths[0]) as f:
                self.assertEqual(json.load(f)["schema"], r.SCHEMA)
            svg = xml.dom.minidom.parse(paths[2])
            self.assertEqual(len(svg.getElementsByTagName("polyline")), 2)

    def test_svg_with_no_rows_is_still_valid(self):
        rep = r.build_report({}, None, None)
        xml.dom.minidom.parseString(r.to_svg(rep))


if __name__ == "__main__":
    unittest.main()
