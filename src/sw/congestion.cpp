// Congestion control on the userspace device: the datapath's hooks into the state machines of
// src/cc (one cc::QpCc per RC QP, built from DeviceConfig::cc; mode auto = dcqcn here).
//
//   notification point  a packet whose IP header says CE (read with IP_RECVTOS / IPV6_RECVTCLASS)
//                       makes the QP send a CNP (BTH opcode 0x81, BECN set, 16 reserved bytes,
//                       DestQP = the peer's QP) at most once per CNP_INTERVAL;
//   reaction point      a CNP cuts the QP's rate (DCQCN), timer and byte counter raise it again;
//   pacer               every packet the requester sends waits for the QP's token bucket.
//
// READ responses are the one flow whose sender is not a requester: the responder answers as fast
// as requests come. So the reader owns that rate: it paces its READ requests by the bytes they
// ask for, and a CE mark on a READ response acts on its own reaction point instead of becoming
// a CNP to the responder (counted as cnps_local). Rendezvous in UCP is READ-based by default, so
// this is the path that carries MPI's large messages.
#include <netinet/in.h>

#include "common/log.hpp"
#include "sw/device_impl.hpp"

namespace roce::sw {

cc::CcMode DeviceImpl::resolve_cc_mode() const {
    const bool loopback = sock_.local().is_loopback();
    return cc::resolve_mode(cfg_.cc.mode,
                            loopback ? cc::DeviceKind::userspace_loopback : cc::DeviceKind::userspace);
}

void DeviceImpl::cc_init(Qp& qp) {
    if (cc_mode_ != cc::CcMode::off)
        qp.cc.emplace(cfg_.cc, cc_mode_, cfg_.line_rate_bps, qp.mtu);
}

bool DeviceImpl::cc_may_send(Qp& qp, uint32_t bytes, uint64_t now, uint32_t psn) {
    if (!qp.cc)
        return true;
    // A retransmission is paced but never held by the window: the window counts the very packets
    // it repeats, so waiting for their ACK would wait forever (measured: delay mode deadlocked a
    // QP after the first loss until the peer timeout failed it).
    const bool retransmission = wire::psn_diff(psn, qp.sent_hi) < 0;
    const uint64_t outstanding =
        retransmission ? 0 : uint64_t(std::max(0, wire::psn_diff(qp.sent_hi, qp.una_psn))) * qp.mtu;
    const cc::Nanos t = qp.cc->next_send_time(cc::Nanos(now), bytes, outstanding);
    if (t <= cc::Nanos(now)) {
        qp.cc_wake_ns = 0;
        return true;
    }
    st_.cc_paced++;
    qp.st.cc_paced++;
    // "never" (a full delay window) waits for an ACK; the retransmission timer covers the rest.
    qp.cc_wake_ns = t == cc::never ? 0 : uint64_t(t);
    return false;
}

void DeviceImpl::cc_sent(Qp& qp, uint32_t bytes, uint64_t now) {
    if (qp.cc)
        qp.cc->on_sent(bytes, cc::Nanos(now));
}

void DeviceImpl::cc_ce(Qp& qp, uint8_t opcode, uint64_t now) {
    st_.ce_received++;
    qp.st.ce_received++;
    if (!qp.cc || !qp.cc->on_ce_packet(cc::Nanos(now)))
        return;
    const bool read_response = opcode >= uint8_t(wire::Opcode::rc_read_response_first) &&
                               opcode <= uint8_t(wire::Opcode::rc_read_response_only);
    if (read_response) {
        st_.cnps_local++;
        qp.st.cnps_local++;
        qp.cc->on_cnp(cc::Nanos(now));
    } else {
        send_cnp(qp);
    }
}

void DeviceImpl::cc_cnp(Qp& qp, uint64_t now) {
    st_.cnps_received++;
    qp.st.cnps_received++;
    if (qp.cc)
        qp.cc->on_cnp(cc::Nanos(now));
}

void DeviceImpl::cc_loss(Qp& qp, uint64_t now) {
    if (qp.cc)
        qp.cc->on_loss(cc::Nanos(now));
}

void DeviceImpl::send_cnp(Qp& qp) {
    wire::Packet pkt;
    pkt.bth.opcode = uint8_t(wire::Opcode::cnp);
    pkt.bth.becn = true;
    pkt.bth.dest_qp = qp.dest_qpn;
    uint8_t* buf = tx_slot();
    const size_t n = wire::build(pkt, {}, qp.tx_ip, std::span<uint8_t>(buf, max_datagram));
    if (n == 0) {
        ROCE_ERROR("qp 0x%x: cannot build a CNP", qp.qpn);
        return;
    }
    // CNPs travel in their own class (UCX_RC_ROCE_CNP_*), usually a strict-priority queue.
    tx_commit(n, qp.peer_sa, qp.peer_salen, cfg_.cnp_traffic_class, qp.cnp_sock);
    st_.cnps_sent++;
    qp.st.cnps_sent++;
}

} // namespace roce::sw
