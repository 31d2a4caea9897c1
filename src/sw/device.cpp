// Device: open/close, the public API under one recursive mutex, QP table, completion and
// receive queues, and the passive-target progress thread. The datapath (progress loop, tx/rx
// batching, timers) is in datapath.cpp.
#include <algorithm>
#include <arpa/inet.h>
#include <cstring>
#include <ctime>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>
#include <utility>

#include "common/log.hpp"
#include "common/roce_mtu.hpp"
#include "sw/device_impl.hpp"

namespace roce::sw {

std::string PortRange::str() const {
    return is_range() ? std::to_string(first) + "-" + std::to_string(last) : std::to_string(first);
}

std::optional<PortRange> make_port_range(unsigned long first, unsigned long last) {
    if (first > 65535 || last > 65535 || last < first || (first == 0 && last != 0))
        return std::nullopt;
    return PortRange(uint16_t(first), uint16_t(last));
}

std::optional<PortRange> parse_port_range(std::string_view text) {
    // One number, or two joined by '-'; digits only (strtoul would take " -5" and "+5").
    auto number = [](std::string_view t, unsigned long& out) {
        if (t.empty() || t.size() > 5) return false;
        out = 0;
        for (char c : t) {
            if (c < '0' || c > '9') return false;
            out = out * 10 + unsigned(c - '0');
        }
        return true;
    };
    unsigned long a = 0, b = 0;
    const size_t dash = text.find('-');
    if (dash == std::string_view::npos)
        return number(text, a) ? make_port_range(a, a) : std::nullopt;
    if (!number(text.substr(0, dash), a) || !number(text.substr(dash + 1), b))
        return std::nullopt;
    return make_port_range(a, b);
}

uint32_t DeviceConfig::ack_delay_limit_us() const {
    return uint32_t(std::min<uint64_t>(uint64_t(retransmit_timeout_us) * 1000, max_rto_ns) / 4000);
}

Status Device::open(const DeviceConfig& cfg, std::shared_ptr<Pd> pd, std::unique_ptr<Device>& out) {
    auto pdi = std::dynamic_pointer_cast<PdImpl>(pd);
    if (!pdi)
        return Status::invalid_param;
    if (!valid_roce_mtu(cfg.mtu))
        return Status::invalid_param;
    if (cfg.sq_depth == 0 || cfg.max_rd_atomic == 0 || cfg.ack_coalesce == 0 ||
        cfg.retransmit_timeout_us == 0 || cfg.recv_queue_len == 0)
        return Status::invalid_param;
    if (cfg.max_rd_atomic > replay_entries) {
        // The responder answers duplicates of the last replay_entries READs/atomics only: a peer
        // with more outstanding would find its retransmitted atomics refused.
        ROCE_ERROR("max_rd_atomic %u is over the %zu outstanding READs/atomics the userspace device "
                   "serves (UCX_RC_ROCE_MAX_RD_ATOMIC)", cfg.max_rd_atomic, replay_entries);
        return Status::invalid_param;
    }
    if (cfg.ack_delay_us > cfg.ack_delay_limit_us()) {
        ROCE_ERROR("ACK delay %u us must be at most a quarter of the retransmission timeout (%u us here)",
                   cfg.ack_delay_us, cfg.ack_delay_limit_us());
        return Status::invalid_param;
    }
    auto dev = std::make_unique<DeviceImpl>(cfg, std::move(pdi));
    const Status s = dev->init();
    if (s != Status::ok)
        return s;
    out = std::move(dev);
    return Status::ok;
}

DeviceImpl::DeviceImpl(const DeviceConfig& cfg, std::shared_ptr<PdImpl> pd)
    : cfg_(cfg), pd_(std::move(pd)), faults_(cfg.faults) {}

Status DeviceImpl::init() {
    Status s = sock_.open(cfg_.ip, cfg_.ports, cfg_.traffic_class, cfg_.priority, cfg_.gro);
    if (s != Status::ok)
        return s;
    {   // a wildcard address has no ICRC identity
        static const uint8_t zero[16] = {};
        if (std::memcmp(sock_.local().ip, zero, sock_.local().family == AF_INET ? 4 : 16) == 0)
            return Status::invalid_param;
    }
    if (getrandom(rng_, sizeof(rng_), 0) != ssize_t(sizeof(rng_))) {
        rng_[0] = now_ns() ^ uint64_t(getpid()) << 32;
        rng_[1] = uintptr_t(this);
    }
    rng_[1] |= 1;
    next_qpn_ = 2 + random32() % 0x7fff00;
    // In-flight packets per QP: what half the peer's receive buffer holds (assumed configured
    // like ours; loopback charges ~2x the datagram size per packet).
    const uint32_t per_pkt = cfg_.mtu <= 1024 ? 4096 : 2 * (cfg_.mtu + 512);
    window_pkts_ = std::clamp<uint32_t>(uint32_t(sock_.rcvbuf_bytes()) / 2 / per_pkt, 16, 256);
    read_chunk_pkts_ = std::clamp<uint32_t>(uint32_t(cfg_.max_read_request / cfg_.mtu), 1,
                                            std::max<uint32_t>(1, window_pkts_ / 8));
    cc_mode_ = resolve_cc_mode();   // needs the bound address

    if (!cfg_.pcap_path.empty()) {
        std::string err;
        const std::string path = expand_trace_path(cfg_.pcap_path, sock_.local().port);
        if (PcapWriter::open(path, cfg_.pcap_limit, pcap_, err) != Status::ok) {
            ROCE_ERROR("packet trace: %s", err.c_str());
            return Status::io_error;
        }
        ROCE_INFO("packet trace of %s: %s", sock_.local().to_string().c_str(), path.c_str());
    }
    gso_ = cfg_.gso && sock_.gso_supported() && !faults_.enabled();
    gro_ = sock_.gro_enabled();
    if (gro_) {
        rx_n_ = 16;
        rx_size_ = 65536;
    }
    tx_.resize(tx_batch);
    tx_msgs_.resize(2 * tx_batch + 2);
    tx_msg_sock_.resize(2 * tx_batch + 2);
    tx_iov_.resize(3 * tx_batch + 2);   // a gathered packet takes three (tx_send_gso)
    tx_cmsg_.resize(tx_batch);
    rx_bufs_.resize(size_t(rx_n_) * rx_size_);
    rx_msgs_.resize(rx_n_);
    rx_iov_.resize(rx_n_);
    rx_sa_.resize(rx_n_);
    rx_cmsg_.resize(rx_n_);
    for (unsigned i = 0; i < rx_n_; ++i) {
        rx_iov_[i] = {rx_bufs_.data() + size_t(i) * rx_size_, rx_size_};
        std::memset(&rx_msgs_[i], 0, sizeof(mmsghdr));
        rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
        rx_msgs_[i].msg_hdr.msg_iovlen = 1;
        rx_msgs_[i].msg_hdr.msg_name = &rx_sa_[i];
        rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
        rx_msgs_[i].msg_hdr.msg_control = rx_cmsg_[i].b;   // GRO segment size, ToS (ECN)
        rx_msgs_[i].msg_hdr.msg_controllen = sizeof(rx_cmsg_[i].b);
    }

    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    notify_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || notify_fd_ < 0 || stop_fd_ < 0)
        return Status::io_error;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = sock_.fd();
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, sock_.fd(), &ev);
    ev.data.fd = notify_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, notify_fd_, &ev);

    // The owner pushes the thread's timer so that it fires at least 1 ms after a push: a timer
    // due sooner than the kernel's next tick is reprogrammed in hardware, which costs a virtual
    // machine an exit (timerfd_settime 5.3 us at 0.5 ms, 3.4 at 1 ms, 1.3 from 5 ms on, this
    // machine). Pushed every 250 us, as it was with the 500 us default, UCT am_lat averaged
    // 6.7-6.9 us against 6.3-6.4 with the thread off; every 750 us (fires 1 ms after), 6.3-6.5.
    // The thread then takes over 0.5-1 ms after the owner's last call instead of at 0.5 ms: a
    // delayed ACK (200 us) of an owner that stopped leaves within ~1.2 ms, inside the peer's 2 ms
    // retransmission timeout. The floor is kept to twice the idle time and half the
    // retransmission timeout (a held or delayed ACK of an owner that stopped waits for the
    // takeover). Not while the thread serves an owner that calls only now and then
    // (thread_main): a passive target's throughput is the thread's takeover delay after each
    // such call (ucp_get 1 MiB 2.2 GB/s with pushes every 250 us, 1.2 with every 750 us).
    const uint64_t idle_ns = uint64_t(cfg_.idle_takeover_us) * 1000;
    const uint64_t min_fire_ns =
            std::min({uint64_t(1'000'000), 2 * idle_ns, uint64_t(cfg_.retransmit_timeout_us) * 500});
    rearm_quiet_ns_ = std::max(idle_ns / 2, min_fire_ns > idle_ns / 2 ? min_fire_ns - idle_ns / 2 : 0);
    owner_.open(idle_ns, now_ns(), cfg_.progress_thread, rearm_quiet_ns_);
    if (cfg_.progress_thread)
        thread_ = std::thread([this] { thread_main(); });
    return Status::ok;
}

