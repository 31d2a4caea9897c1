// Connection manager over QP1 (see cm.hpp for the message format and handshake).
#include "sw/cm.hpp"

#include <algorithm>
#include <cstring>

#include "common/log.hpp"
#include "common/roce_mtu.hpp"
#include "sw/device_impl.hpp"
#include "wire/byteorder.hpp"

namespace roce::sw {

namespace cm {

void encode(const Msg& m, uint8_t* out) {
    namespace be = wire::be;
    std::memset(out, 0, msg_size);
    be::store32(out, magic);
    out[4] = version;
    out[5] = uint8_t(m.type);
    be::store16(out + 6, uint16_t(msg_size));
    be::store64(out + 8, m.conn_id);
    be::store32(out + 16, m.src_qpn);
    be::store32(out + 20, m.dst_qpn);
    be::store32(out + 24, m.start_psn);
    be::store32(out + 28, m.mtu);
    out[32] = uint8_t((m.has_tc ? 1 : 0) | (m.answers_probe ? 2 : 0));
    std::memcpy(out + 33, m.tc.data(), m.tc.size());
}

bool decode(std::span<const uint8_t> in, Msg& m) {
    namespace be = wire::be;
    if (in.size() < msg_size)
        return false;
    const uint8_t* p = in.data();
    if (be::load32(p) != magic || p[4] < version)
        return false;
    const uint16_t len = be::load16(p + 6);
    if (len < msg_size || len > in.size())
        return false;
    if (p[5] < uint8_t(MsgType::req) || p[5] > uint8_t(MsgType::alive))
        return false;
    m.type = MsgType(p[5]);
    m.conn_id = be::load64(p + 8);
    m.src_qpn = be::load32(p + 16);
    m.dst_qpn = be::load32(p + 20);
    m.start_psn = be::load32(p + 24) & wire::psn_mask;
    m.mtu = be::load32(p + 28);
    m.has_tc = p[32] & 1;
    m.answers_probe = p[32] & 2;
    std::memcpy(m.tc.data(), p + 33, m.tc.size());
    // A REJ comes from no QP (its src_qpn is 0): it names only the requester's QP and connection.
    const bool src_ok = m.type == MsgType::rej ? m.src_qpn == 0 : m.src_qpn >= 2;
    return src_ok && m.src_qpn <= wire::psn_mask && m.dst_qpn <= wire::psn_mask;
}

} // namespace cm

std::array<uint8_t, 18> DeviceImpl::peer_key(const WireAddr& a) {
    std::array<uint8_t, 18> k{};
    std::memcpy(k.data(), a.ip, 16);
    k[16] = uint8_t(a.port >> 8);
    k[17] = uint8_t(a.port);
    return k;
}

void DeviceImpl::cm_send(const WireAddr& to, const cm::Msg& m) {
    uint8_t body[cm::msg_size];
    cm::encode(m, body);
    wire::Packet pkt;
    pkt.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
    pkt.bth.dest_qp = 1;
    pkt.bth.psn = cm_psn_;
    cm_psn_ = wire::psn_add(cm_psn_, 1);
    pkt.deth.qkey = cm::qkey;
    pkt.deth.src_qp = 1;
    wire::IpContext ip;
    fill_ip_context(sock_.local(), to, ip);
    sockaddr_storage sa;
    const socklen_t salen = to_sockaddr(to, sa);
    uint8_t* buf = tx_slot();
    const size_t n = wire::build(pkt, std::span<const uint8_t>(body, sizeof(body)), ip,
                                 std::span<uint8_t>(buf, max_datagram));
    if (n)
        tx_commit(n, sa, salen);
}

// A message about the QP's connection, from it to its peer's QP.
cm::Msg DeviceImpl::conn_msg(const Qp& qp, cm::MsgType type) {
    cm::Msg m;
    m.type = type;
    m.conn_id = qp.conn_id;
    m.src_qpn = qp.qpn;
    m.dst_qpn = qp.dest_qpn;
    return m;
}

// An answer about the connection `m` names, from the QP it names to the one that sent it.
void DeviceImpl::cm_answer(const WireAddr& to, cm::MsgType type, const cm::Msg& m) {
    cm::Msg a;
    a.type = type;
    a.conn_id = m.conn_id;
    a.src_qpn = m.dst_qpn;
    a.dst_qpn = m.src_qpn;
    cm_send(to, a);
}

// A REJ from no QP (src_qpn 0): it names the requester's QP and connection only.
void DeviceImpl::cm_reject(const WireAddr& to, const cm::Msg& req) {
    cm::Msg rej;
    rej.type = cm::MsgType::rej;
    rej.conn_id = req.conn_id;
    rej.dst_qpn = req.src_qpn;
    cm_send(to, rej);
}

void DeviceImpl::cm_send_req(Qp& qp) {
    cm::Msg m;
    m.type = cm::MsgType::req;
    m.conn_id = qp.conn_id;
    m.src_qpn = qp.qpn;
    m.start_psn = qp.sq_start_psn;
    m.mtu = qp.mtu;
    m.answers_probe = true;
    cm_put_tc(m);
    cm_send(qp.peer, m);
    qp.cm_deadline_ns = now_ns() + qp.cm_timeout_ns;
}

void DeviceImpl::timewait_add(uint64_t conn_id, uint64_t now) {
    while (!timewait_order_.empty() &&
           (timewait_order_.size() >= timewait_max || timewait_order_.front().first <= now)) {
        auto it = timewait_.find(timewait_order_.front().second);
        if (it != timewait_.end() && it->second == timewait_order_.front().first)
            timewait_.erase(it);
        timewait_order_.pop_front();
    }
    timewait_[conn_id] = now + timewait_ns;
    timewait_order_.emplace_back(now + timewait_ns, conn_id);
}

bool DeviceImpl::in_timewait(uint64_t conn_id, uint64_t now) {
    auto it = timewait_.find(conn_id);
    return it != timewait_.end() && it->second > now;
}

void DeviceImpl::cm_timers(uint64_t now) {
    for (Closing& c : closing_) {   // DREQs not answered yet
        if (now < c.deadline_ns)
            continue;
        if (c.tries_left > 0) {
            --c.tries_left;
            c.interval_ns *= 2;
            c.deadline_ns = now + c.interval_ns;
            cm_send(c.peer, c.m);
        }
    }
    std::erase_if(closing_, [&](const Closing& c) { return c.tries_left == 0 && now >= c.deadline_ns; });
    std::vector<Qp*> fail;
    std::vector<uint32_t> reap;
    for (auto& [q, p] : qps_) {
        Qp& qp = *p;
        if (qp.passive && passive_timer(qp) && now >= passive_timer(qp) && !probe_peer(qp, now))
            reap.push_back(q);
        if (qp.state != QpState::connecting || now < qp.cm_deadline_ns)
            continue;
        if (qp.cm_retries == 0) {
            fail.push_back(&qp);
            continue;
        }
        --qp.cm_retries;
        qp.cm_timeout_ns *= 2;
        cm_send_req(qp);
    }
    for (Qp* qp : fail) {
        ROCE_DEBUG("qp 0x%x: no answer from %s", qp->qpn, qp->peer.to_string().c_str());
        st_.timeouts++;
        qp->st.timeouts++;
        qp_fail(*qp, Status::timeout);
    }
    for (uint32_t q : reap) {
        Qp* qp = find_qp(q);
        if (!qp)
            continue;
        ROCE_DEBUG("cm: passive qp 0x%x freed: %s", q, qp->state == QpState::rts ? "its peer never answered" : "it failed");
        st_.cm_reaped++;
        qp->state = QpState::error;   // no DREQ: a peer that answered no PROBE hears none
        destroy_qp(q);
    }
}

// When the passive QP's timer is due: passive_idle_ms (and its jitter) after the peer was last
// heard, then at the PROBE's retransmission deadline. 0: never (probes off).
uint64_t DeviceImpl::passive_timer(const Qp& qp) const {
    if (!cfg_.passive_idle_ms)
        return 0;
    return qp.probe_deadline_ns ? qp.probe_deadline_ns
                                : std::max(qp.last_heard_ns, qp.alive_ns) + passive_idle_ns() + qp.probe_jitter_ns;
}

// The passive QP's timer expired: probe its peer (again), or return false when it is to be freed:
// its peer silent passive_reap_ms after the first PROBE, or the QP failed (nothing to ask).
bool DeviceImpl::probe_peer(Qp& qp, uint64_t now) {
    const uint64_t idle = passive_idle_ns();
    if (elapsed_ns(now, std::max(qp.last_heard_ns, qp.alive_ns)) < idle + qp.probe_jitter_ns) {
        qp.probe_deadline_ns = 0;   // heard meanwhile
        return true;
    }
    if (qp.state != QpState::rts)
        return false;
    // Only a PROBE this device waited for in time counts: one whose deadline passed while the
    // device itself was away (no progress thread, stopped) may have its answer still on the way.
    const bool waited = qp.probe_deadline_ns && elapsed_ns(now, qp.probe_deadline_ns) < qp.probe_interval_ns;
    if (waited && elapsed_ns(now, qp.first_probe_ns) >= uint64_t(cfg_.passive_reap_ms) * 1000000)
        return false;
    if (!qp.probe_deadline_ns) {
        qp.first_probe_ns = now;
        qp.probe_interval_ns = std::min<uint64_t>(1000000000, idle);
    } else {
        qp.probe_interval_ns = std::min(qp.probe_interval_ns * 2, idle);
    }
    qp.probe_deadline_ns = now + qp.probe_interval_ns;
    cm_send(qp.peer, conn_msg(qp, cm::MsgType::probe));
    st_.cm_probes++;
    return true;
}

void DeviceImpl::cm_packet(const wire::Packet& pkt, const WireAddr& src) {
    cm::Msg m;
    if (pkt.bth.opcode != uint8_t(wire::Opcode::ud_send_only) || pkt.deth.qkey != cm::qkey ||
        pkt.deth.src_qp != 1 || !cm::decode(pkt.payload, m)) {
        st_.malformed++;
        return;
    }
    switch (m.type) {
    case cm::MsgType::req: {
        if (!valid_roce_mtu(m.mtu) || src.family != sock_.local().family) {
            cm_reject(src, m);
            return;
        }
        if (in_timewait(m.conn_id, now_ns())) {
            ROCE_DEBUG("cm: REQ of closed connection %llx from %s ignored", (unsigned long long)m.conn_id,
                       src.to_string().c_str());
            return;
        }
        const auto key = std::make_pair(peer_key(src), m.src_qpn);
        auto it = passive_.find(key);
        Qp* qp = nullptr;
        if (it != passive_.end()) {
            qp = find_qp(it->second);
            if (qp && qp->conn_id != m.conn_id) {
                // The peer reused its QPN for a new connection: the old one is dead.
                destroy_qp(qp->qpn);
                qp = nullptr;
            }
        }
        if (!qp && passive_.size() >= cfg_.max_passive_qps) {
            // Requests are unauthenticated: a flood of them gets one line, and the counter.
            if (st_.cm_refused++ == 0)
                ROCE_WARN("cm: %zu QPs created by connection requests (the most there may be): rejecting "
                          "%s and later requests while so many remain (counter cm_refused)",
                          passive_.size(), src.to_string().c_str());
            cm_reject(src, m);
            return;
        }
        if (!qp) {
            qp = new_qp();
            if (!qp)
                return;
            qp->passive = true;
            qp->conn_id = m.conn_id;
            set_peer(*qp, src);
            qp->dest_qpn = m.src_qpn;
            qp->mtu = std::min(cfg_.mtu, m.mtu);
            qp->epsn = m.start_psn;
            qp->ack_psn = wire::psn_add(m.start_psn, wire::psn_mask);
            qp->state = QpState::rts;
            qp->last_heard_ns = now_ns();
            qp->probe_jitter_ns = random32() % (passive_idle_ns() / 8 + 1);
            cm_take_tc(*qp, m);
            passive_[key] = qp->qpn;
            ROCE_DEBUG("cm: passive qp 0x%x for %s qp 0x%x", qp->qpn, src.to_string().c_str(), m.src_qpn);
        }
        cm::Msg rep;
        rep.type = cm::MsgType::rep;
        rep.conn_id = qp->conn_id;
        rep.src_qpn = qp->qpn;
        rep.dst_qpn = m.src_qpn;
        rep.start_psn = qp->sq_start_psn;
        rep.mtu = qp->mtu;
        cm_put_tc(rep);
        cm_send(src, rep);
        return;
    }
    case cm::MsgType::rep: {
        Qp* qp = find_qp(m.dst_qpn);
        if (!qp || qp->passive || !(qp->peer == src) || qp->conn_id != m.conn_id)
            return;
        if (qp->state != QpState::connecting)
            return;   // duplicate REP
        if (!valid_roce_mtu(m.mtu))
            return;
        qp->dest_qpn = m.src_qpn;
        qp->mtu = std::min(qp->mtu, m.mtu);
        cm_take_tc(*qp, m);
        qp->epsn = m.start_psn;
        qp->ack_psn = wire::psn_add(m.start_psn, wire::psn_mask);
        qp->state = QpState::rts;
        qp->last_heard_ns = now_ns();
        // WRs posted while connecting were sized with the local MTU: resize them. A smaller
        // path MTU can push one past what PSN arithmetic allows (post_wr's check): its last
        // PSN would wrap and its first ACK complete it. Not reachable through UCT (1 GiB at
        // most, 2^22 packets of 256 bytes); a device user's WR fails, and the QP with it.
        bool too_long = false;
        for (Wr& w : qp->sq) {
            too_long = too_long || w.packets(qp->mtu) > max_wr_packets;
            w.npkts = uint32_t(std::min<uint64_t>(w.packets(qp->mtu), max_wr_packets));
        }
        if (too_long) {
            ROCE_ERROR("qp 0x%x: a work request posted while connecting needs more than %u packets "
                       "at the path MTU %u the peer chose: the QP fails", qp->qpn, max_wr_packets, qp->mtu);
            qp_fail(*qp, Status::invalid_param);
            return;
        }
        req_progress(*qp, now_ns());
        return;
    }
    case cm::MsgType::rej: {
        Qp* qp = find_qp(m.dst_qpn);
        if (qp && qp->state == QpState::connecting && qp->peer == src && qp->conn_id == m.conn_id)
            qp_fail(*qp, Status::unreachable);
        return;
    }
    case cm::MsgType::dreq: {
        Qp* qp = find_qp(m.dst_qpn);
        const bool ours = qp && !qp->manual && qp->peer == src && qp->dest_qpn == m.src_qpn && qp->conn_id == m.conn_id;
        if (qp && !ours)
            return;   // another connection's QP (or a forged DREQ): not ours to close or answer
        if (ours) {
            ROCE_DEBUG("cm: peer %s closed qp 0x%x", src.to_string().c_str(), qp->qpn);
            if (qp->passive) {
                qp->state = QpState::error;   // no DREQ echo
                destroy_qp(qp->qpn);
            }   // nobody else knows it well enough to free it
            else
                qp_fail(*qp, Status::canceled);
        }
        cm_answer(src, cm::MsgType::drep, m);   // also when an earlier copy already freed the QP
        return;
    }
    case cm::MsgType::probe: {
        // The passive side of a connection asks whether we still have its active QP.
        if (m.dst_qpn < 2)
            return;   // names no QP we could have: nothing to answer for
        Qp* qp = find_qp(m.dst_qpn);
        const bool ours = qp && !qp->passive && !qp->manual && qp->peer == src && qp->conn_id == m.conn_id;
        const bool alive = ours && (qp->state == QpState::connecting ||
                                    (qp->state == QpState::rts && qp->dest_qpn == m.src_qpn));
        // Not alive: a DREQ for the QP that is gone (or failed: it sends nothing any more).
        cm_answer(src, alive ? cm::MsgType::alive : cm::MsgType::dreq, m);
        return;
    }
    case cm::MsgType::alive: {
        Qp* qp = find_qp(m.dst_qpn);
        if (qp && qp->passive && qp->peer == src && qp->dest_qpn == m.src_qpn &&
            qp->conn_id == m.conn_id) {
            qp->alive_ns = now_ns();
            // The answer ends the PROBE episode: left open, a timer checked later than the
            // PROBE's deadline plus jitter found the answer older than passive_idle (when the two
            // are close: PASSIVE_PROBE of a second or less) and freed the QP for an unanswered
            // PROBE it had sent long before (found by SwCmProbe.ADeviceThatWasAwayAsksAgainFirst
            // under load).
            qp->probe_deadline_ns = 0;
        }
        return;
    }
    case cm::MsgType::drep:
        std::erase_if(closing_, [&](const Closing& c) {
            return c.peer == src && c.m.conn_id == m.conn_id && c.m.src_qpn == m.dst_qpn;
        });
        return;
    }
}

} // namespace roce::sw
