#include "ud/transport.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <random>
#include <stdexcept>

#include "common/log.hpp"

namespace roce::ud {

namespace {
// What an AM kept for the owner costs besides its bytes (its vector and list entry).
constexpr size_t deferred_charge(size_t len) { return len + 64; }
} // namespace

Transport::Transport(const TransportConfig& cfg, std::unique_ptr<DatagramQp> qp, Callbacks cb)
    : cfg_(cfg), qp_(std::move(qp)), cb_(std::move(cb)) {
    frag_ = qp_->max_payload() - header_size;
    hold_budget_.limit = cfg_.hold_budget;
    // AMs reassembled at once: 1024 at the default SEG_SIZE (64 KiB), at least 16 at any.
    hold_budget_.reasm_limit = std::max(cfg_.hold_budget, 16 * cfg_.rx.max_msg);
    service_interval_ns_ = std::min<uint64_t>(20'000, cfg_.ack_delay_ns / 2);
    while (cfg_.sender_id == 0) {
        cfg_.sender_id = std::random_device{}();
    }
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    notify_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    stop_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_fd_ < 0 || notify_fd_ < 0 || stop_fd_ < 0) {
        for (int fd : {epoll_fd_, notify_fd_, stop_fd_}) if (fd >= 0) ::close(fd);
        throw std::runtime_error("ud transport: out of file descriptors");
    }
    for (int fd : {qp_->event_fd(), notify_fd_}) {
        if (fd < 0) continue;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    }
    holds_ = qp_->holds_sends();
    // Where sends wait for the thread when the owner leaves (holds_), it must come soon; where it
    // is there for liveness only (verbs), the owner pushes its timer every 10 ms, as often as the
    // thread used to wake to look: each push is a system call, ~1 per ms at the default 2 ms
    // takeover cost UCP tag_lat on rxe under TCG ~8-13% in two 11-round A/B runs.
    const uint64_t idle = std::max<uint64_t>(cfg_.idle_takeover_ns, 100'000);
    owner_.open(idle, now_ns(), cfg_.progress_thread, holds_ ? 0 : std::max<uint64_t>(idle / 2, 10'000'000));
    if (cfg_.progress_thread) {
        thread_ = std::thread([this] { thread_main(); });
    }
}

Transport::~Transport() {
    if (thread_.joinable()) {
        stop_ = true;
        uint64_t one = 1;
        (void)!::write(stop_fd_, &one, sizeof(one));
        thread_.join();
    }
    for (int fd : {epoll_fd_, notify_fd_, stop_fd_}) ::close(fd);
}

UdAddr Transport::peer_addr(PeerId id) const {
    std::lock_guard lk(mu_);
    return peers_[id]->addr;
}

Status Transport::peer_status(PeerId id) const {
    std::lock_guard lk(mu_);
    return peers_[id]->status;
}

bool Transport::busy() const {
    std::lock_guard lk(mu_);
    return !active_.empty();
}

bool Transport::has_deferred() const {
    std::lock_guard lk(mu_);
    return !deferred_.empty() || !failures_.empty();
}

void Transport::arm() {
    std::lock_guard lk(mu_);
    qp_->arm();
    watched_ = true;   // the owner sleeps on event_fd next
}

Transport::PeerId Transport::peer(const UdAddr& addr, size_t max_payload, const ClassAdvert* cls) {
    std::lock_guard lk(mu_);
    auto it = by_addr_.find(addr);
    PeerId id;
    if (it != by_addr_.end()) {
        id = it->second;
    } else {
        id = PeerId(peers_.size());
        peers_.push_back(std::make_unique<Peer>());
        peers_.back()->addr = addr;
        peers_.back()->frag = frag_;
        by_addr_.emplace(addr, id);
        ++stats_.peers;
    }
    // Packets queued before keep their size: the peer's QP took them before it was known.
    Peer& p = *peers_[id];
    if (cls)
        p.cls = qp_->class_for(*cls);
    if (max_payload > header_size && max_payload - header_size < p.frag) {
        p.frag = max_payload - header_size;
        const size_t most = cfg_.tx.queue_len * p.frag;
        if (most < cfg_.rx.max_msg && !warned_small_mtu_) {
            // send_am refuses what could never fit the queue (it would wait for room forever).
            // Logged for the first such peer only: many could be.
            warned_small_mtu_ = true;
            ROCE_WARN("ud_roce: peer %s takes %zu-byte packets: messages above %zu bytes to it fail "
                      "(a message of SEG_SIZE %zu needs more packets than TX_QUEUE_LEN %u)",
                      addr.to_string().c_str(), max_payload, most, cfg_.rx.max_msg, cfg_.tx.queue_len);
        }
    }
    return id;
}

size_t Transport::packet_payload(PeerId id) const {
    std::lock_guard lk(mu_);
    return peers_[id]->frag;
}

Sender& Transport::tx(Peer& p) {
    if (!p.tx) p.tx = std::make_unique<Sender>(cfg_.tx, &tx_buffers_);
    return *p.tx;
}

// The reassembly pool is full: AMs under way whose sender fell silent give their share back. A
// sender mid-AM always has packets unacknowledged and retransmits them at least every max_rto
// (0.5 s), so one whose sequence has not advanced for a quarter of the peer timeout (7.5 s), and
// 4 x max_rto at least, is dead or stopped (or a stranger repeating a first fragment: heard,
// but no live sender's AM stands still that long); one that was only stopped gets the rest of
// its AM refused and times out (Receiver::release_stale): nothing is lost in silence. Well within
// the peer timeout, so that a sender the full pool keeps waiting (whose first fragments are
// refused meanwhile) is not given up before the pool is swept. At most one walk over the peers
// per second.
void Transport::release_stale_reservations(uint64_t now) {
    const uint64_t idle = std::max(cfg_.tx.peer_timeout_ns / 4, 4 * cfg_.tx.max_rto_ns);
    if (elapsed_ns(now, last_reasm_sweep_ns_) < std::min<uint64_t>(idle / 4, 1'000'000'000)) {
        return;
    }
    last_reasm_sweep_ns_ = now;
    for (auto& p : peers_) {
        if (p->rx && p->rx->holds_reservation()) {
            p->rx->release_stale(now, idle);
        }
    }
}

Receiver& Transport::rx(Peer& p) {
    if (!p.rx) p.rx = std::make_unique<Receiver>(cfg_.rx, &hold_budget_);
    return *p.rx;
}

void Transport::activate(PeerId id) {
    Peer& p = *peers_[id];
    if (!p.active) {
        p.active = true;
        active_.push_back(id);
    }
}

Status Transport::put(const Peer& p, const iovec* iov, size_t iovcnt) {
    return hold_ ? qp_->send_held(p.addr, p.cls, iov, iovcnt) : qp_->send(p.addr, p.cls, iov, iovcnt);
}

bool Transport::emit(Peer& p, const Sender::Packet& pkt, bool ack_req) {
    Header h;
    h.type = pkt.type;
    h.flags = uint8_t(pkt.flags | (ack_req ? flag_ack_req : 0) | (p.rx && p.rx->nak() ? flag_nak : 0));
    h.am_id = pkt.am_id;
    h.sender_id = cfg_.sender_id;
    h.psn = pkt.psn;
    h.ack = p.rx ? p.rx->ack() : 0;
    h.sack = p.rx ? p.rx->sack() : 0;
    uint8_t hdr[header_size];
    encode(h, hdr);
    iovec iov[2] = {{hdr, header_size},
                    {const_cast<uint8_t*>(pkt.payload.data()), pkt.payload.size()}};
    const Status s = put(p, iov, pkt.payload.empty() ? 1 : 2);
    if (s == Status::no_resource) {
        return false;
    }
    // Other errors (e.g. an unreachable address) count as a lost packet: the retransmission
    // timer and, in the end, the peer timeout deal with them like with any loss.
    if (p.rx) p.rx->ack_sent();
    ++(pkt.type == PktType::probe ? stats_.probes_sent : stats_.data_sent);
    ++(pkt.type == PktType::probe ? p.probes_sent : p.data_sent);
    p.bytes_sent += pkt.payload.size();
    return true;
}

void Transport::send_ack(Peer& p, uint8_t flags) {
    Header h;
    h.type = PktType::ack;
    h.flags = flags;
    h.sender_id = cfg_.sender_id;
    Receiver& r = rx(p);   // (a busy ACK may be the first word to a peer)
    if (r.nak() && !(flags & flag_busy)) h.flags |= flag_nak;   // (busy: it takes nothing now)
    h.ack = r.ack();
    h.sack = r.sack();
    uint8_t hdr[header_size];
    encode(h, hdr);
    iovec iov{hdr, header_size};
    if (put(p, &iov, 1) != Status::no_resource) {
        r.ack_sent();
        ++stats_.acks_sent;
        ++p.acks_sent;
    }
}

Status Transport::send_am(PeerId id, uint8_t am_id, const iovec* iov, size_t iovcnt) {
    std::lock_guard lk(mu_);
    Peer& p = *peers_[id];
    if (p.status != Status::ok) {
        return p.status;
    }
    size_t len = 0;
    for (size_t i = 0; i < iovcnt; ++i) len += iov[i].iov_len;
    if (len > cfg_.rx.max_msg) {
        return Status::invalid_param;
    }
    const size_t frag = p.frag;
    const size_t npkts = p.packets_for(len);
    if (npkts > cfg_.tx.queue_len) {
        return Status::invalid_param;   // a small-MTU peer (peer() warned)
    }
    Sender& s = tx(p);
    if (!s.can_queue(npkts)) {
        return Status::no_resource;
    }
    const uint64_t now = now_ns();
    size_t off = 0;
    for (size_t i = 0; i < npkts; ++i) {
        const size_t n = std::min(frag, len - off);
        uint8_t flags = uint8_t((i == 0 ? flag_first : 0) | (i + 1 == npkts ? flag_last : 0));
        s.enqueue(PktType::data, flags, am_id, iov, iovcnt, off, n, now);
        off += n;
    }
    // The first message since the owner's progress call leaves at once (a ping-pong's reply),
    // its fragments together; later ones wait for the next progress call or a full batch, so a
    // burst of small messages costs one system call per batch on the userspace device. If the
    // owner stops calling progress, the background thread sends them once the owner has been
    // idle for the takeover time (OwnerWatch). Without the thread nothing waits.
    if (!holds_) {   // a device that sends at once (verbs): nothing to hold or flush
        s.transmit(now, [&](const Sender::Packet& pkt, bool ack_req) { return emit(p, pkt, ack_req); });
        activate(id);
        return Status::ok;
    }
    const bool later = cfg_.progress_thread && posts_since_progress_++ > 0;
    {
        // Also inside receive() (an AM handler replies): the first message still leaves at once,
        // with what the receive pass held so far ahead of it.
        HoldSends hold(hold_, later || npkts > 1);
        s.transmit(now, [&](const Sender::Packet& pkt, bool ack_req) { return emit(p, pkt, ack_req); });
    }
    if (!later && npkts > 1) qp_->flush();
    activate(id);
    return Status::ok;
}

bool Transport::can_send(PeerId id, size_t len) const {
    std::lock_guard lk(mu_);
    const Peer& p = *peers_[id];
    if (p.status != Status::ok) return true;   // the send reports the failure
    if (!p.tx) return true;
    const size_t npkts = p.packets_for(len);
    // A length that can never fit (a small-MTU peer) asks for an empty queue: then whatever
    // fits goes, and send_am refuses the rest for good — waiting for more room would hang.
    return p.tx->can_queue(std::min<size_t>(npkts, cfg_.tx.queue_len));
}

Status Transport::probe(PeerId id) {
    std::lock_guard lk(mu_);
    Peer& p = *peers_[id];
    if (p.status != Status::ok) {
        return p.status;
    }
    Sender& s = tx(p);
    if (!s.idle()) {
        activate(id);
        return Status::ok;   // packets in flight already prove (or disprove) the peer alive
    }
    const uint64_t now = now_ns();
    s.enqueue(PktType::probe, 0, 0, nullptr, 0, 0, 0, now);
    s.transmit(now, [&](const Sender::Packet& pkt, bool ack_req) { return emit(p, pkt, ack_req); });
    activate(id);
    return Status::ok;
}

bool Transport::flushed(PeerId id) const {
    std::lock_guard lk(mu_);
    const Peer& p = *peers_[id];
    return p.status != Status::ok || !p.tx || p.tx->idle();
}

bool Transport::all_flushed() const {
    std::lock_guard lk(mu_);
    for (PeerId id : active_) {
        if (!flushed(id)) return false;
    }
    return true;
}

void Transport::on_datagram(const Datagram& d, uint64_t now) {
    Header h;
    if (!decode(d.data, d.len, h)) {
        ++stats_.malformed;
        return;
    }
    // Traffic comes in runs from one peer: skip the hash lookup for the same address again.
    if (!(have_last_src_ && d.src == last_src_)) {
        auto it = by_addr_.find(d.src);
        if (it == by_addr_.end()) {
            if (passive_peers_ >= cfg_.max_passive_peers) {
                ++stats_.peers_refused;
                if (!warned_refused_) {
                    warned_refused_ = true;
                    ROCE_WARN("ud_roce: %zu peers have made contact without an endpoint of ours: datagrams "
                              "from further new sources (%s first) are dropped (counter peers_refused)",
                              passive_peers_, d.src.to_string().c_str());
                }
                return;
            }
            ++passive_peers_;
        }
        last_peer_ = it != by_addr_.end() ? it->second : peer(d.src);
        last_src_ = d.src;
        have_last_src_ = true;
    }
    const PeerId id = last_peer_;
    Peer& p = *peers_[id];
    // (Before the failed peer's check: a process that starts at the address of one given up
    // must not be ignored for good.)
    if (p.remote_id != h.sender_id && p.remote_id != 0) {
        if (h.sender_id == p.replaced_id) {
            return;   // late from the process this one replaced: it would flip them back and forth
        }
        if (passive_peers_ >= cfg_.max_passive_peers) {
            ++stats_.peers_refused;   // (the new peer would be refused: the old one stays as it is)
            return;
        }
        // Another process now answers at this address: what we sent and received belongs to
        // the one that is gone. If it had acknowledged all we sent, nothing was lost (reset:
        // UCP without error handling is not aborted for it, as for UCX's ud); else timeout.
        ++stats_.restarted_peers;
        const bool quiet = restarts_logged_ >= logged_restarts;
        if (!quiet && ++restarts_logged_ < logged_restarts) {
            ROCE_WARN("ud_roce: peer %s restarted (id %08x -> %08x)", p.addr.to_string().c_str(), p.remote_id,
                      h.sender_id);
        } else if (!quiet) {
            ROCE_WARN("ud_roce: peer %s restarted (id %08x -> %08x); further restarts are counted only "
                      "(counter restarted_peers)", p.addr.to_string().c_str(), p.remote_id, h.sender_id);
        }
        fail(id, p.tx && !p.tx->idle() ? Status::timeout : Status::reset, quiet);   // (no-op if failed)
        // The address is the new process's now: forgotten, so that this datagram makes a new
        // peer as any new source does (the old id stays failed for its endpoints).
        const uint32_t replaced = p.remote_id;
        by_addr_.erase(d.src);
        have_last_src_ = false;
        on_datagram(d, now);   // once: the new peer has no sender id yet
        if (auto it = by_addr_.find(d.src); it != by_addr_.end()) {
            peers_[it->second]->replaced_id = replaced;
        }
        return;
    }
    // A peer given up stays so, also for datagrams from an address that never answered before
    // it failed (remote_id 0): that may be the process we gave up, holding state for us.
    if (p.status != Status::ok) {
        return;
    }
    p.remote_id = h.sender_id;
    auto out = [&](const Sender::Packet& pkt, bool ack_req) { return emit(p, pkt, ack_req); };
    if (p.tx) {
        p.tx->on_ack(h.ack, h.sack, now, out, emptied_ns_ ? elapsed_ns(now, emptied_ns_) : 0,
                     (h.flags & flag_nak) != 0);
        if (h.type == PktType::ack && (h.flags & flag_busy)) {
            p.tx->on_peer_busy(now);
        }
    }
    if (h.type != PktType::ack && passive_ && deferred_bytes_ >= cfg_.hold_budget) {
        // Not taken (the owner has enough waiting): sent again later. The sender hears why, or
        // a rank computing for longer than the peer timeout would be given up.
        ++stats_.over_budget;
        if (p.rx) {
            p.rx->heard(now);   // alive: its AM under way is not a silent sender's (release_stale)
        }
        if (elapsed_ns(now, p.last_busy_ack_ns) >= 1'000'000) {
            p.last_busy_ack_ns = now;
            send_ack(p, flag_busy);
        }
    } else if (h.type != PktType::ack) {
        if (hold_budget_.reasm_used + cfg_.rx.max_msg > hold_budget_.reasm_limit) {
            release_stale_reservations(now);
        }
        rx(p).receive(h, d.data + header_size, d.len - header_size, now,
                      [&](uint8_t am_id, const uint8_t* data, size_t len) {
                          if (passive_) {   // the owner's callbacks run in the owner's thread
                              deferred_.push_back({id, am_id, std::vector<uint8_t>(data, data + len)});
                              deferred_bytes_ += deferred_charge(len);
                          } else {
                              cb_.deliver(id, am_id, data, len);
                          }
                      });
    }
    if ((p.tx && !p.tx->idle()) || (p.rx && p.rx->ack_pending())) {
        activate(id);
        urgent_ |= p.rx && p.rx->ack_now();
    }
}

void Transport::fail(PeerId id, Status why, bool quiet) {
    Peer& p = *peers_[id];
    if (p.status != Status::ok) return;
    if (!quiet)
        ROCE_WARN("ud_roce: peer %s failed (%s): %s; received up to %u", p.addr.to_string().c_str(),
                  std::string(to_string(why)).c_str(), p.tx ? p.tx->describe().c_str() : "nothing sent",
                  p.rx ? p.rx->ack() : 0);
    p.status = why;
    if (p.tx) {
        const SenderStats& s = p.tx->stats();
        dead_tx_.retransmits += s.retransmits;
        dead_tx_.fast_retransmits += s.fast_retransmits;
        dead_tx_.timeouts += s.timeouts;
        dead_tx_.window_cuts += s.window_cuts;
        p.tx->drop_all();
    }
    if (p.rx) {
        p.rx->drop_held();
    }
    ++stats_.failed_peers;
    failures_.emplace_back(id, why);
}

// ACKs that are due, retransmission timers, failures; drops idle peers from the active list.
void Transport::service(uint64_t now, unsigned& count, bool were_away) {
    for (size_t i = 0; i < active_.size();) {
        const PeerId id = active_[i];
        Peer& p = *peers_[id];
        if (p.status == Status::ok) {
            if (p.rx && p.rx->ack_due(now, cfg_.ack_delay_ns)) {
                send_ack(p);
                ++count;
            }
            if (p.tx && !p.tx->on_timer(now, [&](const Sender::Packet& pkt, bool ack_req) {
                    return emit(p, pkt, ack_req);
                }, were_away)) {
                fail(id, Status::timeout);
            }
        }
        const bool busy = p.status == Status::ok &&
                          ((p.tx && !p.tx->idle()) || (p.rx && p.rx->ack_pending()));
        if (busy) {
            ++i;
        } else {
            p.active = false;
            active_[i] = active_.back();
            active_.pop_back();
        }
    }
}

unsigned Transport::receive(uint64_t now) {
    // What the datagrams received and the timers send (packets an ACK lets into the window,
    // ACKs, retransmissions) leaves in one batch at the end: a stream's sender otherwise made
    // one system call per packet, from here, as ACKs opened its window.
    if (!holds_) return receive_held(now);
    unsigned count;
    {
        HoldSends hold(hold_, true);
        count = receive_held(now);
    }
    if (!hold_) qp_->flush();
    return count;
}

unsigned Transport::receive_held(uint64_t now) {
    unsigned count = 0;
    const auto on_dgram = [&](const Datagram& d) { on_datagram(d, now); };
    constexpr size_t batch = 64;
    // After an absence (no receive for over 1 ms) read until the QP is empty, so that the timers
    // below see the ACKs that arrived meanwhile: a poll may stop after one datagram while more
    // are queued (the userspace device's single reads, udp_socket.cpp).
    const bool away = last_receive_ns_ != 0 && elapsed_ns(now, last_receive_ns_) > 1'000'000;
    last_receive_ns_ = now;
    if (watched_) {
        // Asleep on the QP's event fd since the last receive: an arrival would have woken us.
        watched_ = false;
        emptied_ns_ = now;
    }
    for (int round = 0; round < (away ? 16 : 4); ++round) {
        const size_t n = qp_->poll(on_dgram, batch);
        count += unsigned(n);
        if (n == 0 || qp_->emptied())
            emptied_ns_ = now;
        if (n == 0 || (n < batch && !away)) break;
    }
    // Timers (delayed ACKs, retransmission) at most every service_interval_ns_: a pass over the
    // active peers in every busy-poll iteration cost as much as receiving a message (callgrind
    // in the rxe guest); an ACK asked for now (ack_req, a hole, a duplicate) goes at once.
    if (!active_.empty() && (urgent_ || elapsed_ns(now, last_service_ns_) >= service_interval_ns_)) {
        // Over 1 ms since the last pass (every 20 us while anyone polls): nobody ran this
        // transport, so what looks overdue may be an ACK not read yet (Sender::on_timer).
        const bool were_away = last_service_ns_ != 0 && elapsed_ns(now, last_service_ns_) > 1'000'000;
        urgent_ = false;
        last_service_ns_ = now;
        service(now, count, were_away);
    }
    return count;
}

unsigned Transport::progress() {
    std::lock_guard lk(mu_);
    unsigned count = 0;
    posts_since_progress_ = 0;   // receive() sends what waits (the QP's poll flushes first)
    if (!deferred_.empty() || notified_) {
        notified_ = false;
        uint64_t v;
        (void)!::read(notify_fd_, &v, sizeof(v));
        // Received by the background thread: older than anything still in the QP. Also those
        // of a peer that failed since: we acknowledged them, so its sender counted them
        // delivered (they come before the failure report, below).
        std::vector<Deferred> d;
        d.swap(deferred_);
        deferred_bytes_ = 0;
        for (Deferred& m : d) {
            cb_.deliver(m.peer, m.am_id, m.data.data(), m.data.size());
        }
        count += unsigned(d.size());
    }
    // One clock read per call: on a VM whose clocksource has no vDSO path (QEMU's HPET) each
    // read is a system call, and this runs in every busy-poll iteration.
    const uint64_t now = now_ns();
    count += receive(now);
    owner_.stamp(now);
    if (!failures_.empty()) {
        std::vector<std::pair<PeerId, Status>> f;
        f.swap(failures_);
        for (auto& [id, why] : f) {
            cb_.failed(id, why);
        }
        count += unsigned(f.size());
    }
    return count;
}

// The background thread: asleep while the owner progresses (OwnerWatch: no wake-up then); once
// the owner is away, it waits for a packet (the QP's fd, armed) or the next timer tick and runs
// the protocol in its stead. It is there for liveness (ACKs, retransmissions), not speed: it must
// not compete with a busy owner (measured on rxe under TCG with a 200 us takeover and a 100 us
// tick: MPI 8 B latency 520 us instead of 37 us without the thread), hence the millisecond ticks.
void Transport::thread_main() {
    const uint64_t idle_ns = owner_.idle_ns();
    const int qp_fd = qp_->event_fd();
    auto sleep_ns = [&](uint64_t ns, bool watch_qp) { sleep_or_stop(stop_fd_, watch_qp ? qp_fd : -1, ns); };
    while (!stop_.load()) {
        if (!owner_.owner_idle(now_ns())) {
            // Checking on a busy owner would cost it: each wake-up takes a CPU from a polling
            // process (rxe under TCG: am_lat 50 us with a check every 2 ms, 34 us without the
            // thread).
            owner_.wait_owner_idle(stop_fd_);
            continue;
        }
        bool busy;
        {
            std::unique_lock lk(mu_, std::try_to_lock);
            if (!lk.owns_lock()) {
                sleep_ns(idle_ns, false);
                continue;
            }
            // Messages the owner posted after its last progress call wait for it (send_am):
            // they leave now. Sending needs no outer lock (no handler runs), so this happens
            // even when the takeover below cannot.
            if (owner_.owner_idle(now_ns())) qp_->flush();
            qp_->arm();
            busy = !active_.empty();
        }
        // Timers (ACK delay, retransmission) need a tick while something is outstanding.
        sleep_ns(busy ? 1'000'000 : 20'000'000, true);
        if (stop_.load()) break;
        // Only a try: the owner may hold that lock while it joins this thread. Without it the
        // round still receives, acknowledges and retransmits; only the handlers wait for the
        // owner (a lock that has no try - UCX_USE_MT_MUTEX - is never taken: before, such a
        // thread did nothing at all, and a computing rank looked dead to its peers).
        const bool outer = cb_.async_ok && cb_.outer_lock;
        const bool locked = outer && cb_.outer_lock(true);
        takeover(locked || !outer);
        if (locked) cb_.outer_lock(false);
    }
}

// One round in the owner's stead; async handlers run only if `may_deliver` (the caller holds
// outer_lock, if there is one).
void Transport::takeover(bool may_deliver) {
    std::unique_lock lk(mu_, std::try_to_lock);
    if (!lk.owns_lock() || !owner_.owner_idle(now_ns())) {
        return;   // the owner is back
    }
    const size_t had = deferred_.size() + failures_.size();
    const bool had_failures = !failures_.empty();
    passive_ = true;
    watched_ = true;   // thread_main slept on the QP's event fd
    receive(now_ns());
    passive_ = false;
    // What may run here goes now, in order: the AMs received before any that wait for the owner
    // (also those a round without the outer lock kept).
    if (cb_.async_ok && may_deliver && !had_failures) {
        size_t n = 0;
        while (n < deferred_.size() && cb_.async_ok(deferred_[n].am_id)) ++n;
        std::vector<Deferred> now_async(std::make_move_iterator(deferred_.begin()),
                                        std::make_move_iterator(deferred_.begin() + ptrdiff_t(n)));
        deferred_.erase(deferred_.begin(), deferred_.begin() + ptrdiff_t(n));
        for (const Deferred& m : now_async) deferred_bytes_ -= deferred_charge(m.data.size());
        for (Deferred& m : now_async) {
            cb_.deliver(m.peer, m.am_id, m.data.data(), m.data.size());   // (acknowledged: see progress())
        }
    }
    qp_->flush();   // replies of the handlers above (posts after the owner's last call are held)
    if (deferred_.size() + failures_.size() != had && !notified_) {
        notified_ = true;
        uint64_t one = 1;
        (void)!::write(notify_fd_, &one, sizeof(one));
    }
}

TransportStats Transport::stats() const {
    std::lock_guard lk(mu_);
    TransportStats s = stats_;
    s.deferred_bytes = deferred_bytes_;
    s.retransmits = dead_tx_.retransmits;
    s.fast_retransmits = dead_tx_.fast_retransmits;
    s.timeouts = dead_tx_.timeouts;
    s.window_cuts = dead_tx_.window_cuts;
    for (const auto& p : peers_) {
        if (p->tx) {
            const SenderStats& t = p->tx->stats();
            s.retransmits += t.retransmits;
            s.fast_retransmits += t.fast_retransmits;
            s.timeouts += t.timeouts;
            s.window_cuts += t.window_cuts;
        }
        if (p->rx) {
            const ReceiverStats& r = p->rx->stats();
            s.delivered += r.delivered;
            s.duplicates += r.duplicates;
            s.out_of_order += r.out_of_order;
            s.out_of_window += r.out_of_window;
            s.malformed += r.malformed;
            s.over_budget += r.over_budget;
            s.reasm_expired += r.reasm_expired;
            s.reasm_refused += r.reasm_refused;
        }
    }
    return s;
}

Transport::Counters Transport::counters() const {
    std::lock_guard lk(mu_);
    const TransportStats s = stats();
    const DatagramStats d = qp_->stats();
    return {{"tx_packets", d.tx_packets}, {"rx_packets", d.rx_packets}, {"tx_bytes", d.tx_bytes},
            {"rx_bytes", d.rx_bytes}, {"tx_dropped", d.tx_dropped}, {"tx_errors", d.tx_errors}, {"rx_errors", d.rx_errors},
            {"tx_batches", d.tx_batches}, {"ah_evicted", d.ah_evicted}, {"icrc_errors", d.icrc_errors},
            {"malformed", d.malformed + s.malformed}, {"wrong_qp", d.wrong_qp}, {"peers", s.peers},
            {"failed_peers", s.failed_peers}, {"data_sent", s.data_sent}, {"acks_sent", s.acks_sent},
            {"probes_sent", s.probes_sent}, {"retransmits", s.retransmits}, {"fast_retransmits", s.fast_retransmits},
            {"timeouts", s.timeouts}, {"window_cuts", s.window_cuts}, {"delivered", s.delivered},
            {"duplicates", s.duplicates}, {"out_of_order", s.out_of_order}, {"out_of_window", s.out_of_window},
            {"restarted_peers", s.restarted_peers}, {"peers_refused", s.peers_refused},
            {"over_budget", s.over_budget}, {"reasm_expired", s.reasm_expired}, {"reasm_refused", s.reasm_refused},
            {"deferred_bytes_now", s.deferred_bytes},
            {"faults_dropped", d.faults_dropped},
            {"faults_duplicated", d.faults_duplicated}, {"faults_reordered", d.faults_reordered},
            {"faults_corrupted", d.faults_corrupted}, {"faults_truncated", d.faults_truncated},
            {"faults_delayed", d.faults_delayed}};
}

std::string Transport::stats_text() const {
    std::string out;
    for (const auto& [name, v] : counters()) {
        if (!out.empty()) out += ' ';
        out += name + '=' + std::to_string(v);
    }
    return out;
}

std::vector<Transport::PeerCounters> Transport::peer_counters() const {
    std::lock_guard lk(mu_);
    std::vector<PeerCounters> out;
    out.reserve(peers_.size());
    for (size_t i = 0; i < peers_.size(); ++i) {
        const Peer& p = *peers_[i];
        PeerCounters c{PeerId(i), p.remote_id, p.addr.to_string(), p.status != Status::ok, {}};
        const SenderStats t = p.tx ? p.tx->stats() : SenderStats{};
        const ReceiverStats r = p.rx ? p.rx->stats() : ReceiverStats{};
        c.counters = {{"data_sent", p.data_sent}, {"bytes_sent", p.bytes_sent}, {"acks_sent", p.acks_sent},
                      {"probes_sent", p.probes_sent}, {"retransmits", t.retransmits},
                      {"fast_retransmits", t.fast_retransmits}, {"timeouts", t.timeouts},
                      {"timers_deferred", t.timers_deferred},
                      {"window_cuts", t.window_cuts}, {"delivered", r.delivered}, {"duplicates", r.duplicates},
                      {"out_of_order", r.out_of_order}, {"out_of_window", r.out_of_window}, {"malformed", r.malformed},
                      {"over_budget", r.over_budget}, {"reasm_expired", r.reasm_expired}, {"reasm_refused", r.reasm_refused},
                      {"window_now", p.tx ? uint64_t(p.tx->cwnd()) : 0},
                      {"packet_payload_now", p.frag}};
        if (p.tx && p.tx->delay()) {
            c.counters.emplace_back("delay_blocked", t.delay_blocked);
            c.counters.emplace_back("rtt_ambiguous", p.tx->delay()->counters().ambiguous);
            c.counters.emplace_back("cc_window_bytes_now", uint64_t(p.tx->delay()->cwnd_bytes()));
            c.counters.emplace_back("srtt_us_now", uint64_t(p.tx->delay()->srtt() / 1000));
            c.counters.emplace_back("inflight_bytes_now", p.tx->inflight_bytes());
        }
        out.push_back(std::move(c));
    }
    return out;
}

} // namespace roce::ud
