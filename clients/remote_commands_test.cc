// The `blossom` CLI: its command-line checks (ResolveCommandLine), its server-mode calls
// (RunRemoteCommand) against the real service on loopback, and the binary itself, so that main's
// wiring of the two (a TEXT argument, the beam-only flags) is covered too.
#include "clients/remote_commands.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "server/testing/in_process_server.h"

namespace blossom {
namespace {

struct Resolved {
  int rc = -1;
  ResolvedCommand command;
  std::string err;
};

Resolved Resolve(std::vector<std::string> positional, std::string prompt = "",
                 int32_t num_beams = 0, std::vector<std::string> beam_flags_set = {}) {
  CommandLineArguments args;
  args.positional = std::move(positional);
  args.prompt = std::move(prompt);
  args.num_beams = num_beams;
  args.beam_flags_set = std::move(beam_flags_set);
  Resolved r;
  std::ostringstream err;
  r.rc = ResolveCommandLine(args, &r.command, err);
  r.err = err.str();
  return r;
}

TEST(ResolveCommandLineTest, TextIsTheArgumentAsInThePythonCli) {
  for (const char* command : {"generate", "stream", "tokenize"}) {
    const Resolved r = Resolve({command, "hello world"});
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.command.command, command);
    EXPECT_EQ(r.command.text, "hello world");
  }
}

TEST(ResolveCommandLineTest, TextAsPromptFlag) {
  const Resolved r = Resolve({"generate"}, "Hi");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.command.text, "Hi");
}

