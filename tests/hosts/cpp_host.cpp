// The C++ host of the cross-host test, over packlm.hpp (protocol: tests/hosts/README.md).
//   cpp_host check MODEL DIR        restore state.bin, step 5, compare; write state_cpp.bin
//   cpp_host chain MODEL DIR FROM   restore state_FROM.bin, continue greedily, compare
#include "packlm.hpp"

#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kNextToken = 5;
constexpr int kGreedy = 8;
int passed = 0, failed = 0;

void check(bool cond, const std::string &what) {
    if (cond) {
        ++passed;
    } else {
        ++failed;
        std::cerr << "cpp: FAIL: " << what << "\n";
    }
}

std::vector<uint8_t> read_file(const std::string &path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_file(const std::string &path, const std::vector<uint8_t> &bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
}

std::vector<uint32_t> read_greedy(const std::string &dir) {
    std::ifstream f(dir + "/greedy.txt");
    std::vector<uint32_t> ids;
    uint32_t id = 0;
    while (f >> id) ids.push_back(id);
    if (ids.size() < kGreedy) throw std::runtime_error("greedy.txt: fewer than 8 ids");
    return ids;
}

} // namespace

int main(int argc, char **argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (argc < 4 || (mode == "chain" && argc != 5)) {
        std::cerr << "usage: cpp_host check MODEL DIR | chain MODEL DIR FROM\n";
        return 2;
    }
    const uint16_t one = 1;
    if (*reinterpret_cast<const uint8_t *>(&one) != 1) {
        std::cerr << "cpp: the .f32 files are little-endian; this machine is not\n";
        return 1;
    }
    const std::string dir = argv[3];
    try {
        packlm::Model model(argv[2]);
        const std::vector<uint32_t> greedy = read_greedy(dir);
        if (mode == "check") {
            packlm::Session s(model);
            s.restore(read_file(dir + "/state.bin"));
            std::vector<float> logits = s.step(kNextToken);
            const std::vector<uint8_t> want = read_file(dir + "/next.f32");
            check(want.size() == logits.size() * sizeof(float) && std::memcmp(want.data(), logits.data(), want.size()) == 0,
                  "logits after restore + step 5 are next.f32, bit for bit");
            write_file(dir + "/state_cpp.bin", s.snapshot());
            for (int i = 0; i < kGreedy; ++i) {
                const uint32_t t = packlm::argmax(logits);
                check(t == greedy[i], "greedy token " + std::to_string(i) + " is " + std::to_string(greedy[i]) + " (got " + std::to_string(t) + ")");
                logits = s.step(greedy[i]);
            }
        } else if (mode == "chain") {
            packlm::Session base(model), s(model);
            base.restore(read_file(dir + "/state.bin"));
            s.restore(read_file(dir + "/state_" + std::string(argv[4]) + ".bin"));
            check(s.n_past() == base.n_past() + 1, "the snapshot holds state.bin's positions and token 5");
            for (int i = 0; i + 1 < kGreedy; ++i) {
                const uint32_t t = packlm::argmax(s.step(greedy[i]));
                check(t == greedy[i + 1], "greedy token " + std::to_string(i + 1) + " is " + std::to_string(greedy[i + 1]) + " (got " + std::to_string(t) + ")");
            }
        } else {
            std::cerr << "cpp: unknown mode " << mode << "\n";
            return 2;
        }
    } catch (const packlm::Error &e) {
        std::cerr << "cpp: error " << e.status() << ": " << e.what() << "\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << "cpp: " << e.what() << "\n";
        return 1;
    }
    std::cout << "cpp: " << passed << " passed, " << failed << " failed\n";
    return failed == 0 ? 0 : 1;
}
