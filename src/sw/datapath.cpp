// The datapath of a device: batched transmit (sendmmsg, UDP GSO with per-segment ICRC, fault
// injection), batched receive (recvmmsg, UDP GRO splitting, parse + ICRC check + dispatch to
// responder / completer / CM), ACK coalescing, retransmission timers and the progress loop.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.hpp"
#include "sw/device_impl.hpp"
#include "wire/icrc.hpp"

namespace roce::sw {

// ---- transmit path

uint8_t* DeviceImpl::tx_slot() {
    if (tx_n_ == tx_batch)
        tx_flush();
    return tx_[tx_n_].buf;
}

void DeviceImpl::tx_commit(size_t len, const sockaddr_storage& sa, socklen_t salen, int tos, uint8_t sock) {
    TxSlot& s = tx_[tx_n_++];
    s.tos = tos;
    s.sock = sock;
    if (s.buf[0] != uint8_t(wire::Opcode::rc_ack))
        tx_has_data_ = true;
    s.len = len;
    s.salen = salen;
    std::memcpy(&s.sa, &sa, salen);
    s.ext = nullptr;
    s.ext_len = 0;
    s.mr_rkey = 0;
    s.dead = false;
}

void DeviceImpl::emit(Qp& qp, wire::Packet& pkt, std::span<const uint8_t> payload) {
    pkt.bth.dest_qp = qp.dest_qpn;
    uint8_t* buf = tx_slot();
    const size_t n = wire::build(pkt, payload, qp.tx_ip, std::span<uint8_t>(buf, max_datagram));
    if (n == 0) {
        ROCE_ERROR("qp 0x%x: cannot build opcode 0x%02x with %zu bytes", qp.qpn, pkt.bth.opcode,
                   payload.size());
        return;
    }
    tx_commit(n, qp.peer_sa, qp.peer_salen, qp.tos, qp.tx_sock);
    qp.st.tx_packets++;
    qp.st.tx_bytes += n;
}

// Below this a payload is copied: the copy costs less than the two extra iovecs.
constexpr size_t gather_min_bytes = 1024;

void DeviceImpl::emit_gather(Qp& qp, wire::Packet& pkt, std::span<const uint8_t> payload, uint32_t mr_rkey,
                             uint64_t mr_va) {
    // Without GSO (or with fault injection, which turns it off) tx_send_plain sends one iovec
    // per packet, and the fault injector and the trace need the packet's bytes in the slot.
    if (!gso_ || pcap_ || payload.size() < gather_min_bytes) {
        emit(qp, pkt, payload);
        return;
    }
    pkt.bth.dest_qp = qp.dest_qpn;
    uint8_t* buf = tx_slot();
    size_t head = 0;
    const size_t n = wire::build_gather(pkt, payload, qp.tx_ip, std::span<uint8_t>(buf, max_datagram), head);
    if (n == 0) {
        ROCE_ERROR("qp 0x%x: cannot build opcode 0x%02x with %zu bytes", qp.qpn, pkt.bth.opcode,
                   payload.size());
        return;
    }
    tx_commit(n + payload.size(), qp.peer_sa, qp.peer_salen, qp.tos, qp.tx_sock);
    TxSlot& s = tx_[tx_n_ - 1];
    s.ext = payload.data();
    s.ext_len = payload.size();
    s.head = head;
    s.mr_rkey = mr_rkey;
    s.mr_va = mr_va;
    if (mr_rkey && tx_mr_n_++ == 0)
        tx_mr_gen_ = pd_->generation();
    qp.st.tx_packets++;
    qp.st.tx_bytes += s.len;
}

// A region a queued READ response points into was deregistered (the generation moved): the
// responses into regions that are gone are dropped, as if lost (the requester asks again and
// gets the access error a new request would get). Called with the PD pinned.
void DeviceImpl::tx_check_regions() {
    for (unsigned i = 0; i < tx_n_; ++i) {
        TxSlot& s = tx_[i];
        if (s.mr_rkey && !pd_->lookup_pinned(s.mr_rkey, s.mr_va, s.ext_len, access_remote_read)) {
            s.dead = true;
            st_.tx_region_gone++;
        }
    }
}

void DeviceImpl::tx_flush() {
    if (tx_n_ == 0 || in_flush_)
        return;
    in_flush_ = true;
    {
        // READ responses read from their region during the send: no dereg_mr until it is done.
        std::shared_lock<std::shared_mutex> pin;
        if (tx_mr_n_) {
            if (!pd_pinned_)
                pin = pd_->pin();
            if (pd_->generation() != tx_mr_gen_)
                tx_check_regions();
        }
        if (gso_)
            tx_send_gso();
        else
            tx_send_plain();
    }
    tx_n_ = 0;
    tx_mr_n_ = 0;
    tx_has_data_ = false;
    in_flush_ = false;
}

// A packet whose ToS is not its socket's (a fault-injected CE mark; a connection's class when the
// kernel refused a class socket) carries it as IP_TOS / IPV6_TCLASS ancillary data at `at`;
// returns the space used. On IPv4 the kernel then sets the packet's priority from the ToS
// (rt_tos2priority), not from SO_PRIORITY.
static size_t put_tos_cmsg(uint8_t* at, int family, int tos) {
    auto* cm = reinterpret_cast<cmsghdr*>(at);
    cm->cmsg_level = family == AF_INET ? IPPROTO_IP : IPPROTO_IPV6;
    cm->cmsg_type = family == AF_INET ? IP_TOS : IPV6_TCLASS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &tos, sizeof(int));
    return CMSG_SPACE(sizeof(int));
}

