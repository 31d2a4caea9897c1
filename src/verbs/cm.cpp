// rdma_cm for the verbs device. The device listens (RDMA_PS_TCP) on its GID's IP and a port; its
// address is that IP + port, so a connection needs nothing else, like the userspace device's CM.
//
// Active side (connect_qp): the GID policy chooses the local entry that reaches the peer (validated
// by an address handle) -> rdma_resolve_addr bound to that entry's IP (rdma_cm derives the source
// GID from it) -> rdma_resolve_route with our ToS -> QP to INIT -> rdma_connect (REQ carrying a
// magic and our traffic class, ConnPriv) -> on CONNECT_RESPONSE (REP carrying the peer's class):
// RTR, RTS with the attributes rdma_init_qp_attr derives from the exchange (PSNs, path, negotiated
// READ/atomic depths), the policy's sgid_index and the negotiated class as GRH traffic class and
// SL, then rdma_establish (RTU) and the WRs queued meanwhile are posted. Rejected (nobody listens
// on that port: the peer's CM answers REJ) -> the QP fails with unreachable; no answer within
// connect_timeout_ms -> timeout.
// Address resolution runs in attempts of a quarter of connect_timeout_ms, repeated on a timeout
// until the deadline: the kernel re-checks a pending neighbour (ARP) only when a neighbour event
// wakes it or the attempt's timeout expires, and measured on two rxe devices it missed the event
// when both ends resolved each other at once - one attempt as long as the deadline then lost the
// race against our own deadline.
// Passive side (CONNECT_REQUEST): a QP is created for the request, taken to RTS with the class
// negotiated from the REQ's advert and accepted (REP with our advert, so the active side computes
// the same class); it is ready when REP is sent. Duplicate REQs are answered by the kernel's CM (the same
// REP again, no new event); a late REQ (its active side gave up) ends in REJECTED (our requester
// answers a REP that comes after its deadline with REJ) or, when the RTU never comes, in
// UNREACHABLE (the kernel's CM: IB_CM_REP_ERROR, -ETIMEDOUT) or CONNECT_ERROR, and the QP is
// freed; a DREQ (the peer destroyed its QP) frees it too.
// An active QP whose peer disconnects goes to error (posted WRs flush as canceled) and stays until
// destroy_qp.
//
// The CM thread waits on the event channel, copies and acks each event before it takes the device
// lock, so rdma_destroy_id under the lock (destroy_qp) never waits for it.
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <utility>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.hpp"
#include "verbs/device_impl.hpp"
#include "verbs/mtu.hpp"

namespace roce::verbs {

namespace {
socklen_t to_sockaddr(const WireAddr& a, sockaddr_storage& ss) {
    std::memset(&ss, 0, sizeof(ss));
    if (a.family == AF_INET) {
        auto* s = reinterpret_cast<sockaddr_in*>(&ss);
        s->sin_family = AF_INET;
        std::memcpy(&s->sin_addr, a.ip, 4);
        s->sin_port = htons(a.port);
        return sizeof(sockaddr_in);
    }
    auto* s = reinterpret_cast<sockaddr_in6*>(&ss);
    s->sin6_family = AF_INET6;
    std::memcpy(&s->sin6_addr, a.ip, 16);
    s->sin6_port = htons(a.port);
    return sizeof(sockaddr_in6);
}

WireAddr from_sockaddr(const sockaddr* sa) {
    WireAddr a{};
    if (sa && sa->sa_family == AF_INET) {
        auto* s = reinterpret_cast<const sockaddr_in*>(sa);
        a.family = AF_INET;
        std::memcpy(a.ip, &s->sin_addr, 4);
        a.port = ntohs(s->sin_port);
    } else if (sa && sa->sa_family == AF_INET6) {
        auto* s = reinterpret_cast<const sockaddr_in6*>(sa);
        a.family = AF_INET6;
        std::memcpy(a.ip, &s->sin6_addr, 16);
        a.port = ntohs(s->sin6_port);
    }
    return a;
}

void* token_ptr(uint64_t t) { return reinterpret_cast<void*>(uintptr_t(t)); }

// A link-local IPv6 address means nothing without its link: the netdev of the GID entry.
void set_scope(sockaddr_storage& ss, const std::string& ndev) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    if (ss.ss_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr) && !ndev.empty())
        s6->sin6_scope_id = if_nametoindex(ndev.c_str());
}
} // namespace

