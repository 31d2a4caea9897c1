// A peer that dies and comes back on the same address and UDP port is a new peer: the surviving
// device's QP to the old incarnation never delivers to (or takes answers from) the new one, and
// fails on its own once the old peer stays silent; the new incarnation connects afresh. What
// keeps them apart is what real RoCE has: a fresh random QPN range per device and a random
// starting PSN per QP (the CM request carries a nonce too). The peers are real processes (fork),
// the first one SIGKILLed, so nothing is torn down politely.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "sw/test_support.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

namespace {

DeviceConfig no_thread_cfg(uint16_t port = 0) {
    DeviceConfig c;
    c.ports = port;
    c.progress_thread = false;   // fork() must not copy a process with other threads running
    c.retransmit_timeout_us = 2000;
    c.retry_count = 3;
    c.peer_timeout_ms = 1500;
    return c;
}

uint16_t free_udp_port() {
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    socklen_t l = sizeof(sa);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &l);
    ::close(fd);
    return ntohs(sa.sin_port);
}

// Child body: open a device on `port`, connect to `server`, send `hello`; if `expect` is set,
// wait for exactly that reply and then keep listening `linger_s` for anything else. Exit codes:
// 0 ok, 10+ the step that failed. `ready` gets one byte once the hello was acknowledged.
[[noreturn]] void peer(uint16_t port, const WireAddr& server, const std::string& hello, const char* expect,
                       double linger_s, int ready) {
    Host h;
    if (h.open(no_thread_cfg(port)) != Status::ok) _exit(10);
    uint32_t q;
    if (h.dev->create_qp(q) != Status::ok || h.dev->connect_qp(q, server) != Status::ok) _exit(11);
    if (!run_until({&h}, [&] { return h.dev->qp_state(q) == QpState::rts; }, 10)) _exit(12);
    iovec iov{const_cast<char*>(hello.data()), hello.size()};
    if (h.dev->post_send(q, 1, &iov, 1) != Status::ok) _exit(13);
    if (!run_until({&h}, [&] { return h.find(1) != nullptr; }, 10) || h.find(1)->status != Status::ok) _exit(14);
    (void)!::write(ready, "x", 1);
    if (expect == nullptr) {
        for (;;) h.poll();   // until SIGKILL
    }
    if (!run_until({&h}, [&] { return !h.msgs.empty(); }, 10)) _exit(15);
    if (std::string(h.msgs[0].data.begin(), h.msgs[0].data.end()) != expect) _exit(16);
    run_until({&h}, [] { return false; }, linger_s);   // whatever else arrives is a mistake
    if (h.msgs.size() != 1) _exit(17);
    // The old connection's retransmissions did reach this port, and were dropped as strangers.
    if (h.dev->stats().dropped_unknown_qp == 0) _exit(18);
    _exit(0);
}

} // namespace

TEST(SwIncarnation, RestartedPeerOnTheSamePortIsANewPeer) {
    Host a;
    ASSERT_EQ(a.open(no_thread_cfg()), Status::ok);
    const uint16_t port = free_udp_port();
    int pipe1[2], pipe2[2];
    ASSERT_EQ(::pipe(pipe1), 0);
    ASSERT_EQ(::pipe(pipe2), 0);

    // Incarnation 1 connects, says "old", and is killed.
    const pid_t old_peer = ::fork();
    ASSERT_GE(old_peer, 0);
    if (old_peer == 0)
        peer(port, a.dev->address(), "old", nullptr, 0, pipe1[1]);
    char b;
    ASSERT_TRUE(run_until({&a}, [&] { return !a.msgs.empty(); }, 10));
    ASSERT_EQ(std::string(a.msgs[0].data.begin(), a.msgs[0].data.end()), "old");
    const uint32_t old_qp = a.msgs[0].qpn;
    ASSERT_EQ(::read(pipe1[0], &b, 1), 1);
    ::kill(old_peer, SIGKILL);
    ::waitpid(old_peer, nullptr, 0);
    // Something for the dead peer: it keeps being retransmitted towards its address and port.
    const std::string late = "for the old peer";
    iovec iov{const_cast<char*>(late.data()), late.size()};
    ASSERT_EQ(a.dev->post_send(old_qp, 77, &iov, 1), Status::ok);
    run_until({&a}, [] { return false; }, 0.1);

    // Incarnation 2, same address and port: says "new", must get exactly "pong".
    const pid_t new_peer = ::fork();
    ASSERT_GE(new_peer, 0);
    if (new_peer == 0)
        peer(port, a.dev->address(), "new", "pong", 1.5, pipe2[1]);
    ASSERT_TRUE(run_until({&a}, [&] { return a.msgs.size() >= 2; }, 10));
    ASSERT_EQ(std::string(a.msgs[1].data.begin(), a.msgs[1].data.end()), "new");
    const uint32_t new_qp = a.msgs[1].qpn;
    EXPECT_NE(new_qp, old_qp);
    const std::string pong = "pong";
    iovec piov{const_cast<char*>(pong.data()), pong.size()};
    ASSERT_EQ(a.dev->post_send(new_qp, 78, &piov, 1), Status::ok);
    int status = -1;
    ASSERT_TRUE(run_until({&a}, [&] { return ::waitpid(new_peer, &status, WNOHANG) == new_peer; }, 20));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "new incarnation failed at step " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
        << " (16: wrong reply, 17: received something meant for the old peer, 18: no old packet seen)";
    ASSERT_NE(a.find(78), nullptr);
    EXPECT_EQ(a.find(78)->status, Status::ok);
    // The old QP gives up on its own: its peer never answered again.
    ASSERT_TRUE(run_until({&a}, [&] { return a.find(77) != nullptr; }, 20));
    EXPECT_EQ(a.find(77)->status, Status::timeout);
    EXPECT_EQ(a.dev->qp_state(old_qp), QpState::error);
    EXPECT_EQ(a.dev->qp_state(new_qp), QpState::rts);
    EXPECT_EQ(a.msgs.size(), 2u);
}