// The trace frame of a queued packet as the kernel sends it (the ToS: the packet's, else the
// socket's).
void DeviceImpl::trace_tx(const TxSlot& s, uint16_t ipv4_id) {
    WireAddr dst;
    if (!from_sockaddr(reinterpret_cast<const sockaddr*>(&s.sa), s.salen, dst))
        return;
    const uint8_t tos = s.tos >= 0 ? uint8_t(s.tos) : cfg_.traffic_class;
    pcap_->write(sock_.local(), dst, tos, ipv4_id, std::span<const uint8_t>(s.buf, s.len));
}

void DeviceImpl::tx_send_plain() {
    unsigned m = 0;
    auto add = [&](TxSlot& s) {
        tx_iov_[m] = {s.buf, s.len};
        std::memset(&tx_msgs_[m], 0, sizeof(mmsghdr));
        tx_msgs_[m].msg_hdr.msg_name = &s.sa;
        tx_msgs_[m].msg_hdr.msg_namelen = s.salen;
        tx_msgs_[m].msg_hdr.msg_iov = &tx_iov_[m];
        tx_msgs_[m].msg_hdr.msg_iovlen = 1;
        if (const int tos = cmsg_tos(s.tos, s.sock); tos >= 0) {   // indexed by slot: a duplicate shares it
            uint8_t* c = tx_cmsg_[size_t(&s - tx_.data())].b;
            tx_msgs_[m].msg_hdr.msg_control = c;
            tx_msgs_[m].msg_hdr.msg_controllen = put_tos_cmsg(c, s.sa.ss_family, tos);
        }
        tx_msg_sock_[m] = s.sock;
        st_.tx_packets++;
        st_.tx_bytes += s.len;
        if (pcap_)
            trace_tx(s, 0);
        ++m;
    };
    if (!faults_.enabled()) {
        for (unsigned i = 0; i < tx_n_; ++i)
            add(tx_[i]);
    } else {
        int held = -1;   // reordered packet waiting for the next one
        for (unsigned i = 0; i < tx_n_; ++i) {
            TxSlot& s = tx_[i];
            const auto d = faults_.decide(s.buf[0]);
            if (d.drop) {
                st_.faults_dropped++;
                st_.faults_acks_dropped += d.ack_dropped;
                continue;
            }
            if (d.delay) {   // sent by send_delayed once due: late, behind later packets
                delayed_.push_back({now_ns() + uint64_t(cfg_.faults.delay_us) * 1000,
                                    std::vector<uint8_t>(s.buf, s.buf + s.len), s.sa, s.salen, s.tos, s.sock});
                st_.faults_delayed++;
                continue;
            }
            if (d.truncate) {   // the receiver's length and ICRC checks must refuse what is left
                s.len = faults_.truncated_length(s.len);
                st_.faults_truncated++;
            }
            if (d.corrupt) {
                faults_.corrupt(s.buf, s.len);
                st_.faults_corrupted++;
            }
            if (d.ce) {   // the ECN bits of the packet's ToS (the socket's unless it has its own)
                s.tos = (s.tos >= 0 ? s.tos : cfg_.traffic_class) | wire_ecn_ce;
                st_.faults_ce++;
            }
            if (d.reorder && held < 0) {
                held = int(i);
                st_.faults_reordered++;
                continue;
            }
            add(s);
            if (d.duplicate) {
                add(s);
                st_.faults_duplicated++;
            }
            if (held >= 0) {
                add(tx_[unsigned(held)]);
                held = -1;
            }
        }
        if (held >= 0)
            add(tx_[unsigned(held)]);
    }
    tx_send_runs(m);
}