ConnPriv DeviceImpl::conn_priv(ibv_mtu own) const {
    ConnPriv cp{};
    cp.magic = htonl(conn_magic);
    cp.version = htonl(conn_version);
    const gid::TcAdvert a = gid::encode_tc_advert(tc_);
    std::memcpy(cp.tc, a.data(), sizeof(cp.tc));
    cp.flags = conn_flag_tc | conn_flag_port | conn_flag_mtu;
    cp.listen_port[0] = uint8_t(addr_.port >> 8);
    cp.listen_port[1] = uint8_t(addr_.port);
    cp.mtu = uint8_t(own);
    return cp;
}

// The entry's netdev counts too (netdev_mtu_cap: a VLAN smaller than the port). rdma_cm counts
// the active side's netdev (its route) but gives the passive side the requester's path MTU, so
// each side says its own. The entry and its netdev are read when the connection is made: a
// VLAN (its GID) added or an MTU changed since the device opened is seen.
ibv_mtu DeviceImpl::own_mtu(int sgid_index) const {
    const ibv_mtu m = std::min(mtu_enum(cfg_.mtu), port_attr_.active_mtu);
    if (sgid_index < 0)
        return m;
    const gid::SysRoot root(cfg_.sysroot);
    const gid::GidEntry e = gid::read_gid_entry(root, cfg_.dev_name, cfg_.port, unsigned(sgid_index));
    return std::min(m, netdev_mtu_cap(root, e.ndev, e.ip().family() == gid::Family::inet6));
}

uint8_t DeviceImpl::peer_mtu(const void* priv, size_t priv_len) {
    ConnPriv cp{};
    if (priv == nullptr || priv_len < sizeof(cp))
        return 0;
    std::memcpy(&cp, priv, sizeof(cp));
    if (ntohl(cp.magic) != conn_magic || !(cp.flags & conn_flag_mtu))
        return 0;
    if (cp.mtu < IBV_MTU_256 || cp.mtu > IBV_MTU_4096) {
        // Unauthenticated, like the request itself: one line, not one per request.
        if (!std::exchange(warned_bad_mtu_, true))
            ROCE_WARN("verbs: %s: ignoring a malformed MTU (%u) in a connection's private data "
                      "(and in later ones)", cfg_.dev_name.c_str(), unsigned(cp.mtu));
        return 0;
    }
    return cp.mtu;
}

gid::TrafficClass DeviceImpl::negotiate_tc(const void* priv, size_t priv_len) {
    ConnPriv cp{};
    if (priv == nullptr || priv_len < sizeof(cp))
        return tc_;
    std::memcpy(&cp, priv, sizeof(cp));
    if (ntohl(cp.magic) != conn_magic || ntohl(cp.version) < 2 || !(cp.flags & conn_flag_tc))
        return tc_;   // a version-1 peer: it uses its own class, we keep ours
    gid::TcAdvert a;
    std::memcpy(a.data(), cp.tc, a.size());
    const std::optional<gid::TrafficClass> peer = gid::decode_tc_advert(a);
    // Each said once per device, as peer_mtu() does: any sender of connection requests could
    // otherwise write a line per request.
    if (!peer) {
        if (!std::exchange(warned_bad_tc_, true))
            ROCE_WARN("verbs: %s: ignoring a malformed traffic-class advert (and later ones)", cfg_.dev_name.c_str());
        return tc_;
    }
    bool conflict = false;
    const gid::TrafficClass t = gid::negotiate_traffic_class(tc_, *peer, &conflict);
    if (conflict && !std::exchange(warned_tc_conflict_, true))
        ROCE_WARN("verbs: %s: both sides configured a traffic class (ours %s, peer's %s): using %s "
                  "(said once per device)", cfg_.dev_name.c_str(), tc_.str().c_str(), peer->str().c_str(),
                  t.str().c_str());
    return t;
}

