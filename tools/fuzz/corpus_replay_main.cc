// The main() of a cc_fuzz_test's replay binary (tools/fuzz/fuzz.bzl): runs every file named on
// the command line through LLVMFuzzerTestOneInput once, with the ordinary compiler and no fuzzer
// runtime. A crash, an abort or a sanitizer report fails the test; so does an empty corpus (a
// replay of nothing proves nothing).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "no corpus files given: add inputs under corpus/<target>/\n");
    return 1;
  }
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %d corpus inputs\n", argc - 1);
  return 0;
}