void DeviceImpl::tx_send_runs(unsigned m) {
    for (unsigned i = 0; i < m;) {
        unsigned j = i + 1;
        while (j < m && tx_msg_sock_[j] == tx_msg_sock_[i])
            ++j;
        tx_socket(tx_msg_sock_[i]).send_batch(tx_msgs_.data() + i, j - i);
        i = j;
    }
}

// Runs of equal-size packets to one destination (the last may be shorter) become one
// UDP_SEGMENT send. The kernel numbers the segments' IPv4 IDs 0, 1, 2, ... (DF, unconnected
// socket), so segment k's ICRC is patched from ID 0 to ID k. A gathered packet is three iovecs
// (headers, payload in place, pad + ICRC): at most 3 * 64 per run, far below UIO_MAXIOV.
void DeviceImpl::tx_send_gso() {
    constexpr unsigned max_segs = GsoIcrcPatches::max_segments;
    unsigned m = 0;
    unsigned i = 0;
    size_t v = 0;   // next free tx_iov_
    while (i < tx_n_) {
        TxSlot& first = tx_[i];
        if (first.dead) {
            ++i;
            continue;
        }
        const size_t seg = first.len;
        const unsigned cap = std::min<unsigned>(max_segs, unsigned(65507 / seg));
        unsigned j = i + 1;
        while (j < tx_n_ && j - i < cap && !tx_[j].dead && tx_[j].salen == first.salen &&
               tx_[j].tos == first.tos && tx_[j].sock == first.sock &&
               std::memcmp(&tx_[j].sa, &first.sa, first.salen) == 0 && tx_[j].len <= seg) {
            const bool shorter = tx_[j].len < seg;
            ++j;
            if (shorter)
                break;
        }
        const unsigned n = j - i;
        std::memset(&tx_msgs_[m], 0, sizeof(mmsghdr));
        msghdr& mh = tx_msgs_[m].msg_hdr;
        mh.msg_name = &first.sa;
        mh.msg_namelen = first.salen;
        mh.msg_iov = &tx_iov_[v];
        for (unsigned k = 0; k < n; ++k) {
            TxSlot& s = tx_[i + k];
            if (s.ext_len) {
                st_.tx_gathered++;
                tx_iov_[v++] = {s.buf, s.head};
                tx_iov_[v++] = {const_cast<uint8_t*>(s.ext), s.ext_len};
                tx_iov_[v++] = {s.buf + s.head, s.len - s.ext_len - s.head};
            } else {
                tx_iov_[v++] = {s.buf, s.len};
            }
            if (k && first.sa.ss_family == AF_INET)
                xor_icrc(s.icrc(), gso_patches_.patch(s.len, k));
            st_.tx_packets++;
            st_.tx_bytes += s.len;
            if (pcap_)
                trace_tx(s, first.sa.ss_family == AF_INET ? uint16_t(k) : 0);
        }
        mh.msg_iovlen = size_t(&tx_iov_[v] - static_cast<iovec*>(mh.msg_iov));
        if (const int tos = cmsg_tos(first.tos, first.sock); tos >= 0) {
            mh.msg_control = tx_cmsg_[m].b;
            mh.msg_controllen = put_tos_cmsg(tx_cmsg_[m].b + (n > 1 ? CMSG_SPACE(sizeof(uint16_t)) : 0),
                                             first.sa.ss_family, tos);
        }
        tx_msg_sock_[m] = first.sock;
        if (n > 1) {
            mh.msg_control = tx_cmsg_[m].b;
            mh.msg_controllen += CMSG_SPACE(sizeof(uint16_t));
            cmsghdr* cm = CMSG_FIRSTHDR(&mh);
            cm->cmsg_level = IPPROTO_UDP;
            cm->cmsg_type = UDP_SEGMENT;
            cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
            const uint16_t gs = uint16_t(seg);
            std::memcpy(CMSG_DATA(cm), &gs, sizeof(gs));
            st_.gso_sends++;
        }
        ++m;
        i = j;
    }
    tx_send_runs(m);
}

