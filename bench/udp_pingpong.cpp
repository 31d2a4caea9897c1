// The floor for any socket datapath: a raw UDP ping-pong over loopback between two processes,
// both busy-polling non-blocking sockets. Prints: size=<bytes> lat_us=<half round trip>.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

int bound_socket(sockaddr_in& addr) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        std::perror("udp_pingpong: socket");
        std::exit(1);
    }
    return fd;
}

void recv_one(int fd, std::vector<char>& buf) {
    while (recv(fd, buf.data(), buf.size(), 0) < 0) {}
}

}  // namespace

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
    sockaddr_in a{}, b{};
    int fa = bound_socket(a), fb = bound_socket(b);
    for (size_t size : {8ul, 64ul, 4096ul}) {
        std::vector<char> buf(65536);
        pid_t child = fork();
        if (child == 0) {   // echo side
            for (int i = 0; i < iters + 100; ++i) {
                recv_one(fb, buf);
                sendto(fb, buf.data(), size, 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
            }
            _exit(0);
        }
        std::chrono::steady_clock::time_point t0;
        for (int i = -100; i < iters; ++i) {
            if (i == 0) t0 = std::chrono::steady_clock::now();
            sendto(fa, buf.data(), size, 0, reinterpret_cast<sockaddr*>(&b), sizeof(b));
            recv_one(fa, buf);
        }
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        waitpid(child, nullptr, 0);
        std::printf("size=%zu lat_us=%.2f\n", size, us / iters / 2);
    }
    return 0;
}
