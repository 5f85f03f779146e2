// Lets every Blossom binary accept `--max-new-tokens` as well as Abseil's `--max_new_tokens`.
//
// Abseil flag names are C identifiers, but users (and the docs of vLLM and TGI) write dashes.
// Call NormalizeDashedFlags(argc, argv) before absl::ParseCommandLine: it rewrites, in place,
// the dashes in the NAME part of every `--name` or `--name=value` argument that names a
// defined flag (with underscores) into underscores. Values are untouched: `--stop=a-b`, and the
// argument after a non-bool `--flag` given without `=` (`--stop --END--`, `--prompt ---`),
// whatever it looks like. So is an argument naming no flag (Abseil reports it as written), and
// everything after a bare `--`.
#ifndef BLOSSOM_TOOLS_CLI_DASHED_FLAGS_H_
#define BLOSSOM_TOOLS_CLI_DASHED_FLAGS_H_

namespace blossom {

// argv's strings are writable (C and C++ guarantee it for main's argv).
void NormalizeDashedFlags(int argc, char** argv);

}  // namespace blossom

#endif  // BLOSSOM_TOOLS_CLI_DASHED_FLAGS_H_
