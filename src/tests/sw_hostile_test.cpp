// Hostile input from a plain UDP socket: random bytes, truncated packets, valid-ICRC packets
// with a bad opcode / unknown QPN / wrong source, and a fake peer that connects through the CM
// and then sends absurd RETH lengths, PSNs far ahead and bad atomics. Counters must move,
// nothing may crash or be written, and a transfer running meanwhile must complete.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <cstring>
#include <map>
#include <random>
#include <sys/socket.h>
#include <unistd.h>

#include "sw/cm.hpp"
#include "sw_attacker.hpp"
#include "wire/icrc.hpp"
#include "wire/packet.hpp"

using namespace roce;
using namespace roce::sw;
using namespace roce::sw::testing;

TEST(SwHostile, GarbageAndForgedPackets) {
    Pair p;
    DeviceConfig c;
    c.retransmit_timeout_us = 1000;
    c.retry_count = 20;
    ASSERT_TRUE(p.open(c, c));
    std::vector<uint8_t> target(8 << 20), src(8 << 20, 0x3c);
    MrKeys k;
    ASSERT_EQ(p.b.pd->reg_mr(target.data(), target.size(), access_all, k), Status::ok);
    // a long transfer runs while b is attacked
    ASSERT_EQ(p.a.dev->post_write(p.qa, 1, src.data(), src.size(), uint64_t(uintptr_t(target.data())), k.rkey, false),
              Status::ok);
    Attacker at(p.b.dev->address());
    std::mt19937 rng(3);
    const DeviceStats s0 = p.b.dev->stats();
    // 1. random bytes of random lengths (incl. empty and oversize)
    for (int i = 0; i < 2000; ++i) {
        std::vector<uint8_t> junk(rng() % 5000);
        for (auto& b : junk)
            b = uint8_t(rng());
        if (i % 3 == 0 && junk.size() >= 12)
            junk[0] = uint8_t(rng() % 0x15);   // plausible RC opcodes
        at.send_raw(junk.data(), junk.size());
        if (i % 64 == 0) {
            p.a.poll();
            p.b.poll();
        }
    }
    at.send_raw(nullptr, 0);
    std::vector<uint8_t> huge(60000, 0);
    at.send_raw(huge.data(), huge.size());
    // 2. truncated valid packets
    wire::Packet w;
    w.bth.opcode = uint8_t(wire::Opcode::rc_write_only);
    w.bth.dest_qp = p.qb;
    w.reth.va = uint64_t(uintptr_t(target.data()));
    w.reth.rkey = k.rkey;
    w.reth.dma_len = 64;
    std::vector<uint8_t> pay(64, 0xab);
    auto good = at.build(w, pay);
    for (size_t n = 0; n < good.size(); ++n)
        at.send_raw(good.data(), n);
    // 3. valid ICRC, bad opcode
    for (uint8_t op : {uint8_t(0x1f), uint8_t(0x15), uint8_t(0x40), uint8_t(0xff)}) {
        auto v = good;
        v[0] = op;
        at.reseal(v);
        at.send(v);
    }
    // 4. unknown QPN, and the right QPN from the wrong source
    auto v = good;
    v[5] = 0x7f;   // dest QP high byte
    at.reseal(v);
    at.send(v);
    at.send(good);   // b's QP is connected to a, not to the attacker
    ASSERT_TRUE(run_until({&p.a, &p.b}, [&] { return p.a.find(1) != nullptr; }, 30));
    EXPECT_EQ(p.a.find(1)->status, Status::ok);
    // The write may complete while the last forged packets still wait in b's socket (a
    // progress call can stop after a single read): b reads on until they are counted.
    run_until({&p.a, &p.b}, [&] { return p.b.dev->stats().dropped_unknown_qp >= s0.dropped_unknown_qp + 2; }, 10);
    EXPECT_EQ(std::memcmp(target.data(), src.data(), src.size()), 0);   // forged write never landed
    const DeviceStats s1 = p.b.dev->stats();
    EXPECT_GT(s1.malformed, s0.malformed);
    EXPECT_GT(s1.icrc_errors, s0.icrc_errors);
    EXPECT_GE(s1.dropped_unknown_qp, s0.dropped_unknown_qp + 2);
}

