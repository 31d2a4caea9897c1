// Replays the requests the kernel's rxe driver sent (fixtures/rxe-pcap, hostb -> hosta) to our
// device through a plain UDP socket, re-addressed to our QP, MR and addresses (ICRC resealed),
// and compares our responder's answers with what rxe's responder (hosta) answered: opcode,
// payload length, AETH syndrome, MSN, atomic original values; and checks the data.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <sys/socket.h>
#include <unistd.h>

#include "sw/cm.hpp"
#include "sw/test_support.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"
#include "wire/pcap.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

namespace {

bool is_request(uint8_t op) { return op <= 0x0c || op == 0x13 || op == 0x14; }
bool is_response(uint8_t op) { return op >= 0x0d && op <= 0x12; }

struct Resp {
    uint8_t opcode;
    size_t len;
    uint8_t syndrome;
    uint32_t msn;
    uint64_t orig;
};

struct FakePeer {
    int fd = -1;
    sockaddr_in self{}, dev_sa{};
    wire::IpContext to_dev, from_dev;
    Host& dut;
    uint32_t qpn = 0;

    explicit FakePeer(Host& h) : dut(h) {
        fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
        self.sin_family = AF_INET;
        self.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof(self));
        socklen_t l = sizeof(self);
        getsockname(fd, reinterpret_cast<sockaddr*>(&self), &l);
        const WireAddr d = h.dev->address();
        dev_sa.sin_family = AF_INET;
        std::memcpy(&dev_sa.sin_addr, d.ip, 4);
        dev_sa.sin_port = htons(d.port);
        std::memcpy(to_dev.src_ip, &self.sin_addr, 4);
        std::memcpy(to_dev.dst_ip, d.ip, 4);
        to_dev.src_port = ntohs(self.sin_port);
        to_dev.dst_port = d.port;
        std::memcpy(from_dev.src_ip, d.ip, 4);
        std::memcpy(from_dev.dst_ip, &self.sin_addr, 4);
        from_dev.src_port = d.port;
        from_dev.dst_port = ntohs(self.sin_port);
        from_dev.ipv4_id_known = false;
    }
    ~FakePeer() { close(fd); }

    void send(wire::Packet pkt, std::span<const uint8_t> payload) {
        std::vector<uint8_t> out(8192);
        const size_t n = wire::build(pkt, payload, to_dev, out);
        ASSERT_GT(n, 0u);
        sendto(fd, out.data(), n, 0, reinterpret_cast<sockaddr*>(&dev_sa), sizeof(dev_sa));
    }
    // Drives the device until no packet arrived for a few ms; returns what it sent us.
    std::vector<wire::Packet> collect(std::vector<std::vector<uint8_t>>& store, double quiet_ms = 3) {
        std::vector<wire::Packet> out;
        auto last = std::chrono::steady_clock::now();
        for (;;) {
            dut.poll();
            std::vector<uint8_t> b(70000);
            const ssize_t r = recv(fd, b.data(), b.size(), 0);
            if (r > 0) {
                b.resize(size_t(r));
                store.push_back(std::move(b));
                wire::Packet p;
                EXPECT_EQ(wire::parse(store.back(), from_dev, true, p), wire::ParseError::none);
                out.push_back(p);
                last = std::chrono::steady_clock::now();
            } else if (std::chrono::steady_clock::now() - last > std::chrono::duration<double, std::milli>(quiet_ms)) {
                return out;
            }
        }
    }
    bool connect(uint32_t start_psn) {
        wire::Packet ud;
        ud.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
        ud.bth.dest_qp = 1;
        ud.deth = {cm::qkey, 1};
        cm::Msg req;
        req.type = cm::MsgType::req;
        req.conn_id = 1;
        req.src_qpn = 0x99;
        req.start_psn = start_psn;
        req.mtu = 1024;
        uint8_t body[cm::msg_size];
        cm::encode(req, body);
        send(ud, body);
        std::vector<std::vector<uint8_t>> store;
        for (const wire::Packet& p : collect(store, 20)) {
            cm::Msg rep;
            if (p.bth.opcode == uint8_t(wire::Opcode::ud_send_only) && cm::decode(p.payload, rep) &&
                rep.type == cm::MsgType::rep) {
                qpn = rep.src_qpn;
                return true;
            }
        }
        return false;
    }
};

struct ReplayResult {
    std::map<uint32_t, Resp> rxe, ours;   // first response per PSN
    size_t requests = 0;
};