void DeviceImpl::send_delayed(uint64_t now) {
    while (!delayed_.empty() && delayed_.front().due_ns <= now) {
        DelayedTx& d = delayed_.front();
        iovec iov{d.bytes.data(), d.bytes.size()};
        mmsghdr mm{};
        msghdr& m = mm.msg_hdr;
        m.msg_name = &d.sa;
        m.msg_namelen = d.salen;
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        uint8_t c[CMSG_SPACE(sizeof(int))];
        if (const int tos = cmsg_tos(d.tos, d.sock); tos >= 0) {
            m.msg_control = c;
            m.msg_controllen = put_tos_cmsg(c, d.sa.ss_family, tos);
        }
        if (tx_socket(d.sock).send_mmsg(&mm, 1) == 1) {
            st_.tx_packets++;
            st_.tx_bytes += d.bytes.size();
            WireAddr dst;
            if (pcap_ && from_sockaddr(reinterpret_cast<const sockaddr*>(&d.sa), d.salen, dst))
                pcap_->write(sock_.local(), dst, d.tos >= 0 ? uint8_t(d.tos) : cfg_.traffic_class, 0, d.bytes);
        }
        delayed_.pop_front();
    }
}

// ---- receive path

void DeviceImpl::process_datagram(const uint8_t* buf, size_t len, const WireAddr& src, bool ce, uint64_t now) {
    st_.rx_packets++;
    st_.rx_bytes += len;
    wire::IpContext ip;
    fill_ip_context(src, sock_.local(), ip);
    ip.ipv4_id_known = false;
    wire::Packet pkt;
    const std::span<const uint8_t> data(buf, len);
    // The trace frame carries the IPv4 ID the ICRC matched (the socket does not show it; 0 when
    // nothing matched) and this device's ToS (nor does it show that).
    auto trace = [&](uint16_t ipv4_id) {
        if (pcap_)
            pcap_->write(src, sock_.local(), cfg_.traffic_class, ipv4_id, data);
    };
    if (wire::parse(data, ip, false, pkt) != wire::ParseError::none) {
        trace(0);
        st_.malformed++;
        return;
    }
    // An IPv4 ID the ICRC matched is plausible when below max_plausible_ipv4_id (ours: 0, or the
    // GSO segment number), or any ID when it comes to a QP whose peer numbers its packets (rxe,
    // NICs: ManualPeer::any_ipv4_id).
    bool icrc_ok;
    uint16_t id = 0;
    if (ip.ipv6)
        icrc_ok = wire::icrc_verify(ip, data);
    else
        icrc_ok = wire::icrc_verify_any_ipv4_id(ip, data, &id);
    trace(icrc_ok ? id : 0);
    Qp* qp = pkt.bth.dest_qp == 1 ? nullptr : find_qp(pkt.bth.dest_qp);
    if (icrc_ok && id >= max_plausible_ipv4_id)
        icrc_ok = qp && qp->any_ipv4_id && from_peer(*qp, src);
    if (!icrc_ok) {
        st_.icrc_errors++;
        return;
    }
    if (id)
        st_.rx_nonzero_ipv4_id++;
    if (pkt.bth.dest_qp == 1) {
        cm_packet(pkt, src);
        return;
    }
    if (!qp || qp->state != QpState::rts || !from_peer(*qp, src)) {
        st_.dropped_unknown_qp++;
        return;
    }
    qp->st.rx_packets++;
    qp->st.rx_bytes += len;
    qp->last_heard_ns = now;
    const uint8_t op = pkt.bth.opcode;
    if (op == uint8_t(wire::Opcode::cnp)) {
        cc_cnp(*qp, now);
        return;
    }
    if (ce)
        cc_ce(*qp, op, now);
    if (op <= 0x0c || op == 0x13 || op == 0x14) {
        resp_packet(*qp, pkt);
    } else if (op >= 0x0d && op <= 0x12) {
        comp_packet(*qp, pkt, now);
    } else {
        st_.malformed++;   // UC/UD/CNP/invalidate opcodes on an RC QP
    }
}