TEST(SwHostile, FakePeerThroughCm) {
    Host b;
    ASSERT_EQ(b.open(DeviceConfig{}), Status::ok);
    std::vector<uint8_t> target(16384, 0xee);
    MrKeys k;
    ASSERT_EQ(b.pd->reg_mr(target.data() + 4096, 8192, access_all, k), Status::ok);
    const uint64_t va = uint64_t(uintptr_t(target.data() + 4096));
    Attacker at(b.dev->address());
    // malformed CM messages
    const wire::Packet ud = cm_datagram();
    const DeviceStats s0 = b.dev->stats();
    std::vector<uint8_t> shortmsg(10, 0);
    at.send(at.build(ud, shortmsg));
    uint8_t msg[cm::msg_size];
    cm::Msg req;
    req.type = cm::MsgType::req;
    req.conn_id = 99;
    req.src_qpn = 0x1234;
    req.start_psn = 100;
    req.mtu = 4096;
    cm::encode(req, msg);
    msg[0] ^= 1;   // bad magic
    at.send(at.build(ud, msg));
    msg[0] ^= 1;
    // proper REQ, sent twice: one passive QP only
    at.send(at.build(ud, msg));
    at.send(at.build(ud, msg));
    wire::Packet rp;
    cm::Msg rep;
    uint32_t qpn = 0;
    for (int i = 0; i < 2; ++i) {
        auto r = at.recv(b);
        ASSERT_FALSE(r.empty());
        ASSERT_EQ(wire::parse(r, wire::IpContext{}, false, rp), wire::ParseError::none);
        ASSERT_TRUE(cm::decode(rp.payload, rep));
        EXPECT_EQ(rep.type, cm::MsgType::rep);
        if (i == 0)
            qpn = rep.src_qpn;
        EXPECT_EQ(rep.src_qpn, qpn);
    }
    EXPECT_GE(b.dev->stats().malformed, s0.malformed + 2);
    uint32_t psn = 100;
    auto expect_nak = [&](uint8_t code, const char* what) {
        auto r = at.recv(b);
        ASSERT_FALSE(r.empty()) << what;
        wire::Packet a;
        ASSERT_EQ(wire::parse(r, wire::IpContext{}, false, a), wire::ParseError::none) << what;
        EXPECT_EQ(a.bth.opcode, uint8_t(wire::Opcode::rc_ack)) << what;
        EXPECT_EQ(a.aeth.syndrome, wire::aeth_nak_syndrome(wire::NakCode(code))) << what;
        EXPECT_EQ(a.bth.psn, psn) << what;
    };
    wire::Packet w;
    w.bth.dest_qp = qpn;
    w.bth.psn = psn;
    std::vector<uint8_t> pay(16, 1);
    // PSN far ahead: one sequence-error NAK (and only one per gap), nothing executed
    w.bth.opcode = uint8_t(wire::Opcode::rc_write_only);
    w.bth.psn = psn + 1000000;
    w.reth = {va, k.rkey, 16};
    at.send(at.build(w, pay));
    expect_nak(wire::nak_psn_seq_error, "psn ahead");
    w.bth.psn = psn;
    // absurd RETH length on WRITE ONLY (payload mismatch) -> invalid request
    w.bth.opcode = uint8_t(wire::Opcode::rc_write_only);
    w.reth = {va, k.rkey, 0xffffffffu};
    at.send(at.build(w, pay));
    expect_nak(wire::nak_invalid_request, "write len");
    // WRITE FIRST claiming 4 GiB -> remote access (out of bounds), nothing written
    w.bth.opcode = uint8_t(wire::Opcode::rc_write_first);
    std::vector<uint8_t> mtu_pay(4096, 2);
    at.send(at.build(w, mtu_pay));
    expect_nak(wire::nak_remote_access, "write first bounds");
    // READ of 2 GiB / beyond the region -> NAK
    w.bth.opcode = uint8_t(wire::Opcode::rc_read_request);
    w.reth = {va, k.rkey, 0x80000000u};
    at.send(at.build(w));
    expect_nak(wire::nak_remote_access, "read len");
    w.reth = {va - 4096, k.rkey, 16};
    at.send(at.build(w));
    expect_nak(wire::nak_remote_access, "read before region");
    // misaligned atomic -> invalid request; wrong rkey -> access
    wire::Packet a;
    a.bth.opcode = uint8_t(wire::Opcode::rc_fetch_add);
    a.bth.dest_qp = qpn;
    a.bth.psn = psn;
    a.atomic = {va + 3, k.rkey, 1, 0};
    at.send(at.build(a));
    expect_nak(wire::nak_invalid_request, "atomic align");
    a.atomic = {va, k.rkey + 1, 1, 0};
    at.send(at.build(a));
    expect_nak(wire::nak_remote_access, "atomic rkey");
    // MIDDLE without FIRST -> invalid request
    w.bth.opcode = uint8_t(wire::Opcode::rc_send_middle);
    at.send(at.build(w, mtu_pay));
    expect_nak(wire::nak_invalid_request, "middle without first");
    for (size_t i = 0; i < target.size(); ++i)
        ASSERT_EQ(target[i], 0xee) << "byte " << i << " written";
    // ... and a correct WRITE now works: the device is still sane
    w.bth.opcode = uint8_t(wire::Opcode::rc_write_only);
    w.bth.psn = psn;
    w.reth = {va, k.rkey, 16};
    at.send(at.build(w, pay));
    auto r = at.recv(b);   // ACK
    ASSERT_FALSE(r.empty());
    EXPECT_EQ(target[4096], 1);
    EXPECT_EQ(target[4096 + 16], 0xee);
    // a forged DREQ for the wrong connection id is ignored, the right one frees the QP
    cm::Msg d;
    d.type = cm::MsgType::dreq;
    d.conn_id = 98;
    d.src_qpn = 0x1234;
    d.dst_qpn = qpn;
    cm::encode(d, msg);
    at.send(at.build(ud, msg));
    run_until({&b}, [] { return false; }, 0.02);
    EXPECT_EQ(b.dev->qp_state(qpn), QpState::rts);
    d.conn_id = 99;
    cm::encode(d, msg);
    at.send(at.build(ud, msg));
    ASSERT_TRUE(run_until({&b}, [&] { return b.dev->qp_state(qpn) == QpState::error; }, 2));
}