Status DeviceImpl::cm_init() {
    const char* name = cfg_.dev_name.c_str();
    cm_channel_.reset(rdma_create_event_channel());
    if (!cm_channel_) {
        ROCE_ERROR("verbs: %s: rdma_create_event_channel failed: %s (rdma_ucm module loaded?)", name,
                   std::strerror(errno));
        return Status::io_error;
    }
    if (int fl = fcntl(cm_channel_->fd, F_GETFL); fl < 0 || fcntl(cm_channel_->fd, F_SETFL, fl | O_NONBLOCK) != 0)
        return Status::io_error;
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(cm_channel_.get(), &id, token_ptr(1), RDMA_PS_TCP) != 0) {
        ROCE_ERROR("verbs: %s: rdma_create_id failed: %s", name, std::strerror(errno));
        return Status::io_error;
    }
    listen_id_.reset(id);
    WireAddr bind = addr_;
    bind.port = cfg_.cm_port;
    sockaddr_storage ss;
    to_sockaddr(bind, ss);
    set_scope(ss, gid_.ndev);
    if (rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&ss)) != 0) {
        const int e = errno;
        ROCE_ERROR("verbs: %s: cannot bind rdma_cm to %s: %s", name, bind.to_string().c_str(),
                   std::strerror(e));
        return e == EADDRINUSE ? Status::io_error : Status::no_device;
    }
    if (!id->verbs || cfg_.dev_name != ibv_get_device_name(id->verbs->device)) {
        ROCE_ERROR("verbs: %s: address %s belongs to RDMA device %s, not to %s", name,
                   bind.to_string().c_str(), id->verbs ? ibv_get_device_name(id->verbs->device) : "(none)", name);
        return Status::no_device;
    }
    if (rdma_listen(id, 128) != 0) {
        ROCE_ERROR("verbs: %s: rdma_listen failed: %s", name, std::strerror(errno));
        return Status::io_error;
    }
    addr_.port = ntohs(rdma_get_src_port(id));
    wake_fd_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_fd_)
        return Status::io_error;
    ROCE_INFO("verbs: %s port %u: GID index %d, rdma_cm listening on %s", name, unsigned(cfg_.port),
              gid_.index, addr_.to_string().c_str());
    cm_thread_ = std::thread([this] { cm_thread_main(); });
    return Status::ok;
}

Status DeviceImpl::connect_qp(uint32_t qpn, const WireAddr& peer) {
    std::lock_guard lk(mu_);
    VQp* q = find_qp(qpn);
    if (!q || q->state != QpState::reset)
        return Status::invalid_param;
    if (peer.port == 0 || (peer.family != AF_INET && peer.family != AF_INET6))
        return Status::invalid_param;   // (family 0 would read as IPv6 ::, which reaches ourselves)
    // Our entry towards this peer: the one that reaches it (route / subnet, per the settings).
    GidChoice src_gid;
    std::string err;
    const Status gs = choose_gid(
            gid_ctx_, &peer,
            [this](const gid::GidEntry& e, const gid::PeerGid*, std::string& why) { return validate_gid(e, why); },
            src_gid, err);
    if (gs != Status::ok) {
        ROCE_ERROR("verbs: QP %u: %s", qpn, err.c_str());
        return gs == Status::invalid_param ? gs : Status::unreachable;
    }
    const uint64_t token = next_token_++;
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(cm_channel_.get(), &id, token_ptr(token), RDMA_PS_TCP) != 0) {
        ROCE_ERROR("verbs: QP %u: rdma_create_id failed: %s", qpn, std::strerror(errno));
        return Status::io_error;
    }
    CmIdPtr owned(id);
    WireAddr src = src_gid.addr;
    src.port = 0;
    sockaddr_storage ss, ds;
    to_sockaddr(src, ss);
    to_sockaddr(peer, ds);
    set_scope(ss, src_gid.ndev);
    set_scope(ds, src_gid.ndev);
    if (rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&ss), reinterpret_cast<sockaddr*>(&ds),
                          resolve_attempt_ms()) != 0) {
        ROCE_ERROR("verbs: QP %u: rdma_resolve_addr(%s) failed: %s", qpn, peer.to_string().c_str(),
                   std::strerror(errno));
        return Status::unreachable;
    }
    q->id = std::move(owned);
    q->token = token;
    tokens_[token] = qpn;
    q->peer = peer;
    q->cm_src = ss;
    q->cm_dst = ds;
    q->sgid_index = src_gid.index;
    q->sgid_ndev = src_gid.ndev;
    q->tc = tc_;
    q->state = QpState::connecting;
    q->connect_deadline_ns = now_ns() + uint64_t(cfg_.connect_timeout_ms) * 1000000;
    ++st_.cm_connects;
    uint64_t one = 1;
    (void)!write(wake_fd_.get(), &one, sizeof(one));   // the CM thread watches the deadline
    return Status::ok;
}