DeviceImpl::~DeviceImpl() {
    if (thread_.joinable()) {
        stop_ = true;
        uint64_t one = 1;
        (void)!write(stop_fd_, &one, sizeof(one));
        thread_.join();
    }
    {
        std::lock_guard lk(mu_);
        std::vector<uint32_t> ids;
        for (auto& [q, p] : qps_)
            ids.push_back(q);
        for (uint32_t q : ids)
            destroy_qp(q);
        tx_flush();
    }
    for (int fd : {epoll_fd_, notify_fd_, stop_fd_})
        if (fd >= 0)
            ::close(fd);
}

uint32_t DeviceImpl::random32() {
    uint64_t s1 = rng_[0];
    const uint64_t s0 = rng_[1];
    rng_[0] = s0;
    s1 ^= s1 << 23;
    rng_[1] = s1 ^ s0 ^ (s1 >> 17) ^ (s0 >> 26);
    return uint32_t((rng_[1] + s0) >> 16);
}

DeviceStats DeviceImpl::stats() const {
    std::lock_guard lk(mu_);
    return st_;
}

RcDevice::Counters DeviceImpl::counters() const {
    const DeviceStats st = stats();
    Counters out;
#define ROCE_SW_STAT(f) out.emplace_back(#f, st.f);
    ROCE_SW_STAT(tx_packets) ROCE_SW_STAT(tx_bytes) ROCE_SW_STAT(rx_packets) ROCE_SW_STAT(rx_bytes)
    ROCE_SW_STAT(retransmits) ROCE_SW_STAT(duplicates) ROCE_SW_STAT(seq_errors)
    ROCE_SW_STAT(naks_sent) ROCE_SW_STAT(naks_received) ROCE_SW_STAT(rnr_naks)
    ROCE_SW_STAT(timeouts) ROCE_SW_STAT(icrc_errors) ROCE_SW_STAT(malformed)
    ROCE_SW_STAT(dropped_unknown_qp) ROCE_SW_STAT(gso_sends) ROCE_SW_STAT(gro_datagrams)
    ROCE_SW_STAT(rx_nonzero_ipv4_id) ROCE_SW_STAT(ce_received) ROCE_SW_STAT(cnps_sent)
    ROCE_SW_STAT(cnps_received) ROCE_SW_STAT(cnps_local) ROCE_SW_STAT(faults_ce) ROCE_SW_STAT(cc_paced)
    ROCE_SW_STAT(reads_capped) ROCE_SW_STAT(tx_gathered) ROCE_SW_STAT(tx_region_gone)
    ROCE_SW_STAT(resp_dropped)
    ROCE_SW_STAT(naks_sent_seq) ROCE_SW_STAT(naks_sent_rnr)
    ROCE_SW_STAT(naks_sent_access) ROCE_SW_STAT(naks_sent_invalid) ROCE_SW_STAT(naks_received_seq)
    ROCE_SW_STAT(naks_received_rnr) ROCE_SW_STAT(naks_received_access) ROCE_SW_STAT(naks_received_invalid)
    ROCE_SW_STAT(faults_dropped) ROCE_SW_STAT(faults_duplicated) ROCE_SW_STAT(faults_reordered)
    ROCE_SW_STAT(faults_corrupted) ROCE_SW_STAT(faults_truncated) ROCE_SW_STAT(faults_acks_dropped)
    ROCE_SW_STAT(faults_delayed) ROCE_SW_STAT(cm_refused) ROCE_SW_STAT(cm_probes)
    ROCE_SW_STAT(cm_reaped) ROCE_SW_STAT(reasm_given_up)
#undef ROCE_SW_STAT
    return out;
}

