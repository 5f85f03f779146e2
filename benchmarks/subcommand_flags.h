// Which of blossom-bench's flags each subcommand reads. One binary defines every flag, so a flag
// of the other subcommand would parse and then be silently ignored (`serve --max-new-tokens 64`
// runs with --output-len-dist's lengths); CheckSubcommandFlags refuses it instead, naming it.
//
// Pure functions over names; thread-safe.
#ifndef BLOSSOM_BENCHMARKS_SUBCOMMAND_FLAGS_H_
#define BLOSSOM_BENCHMARKS_SUBCOMMAND_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace blossom {

// Flags (Abseil's underscore names) only `sweep` reads: its batch sizes, cycles, threads, model
// loading and roofline flags, and every --cuda_* flag (the CUDA backend's kernel choices).
bool IsSweepOnlyFlag(absl::string_view name);
// Flags only `serve` reads: the target, the load's shape, the SLOs, --request-timeout, ...
bool IsServeOnlyFlag(absl::string_view name);

// InvalidArgument naming the first flag in `specified` (the names of the flags the command line
// set to something other than their default) that `command` ("sweep" or "serve") does not read;
// OK otherwise (and for any other command).
absl::Status CheckSubcommandFlags(const std::string& command,
                                  const std::vector<std::string>& specified);

}  // namespace blossom

#endif  // BLOSSOM_BENCHMARKS_SUBCOMMAND_FLAGS_H_