void DeviceImpl::cm_thread_main() {
    while (!stop_.load()) {
        int timeout = -1;
        {
            std::lock_guard lk(mu_);
            for (auto& [k, q] : qps_) {
                if (q->state == QpState::connecting) {
                    timeout = 20;
                    break;
                }
            }
        }
        pollfd p[2] = {{cm_channel_->fd, POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
        poll(p, 2, timeout);
        if (stop_.load())
            break;
        uint64_t v;
        (void)!read(wake_fd_.get(), &v, sizeof(v));
        rdma_cm_event* ev;
        while (rdma_get_cm_event(cm_channel_.get(), &ev) == 0) {
            const int type = ev->event;
            const int status = ev->status;
            rdma_cm_id* id = ev->id;
            const uint64_t token = uint64_t(reinterpret_cast<uintptr_t>(id->context));
            uint8_t priv[256];
            size_t priv_len = 0;
            uint8_t resp_res = 0, init_depth = 0;
            if (type == RDMA_CM_EVENT_CONNECT_REQUEST || type == RDMA_CM_EVENT_ESTABLISHED ||
                type == RDMA_CM_EVENT_CONNECT_RESPONSE || type == RDMA_CM_EVENT_REJECTED) {
                priv_len = std::min<size_t>(ev->param.conn.private_data_len, sizeof(priv));
                if (priv_len && ev->param.conn.private_data)
                    std::memcpy(priv, ev->param.conn.private_data, priv_len);
                resp_res = ev->param.conn.responder_resources;
                init_depth = ev->param.conn.initiator_depth;
            }
            rdma_ack_cm_event(ev);
            std::lock_guard lk(mu_);
            cm_handle(type, status, token, id, priv, priv_len, resp_res, init_depth);
        }
        std::lock_guard lk(mu_);
        cm_deadlines();
    }
}

bool DeviceImpl::cm_modify(VQp& q, rdma_cm_id* id, ibv_qp_state state, bool quiet) {
    ibv_qp_attr a{};
    int mask = 0;
    a.qp_state = state;
    if (rdma_init_qp_attr(id, &a, &mask) != 0) {
        if (quiet)   // a request withdrawn meanwhile (its active side gave up): not an error
            ROCE_INFO("verbs: QP %u: connection request withdrawn (%s)", q.qpn, std::strerror(errno));
        else
            ROCE_ERROR("verbs: QP %u: rdma_init_qp_attr(state %d) failed: %s", q.qpn, int(state), std::strerror(errno));
        return false;
    }
    if (state == IBV_QPS_INIT) {
        a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC;
        mask |= IBV_QP_ACCESS_FLAGS;
    } else if (state == IBV_QPS_RTR) {
        a.min_rnr_timer = cfg_.min_rnr_timer;
        mask |= IBV_QP_MIN_RNR_TIMER;
        // rdma_cm fills in the peer's initiator depth (its REQ, or its REP), which no one bounds
        // by our configuration or our device: taken as it came, a peer allowed more (another
        // device, a larger MAX_RD_ATOMIC, a forged REQ) made ibv_modify_qp fail (EINVAL) and the
        // connection refused, or the QP larger than configured. Ours: what we advertised.
        a.max_dest_rd_atomic = uint8_t(std::min<int>({a.max_dest_rd_atomic, int(cfg_.max_rd_atomic),
                                                      dev_attr_.max_qp_rd_atom}));
        q.dest_rd_atomic = a.max_dest_rd_atomic;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC;
        q.dest_qpn = a.dest_qp_num;
        // The negotiated class in both directions, and (active side) the policy's source entry.
        a.ah_attr.grh.traffic_class = q.tc.tos;
        a.ah_attr.sl = q.tc.priority;
        if (q.sgid_index >= 0)
            a.ah_attr.grh.sgid_index = uint8_t(q.sgid_index);
        const ibv_mtu from_cm = a.path_mtu;
        // The passive side learns its entry here (the REQ's destination); the REP says the result.
        // The active side keeps what its REQ said (the peer sized its side by it).
        if (q.own_mtu == 0)
            q.own_mtu = uint8_t(own_mtu(int(a.ah_attr.grh.sgid_index)));
        a.path_mtu = std::min(a.path_mtu, ibv_mtu(q.own_mtu));
        if (q.peer_mtu)
            a.path_mtu = std::min(a.path_mtu, ibv_mtu(q.peer_mtu));
        ROCE_INFO("verbs: QP %u (%s) -> %s: sgid index %u, %s, path MTU %u (rdma_cm %u, ours %u, peer's %u)",
                  q.qpn, q.passive ? "passive" : "active", q.peer.to_string().c_str(),
                  unsigned(a.ah_attr.grh.sgid_index), q.tc.str().c_str(), mtu_bytes(a.path_mtu),
                  mtu_bytes(from_cm), mtu_bytes(ibv_mtu(q.own_mtu)),
                  q.peer_mtu ? mtu_bytes(ibv_mtu(q.peer_mtu)) : 0);
    } else if (state == IBV_QPS_RTS) {
        a.timeout = cfg_.ack_timeout;
        a.max_rd_atomic = uint8_t(std::min<int>({a.max_rd_atomic, int(cfg_.max_rd_atomic),
                                                 dev_attr_.max_qp_init_rd_atom}));
        q.rd_atomic = a.max_rd_atomic;
        mask |= IBV_QP_MAX_QP_RD_ATOMIC;
        a.retry_cnt = uint8_t(std::min<uint32_t>(cfg_.retry_count, 7));
        a.rnr_retry = uint8_t(std::min<uint32_t>(cfg_.rnr_retry, 7));
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
    }
    if (const int rc = ibv_modify_qp(q.qp.get(), &a, mask); rc != 0) {
        ROCE_ERROR("verbs: QP %u: ibv_modify_qp to state %d failed: %s", q.qpn, int(state), std::strerror(rc));
        return false;
    }
    return true;
}

void DeviceImpl::cm_fail_connect(VQp& q, Status st, const char* why) {
    if (q.state != QpState::connecting)
        return;
    ROCE_WARN("verbs: QP %u: connection to %s failed: %s", q.qpn, q.peer.to_string().c_str(), why);
    ++st_.cm_errors;
    fail_qp(q, st);
    notify();
}

void DeviceImpl::free_passive(VQp& q) {
    const uint32_t qpn = q.qpn;
    release_qp(q, Status::canceled);
    erase_qp(qpn);
    ++st_.passive_freed;
    notify();
}

void DeviceImpl::cm_deadlines() {
    const uint64_t now = now_ns();
    for (auto& [k, q] : qps_) {
        if (q->state == QpState::connecting && now >= q->connect_deadline_ns)
            cm_fail_connect(*q, Status::timeout, "no answer within connect_timeout_ms");
    }
}

void DeviceImpl::cm_accept(rdma_cm_id* id, const void* priv, size_t priv_len, uint8_t resp_res,
                           uint8_t init_depth) {
    ConnPriv cp{};
    if (priv_len >= sizeof(cp))
        std::memcpy(&cp, priv, sizeof(cp));
    // Requests are unauthenticated: a flood of them gets one line each kind, and the counters.
    if (ntohl(cp.magic) != conn_magic || ntohl(cp.version) < 1) {
        if (!std::exchange(warned_foreign_req_, true))
            ROCE_WARN("verbs: %s: rejecting a connection request that is not ours (and later ones, "
                      "counter cm_rejected)", cfg_.dev_name.c_str());
        rdma_reject(id, nullptr, 0);
        rdma_destroy_id(id);
        ++st_.cm_rejected;
        return;
    }
    if (passive_qps_ >= cfg_.max_passive_qps) {
        if (st_.cm_refused++ == 0)
            ROCE_WARN("verbs: %s: %u QPs created by connection requests (the most there may be): "
                      "rejecting later requests while so many remain (counter cm_refused)",
                      cfg_.dev_name.c_str(), passive_qps_);
        rdma_reject(id, nullptr, 0);
        rdma_destroy_id(id);
        return;
    }
    auto q = std::make_unique<VQp>();
    q->passive = true;
    q->token = next_token_++;
    id->context = token_ptr(q->token);
    q->id.reset(id);
    q->peer = from_sockaddr(rdma_get_peer_addr(id));
    if (cp.flags & conn_flag_port)
        q->peer.port = uint16_t(cp.listen_port[0] << 8 | cp.listen_port[1]);
    q->tc = negotiate_tc(priv, priv_len);
    q->peer_mtu = peer_mtu(priv, priv_len);
    if (new_ibv_qp(*q) != Status::ok || !cm_modify(*q, id, IBV_QPS_INIT, true) ||
        !cm_modify(*q, id, IBV_QPS_RTR, true) || !cm_modify(*q, id, IBV_QPS_RTS, true)) {
        rdma_reject(id, nullptr, 0);
        ++st_.cm_errors;
        return;   // q (QP, id) destroyed here
    }
    rdma_conn_param p{};
    p.responder_resources = uint8_t(std::min<int>({init_depth, int(cfg_.max_rd_atomic), dev_attr_.max_qp_rd_atom}));
    p.initiator_depth = uint8_t(std::min<int>({resp_res, int(cfg_.max_rd_atomic), dev_attr_.max_qp_init_rd_atom}));
    p.retry_count = uint8_t(std::min<uint32_t>(cfg_.retry_count, 7));
    p.rnr_retry_count = uint8_t(std::min<uint32_t>(cfg_.rnr_retry, 7));
    p.qp_num = q->qpn;
    p.srq = 1;
    const ConnPriv rep = conn_priv(ibv_mtu(q->own_mtu));
    p.private_data = &rep;
    p.private_data_len = sizeof(rep);
    if (rdma_accept(id, &p) != 0) {
        ROCE_ERROR("verbs: %s: rdma_accept failed: %s", cfg_.dev_name.c_str(), std::strerror(errno));
        ++st_.cm_errors;
        return;
    }
    q->state = QpState::rts;   // ready when REP is sent, like the userspace device
    ++st_.cm_accepted;
    tokens_[q->token] = q->qpn;
    insert_qp(std::move(q));
}

void DeviceImpl::cm_handle(int type, int status, uint64_t token, rdma_cm_id* id, const void* priv,
                           size_t priv_len, uint8_t resp_res, uint8_t init_depth) {
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        cm_accept(id, priv, priv_len, resp_res, init_depth);
        return;
    }
    VQp* q = find_token(token);
    if (!q)
        return;   // its QP is gone
    const Status err = status == -ETIMEDOUT ? Status::timeout : Status::unreachable;
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (q->state != QpState::connecting)
            return;
        {   // the route (and the REQ's path) in our class; the QP gets the negotiated one at RTR
            uint8_t tos = tc_.tos;
            rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos));
        }
        if (rdma_resolve_route(id, int(cfg_.connect_timeout_ms)) != 0)
            cm_fail_connect(*q, Status::unreachable, "rdma_resolve_route failed");
        return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        if (q->state != QpState::connecting)
            return;
        if (!id->verbs || cfg_.dev_name != ibv_get_device_name(id->verbs->device)) {
            cm_fail_connect(*q, Status::unreachable, "the route leaves through another RDMA device");
            return;
        }
        if (!cm_modify(*q, id, IBV_QPS_INIT)) {
            cm_fail_connect(*q, Status::io_error, "QP to INIT failed");
            return;
        }
        q->own_mtu = uint8_t(own_mtu(q->sgid_index));
        const ConnPriv cp = conn_priv(ibv_mtu(q->own_mtu));
        rdma_conn_param p{};
        p.private_data = &cp;
        p.private_data_len = sizeof(cp);
        p.responder_resources = uint8_t(std::min<int>(int(cfg_.max_rd_atomic), dev_attr_.max_qp_rd_atom));
        p.initiator_depth = uint8_t(std::min<int>(int(cfg_.max_rd_atomic), dev_attr_.max_qp_init_rd_atom));
        p.retry_count = uint8_t(std::min<uint32_t>(cfg_.retry_count, 7));
        p.rnr_retry_count = uint8_t(std::min<uint32_t>(cfg_.rnr_retry, 7));
        p.qp_num = q->qpn;
        p.srq = 1;
        if (rdma_connect(id, &p) != 0)
            cm_fail_connect(*q, Status::unreachable, "rdma_connect failed");
        return;
    }
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
        if (q->state != QpState::connecting) {
            // Gave up meanwhile (deadline): REJ, so that the peer frees the passive QP it made
            // for us now rather than when its REP's retries run out.
            rdma_reject(id, nullptr, 0);
            return;
        }
        q->tc = negotiate_tc(priv, priv_len);
        q->peer_mtu = peer_mtu(priv, priv_len);
        if (!cm_modify(*q, id, IBV_QPS_RTR) || !cm_modify(*q, id, IBV_QPS_RTS)) {
            rdma_reject(id, nullptr, 0);
            cm_fail_connect(*q, Status::io_error, "QP to RTR/RTS failed");
            return;
        }
        if (rdma_establish(id) != 0) {
            cm_fail_connect(*q, Status::io_error, "rdma_establish failed");
            return;
        }
        q->state = QpState::rts;
        ++st_.cm_established;
        post_pending(*q);
        notify();
        return;
    case RDMA_CM_EVENT_ESTABLISHED:
        return;
    case RDMA_CM_EVENT_ADDR_ERROR:
        if (q->state == QpState::connecting && (status == -ETIMEDOUT || status == -ENODATA) &&
            now_ns() + uint64_t(resolve_attempt_ms()) * 1000000 < q->connect_deadline_ns &&
            rdma_resolve_addr(id, reinterpret_cast<sockaddr*>(&q->cm_src), reinterpret_cast<sockaddr*>(&q->cm_dst),
                              resolve_attempt_ms()) == 0) {
            ROCE_DEBUG("verbs: QP %u: address resolution of %s timed out, retrying", q->qpn, q->peer.to_string().c_str());
            return;
        }
        cm_fail_connect(*q, err, "address resolution failed");
        return;
    case RDMA_CM_EVENT_ROUTE_ERROR:
        cm_fail_connect(*q, err, "route resolution failed");
        return;
    case RDMA_CM_EVENT_UNREACHABLE:
        if (q->passive) {
            // Our REP was never answered (the kernel's CM reports its retries running out so): a
            // requester that gave up, or one that never meant to finish.
            free_passive(*q);
            return;
        }
        cm_fail_connect(*q, err, status == -ETIMEDOUT ? "no answer to the connection request" : "unreachable");
        return;
    case RDMA_CM_EVENT_REJECTED:
        ++st_.cm_rejected;
        if (!q->passive) {
            // The status is the IB CM reason: 28 (consumer defined) comes from the peer's
            // rdma_reject or destroyed id (its passive-QP cap, a failed QP creation), 8 from a
            // port nobody listens on.
            cm_fail_connect(*q, Status::unreachable,
                            status == 28 ? "rejected by the peer (see its log)"
                                         : "rejected (nobody listens on that port?)");
            return;
        }
        [[fallthrough]];   // our REP was answered with REJ: the active side gave up
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        if (type == RDMA_CM_EVENT_DISCONNECTED)
            ++st_.cm_disconnects;
        if (q->passive) {
            // Our peer destroyed its QP, or never completed the handshake (late request).
            free_passive(*q);
            return;
        }
        if (q->state == QpState::connecting) {
            cm_fail_connect(*q, Status::timeout, "connection error");
            return;
        }
        if (q->state == QpState::rts) {
            abort_qp(*q, Status::canceled);   // never posted ones at once, posted ones flush
            notify();
        }
        return;
    default:
        return;
    }
}

} // namespace roce::verbs