static RcDevice::Counters qp_stat_list(const QpStats& st) {
    RcDevice::Counters out;
#define ROCE_NAMED(f) out.emplace_back(#f, st.f);
    ROCE_SW_QP_STATS(ROCE_NAMED)
#undef ROCE_NAMED
    return out;
}

std::vector<RcDevice::QpCounters> DeviceImpl::qp_counters() const {
    std::lock_guard lk(mu_);
    std::vector<QpCounters> out;
    out.reserve(qps_.size());
    for (const auto& [qpn, qp] : qps_) {
        QpCounters q{qpn, qp->dest_qpn, qp->peer.to_string(), qp->state, {}};
        q.counters = qp_stat_list(qp->st);
        // Gauges (*_now): the QP at this moment, not monotonic.
        q.counters.emplace_back("outstanding_now", qp->sq.size());
        q.counters.emplace_back("cwnd_pkts_now", uint64_t(qp->cwnd));
        q.counters.emplace_back("srtt_us_now", uint64_t(qp->srtt_ns / 1000));
        if (qp->cc) {
            q.counters.emplace_back("cc_rate_mbps_now", uint64_t(qp->cc->rate_bps() / 1e6));
            if (qp->cc->cwnd_bytes() > 0)
                q.counters.emplace_back("cc_window_bytes_now", uint64_t(qp->cc->cwnd_bytes()));
        }
        out.push_back(std::move(q));
    }
    // Destroyed QPs, summed per peer: the peer's totals survive its connections' teardown.
    for (const auto& [peer, st] : closed_qps_)
        out.push_back(QpCounters{0, 0, peer, QpState::error, qp_stat_list(st), true});
    return out;
}