void DeviceImpl::flush_acks() {
    for (uint32_t q : ack_list_) {
        Qp* qp = find_qp(q);
        if (!qp)
            continue;
        qp->ack_listed = false;
        if (qp->ack_pending && qp->state == QpState::rts)
            send_ack(*qp, wire::aeth_ack_syndrome, qp->ack_psn);
    }
    ack_list_.clear();
}

void DeviceImpl::run_timers(uint64_t now) {
    // If this device has not run for a while (owner descheduled or computing), an expired
    // timer says nothing about the peer: give ACKs waiting in its queues one grace period
    // before retransmitting (once per timeout, so rare callers still detect dead peers).
    const uint64_t gap = last_timer_ns_ ? elapsed_ns(now, last_timer_ns_) : 0;
    last_timer_ns_ = now;
    const bool were_away = gap > 1000000;
    cm_timers(now);
    std::vector<Qp*> fire;
    for (auto& [q, p] : qps_) {
        Qp& qp = *p;
        if (qp.ack_deadline_ns && now >= qp.ack_deadline_ns) {
            qp.ack_deadline_ns = 0;
            if (qp.ack_pending && qp.state == QpState::rts)
                send_ack(qp, wire::aeth_ack_syndrome, qp.ack_psn);
        }
        if (qp.state == QpState::rts && qp.timer_deadline_ns && now >= qp.timer_deadline_ns)
            fire.push_back(&qp);
    }
    for (Qp* qp : fire) {
        if (were_away && !qp->timer_deferred) {
            qp->timer_deferred = true;
            qp->timer_deadline_ns = now + std::max<uint64_t>(gap, 1000000);
            continue;
        }
        qp->timer_deferred = false;
        if (qp->cc_wake_ns && qp->cc_wake_ns > now) {
            // The pacer holds packets back (congestion control at a low rate): what is missing
            // may not have left yet, so the silence says nothing about the peer. Count the
            // timeout only once the paced packets have gone out and one more timeout passed.
            qp->timer_deadline_ns = qp->cc_wake_ns + qp->cur_timeout_ns;
            continue;
        }
        // A peer that still sends (congestion collapse: responses and duplicates behind a full
        // queue, every timeout a go-back-N) is alive however many timeouts pass; one that has
        // been silent for peer_timeout after the retries ran out has failed.
        // (`now` may be older than a packet stamped meanwhile: that is silence 0, not 2^64.)
        const uint64_t silent_ns = now > qp->last_heard_ns ? now - qp->last_heard_ns : 0;
        if (qp->retries_left == 0 && silent_ns >= uint64_t(cfg_.peer_timeout_ms) * 1000000) {
            ROCE_DEBUG("qp 0x%x: retries exhausted, una 0x%x", qp->qpn, qp->una_psn);
            st_.timeouts++;
            qp->st.timeouts++;
            qp_fail(*qp, Status::timeout);
            continue;
        }
        ROCE_DEBUG("qp 0x%x: timeout, una 0x%x next 0x%x send_idx %zu pkt %u cwnd %.1f sq %zu head 0x%x+%u late %.1fus", qp->qpn,
                    qp->una_psn, qp->next_psn, qp->send_idx, qp->send_pkt, qp->cwnd, qp->sq.size(),
                    qp->sq.empty() ? 0 : qp->sq.front().first_psn, qp->sq.empty() ? 0 : qp->sq.front().npkts,
                    (now - qp->timer_deadline_ns) / 1e3);
        if (qp->retries_left > 0)
            --qp->retries_left;
        qp->cur_timeout_ns = std::min<uint64_t>(qp->cur_timeout_ns * 2, max_rto_ns);
        qp->ssthresh = std::max(min_cwnd, qp->cwnd / 2);
        qp->cwnd = qp->ssthresh;
        st_.timeouts++;
        qp->st.timeouts++;
        cc_loss(*qp, now);
        goback_head(*qp, now);
        qp->timer_deadline_ns = now + qp->cur_timeout_ns;
    }
    uint64_t next = 0;
    auto consider = [&](uint64_t t) {
        if (t && (!next || t < next))
            next = t;
    };
    if (!delayed_.empty())
        consider(delayed_.front().due_ns);
    for (const Closing& c : closing_)
        consider(c.deadline_ns);
    for (auto& [q, p] : qps_) {
        consider(p->timer_deadline_ns);
        consider(p->ack_deadline_ns);
        consider(p->rnr_wait_until_ns);
        consider(p->cc_wake_ns);
        if (!p->resp_jobs.empty())
            consider(now);   // the progress thread comes back for the next slice
        if (p->state == QpState::connecting)
            consider(p->cm_deadline_ns);
        if (p->passive)
            consider(passive_timer(*p));
    }
    next_timer_ns_.store(next, std::memory_order_relaxed);
}

