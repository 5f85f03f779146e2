// The `blossom` CLI: its command-line checks (ResolveCommandLine, ResolveApiKey), its server-mode
// calls (RunRemoteCommand) against the real service on loopback and a mutual-TLS server, and the
// binary itself, so that main's wiring (a TEXT argument, the beam-only flags, where the API key
// comes from) is covered too.
#include "clients/remote_commands.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "clients/gateway/test_certs.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/auth/api_keys.h"
#include "server/testing/fake_health_service.h"
#include "server/testing/in_process_server.h"
#include "server/testing/run_binary.h"
#include "tests/util/fixture_path.h"

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

std::string WriteTempFile(const std::string& name, const std::string& contents) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/", name);
  std::ofstream(path) << contents;
  return path;
}

// --api_key, else --api_key_file, else BLOSSOM_API_KEY; a key shows in `ps` only as a flag.
TEST(ResolveApiKeyTest, FlagThenFileThenEnvironment) {
  const std::string file = WriteTempFile("cli.key", "from-file\n");
  EXPECT_EQ(*ResolveApiKey("from-flag", "", "from-env"), "from-flag");
  EXPECT_EQ(*ResolveApiKey("", file, "from-env"), "from-file");
  EXPECT_EQ(*ResolveApiKey("", "", "from-env"), "from-env");
  EXPECT_EQ(*ResolveApiKey("", "", ""), "");       // an empty variable is no key
  EXPECT_EQ(*ResolveApiKey("", "", nullptr), "");  // nor is an unset one
}

TEST(ResolveApiKeyTest, ConflictsAndUnusableKeysAreErrors) {
  const std::string file = WriteTempFile("cli2.key", "from-file\n");
  absl::StatusOr<std::string> both = ResolveApiKey("k", file, nullptr);
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message(), "give one of --api_key and --api_key_file");
  absl::StatusOr<std::string> empty = ResolveApiKey("", WriteTempFile("empty.key", "\n"), "env");
  ASSERT_FALSE(empty.ok());  // not silently the variable's key, nor no key
  EXPECT_NE(empty.status().message().find("holds no key"), absl::string_view::npos)
      << empty.status();
  EXPECT_FALSE(ResolveApiKey("", "/nonexistent/key", nullptr).ok());
  absl::StatusOr<std::string> spaced = ResolveApiKey("", "", "two words");
  ASSERT_FALSE(spaced.ok());
  EXPECT_NE(spaced.status().message().find("BLOSSOM_API_KEY"), absl::string_view::npos);
  EXPECT_EQ(spaced.status().message().find("two words"), absl::string_view::npos);
  EXPECT_FALSE(ResolveApiKey("bad\nkey", "", nullptr).ok());
}