Qp* DeviceImpl::find_qp(uint32_t qpn) {
    auto it = qps_.find(qpn);
    return it == qps_.end() ? nullptr : it->second.get();
}

Qp* DeviceImpl::new_qp() {
    if (qps_.size() >= 0xfff000)
        return nullptr;
    uint32_t q;
    do {
        q = next_qpn_;
        next_qpn_ = next_qpn_ + 1 > 0xffffff ? 2 : next_qpn_ + 1;
    } while (q < 2 || qps_.count(q));
    auto qp = std::make_unique<Qp>();
    qp->qpn = q;
    qp->mtu = cfg_.mtu;
    qp->sq_start_psn = random32() & wire::psn_mask;
    qp->next_psn = qp->una_psn = qp->sent_hi = qp->sq_start_psn;
    qp->retries_left = cfg_.retry_count;
    qp->rnr_left = cfg_.rnr_retry;
    qp->cur_timeout_ns = uint64_t(cfg_.retransmit_timeout_us) * 1000;
    qp->cwnd = qp->ssthresh = window_pkts_;
    cc_init(*qp);
    Qp* p = qp.get();
    qps_.emplace(q, std::move(qp));
    return p;
}

void DeviceImpl::set_peer(Qp& qp, const WireAddr& peer) {
    qp.peer = peer;
    qp.peer_salen = to_sockaddr(peer, qp.peer_sa);
    fill_ip_context(sock_.local(), peer, qp.tx_ip);
}