// valid_rkey: the rkey that maps to our region (0 = the first one seen).
void replay(const std::string& name, bool compare, uint32_t valid_rkey = 0,
            std::vector<Received>* delivered = nullptr) {
    SCOPED_TRACE(name);
    std::vector<wire::PcapFrame> frames;
    std::string err;
    ASSERT_EQ(wire::read_pcap(std::string(ROCE_FIXTURE_DIR) + "/" + name + ".pcap", frames, err), Status::ok) << err;
    std::vector<wire::PcapFrame> reqs;
    ReplayResult r;
    for (const auto& f : frames) {
        wire::Packet p;
        if (wire::parse(f.payload(), f.ip, true, p) != wire::ParseError::none)
            continue;
        const bool to_a = f.ip.dst_ip[3] == 1;
        if (to_a && is_request(p.bth.opcode) && p.bth.dest_qp != 1)
            reqs.push_back(f);
        if (!to_a && is_response(p.bth.opcode) && !r.rxe.count(p.bth.psn))
            r.rxe[p.bth.psn] = Resp{p.bth.opcode, p.payload.size(), p.aeth.syndrome, p.aeth.msn, p.atomic_ack.orig};
    }
    ASSERT_FALSE(reqs.empty());
    Host dut;
    ASSERT_EQ(dut.open(DeviceConfig{}), Status::ok);
    std::vector<uint8_t> mem(1 << 20, 0);
    for (size_t i = 0; i < mem.size(); ++i)
        mem[i] = uint8_t(i * 13 + 5);
    MrKeys k;
    ASSERT_EQ(dut.pd->reg_mr(mem.data(), mem.size(), access_all, k), Status::ok);
    FakePeer peer(dut);
    wire::Packet first;
    ASSERT_EQ(wire::parse(reqs[0].payload(), reqs[0].ip, true, first), wire::ParseError::none);
    ASSERT_TRUE(peer.connect(first.bth.psn));
    uint64_t base_va = 0;
    bool have_va = false;
    uint8_t* const region = mem.data() + 65536;
    std::vector<std::vector<uint8_t>> store;
    std::vector<wire::Packet> ours;
    bool atomic_init = false;
    std::vector<uint8_t> shadow = mem;   // what memory must look like after the WRITEs
    size_t wr_off = 0;
    std::map<uint32_t, bool> seen_psn;
    for (const auto& f : reqs) {
        wire::Packet p;
        ASSERT_EQ(wire::parse(f.payload(), f.ip, true, p), wire::ParseError::none);
        p.bth.dest_qp = peer.qpn;
        uint64_t* va = p.has_reth ? &p.reth.va : p.has_atomic ? &p.atomic.va : nullptr;
        uint32_t* rkey = p.has_reth ? &p.reth.rkey : p.has_atomic ? &p.atomic.rkey : nullptr;
        if (va) {
            if (!have_va) {
                base_va = *va;
                have_va = true;
                if (!valid_rkey)
                    valid_rkey = *rkey;
            }
            *va = uint64_t(uintptr_t(region)) + (*va - base_va);
            *rkey = *rkey == valid_rkey ? k.rkey : k.rkey ^ 0x100;
        }
        const bool first_time = !seen_psn[p.bth.psn];
        seen_psn[p.bth.psn] = true;
        if (first_time && p.bth.opcode >= 0x06 && p.bth.opcode <= 0x0b && (p.reth.rkey == k.rkey || !p.has_reth)) {
            if (p.has_reth)
                wr_off = size_t(p.reth.va - uint64_t(uintptr_t(mem.data())));
            std::memcpy(shadow.data() + wr_off, p.payload.data(), p.payload.size());
            wr_off += p.payload.size();
        }
        if (p.has_atomic && !atomic_init) {
            // start from the value rxe's memory held, so the results must match rxe's
            auto it = r.rxe.find(f.ip.dst_ip[3] == 1 ? p.bth.psn : 0);
            if (it != r.rxe.end())
                std::memcpy(region + (p.atomic.va - uint64_t(uintptr_t(region))), &it->second.orig, 8);
            atomic_init = true;
        }
        peer.send(p, p.payload);
        ++r.requests;
        if (p.bth.ack_req)
            for (auto& q : peer.collect(store))
                ours.push_back(q);
    }
    for (auto& q : peer.collect(store))
        ours.push_back(q);
    for (const auto& q : ours)
        if (is_response(q.bth.opcode) && !r.ours.count(q.bth.psn))
            r.ours[q.bth.psn] = Resp{q.bth.opcode, q.payload.size(), q.aeth.syndrome, q.aeth.msn, q.atomic_ack.orig};
    EXPECT_EQ(dut.dev->stats().malformed, 0u);
    EXPECT_EQ(dut.dev->stats().icrc_errors, 0u);
    if (name.find("write") != std::string::npos) {
        EXPECT_TRUE(mem == shadow) << "WRITE data differs";
    }
    for (const auto& q : ours) {   // READ response payloads are our memory
        if (q.bth.opcode >= 0x0d && q.bth.opcode <= 0x10 && !q.payload.empty()) {
            EXPECT_NE(std::search(mem.begin(), mem.end(), q.payload.begin(), q.payload.end()), mem.end());
        }
    }
    if (delivered)
        *delivered = dut.msgs;
    if (!compare)
        return;
    size_t compared = 0;
    ASSERT_FALSE(r.rxe.empty());
    for (const auto& [psn, want] : r.rxe) {
        auto it = r.ours.find(psn);
        ASSERT_NE(it, r.ours.end()) << "no response for psn 0x" << std::hex << psn;
        const Resp& got = it->second;
        EXPECT_EQ(got.opcode, want.opcode) << "psn 0x" << std::hex << psn;
        EXPECT_EQ(got.len, want.len) << "psn 0x" << std::hex << psn;
        if (want.opcode != uint8_t(wire::Opcode::rc_read_response_middle)) {
            EXPECT_EQ(got.syndrome, want.syndrome) << "psn 0x" << std::hex << psn;
            EXPECT_EQ(got.msn, want.msn) << "psn 0x" << std::hex << psn;
        }
        if (want.opcode == uint8_t(wire::Opcode::rc_atomic_ack)) {
            EXPECT_EQ(got.orig, want.orig) << "psn 0x" << std::hex << psn;
        }
        ++compared;
    }
    EXPECT_EQ(compared, r.rxe.size());
    if (getenv("ROCE_REPLAY_VERBOSE"))
        printf("%s: %zu requests replayed, %zu rxe responses matched\n", name.c_str(), r.requests, compared);
}