TEST(ResolveCommandLineTest, TextGivenTwiceIsRefused) {
  const Resolved r = Resolve({"generate", "Hi"}, "Ho");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("given twice"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'Hi'"), std::string::npos) << r.err;
}

TEST(ResolveCommandLineTest, ExtraArgumentsAreRefusedNotDropped) {
  Resolved r = Resolve({"generate", "Hello", "world"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("one TEXT argument"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'Hello' 'world'"), std::string::npos) << r.err;
  r = Resolve({"tokenize", "a", "b"}, "");
  EXPECT_EQ(r.rc, 2) << r.err;
  // --prompt plus two arguments: both arguments would be dropped.
  r = Resolve({"tokenize", "a", "b"}, "c");
  EXPECT_EQ(r.rc, 2) << r.err;
  for (const char* command : {"health", "info"}) {
    r = Resolve({command, "x"});
    EXPECT_EQ(r.rc, 2);
    EXPECT_NE(r.err.find("takes no arguments, got 1: 'x'"), std::string::npos) << r.err;
  }
}

TEST(ResolveCommandLineTest, HealthAndInfoTakeNoText) {
  Resolved r = Resolve({"info"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.command.text, "");
  r = Resolve({"health"}, "Hi");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--prompt does not apply to 'health'"), std::string::npos) << r.err;
}

TEST(ResolveCommandLineTest, MissingTextIsAUsageError) {
  for (const char* command : {"generate", "stream", "tokenize"}) {
    const Resolved r = Resolve({command});
    EXPECT_EQ(r.rc, 2) << command;
    EXPECT_NE(r.err.find("needs the text"), std::string::npos) << r.err;
  }
}

TEST(ResolveCommandLineTest, UnknownOrNoCommand) {
  Resolved r = Resolve({"generat", "x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown command 'generat'"), std::string::npos) << r.err;
  r = Resolve({});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("no command"), std::string::npos) << r.err;
}

TEST(ResolveCommandLineTest, BeamOnlyFlagsNeedNumBeams) {
  for (const char* flag : kBeamOnlyFlags) {
    Resolved r = Resolve({"generate", "x"}, "", /*num_beams=*/0, {flag});
    EXPECT_EQ(r.rc, 2) << flag;
    EXPECT_NE(r.err.find(absl::StrCat("--", flag, " applies to beam search only")),
              std::string::npos)
        << r.err;
    r = Resolve({"generate", "x"}, "", /*num_beams=*/2, {flag});
    EXPECT_EQ(r.rc, 0) << r.err;
  }
}

TEST(ResolveCommandLineTest, NumBeamsIsForGenerateAndNotNegative) {
  Resolved r = Resolve({"stream", "x"}, "", 2);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--num_beams works with generate only"), std::string::npos) << r.err;
  r = Resolve({"generate", "x"}, "", -1);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--num_beams must be >= 0"), std::string::npos) << r.err;
}

// The real service (tiny fixture model) on loopback, loaded.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { server_.Load(); }

  RemoteOptions Options() const {
    RemoteOptions options;
    options.server = server_.address();
    options.timeout_seconds = 60;
    options.quiet = true;
    return options;
  }

  // The ids RunRemoteCommand("tokenize") prints for `text` (one "id\ttoken" line each).
  static std::vector<std::string> Ids(const std::string& out) {
    std::vector<std::string> ids;
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
      ids.emplace_back(line.substr(0, line.find('\t')));
    }
    return ids;
  }

  testing::InProcessServer server_;
};

TEST_F(ServerTest, TokenizePrintsTheServersIds) {
  v1::GenerateRequest request;
  request.set_text("hello world");
  std::ostringstream out, err;
  ASSERT_EQ(RunRemoteCommand("tokenize", Options(), request, out, err), 0) << err.str();
  auto want = server_.tokenizer().Encode("hello world");
  ASSERT_TRUE(want.ok());
  ASSERT_FALSE(want->empty());
  std::vector<std::string> want_ids;
  for (int32_t id : *want) want_ids.push_back(std::to_string(id));
  EXPECT_EQ(Ids(out.str()), want_ids);
}

TEST_F(ServerTest, GenerateAndStreamPrintTheSameGreedyText) {
  v1::GenerateRequest request;
  request.set_text("Hello");
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stopping()->set_max_new_tokens(4);
  request.mutable_stopping()->set_ignore_eos(true);
  std::ostringstream generated, streamed, err;
  RemoteOptions options = Options();
  options.quiet = false;
  ASSERT_EQ(RunRemoteCommand("generate", options, request, generated, err), 0) << err.str();
  EXPECT_NE(err.str().find("generated_tokens=4"), std::string::npos) << err.str();
  ASSERT_EQ(RunRemoteCommand("stream", Options(), request, streamed, err), 0) << err.str();
  EXPECT_EQ(streamed.str(), generated.str());
}

TEST_F(ServerTest, UsageErrorsExitTwoAndServerErrorsOne) {
  v1::GenerateRequest request;
  request.set_text("x");
  std::ostringstream out, err;
  RemoteOptions options = Options();
  options.server = "";
  EXPECT_EQ(RunRemoteCommand("tokenize", options, request, out, err), 2);
  options = Options();
  options.timeout_seconds = -1;
  EXPECT_EQ(RunRemoteCommand("tokenize", options, request, out, err), 2);
  options = Options();
  options.tls_ca_file = "/dev/null";
  EXPECT_EQ(RunRemoteCommand("tokenize", options, request, out, err), 2);
  EXPECT_EQ(RunRemoteCommand("bogus", Options(), request, out, err), 2);
  request.mutable_sampling()->set_top_p(2.0f);  // refused by the server
  err.str("");
  EXPECT_EQ(RunRemoteCommand("generate", Options(), request, out, err), 1);
  EXPECT_NE(err.str().find("INVALID_ARGUMENT"), std::string::npos) << err.str();
}

struct CliRun {
  int rc = -1;
  std::string out;
  std::string err;
};

std::string ShellQuote(const std::string& s) {
  std::string quoted = "'";
  for (char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The `blossom` binary (a runfile) with `args`; its exit code, stdout and stderr.
CliRun RunCli(const std::vector<std::string>& args) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  const char* tmpdir = std::getenv("TEST_TMPDIR");
  std::string command = srcdir != nullptr
                            ? absl::StrCat(srcdir, "/", workspace ? workspace : "blossom",
                                           "/clients/blossom")
                            : "clients/blossom";
  command = ShellQuote(command);
  for (const std::string& arg : args) absl::StrAppend(&command, " ", ShellQuote(arg));
  const std::string err_file = absl::StrCat(tmpdir ? tmpdir : "/tmp", "/blossom_cli.err");
  absl::StrAppend(&command, " 2>", ShellQuote(err_file));
  CliRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) run.out.append(buffer, n);
  const int status = pclose(pipe);
  run.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream err;
  err << in.rdbuf();
  run.err = err.str();
  return run;
}

TEST_F(ServerTest, CliTakesTheTextAsItsArgument) {
  const CliRun tokenized = RunCli({"tokenize", "--server", server_.address(), "hello world"});
  ASSERT_EQ(tokenized.rc, 0) << tokenized.err;
  v1::GenerateRequest request;
  request.set_text("hello world");
  std::ostringstream want, err;
  ASSERT_EQ(RunRemoteCommand("tokenize", Options(), request, want, err), 0) << err.str();
  EXPECT_EQ(tokenized.out, want.str());
  // After `--`, a text that starts with dashes.
  const CliRun dashes = RunCli({"tokenize", "--server", server_.address(), "--", "--a-b"});
  EXPECT_EQ(dashes.rc, 0) << dashes.err;
  EXPECT_FALSE(dashes.out.empty());

  const std::vector<std::string> greedy = {"--server", server_.address(), "--temperature", "0",
                                           "--max_new_tokens", "4", "--ignore_eos", "--quiet"};
  std::vector<std::string> as_argument = {"generate", "Hello"};
  as_argument.insert(as_argument.end(), greedy.begin(), greedy.end());
  std::vector<std::string> as_flag = {"generate", "--prompt", "Hello"};
  as_flag.insert(as_flag.end(), greedy.begin(), greedy.end());
  const CliRun by_argument = RunCli(as_argument);
  const CliRun by_flag = RunCli(as_flag);
  ASSERT_EQ(by_argument.rc, 0) << by_argument.err;
  ASSERT_EQ(by_flag.rc, 0) << by_flag.err;
  EXPECT_EQ(by_argument.out, by_flag.out);
  EXPECT_NE(by_argument.out, "\n");  // a completion, not the empty prompt's refusal
}

TEST_F(ServerTest, CliRefusesWhatItWouldDrop) {
  const std::string server = server_.address();
  CliRun run = RunCli({"generate", "--server", server, "Hello", "world"});
  EXPECT_EQ(run.rc, 2);
  EXPECT_NE(run.err.find("'Hello' 'world'"), std::string::npos) << run.err;
  EXPECT_EQ(run.out, "");
  run = RunCli({"tokenize", "--server", server});
  EXPECT_EQ(run.rc, 2);
  EXPECT_NE(run.err.find("needs the text"), std::string::npos) << run.err;
  for (const std::vector<std::string>& beam_flag :
       std::vector<std::vector<std::string>>{{"--num_return_sequences", "2"},
                                             {"--length_penalty", "2"},
                                             {"--early_stopping", "true"},
                                             {"--show_token_ids"}}) {
    std::vector<std::string> args = {"generate", "--server", server, "Hi"};
    args.insert(args.end(), beam_flag.begin(), beam_flag.end());
    run = RunCli(args);
    EXPECT_EQ(run.rc, 2) << beam_flag[0];
    EXPECT_NE(run.err.find(beam_flag[0] + " applies to beam search only"), std::string::npos)
        << run.err;
    EXPECT_EQ(run.out, "");
  }
  // With --num_beams the same flags are taken (and the beams printed).
  run = RunCli({"generate", "--server", server, "Hi", "--num_beams", "2",
                "--num_return_sequences", "2", "--max_new_tokens", "2", "--show_token_ids",
                "--quiet"});
  EXPECT_EQ(run.rc, 0) << run.err;
  EXPECT_NE(run.out.find("# beam 2:"), std::string::npos) << run.out;
  // Giving a beam flag its default changes nothing, so it is no reason to refuse.
  run = RunCli({"tokenize", "--server", server, "Hi", "--length_penalty", "1"});
  EXPECT_EQ(run.rc, 0) << run.err;
}

}  // namespace
}  // namespace blossom