Status DeviceImpl::create_qp(uint32_t& qpn) {
    std::lock_guard lk(mu_);
    Qp* qp = new_qp();
    if (!qp)
        return Status::no_resource;
    qpn = qp->qpn;
    return Status::ok;
}

Status DeviceImpl::connect_qp(uint32_t qpn, const WireAddr& peer) {
    std::lock_guard lk(mu_);
    Qp* qp = find_qp(qpn);
    if (!qp || qp->state != QpState::reset)
        return Status::invalid_param;
    if (peer.family != sock_.local().family)
        return Status::unreachable;
    if (peer.port == 0)
        return Status::invalid_param;
    set_peer(*qp, peer);
    qp->conn_id = uint64_t(random32()) << 32 | random32();
    qp->state = QpState::connecting;
    qp->cm_timeout_ns = uint64_t(cfg_.retransmit_timeout_us) * 1000;
    qp->cm_retries = cfg_.retry_count;
    cm_send_req(*qp);
    tx_flush();
    return Status::ok;
}

// A DREQ (retried until answered) frees the peer's passive QP: it runs no timer of its own.
void DeviceImpl::send_dreq(Qp& qp) {
    if (qp.manual || (qp.state != QpState::rts && qp.state != QpState::connecting))
        return;
    const cm::Msg m = conn_msg(qp, cm::MsgType::dreq);
    cm_send(qp.peer, m);
    const uint64_t first_ns = 2000000;   // then 4, 8, ... ms, cm::dreq_tries in all
    closing_.push_back({qp.peer, m, now_ns() + first_ns, first_ns, cm::dreq_tries - 1});
}

Status DeviceImpl::cancel_qp(uint32_t qpn) {
    std::lock_guard lk(mu_);
    Qp* qp = find_qp(qpn);
    if (!qp)
        return Status::invalid_param;
    if (qp->state != QpState::error) {
        send_dreq(*qp);   // now: destroy_qp finds the QP in error and would not
        qp_fail(*qp, Status::canceled);
    }
    return Status::ok;
}

Status DeviceImpl::destroy_qp(uint32_t qpn) {
    std::lock_guard lk(mu_);
    Qp* qp = find_qp(qpn);
    if (!qp)
        return Status::invalid_param;
    send_dreq(*qp);
    qp_fail(*qp, Status::canceled);
    if (qp->passive) {
        timewait_add(qp->conn_id, now_ns());
        auto it = passive_.find({peer_key(qp->peer), qp->dest_qpn});
        if (it != passive_.end() && it->second == qpn)
            passive_.erase(it);
    }
    if (qp->state != QpState::reset || qp->st.tx_packets)
        add_closed(closed_qps_, qp->peer, qp->st);
    const uint8_t socks[2] = {qp->tx_sock, qp->cnp_sock};
    qps_.erase(qpn);
    std::erase(ack_list_, qpn);
    std::erase(resp_list_, qpn);
    tx_flush();
    // After the flush: a sibling nobody uses may be reopened in another class. (Packets the
    // fault injector delays keep the id and would leave in that class: test runs only.)
    for (uint8_t s : socks)
        class_socks_.release(s);
    return Status::ok;
}

QpState DeviceImpl::qp_state(uint32_t qpn) const {
    std::lock_guard lk(mu_);
    auto it = qps_.find(qpn);
    return it == qps_.end() ? QpState::error : it->second->state;
}

