// A plain UDP socket on loopback that speaks to a device with hand-built RoCEv2 packets (valid
// ICRC): forged peers, hostile input and CM partners that go away (sw_hostile_test.cpp,
// sw_cm_probe_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cstring>
#include <optional>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "sw/cm.hpp"
#include "sw/test_support.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

namespace roce::sw::testing {

struct Attacker {
    int fd = -1;
    WireAddr self{};
    WireAddr target{};
    explicit Attacker(const WireAddr& t) : target(t) {
        fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
        socklen_t l = sizeof(sa);
        getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &l);
        self.family = AF_INET;
        std::memcpy(self.ip, &sa.sin_addr, 4);
        self.port = ntohs(sa.sin_port);
    }
    ~Attacker() { close(fd); }
    void send_raw(const uint8_t* p, size_t n) {
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        std::memcpy(&sa.sin_addr, target.ip, 4);
        sa.sin_port = htons(target.port);
        sendto(fd, p, n, 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    }
    wire::IpContext ip() const {
        wire::IpContext c;
        std::memcpy(c.src_ip, self.ip, 4);
        std::memcpy(c.dst_ip, target.ip, 4);
        c.src_port = self.port;
        c.dst_port = target.port;
        return c;
    }
    // A well-formed packet with a valid ICRC; returns its bytes.
    std::vector<uint8_t> build(wire::Packet pkt, std::span<const uint8_t> payload = {}) {
        std::vector<uint8_t> out(8192);
        const size_t n = wire::build(pkt, payload, ip(), out);
        EXPECT_GT(n, 0u);
        out.resize(n);
        return out;
    }
    void send(const std::vector<uint8_t>& v) { send_raw(v.data(), v.size()); }
    // Re-seals a modified packet with a valid ICRC.
    void reseal(std::vector<uint8_t>& v) {
        const uint32_t crc = wire::icrc_compute(ip(), v);
        uint8_t* p = v.data() + v.size() - 4;
        p[0] = uint8_t(crc);
        p[1] = uint8_t(crc >> 8);
        p[2] = uint8_t(crc >> 16);
        p[3] = uint8_t(crc >> 24);
    }
    // Receives one datagram (waits up to ~1 s); empty on timeout.
    std::vector<uint8_t> recv(Host& h) {
        std::vector<uint8_t> b(9000);
        for (int i = 0; i < 100000; ++i) {
            h.poll();
            const ssize_t r = ::recv(fd, b.data(), b.size(), 0);
            if (r > 0) {
                b.resize(size_t(r));
                return b;
            }
            if (i > 1000)
                usleep(10);
        }
        return {};
    }
};

// A UD SEND to QP1 with the CM's Q_Key: how connection-manager messages travel.
inline wire::Packet cm_datagram() {
    wire::Packet ud;
    ud.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
    ud.bth.dest_qp = 1;
    ud.deth.qkey = cm::qkey;
    ud.deth.src_qp = 1;
    return ud;
}

// A REQ as a hand-built active side sends it.
inline cm::Msg cm_req(uint64_t conn_id, uint32_t src_qpn, uint32_t mtu = 4096, bool answers_probe = true) {
    cm::Msg req;
    req.type = cm::MsgType::req;
    req.conn_id = conn_id;
    req.src_qpn = src_qpn;
    req.start_psn = 100;
    req.mtu = mtu;
    req.answers_probe = answers_probe;
    return req;
}

// The next datagram the attacker receives from h, as a CM message (nullopt: none, or no CM message).
inline std::optional<cm::Msg> cm_answer(Attacker& at, Host& h) {
    const auto r = at.recv(h);
    wire::Packet p;
    cm::Msg m;
    if (r.empty() || wire::parse(r, wire::IpContext{}, false, p) != wire::ParseError::none || !cm::decode(p.payload, m))
        return std::nullopt;
    return m;
}

// Sends m to h's connection manager and returns its answer.
inline std::optional<cm::Msg> cm_exchange(Attacker& at, Host& h, const cm::Msg& m) {
    uint8_t msg[cm::msg_size];
    cm::encode(m, msg);
    at.send(at.build(cm_datagram(), msg));
    return cm_answer(at, h);
}


} // namespace roce::sw::testing
