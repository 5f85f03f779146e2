"""cc_fuzz_test: one libFuzzer entry point (LLVMFuzzerTestOneInput), two binaries.

- `<name>` (cc_test, in every build): replays each file of the committed corpus through the entry
  point with the ordinary compiler, so a corpus input that once crashed stays a regression test.
- `<name>_fuzzer` (cc_binary, tag manual): the libFuzzer binary, built only under
  `--config=fuzz` with clang (tools/fuzz/run.sh does this in its own output base).

The corpus is `corpus/<name>/` beside the BUILD file.
"""

def cc_fuzz_test(name, srcs, deps, data = [], size = "small"):
    corpus = native.glob(["corpus/%s/**" % name])
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs,
        args = ["$(rootpath %s)" % f for f in corpus],
        data = corpus + data,
        deps = deps + ["//tools/fuzz:corpus_replay_main"],
    )
    native.cc_binary(
        name = name + "_fuzzer",
        srcs = srcs,
        data = data,
        deps = deps,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual", "fuzzer"],
        target_compatible_with = select({
            "//tools/fuzz:fuzz_build": [],
            "//conditions:default": ["@platforms//:incompatible"],
        }),
    )