size_t DeviceImpl::outstanding(uint32_t qpn) const {
    std::lock_guard lk(mu_);
    if (qpn != 0) {
        auto it = qps_.find(qpn);
        return it == qps_.end() ? 0 : it->second->sq.size();
    }
    size_t n = 0;
    for (auto& [q, p] : qps_)
        n += p->sq.size();
    return n;
}

// ---- posting

Status DeviceImpl::post_send(uint32_t qpn, uint64_t wr_id, const iovec* iov, size_t iovcnt,
                             const uint32_t* imm) {
    std::lock_guard lk(mu_);   // the copy goes into a pooled buffer
    Wr w;
    w.wr_id = wr_id;
    w.op = OpKind::send;
    w.lazy = (wr_id & wr_id_lazy) != 0;
    size_t total = 0;
    for (size_t i = 0; i < iovcnt; ++i)
        total += iov[i].iov_len;
    w.owned = take_buf();
    w.owned.reserve(total);
    for (size_t i = 0; i < iovcnt; ++i) {   // appended, not resized: no zero fill before the copy
        const auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
        if (iov[i].iov_len)
            w.owned.insert(w.owned.end(), p, p + iov[i].iov_len);
    }
    w.src = w.owned.data();
    w.len = total;
    if (imm) {
        w.has_imm = true;
        w.imm = *imm;
    }
    return post_wr(qpn, std::move(w));
}

Status DeviceImpl::post_write(uint32_t qpn, uint64_t wr_id, const void* local, size_t len,
                              uint64_t remote_va, uint32_t rkey, bool copy, uint32_t /*lkey*/) {
    if (len > 0xffffffffu || (len && !local))
        return Status::invalid_param;
    Wr w;
    w.wr_id = wr_id;
    w.op = OpKind::write;
    if (copy && len) {
        std::lock_guard lk(mu_);
        w.owned = take_buf();
        w.owned.assign(static_cast<const uint8_t*>(local), static_cast<const uint8_t*>(local) + len);
        w.src = w.owned.data();
    } else {
        w.src = static_cast<const uint8_t*>(local);
    }
    w.len = len;
    w.remote_va = remote_va;
    w.rkey = rkey;
    return post_wr(qpn, std::move(w));
}

Status DeviceImpl::post_read(uint32_t qpn, uint64_t wr_id, void* local, size_t len,
                             uint64_t remote_va, uint32_t rkey, uint32_t /*lkey*/) {
    if (len > 0x7fffffffu || (len && !local))
        return Status::invalid_param;
    Wr w;
    w.wr_id = wr_id;
    w.op = OpKind::read;
    w.dst = static_cast<uint8_t*>(local);
    w.len = len;
    w.remote_va = remote_va;
    w.rkey = rkey;
    return post_wr(qpn, std::move(w));
}

Status DeviceImpl::post_fetch_add(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                                  uint64_t add, uint64_t* result) {
    if (remote_va & 7)
        return Status::invalid_param;
    Wr w;
    w.wr_id = wr_id;
    w.op = OpKind::fetch_add;
    w.len = 8;
    w.remote_va = remote_va;
    w.rkey = rkey;
    w.swap_add = add;
    w.result = result;
    return post_wr(qpn, std::move(w));
}

Status DeviceImpl::post_cmp_swap(uint32_t qpn, uint64_t wr_id, uint64_t remote_va, uint32_t rkey,
                                 uint64_t compare, uint64_t swap, uint64_t* result) {
    if (remote_va & 7)
        return Status::invalid_param;
    Wr w;
    w.wr_id = wr_id;
    w.op = OpKind::cmp_swap;
    w.len = 8;
    w.remote_va = remote_va;
    w.rkey = rkey;
    w.swap_add = swap;
    w.compare = compare;
    w.result = result;
    return post_wr(qpn, std::move(w));
}

// ---- completions and received messages

void DeviceImpl::push_completion(const Completion& c) {
    cq_.push_back(c);
    ++new_events_;
}