// Connection requests are unauthenticated: each new one creates a QP, up to max_passive_qps;
// beyond, each is answered with a REJ and counted (the log gets one line), and a QP freed by its
// DREQ makes room for the next request.
TEST(SwHostile, ConnectionRequestFloodIsBounded) {
    Host b;
    DeviceConfig cfg;
    cfg.max_passive_qps = 4;
    ASSERT_EQ(b.open(cfg), Status::ok);
    Attacker at(b.dev->address());
    auto exchange = [&](const cm::Msg& m) {
        const auto ans = cm_exchange(at, b, m);
        if (!ans) {
            ADD_FAILURE() << "no CM answer";
            return cm::Msg{};
        }
        EXPECT_EQ(ans->conn_id, m.conn_id);
        return *ans;
    };
    auto request = [&](uint32_t conn) { return exchange(cm_req(conn, 0x1000 + conn)); };
    std::vector<uint32_t> qpns;
    for (uint32_t conn = 1; conn <= 6; ++conn) {
        const cm::Msg a = request(conn);
        if (conn <= 4) {
            EXPECT_EQ(a.type, cm::MsgType::rep) << conn;
            qpns.push_back(a.src_qpn);
        } else {
            EXPECT_EQ(a.type, cm::MsgType::rej) << conn;
        }
    }
    ASSERT_EQ(qpns.size(), 4u);
    EXPECT_EQ(b.dev->stats().cm_refused, 2u);
    cm::Msg d;
    d.type = cm::MsgType::dreq;
    d.conn_id = 1;
    d.src_qpn = 0x1001;
    d.dst_qpn = qpns[0];
    EXPECT_EQ(exchange(d).type, cm::MsgType::drep);
    EXPECT_EQ(request(7).type, cm::MsgType::rep);
    EXPECT_EQ(request(8).type, cm::MsgType::rej);
    EXPECT_EQ(b.dev->stats().cm_refused, 3u);
    // A real requester understands the REJ: its QP fails at once, not after its REQ retries.
    Host a;
    DeviceConfig slow_retry;   // (one REQ: a retry before the REJ is read would be refused too)
    slow_retry.retransmit_timeout_us = 500'000;
    ASSERT_EQ(a.open(slow_retry), Status::ok);
    uint32_t q = 0;
    ASSERT_EQ(a.dev->create_qp(q), Status::ok);
    ASSERT_EQ(a.dev->connect_qp(q, b.dev->address()), Status::ok);
    ASSERT_TRUE(run_until({&a, &b}, [&] { return a.dev->qp_state(q) == QpState::error; }, 5));
    EXPECT_EQ(a.dev->stats().timeouts, 0u);
    EXPECT_EQ(b.dev->stats().cm_refused, 4u);
}