// A server that requires a client certificate (blossom-server --tls_client_ca): `health` gets
// through with --tls_cert/--tls_key and not without; the pair is checked before connecting.
TEST(MutualTlsTest, ClientCertificateReachesAServerThatRequiresOne) {
  const gateway::testing::TestCerts& certs = gateway::testing::MakeTestCerts();
  testing::ServingHealthService health;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", certs.MutualTlsServerCredentials(), &port);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  RemoteOptions options;
  options.server = absl::StrCat("localhost:", port);  // the name the server certificate holds
  options.timeout_seconds = 10;
  options.tls = true;
  options.tls_ca_file = certs.ca;
  options.tls_cert_file = certs.client_cert;
  options.tls_key_file = certs.client_key;
  v1::GenerateRequest none;
  std::ostringstream out, err;
  EXPECT_EQ(RunRemoteCommand("health", options, none, out, err), 0) << err.str();
  EXPECT_EQ(out.str(), "SERVING\n");

  RemoteOptions without = options;
  without.tls_cert_file.clear();
  without.tls_key_file.clear();
  without.timeout_seconds = 2;
  err.str("");
  EXPECT_EQ(RunRemoteCommand("health", without, none, out, err), 1) << err.str();

  RemoteOptions half = options;
  half.tls_key_file.clear();
  err.str("");
  EXPECT_EQ(RunRemoteCommand("health", half, none, out, err), 2);
  EXPECT_NE(err.str().find("--tls_cert and --tls_key go together"), std::string::npos)
      << err.str();
  RemoteOptions plain = options;
  plain.tls = false;
  plain.tls_ca_file.clear();
  err.str("");
  EXPECT_EQ(RunRemoteCommand("health", plain, none, out, err), 2);
  EXPECT_NE(err.str().find("--tls_cert is set without --tls"), std::string::npos) << err.str();
  RemoteOptions unreadable = options;
  unreadable.tls_key_file = "/nonexistent/client.key";
  err.str("");
  EXPECT_EQ(RunRemoteCommand("health", unreadable, none, out, err), 2);
  EXPECT_NE(err.str().find("--tls_key: cannot read /nonexistent/client.key"), std::string::npos)
      << err.str();
  server->Shutdown(std::chrono::system_clock::now());
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

// The `blossom` binary (a runfile) with `args` (and `env`, "NAME=value" settings, in its
// environment); its exit code, stdout (output) and stderr (error), apart: tests compare stdout
// exactly.
testing::RunResult RunCli(const std::vector<std::string>& args,
                          const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {testing::RunfilePath("clients/blossom")};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::RunOptions options;
  options.env = env;
  options.merge_stderr = false;
  return testing::RunBinary(argv, options);
}

TEST_F(ServerTest, CliTakesTheTextAsItsArgument) {
  const testing::RunResult tokenized =
      RunCli({"tokenize", "--server", server_.address(), "hello world"});
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.error;
  v1::GenerateRequest request;
  request.set_text("hello world");
  std::ostringstream want, err;
  ASSERT_EQ(RunRemoteCommand("tokenize", Options(), request, want, err), 0) << err.str();
  EXPECT_EQ(tokenized.output, want.str());
  // After `--`, a text that starts with dashes.
  const testing::RunResult dashes =
      RunCli({"tokenize", "--server", server_.address(), "--", "--a-b"});
  EXPECT_EQ(dashes.exit_code, 0) << dashes.error;
  EXPECT_FALSE(dashes.output.empty());

  const std::vector<std::string> greedy = {"--server", server_.address(), "--temperature", "0",
                                           "--max_new_tokens", "4", "--ignore_eos", "--quiet"};
  std::vector<std::string> as_argument = {"generate", "Hello"};
  as_argument.insert(as_argument.end(), greedy.begin(), greedy.end());
  std::vector<std::string> as_flag = {"generate", "--prompt", "Hello"};
  as_flag.insert(as_flag.end(), greedy.begin(), greedy.end());
  const testing::RunResult by_argument = RunCli(as_argument);
  const testing::RunResult by_flag = RunCli(as_flag);
  ASSERT_EQ(by_argument.exit_code, 0) << by_argument.error;
  ASSERT_EQ(by_flag.exit_code, 0) << by_flag.error;
  EXPECT_EQ(by_argument.output, by_flag.output);
  EXPECT_NE(by_argument.output, "\n");  // a completion, not the empty prompt's refusal
}

TEST_F(ServerTest, CliRefusesWhatItWouldDrop) {
  const std::string server = server_.address();
  testing::RunResult run = RunCli({"generate", "--server", server, "Hello", "world"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.error.find("'Hello' 'world'"), std::string::npos) << run.error;
  EXPECT_EQ(run.output, "");
  run = RunCli({"tokenize", "--server", server});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.error.find("needs the text"), std::string::npos) << run.error;
  for (const std::vector<std::string>& beam_flag :
       std::vector<std::vector<std::string>>{{"--num_return_sequences", "2"},
                                             {"--length_penalty", "2"},
                                             {"--early_stopping", "true"},
                                             {"--show_token_ids"}}) {
    std::vector<std::string> args = {"generate", "--server", server, "Hi"};
    args.insert(args.end(), beam_flag.begin(), beam_flag.end());
    run = RunCli(args);
    EXPECT_EQ(run.exit_code, 2) << beam_flag[0];
    EXPECT_NE(run.error.find(beam_flag[0] + " applies to beam search only"), std::string::npos)
        << run.error;
    EXPECT_EQ(run.output, "");
  }
  // With --num_beams the same flags are taken (and the beams printed).
  run = RunCli({"generate", "--server", server, "Hi", "--num_beams", "2",
                "--num_return_sequences", "2", "--max_new_tokens", "2", "--show_token_ids",
                "--quiet"});
  EXPECT_EQ(run.exit_code, 0) << run.error;
  EXPECT_NE(run.output.find("# beam 2:"), std::string::npos) << run.output;
  // Giving a beam flag its default changes nothing, so it is no reason to refuse.
  run = RunCli({"tokenize", "--server", server, "Hi", "--length_penalty", "1"});
  EXPECT_EQ(run.exit_code, 0) << run.error;
  // tokenize, health and info generate nothing: a generation flag would be ignored.
  run = RunCli({"tokenize", "--server", server, "Hi", "--temperature", "0.5"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.error.find("--temperature applies to generate and stream"), std::string::npos)
      << run.error;
  EXPECT_EQ(run.output, "");
  run = RunCli({"health", "--server", server, "--max_new_tokens", "5"});
  EXPECT_EQ(run.exit_code, 2);
  run = RunCli({"info", "--server", server, "--max_new_tokens", "32"});  // its default
  EXPECT_EQ(run.exit_code, 0) << run.error;
}

// The seed a run reports replays it, over the whole range the server draws seeds from (uint64:
// about half of them are at or above 2^63, which a signed flag refused).
TEST_F(ServerTest, CliReplaysAnySeedItPrints) {
  const std::vector<std::string> args = {"generate", "--server", server_.address(), "Hello",
                                         "--temperature", "1", "--max_new_tokens", "6",
                                         "--ignore_eos", "--seed", "18446744073709551615"};
  const testing::RunResult first = RunCli(args), second = RunCli(args);
  ASSERT_EQ(first.exit_code, 0) << first.error;
  ASSERT_EQ(second.exit_code, 0) << second.error;
  EXPECT_EQ(first.output, second.output);
  EXPECT_NE(first.error.find("seed=18446744073709551615"), std::string::npos) << first.error;
  const testing::RunResult negative = RunCli({"generate", "--server", server_.address(), "Hi",
                                              "--seed", "-1"});
  EXPECT_EQ(negative.exit_code, 1);
  EXPECT_NE(negative.error.find("seed"), std::string::npos) << negative.error;
  EXPECT_EQ(negative.output, "");
}

// A refused request leaves stdout empty, in-process as with --server (scripts capture it), and
// a flag the run would ignore is refused in-process as the server refuses it.
TEST_F(ServerTest, RefusedRunsPrintNothingToStdout) {
  testing::RunResult run =
      RunCli({"stream", "--server", server_.address(), "x", "--top_p", "2", "--quiet"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.output, "");
  const std::string model = FixturePath("models/bloom-tiny-h4");
  const std::vector<std::vector<std::string>> refused = {
      {"--max_new_tokens", "0"}, {"--json_compact"}, {"--threads", "-4"}};
  for (const std::vector<std::string>& flags : refused) {
    std::vector<std::string> args = {"generate", "--model", model, "Hello", "--quiet"};
    args.insert(args.end(), flags.begin(), flags.end());
    run = RunCli(args);
    EXPECT_EQ(run.exit_code, 1) << flags[0];
    EXPECT_EQ(run.output, "") << flags[0];
    EXPECT_NE(run.error.find(flags[0].substr(2)), std::string::npos) << run.error;
  }
  // In-process the prompt comes first, then the completion (the server's text).
  run = RunCli({"generate", "--model", model, "Hello", "--temperature", "0", "--max_new_tokens",
                "4", "--ignore_eos", "--quiet"});
  ASSERT_EQ(run.exit_code, 0) << run.error;
  const testing::RunResult remote =
      RunCli({"generate", "--server", server_.address(), "Hello", "--temperature", "0",
              "--max_new_tokens", "4", "--ignore_eos", "--quiet"});
  ASSERT_EQ(remote.exit_code, 0) << remote.error;
  EXPECT_EQ(run.output, "Hello" + remote.output);
}

// The real service with API keys on: the CLI's key from --api_key_file or BLOSSOM_API_KEY
// (neither shows in `ps`) gets through, none is refused by the server, and both flags are a
// usage error.
TEST(KeyedServerTest, CliReadsTheKeyFromAFileOrTheEnvironment) {
  ServiceOptions service;
  service.api_keys = auth::ApiKeys({"cli-secret"});
  testing::InProcessServer server(std::move(service));
  server.Load();
  const std::string address = server.address();
  testing::RunResult run = RunCli({"tokenize", "--server", address, "hi"});
  EXPECT_EQ(run.exit_code, 1) << run.error;
  EXPECT_NE(run.error.find("UNAUTHENTICATED"), std::string::npos) << run.error;
  const std::string key_file = WriteTempFile("cli-secret.key", "cli-secret\n");
  run = RunCli({"tokenize", "--server", address, "--api_key_file", key_file, "hi"});
  EXPECT_EQ(run.exit_code, 0) << run.error;
  EXPECT_FALSE(run.output.empty());
  run = RunCli({"tokenize", "--server", address, "hi"}, {"BLOSSOM_API_KEY=cli-secret"});
  EXPECT_EQ(run.exit_code, 0) << run.error;
  // A flag wins over the variable (here a wrong one: refused by the server).
  run = RunCli({"tokenize", "--server", address, "--api_key", "wrong", "hi"},
               {"BLOSSOM_API_KEY=cli-secret"});
  EXPECT_EQ(run.exit_code, 1) << run.error;
  run = RunCli({"tokenize", "--server", address, "--api-key-file", key_file, "--api_key", "x", "hi"});
  EXPECT_EQ(run.exit_code, 2) << run.error;
  EXPECT_NE(run.error.find("give one of --api_key and --api_key_file"), std::string::npos)
      << run.error;
  run = RunCli({"tokenize", "--server", address, "--api_key_file", WriteTempFile("e.key", ""), "hi"});
  EXPECT_EQ(run.exit_code, 2) << run.error;
  EXPECT_NE(run.error.find("holds no key"), std::string::npos) << run.error;
  // Without --server the key would be sent nowhere.
  run = RunCli({"generate", "--api_key_file", key_file, "hi"});
  EXPECT_EQ(run.exit_code, 2) << run.error;
  EXPECT_NE(run.error.find("--api_key_file applies to --server calls only"), std::string::npos)
      << run.error;
}

}  // namespace
}  // namespace blossom