size_t DeviceImpl::poll_completions(Completion* out, size_t max) {
    std::lock_guard lk(mu_);
    size_t n = 0;
    while (n < max && !cq_.empty()) {
        out[n++] = cq_.front();
        cq_.pop_front();
    }
    return n;
}

void DeviceImpl::charge_rbuf(Qp& qp) {
    rq_bytes_ += qp.rbuf.size() - qp.rbuf_charge;
    qp.rbuf_charge = qp.rbuf.size();
}

std::vector<uint8_t> DeviceImpl::take_rbuf(Qp& qp) {
    rq_bytes_ -= std::exchange(qp.rbuf_charge, 0);
    return std::exchange(qp.rbuf, {});
}

void DeviceImpl::release_rbuf(Qp& qp) {
    give_buf(take_rbuf(qp));
}

bool DeviceImpl::give_up_overdue_sends(uint64_t now) {
    const uint64_t deadline = uint64_t(cfg_.reasm_deadline_ms) * 1000000;
    if (overdue_scan_ns_ && elapsed_ns(now, overdue_scan_ns_) < deadline / 4)
        return false;
    overdue_scan_ns_ = now;
    bool any = false;
    for (auto& [qpn, q] : qps_) {
        Qp& qp = *q;
        if (qp.in_op != Qp::InOp::send || elapsed_ns(now, qp.rbuf_first_ns) < deadline)
            continue;
        if (st_.reasm_given_up++ < 8)   // anyone can cause it: the first few are logged
            ROCE_WARN("qp 0x%x: a SEND from %s unfinished after %u ms with the receive budget (%zu bytes) "
                      "spent: given up, the connection fails", qp.qpn, qp.peer.to_string().c_str(),
                      cfg_.reasm_deadline_ms, cfg_.recv_budget);
        // READ responses still queued on this QP die with it (pump_responses drops a failed
        // QP's jobs): a NAK queued behind them would die too, and the peer would learn only by
        // its own timeout. Dropped first, so the NAK leaves now.
        qp.resp_jobs.clear();
        send_ack(qp, wire::aeth_nak_syndrome(wire::nak_invalid_request), qp.epsn);
        qp_fail(qp, Status::remote_invalid);   // (drops the reassembly)
        any = true;
    }
    return any;
}

// fn: poll_recv's std::function or progress_round's sink.
template <typename Fn>
size_t DeviceImpl::recv_locked(Fn&& fn, size_t max, uint64_t now) {
    size_t n = 0;
    while (n < max && !rq_.empty()) {
        RecvEntry e = std::move(rq_.front());
        rq_.pop_front();
        rq_bytes_ -= e.charge;
        if (Qp* qp = find_qp(e.qpn); qp && qp->undelivered)
            --qp->undelivered;
        RecvMessage m{e.qpn, e.data.data(), e.data.size(), e.has_imm, e.imm};
        ++n;
        fn(m);
        give_buf(std::move(e.data));
    }
    // ACKs progress() held back stay held a little longer: an MPI rank answers a message after
    // poll_recv returns (the receive completes, then the application sends), and the reply's
    // post flushes ACK and reply in one sendmmsg — one system call less on the critical path of
    // every ping-pong. The next progress() flushes them too; if the owner does neither, the
    // progress thread wakes at the deadline below (well inside any retransmission timeout).
    if (tx_n_ > 0)
        hold_tx(now);
    return n;
}

size_t DeviceImpl::poll_recv(const std::function<void(const RecvMessage&)>& fn, size_t max) {
    std::lock_guard lk(mu_);
    return recv_locked(fn, max, now_ns());
}

void DeviceImpl::hold_tx(uint64_t now) {
    if (!cfg_.progress_thread) {
        tx_flush();   // nobody else would send them
        return;
    }
    const uint64_t deadline = now + uint64_t(cfg_.idle_takeover_us) * 1000;
    const uint64_t next = next_timer_ns_.load(std::memory_order_relaxed);
    if (!next || deadline < next)
        next_timer_ns_.store(deadline, std::memory_order_relaxed);
}