unsigned DeviceImpl::progress_locked(bool owner, uint64_t& now) {
    const unsigned before = new_events_;
    posts_since_progress_ = 0;
    const bool drain = owner && drain_rx_.exchange(false, std::memory_order_relaxed);
    if (drain)
        rx_emptied_ns_ = now;   // the owner slept on event_fd (armed): an arrival would have woken it
    bool stale = false;   // packets went out since the last reading
    for (int round = 0; round < 16; ++round) {
        const int n = sock_.recv_batch(rx_msgs_.data(), rx_n_);
        // Each packet is timed when it is processed (RTT samples, last heard, what its processing
        // sends): the first by one reading for the batch, the others by their own.
        if (n > 0) {
            now = now_ns();
            stale = false;
        }
        const uint64_t read_ns = now;
        const uint64_t tx_before = st_.tx_packets + tx_n_;   // a batch flushed on the way counts
        size_t packets = 0;
        auto packet_time = [&] { return packets++ ? now = now_ns() : now; };
        for (int i = 0; i < n; ++i) {
            mmsghdr& mh = rx_msgs_[size_t(i)];
            WireAddr src;
            if ((mh.msg_hdr.msg_flags & MSG_TRUNC) ||
                !from_sockaddr(reinterpret_cast<sockaddr*>(&rx_sa_[size_t(i)]), mh.msg_hdr.msg_namelen, src)) {
                st_.rx_packets++;
                st_.malformed++;
                continue;
            }
            const uint8_t* buf = static_cast<uint8_t*>(rx_iov_[size_t(i)].iov_base);
            size_t len = mh.msg_len;
            size_t seg = len;
            uint8_t tos = 0;   // the IP header's ToS / traffic class (IP_RECVTOS): its ECN bits
            for (cmsghdr* cm = CMSG_FIRSTHDR(&mh.msg_hdr); cm; cm = CMSG_NXTHDR(&mh.msg_hdr, cm)) {
                if (cm->cmsg_level == IPPROTO_UDP && cm->cmsg_type == UDP_GRO) {
                    int gs = 0;
                    std::memcpy(&gs, CMSG_DATA(cm), sizeof(gs));
                    if (gs > 0 && size_t(gs) < len) {
                        seg = size_t(gs);
                        st_.gro_datagrams++;
                    }
                } else if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS) {
                    tos = *CMSG_DATA(cm);   // one byte for IPv4
                } else if (cm->cmsg_level == IPPROTO_IPV6 && cm->cmsg_type == IPV6_TCLASS) {
                    int tc = 0;
                    std::memcpy(&tc, CMSG_DATA(cm), sizeof(tc));
                    tos = uint8_t(tc);
                }
            }
            const bool ce = (tos & wire_ecn_ce) == wire_ecn_ce;
            if (len == 0)
                process_datagram(buf, 0, src, false, packet_time());   // counted as malformed
            while (len > 0) {
                const size_t l = std::min(seg, len);
                process_datagram(buf, l, src, ce, packet_time());
                buf += l;
                len -= l;
            }
        }
        // prepare for the next batch (the kernel overwrote name/control lengths and flags)
        for (int i = 0; i < n; ++i) {
            msghdr& h = rx_msgs_[size_t(i)].msg_hdr;
            h.msg_namelen = sizeof(sockaddr_storage);
            h.msg_flags = 0;
            h.msg_controllen = sizeof(rx_cmsg_[size_t(i)].b);
        }
        flush_acks();
        if (n > 0) {
            // What the requesters send now is timed by this reading (RTT probes, the pacer):
            // fresh unless the batch was one packet that queued at most an ACK (a ping-pong's
            // message, about a microsecond) — a READ request queues its responses and ICRCs them.
            if (packets > 1 || st_.tx_packets + tx_n_ > tx_before + 1)
                now = now_ns();
            for (auto& [q, p] : qps_)
                req_progress(*p, now);
        }
        if (sock_.emptied())
            rx_emptied_ns_ = read_ns;
        if (n < int(rx_n_) && !(drain && n > 0))   // a short batch emptied the socket; a single read may not
            break;
        tx_flush();   // more to receive: do not hold packets back
        stale = true;
    }
    if (!resp_list_.empty()) {
        pump_responses();
        stale = true;
    }
    if (stale)
        now = now_ns();
    // The last reading, at most a short batch's processing or one empty read old: the timers
    // are milliseconds, the owner's stamp half a millisecond.
    if (owner)
        owner_.stamp(now);
    send_delayed(now);
    run_timers(now);
    if (pcap_ && now - pcap_flushed_ns_ > 1000000000) {   // the trace readable while the job runs
        pcap_->flush();
        pcap_flushed_ns_ = now;
    }
    for (auto& [q, p] : qps_)
        req_progress(*p, now);
    // When only ACKs are queued and messages wait for the owner, hold the ACKs: the owner's
    // poll_recv comes next, and a reply posted from it leaves in the same sendmmsg (one system
    // call per message instead of two). poll_recv flushes at its end, the next progress() at
    // its start; the progress thread never defers.
    if (!(owner && !tx_has_data_ && !rq_.empty()))
        tx_flush();
    unsigned produced = new_events_ - before;
    if (owner) {
        new_events_ = 0;
        if (notified_.exchange(false, std::memory_order_relaxed)) {
            uint64_t v;
            while (read(notify_fd_, &v, sizeof(v)) > 0) {
            }
        }
    }
    return produced;
}

} // namespace roce::sw