// SENDs being reassembled count against recv_budget by the bytes they hold: strangers that open
// passive QPs and start SENDs they never finish meet the budget (then RNR NAKs) instead of holding
// memory beyond it on each of 65,536 QPs. Finishing one gives its room back once the owner takes
// it. (A first version charged the buffer a SEND FIRST reserves, MAX_RECV_MSG: ~512 one-packet
// SEND FIRSTs then RNR-blocked the whole device.)
TEST(SwHostile, UnfinishedSendsCountAgainstTheReceiveBudget) {
    Host b;
    DeviceConfig cfg;
    cfg.recv_budget = 2 * 1024;   // two SEND FIRSTs of MTU 1024 (a SEND is refused at the budget)
    cfg.reasm_deadline_ms = 1000;   // (the steps before c4 take milliseconds)
    ASSERT_EQ(b.open(cfg), Status::ok);
    Attacker at(b.dev->address());
    struct Conn { uint32_t qpn, mtu; };
    auto connect = [&](uint32_t conn) {
        const auto rep = cm_exchange(at, b, cm_req(conn, 0x1000 + conn, 1024));
        if (!rep || rep->type != cm::MsgType::rep) {
            ADD_FAILURE() << "no REP for " << conn;
            return Conn{0, 0};
        }
        return Conn{rep->src_qpn, rep->mtu};
    };
    // Sends one packet asking for an ACK; returns the answer's AETH syndrome (0 if none).
    auto send = [&](const Conn& c, wire::Opcode op, uint32_t psn) -> uint8_t {
        wire::Packet p;
        p.bth.opcode = uint8_t(op);
        p.bth.dest_qp = c.qpn;
        p.bth.psn = psn;
        p.bth.ack_req = true;
        std::vector<uint8_t> pay(c.mtu, uint8_t(psn));
        at.send(at.build(p, pay));
        const auto r = at.recv(b);
        wire::Packet a;
        if (r.empty() || wire::parse(r, wire::IpContext{}, false, a) != wire::ParseError::none)
            return 0;
        EXPECT_EQ(a.bth.opcode, uint8_t(wire::Opcode::rc_ack));
        EXPECT_EQ(a.bth.psn, psn);
        return a.aeth.syndrome;
    };
    const Conn c1 = connect(1), c2 = connect(2), c3 = connect(3);
    ASSERT_EQ(c1.mtu, 1024u);
    EXPECT_EQ(send(c1, wire::Opcode::rc_send_first, 100), wire::aeth_ack_syndrome);
    EXPECT_EQ(send(c2, wire::Opcode::rc_send_first, 100), wire::aeth_ack_syndrome);
    const uint8_t third = send(c3, wire::Opcode::rc_send_first, 100);
    EXPECT_EQ(wire::aeth_kind(third), wire::AethKind::rnr_nak) << "syndrome 0x" << std::hex << int(third);
    EXPECT_GE(b.dev->stats().rnr_naks, 1u);
    // c1's message completes and the owner takes it: its reservation is given back.
    EXPECT_EQ(send(c1, wire::Opcode::rc_send_last, 101), wire::aeth_ack_syndrome);
    ASSERT_TRUE(run_until({&b}, [&] { return b.msgs.size() == 1; }, 2));
    EXPECT_EQ(b.msgs[0].data.size(), 2 * size_t(c1.mtu));
    EXPECT_EQ(send(c3, wire::Opcode::rc_send_first, 100), wire::aeth_ack_syndrome);
    // c2 and c3 now hold the budget: until reasm_deadline_ms after their FIRST they keep it (c4
    // meets an RNR NAK), also while they advance (c2 trickles a MIDDLE: the deadline holds);
    // then they are given up (NAK invalid request, their QPs fail) and c4's SEND gets in.
    const Conn c4 = connect(4);
    EXPECT_EQ(wire::aeth_kind(send(c4, wire::Opcode::rc_send_first, 100)), wire::AethKind::rnr_nak);
    EXPECT_EQ(b.dev->stats().reasm_given_up, 0u);
    usleep(700'000);
    EXPECT_EQ(send(c2, wire::Opcode::rc_send_middle, 101), wire::aeth_ack_syndrome);
    usleep(500'000);
    wire::Packet p;
    p.bth.opcode = uint8_t(wire::Opcode::rc_send_first);
    p.bth.dest_qp = c4.qpn;
    p.bth.psn = 100;
    p.bth.ack_req = true;
    at.send(at.build(p, std::vector<uint8_t>(c4.mtu, 4)));
    std::map<uint32_t, uint8_t> answers;   // attacker's QPN -> syndrome
    for (int i = 0; i < 3; ++i) {
        const auto r = at.recv(b);
        wire::Packet a;
        ASSERT_FALSE(r.empty()) << "answer " << i;
        ASSERT_EQ(wire::parse(r, wire::IpContext{}, false, a), wire::ParseError::none);
        answers[a.bth.dest_qp] = a.aeth.syndrome;
    }
    EXPECT_EQ(answers[0x1002], wire::aeth_nak_syndrome(wire::nak_invalid_request));
    EXPECT_EQ(answers[0x1003], wire::aeth_nak_syndrome(wire::nak_invalid_request));
    EXPECT_EQ(answers[0x1004], wire::aeth_ack_syndrome);
    EXPECT_EQ(b.dev->stats().reasm_given_up, 2u);
    EXPECT_EQ(b.dev->qp_state(c2.qpn), QpState::error);
    EXPECT_EQ(b.dev->qp_state(c3.qpn), QpState::error);
    EXPECT_EQ(b.dev->qp_state(c4.qpn), QpState::rts);
}