unsigned DeviceImpl::progress() {
    std::lock_guard lk(mu_);
    uint64_t now = now_ns();
    return owner_progress_locked(now);
}

// The owner's whole round under one acquisition of mu_ (three before, and a std::function built
// per round: an idle round took 1,171 user instructions, now 627; callgrind over
// bench/device_bench.cpp's BM_sw_idle_round). The callbacks run
// under it, as poll_recv's always did; a completion they queue (a refused post) is handed out
// by this same loop.
unsigned DeviceImpl::progress_round(ProgressSink& sink, size_t max_recv) {
    std::lock_guard lk(mu_);
    uint64_t now = now_ns();
    unsigned count = owner_progress_locked(now);   // now: its last reading
    while (!cq_.empty()) {
        const Completion c = cq_.front();
        cq_.pop_front();
        ++count;
        sink.completion(c);
    }
    if (!rq_.empty())
        count += unsigned(recv_locked([&sink](const RecvMessage& m) { sink.message(m); }, max_recv, now));
    return count;
}

unsigned DeviceImpl::owner_progress_locked(uint64_t& now) {
    owner_.stamp(now);
    const unsigned pending_from_thread = new_events_;
    new_events_ = 0;
    tx_flush();   // anything held back by the previous call or posted since
    return progress_locked(true, now) + pending_from_thread;   // it stamps owner_ again
}

void DeviceImpl::thread_main() {
    const uint64_t idle_ns = uint64_t(cfg_.idle_takeover_us) * 1000;
    constexpr uint64_t serve_window_ns = 100'000'000;
    uint64_t served_ns = 0;   // when this thread last ran the protocol
    bool serving = false;     // it did so within the last serve_window_ns
    while (!stop_.load()) {
        const uint64_t now = now_ns();
        // The owner pushes the thread's timer every rearm period (see init()): rarely while it
        // polls busily and the thread has nothing to do; every half idle time while the thread
        // serves an owner that calls only now and then (a passive target), which is woken as
        // soon as possible again after each of its calls.
        if (serving != (elapsed_ns(now, served_ns) < serve_window_ns)) {
            serving = !serving;
            owner_.set_rearm(serving ? 0 : rearm_quiet_ns_);
        }
        if (!owner_.owner_idle(now)) {
            // Asleep while the owner progresses; while serving, back in time to end that mode.
            owner_.wait_owner_idle(stop_fd_, serving ? serve_window_ns : 0);
            continue;
        }
        // Sleep until a packet arrives or the next timer is due (at most 10 ms, so work posted
        // meanwhile gets its retransmission timer served).
        uint64_t wait = 10000000;
        const uint64_t next = next_timer_ns_.load(std::memory_order_relaxed);
        if (next)
            wait = std::clamp<uint64_t>(next > now ? next - now : 0, 20000, wait);
        sleep_or_stop(stop_fd_, sock_.fd(), wait);
        if (stop_.load())
            break;
        std::unique_lock lk(mu_, std::try_to_lock);
        if (!lk.owns_lock()) {
            // Someone (the owner, or a post from another thread) is in the device: back off
            // instead of spinning on a readable socket.
            sleep_or_stop(stop_fd_, -1, std::max<uint64_t>(idle_ns / 4, 20000));
            continue;
        }
        uint64_t t = now_ns();
        if (!owner_.owner_idle(t))
            continue;
        const unsigned before = new_events_;
        // The thread was watching the socket, not away: timers are not frozen, and what it
        // reads arrived while it slept (an arrival wakes it).
        last_timer_ns_ = served_ns = rx_emptied_ns_ = t;
        progress_locked(false, t);
        if (new_events_ != before) {
            notified_.store(true, std::memory_order_relaxed);
            uint64_t one = 1;
            (void)!write(notify_fd_, &one, sizeof(one));
        }
    }
}

} // namespace roce::sw
