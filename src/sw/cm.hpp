// Our connection manager over QP1. Messages ride in UD SEND_ONLY packets (opcode 0x64, DETH
// Q_Key 0x80010000, source QP 1) to the peer device's QP1. Wire format (big-endian, 40 bytes,
// versioned and size-checked; longer messages from newer versions are accepted):
//    0  magic 'RCM1' (32)          4  version (8) | type (8) | length (16)
//    8  connection id (64, random nonce of the active side)
//   16  source QPN (32)           20  destination QPN (32, 0 in REQ)
//   24  start PSN of the sender's send queue (32)
//   28  path MTU (32)             32  flags (8): bit 0 = traffic class present,
//                                      bit 1 = the sender answers PROBE (REQ)
//   33  traffic class (32, REQ and REP: gid::TcAdvert, ToS | priority | ToS source | prio source)
//   37  reserved (24)
// Handshake: REQ (retransmitted until answered) -> REP. The passive side is ready when it sends
// REP; the active side when it receives it (implicit RTU). A duplicate REQ gets the same REP.
// Both sides use the traffic class negotiated from the two adverts (tc.cpp; no advert: the local).
// DREQ tells the peer a QP is gone (its QP flushes; a passive QP is freed); it is retransmitted
// until a DREP answers it (at most cm_dreq_tries times: a peer that is gone answers nothing). A
// DREQ for a QP that no longer exists is answered too (an earlier copy freed it). Before DREP
// existed DREQ was sent twice, unanswered: a passive QP whose two DREQs were both lost stayed
// forever (found by SwSoak under 1% loss with QPs created and destroyed in a loop). A REQ whose
// connection was closed less than 5 s ago (a duplicate or late copy) is ignored: it would
// create a passive QP for a peer that is gone (DeviceImpl::timewait_).
// PROBE asks the active side whether a connection still exists: a passive QP sends it after
// DeviceConfig::passive_idle_ms (plus up to an eighth, random, so that many QPs do not ask at
// once) without a packet from its peer, retransmitted 1 s apart and doubling, at most
// passive_idle_ms apart. The active side answers ALIVE while its QP is connected (rts or
// connecting), else a DREQ on behalf of the QP it no longer has (destroyed after a failure, which
// sends no DREQ, or never existed: a forged REQ), which frees the passive QP. No answer for
// passive_reap_ms after the first PROBE (the process was killed, its host is gone, the REQ came
// from a socket that only pretended) frees it too, silently: nothing else ever would. Every
// peer is asked, also one whose REQ lacks the "answers PROBE" flag: builds before PROBE existed
// (2026-12-07) drop it as malformed and lose a connection silent that long, but sparing them let
// forged flag-less REQs keep their QPs for good (65,536 of them shut a listener until it closed).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace roce::sw::cm {

inline constexpr uint32_t qkey = 0x80010000u;
inline constexpr uint32_t magic = 0x52434d31u;   // "RCM1"
inline constexpr uint8_t version = 1;
inline constexpr size_t msg_size = 40;

enum class MsgType : uint8_t { req = 1, rep = 2, dreq = 3, rej = 4, drep = 5, probe = 6, alive = 7 };
inline constexpr unsigned dreq_tries = 6;   // 2, 4, 8, ... ms apart

struct Msg {
    MsgType type = MsgType::req;
    uint64_t conn_id = 0;
    uint32_t src_qpn = 0;
    uint32_t dst_qpn = 0;
    uint32_t start_psn = 0;
    uint32_t mtu = 0;
    bool has_tc = false;                  // tc holds the sender's traffic class (gid::TcAdvert)
    bool answers_probe = false;           // REQ: the sender answers PROBE
    std::array<uint8_t, 4> tc{};
};

void encode(const Msg& m, uint8_t* out);   // writes msg_size bytes
bool decode(std::span<const uint8_t> in, Msg& m);

} // namespace roce::sw::cm
