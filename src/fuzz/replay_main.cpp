// Runs a fuzz target's LLVMFuzzerTestOneInput once on every file given (or every file in the
// directories given), without libFuzzer: the corpus as a regression test in the normal build.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
    size_t n = 0;
    auto run = [&](const std::filesystem::path& p) {
        std::ifstream f(p, std::ios::binary);
        std::vector<uint8_t> b((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        LLVMFuzzerTestOneInput(b.data(), b.size());
        ++n;
    };
    for (int i = 1; i < argc; ++i) {
        if (std::filesystem::is_directory(argv[i])) {
            for (const auto& e : std::filesystem::directory_iterator(argv[i]))
                if (e.is_regular_file()) run(e.path());
        } else {
            run(argv[i]);
        }
    }
    std::printf("replayed %zu inputs, no failure\n", n);
    return n > 0 ? 0 : 1;
}
