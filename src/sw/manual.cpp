// connect_qp_manual: a QP connected from parameters exchanged out of band (device.hpp,
// ManualPeer), the way verbs applications connect a QP by hand — ibv_modify_qp to RTR with the
// peer's GID, QPN and rq_psn, then to RTS with sq_psn — so the other end can be a kernel rxe or
// NIC QP, which does not speak our QP1 CM. No CM message is sent or accepted for such a QP.
#include <cstring>

#include "common/log.hpp"
#include "common/roce_mtu.hpp"
#include "sw/device_impl.hpp"

namespace roce::sw {

bool DeviceImpl::from_peer(const Qp& qp, const WireAddr& src) {
    if (!qp.any_source_port)
        return qp.peer == src;
    return qp.peer.family == src.family &&
           std::memcmp(qp.peer.ip, src.ip, src.family == AF_INET ? 4 : 16) == 0;
}

Status DeviceImpl::connect_qp_manual(uint32_t qpn, const ManualPeer& mp) {
    std::lock_guard lk(mu_);
    Qp* qp = find_qp(qpn);
    if (!qp || qp->state != QpState::reset)
        return Status::invalid_param;
    if (mp.addr.family != sock_.local().family)
        return Status::unreachable;
    const uint32_t mtu = mp.mtu ? mp.mtu : cfg_.mtu;
    if (mp.addr.port == 0 || mp.qpn < 2 || mp.qpn > wire::psn_mask || mp.sq_psn > wire::psn_mask ||
        mp.rq_psn > wire::psn_mask || !valid_roce_mtu(mtu))
        return Status::invalid_param;
    set_peer(*qp, mp.addr);
    qp->manual = true;
    qp->any_source_port = mp.any_source_port;
    qp->any_ipv4_id = mp.any_ipv4_id;
    qp->dest_qpn = mp.qpn;
    qp->mtu = mtu;
    // Requester: our first PSN (RTS sq_psn). Responder: the peer's (RTR rq_psn).
    qp->sq_start_psn = qp->next_psn = qp->una_psn = qp->sent_hi = mp.sq_psn;
    qp->epsn = mp.rq_psn;
    qp->ack_psn = wire::psn_add(mp.rq_psn, wire::psn_mask);
    qp->state = QpState::rts;
    qp->last_heard_ns = now_ns();
    // No class exchange with such a peer: data in the device's class, CNPs at its priority (tc.cpp).
    if (cc_mode_ == cc::CcMode::dcqcn)
        qp->cnp_sock = class_socket(cfg_.cnp_traffic_class, cfg_.priority);
    ROCE_DEBUG("qp 0x%x: connected by hand to %s qp 0x%x, sq_psn 0x%x rq_psn 0x%x mtu %u", qp->qpn,
               mp.addr.to_string().c_str(), mp.qpn, mp.sq_psn, mp.rq_psn, mtu);
    return Status::ok;
}

} // namespace roce::sw