// SEND payloads from hostb in PSN order, reassembled per message (first copy of each PSN).
std::vector<std::vector<uint8_t>> sent_messages(const std::string& name) {
    std::vector<wire::PcapFrame> frames;
    std::string err;
    EXPECT_EQ(wire::read_pcap(std::string(ROCE_FIXTURE_DIR) + "/" + name + ".pcap", frames, err), Status::ok);
    std::map<uint32_t, std::pair<uint8_t, std::vector<uint8_t>>> by_psn;
    for (const auto& f : frames) {
        wire::Packet p;
        if (f.ip.dst_ip[3] != 1 || wire::parse(f.payload(), f.ip, true, p) != wire::ParseError::none)
            continue;
        if (p.bth.opcode <= 0x05 && !by_psn.count(p.bth.psn))
            by_psn[p.bth.psn] = {p.bth.opcode, std::vector<uint8_t>(p.payload.begin(), p.payload.end())};
    }
    std::vector<std::vector<uint8_t>> msgs;
    std::vector<uint8_t> cur;
    for (auto& [psn, v] : by_psn) {   // PSNs in these files do not wrap
        cur.insert(cur.end(), v.second.begin(), v.second.end());
        if (v.first >= 0x02) {   // LAST / ONLY
            msgs.push_back(cur);
            cur.clear();
        }
    }
    return msgs;
}

} // namespace

class SwReplay : public ::testing::TestWithParam<const char*> {};

TEST_P(SwReplay, ResponderMatchesRxe) {
    std::vector<Received> got;
    replay(GetParam(), true, 0, &got);
    const std::string name = GetParam();
    if (name.find("rc_send") == 0) {   // the SEND payloads arrive as captured, once each
        const auto want = sent_messages(name);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_EQ(got[i].data, want[i]) << "message " << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SwReplay,
                         ::testing::Values("rc_send_64", "rc_send_5000_mtu1024", "rc_send_imm_64", "rc_send_imm_3000",
                                           "rc_write_8", "rc_write_3000", "rc_write_imm_8", "rc_write_imm_3000",
                                           "rc_read_8", "rc_read_3000", "rc_read_3000_loss", "rc_atomic_fetch_add",
                                           "rc_atomic_cmp_swap"));

TEST(SwReplayExtra, BadRkeyNaked) {
    replay("rc_write_bad_rkey", true, 0x67c);
}

TEST(SwReplayExtra, LossyStreamDeliversOnce) {
    // go-back-N resends from rxe: every message once, in order, with the captured bytes
    std::vector<Received> got;
    replay("rc_send_5000_loss", false, 0, &got);
    const auto want = sent_messages("rc_send_5000_loss");
    ASSERT_EQ(want.size(), 5u);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].data.size(), 5000u);
        EXPECT_EQ(got[i].data, want[i]) << "message " << i;
    }
}
