"""Tests of ncu_summary.py on a CSV in Nsight Compute's layout (standard library only)."""
import os
import subprocess
import sys
import tempfile
import unittest

import ncu_summary

_CSV = '''==PROF== Connected to process 123 (/x/blossom-bench)
==PROF== Profiling "DecodeKernel": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1","blossom-bench","h","void blossom::cuda::(anonymous namespace)::DecodeKernel<__nv_bfloat16>(blossom::cuda::AttentionArgs, float *, float *, int)","1","7","(128, 1, 1)","(32, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","12.50"
"1","1","blossom-bench","h","sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas","1","7","(128, 1, 1)","(8, 16, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","msecond","1.25"
"2","1","blossom-bench","h","void blossom::cuda::(anonymous namespace)::DecodeKernel<__half>(blossom::cuda::AttentionArgs, float *, float *, int)","1","7","(128, 1, 1)","(32, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","7,500"
"3","1","blossom-bench","h","other","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes.sum","byte","100"
'''


class NcuSummaryTest(unittest.TestCase):
    def test_sums_by_short_name_across_units_and_instantiations(self):
        rows = ncu_summary.summarize(_CSV)
        self.assertEqual(rows[0][0], "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas")
        self.assertAlmostEqual(rows[0][2], 1250.0)
        self.assertEqual(rows[1][0], "DecodeKernel")
        self.assertEqual(rows[1][1], 2)  # both instantiations
        self.assertAlmostEqual(rows[1][2], 12.5 + 7.5)
        self.assertEqual(len(rows), 2)  # the other metric is not a time

    def test_short_names(self):
        self.assertEqual(ncu_summary.short_name("void a::b::K<int, 3>(float *)"), "K")
        self.assertEqual(ncu_summary.short_name("plain_kernel"), "plain_kernel")

    def test_short_name_of_cuda13_unnamed_namespace(self):
        self.assertEqual(ncu_summary.short_name(
            "void blossom::<unnamed>::PrefillTcKernel<__nv_bfloat16>(blossom::AttentionArgs, const int *)"),
            "PrefillTcKernel")

    def test_steps_start_at_the_marker_kernel(self):
        seq = [("probe", 9.0), ("Emb", 1.0), ("Gemm", 5.0), ("Emb", 1.0), ("Gemm", 2.0), ("Gemm", 2.0)]
        steps = ncu_summary.split_steps(seq, "Emb")
        self.assertEqual(len(steps), 2)  # the probe before the first marker is dropped
        self.assertEqual(ncu_summary.totals_by_name(steps[1]), [("Gemm", 2, 4.0), ("Emb", 1, 1.0)])

    def test_refuses_what_is_not_an_ncu_csv_and_unknown_units(self):
        with self.assertRaises(ValueError):
            ncu_summary.summarize("no csv here")
        with self.assertRaises(ValueError):
            ncu_summary.summarize(_CSV.replace('"usecond"', '"fortnight"'))

    def test_command_line_prints_a_table(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.csv")
            with open(path, "w") as f:
                f.write(_CSV)
            out = subprocess.run([sys.executable, ncu_summary.__file__, path], check=True,
                                 capture_output=True, text=True).stdout
        self.assertIn("| DecodeKernel | 2 | 0.020 | 10.0 |", out)
        self.assertIn("3 launches", out)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.csv")
            with open(path, "w") as f:
                f.write(_CSV)
            out = subprocess.run([sys.executable, ncu_summary.__file__, path, "--by-step", "DecodeKernel"],
                                 check=True, capture_output=True, text=True).stdout
        self.assertIn("### Step 1 (from a launch of DecodeKernel)", out)


if __name__ == "__main__":
    unittest.main()
