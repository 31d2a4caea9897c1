#include "sw/ud_qp.hpp"

#include <array>
#include <cstring>
#include <ctime>
#include <deque>
#include <random>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <type_traits>
#include <vector>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "common/roce_mtu.hpp"
#include "gid/traffic_class.hpp"
#include "sw/class_sockets.hpp"
#include "sw/fault.hpp"
#include "sw/gso_icrc.hpp"
#include "sw/udp_socket.hpp"
#include "wire/icrc.hpp"

namespace roce::sw {
namespace {

static_assert(std::is_same_v<ud::ClassAdvert, gid::TcAdvert>);
constexpr unsigned tx_batch = 32;
// What a UD packet may carry on receive, whatever our own MTU: the largest IB MTU.
constexpr size_t max_rx_payload = 4096;
const size_t max_rx_pkt = wire::packet_size(uint8_t(wire::Opcode::ud_send_only), max_rx_payload);

class UdQpImpl final : public ud::DatagramQp {
public:
    explicit UdQpImpl(const UdQpConfig& cfg) : cfg_(cfg), faults_(cfg.faults) {}

    Status init() {
        if (!valid_roce_mtu(cfg_.mtu)) {
            return Status::invalid_param;
        }
        const Status s = sock_.open(cfg_.ip, cfg_.ports, cfg_.traffic_class, cfg_.priority, true);
        if (s != Status::ok) {
            return s;
        }
        std::random_device rd;
        qpn_ = 2 + rd() % ((1u << 24) - 2);   // never 0 (SMI) or 1 (GSI)
        max_pkt_ = wire::packet_size(uint8_t(wire::Opcode::ud_send_only), cfg_.mtu);
        tx_buf_.resize(max_pkt_);
        batch_bufs_.resize(size_t(tx_batch) * max_pkt_);
        gso_ = sock_.gso_supported();
        held_.reserve(max_pkt_);
        // With GRO a received entry is a whole GSO run (up to 64 KiB, split in deliver()).
        rx_n_ = sock_.gro_enabled() ? 16 : 32;
        // Without it, room for the largest RoCE packet whatever our MTU: a peer set to a larger
        // one is still understood (deliver_one).
        const size_t entry = sock_.gro_enabled() ? 65536 : max_rx_pkt + 64;
        rx_bufs_.resize(size_t(rx_n_) * entry);
        rx_msgs_.resize(rx_n_);
        rx_iov_.resize(rx_n_);
        rx_sa_.resize(rx_n_);
        rx_cmsg_.resize(rx_n_);
        for (unsigned i = 0; i < rx_n_; ++i) {
            rx_iov_[i] = {rx_bufs_.data() + size_t(i) * entry, entry};
            reset_rx_header(i);
        }
        return Status::ok;
    }

    ud::UdAddr address() const override { return {sock_.local(), qpn_}; }
    size_t max_payload() const override { return cfg_.mtu; }
    int event_fd() const override { return sock_.fd(); }
    ud::DatagramStats stats() const override { return st_; }

    ~UdQpImpl() override { flush_batch(); }

    ud::ClassAdvert class_advert() const override { return gid::encode_tc_advert(own_class()); }
    ud::ClassId class_for(const ud::ClassAdvert& peer) override {
        // A class that gets no socket of its own (ClassSockets::get says why, once) goes to the
        // peer in ours, ToS included: our side then differs from the peer's until it is resolved.
        const gid::TrafficClass t = gid::class_with(own_class(), peer);
        return classes_.get(t.tos, t.priority);
    }

    Status send(const ud::UdAddr& dst, ud::ClassId cls, const iovec* iov, size_t iovcnt) override {
        return stage(dst, cls, iov, iovcnt, false);
    }
    Status send_held(const ud::UdAddr& dst, ud::ClassId cls, const iovec* iov, size_t iovcnt) override {
        return stage(dst, cls, iov, iovcnt, true);
    }
    void flush() override { flush_batch(); }
    bool holds_sends() const override { return true; }
    bool emptied() const override { return sock_.emptied(); }

    // A GSO run received whole (GRO) is handed whole: a call may hand more than max (up to 16
    // entries of a batch's worth of datagrams each). At most `max` datagrams are read, whether
    // handed or dropped: counting only those handed, a flood of junk (anyone's datagrams to the
    // port) kept one call reading for as long as it came, the transport's lock held meanwhile
    // (found by review: 12,000 junk datagrams drained by one call of max 64).
    size_t poll(FunctionRef<void(const ud::Datagram&)> fn, size_t max) override {
        flush_batch();
        flush_held();
        size_t handed = 0, read = 0;
        while (handed < max && read < max) {
            const unsigned want = unsigned(std::min<size_t>(rx_n_, max - std::max(handed, read)));
            // The headers were set up once (init); recvmmsg rewrites only those it fills.
            const int got = sock_.recv_batch(rx_msgs_.data(), want);
            for (int i = 0; i < got; ++i) {
                handed += deliver(rx_msgs_[size_t(i)], rx_sa_[size_t(i)], rx_iov_[size_t(i)], fn);
                reset_rx_header(unsigned(i));
            }
            if (got < int(want)) break;
            read += size_t(got);
        }
        return handed;
    }

private:
    gid::TrafficClass own_class() const {
        return gid::traffic_class_of(cfg_.traffic_class, cfg_.traffic_class_source, cfg_.priority,
                                     cfg_.priority_source);
    }

    struct Run {
        unsigned first = 0, n = 0;   // batch_[first, first + n): one sendmmsg message
    };

    // Builds the packet into the next batch slot; sends it (and what waits before it) unless
    // `hold` and the batch has room. Fault injection sends one by one, as before batching.
    Status stage(const ud::UdAddr& dst, ud::ClassId cls, const iovec* iov, size_t iovcnt, bool hold) {
        if (dst.net.family != sock_.local().family) {
            return Status::unreachable;
        }
        size_t len = 0;
        for (size_t i = 0; i < iovcnt; ++i) len += iov[i].iov_len;
        if (len > cfg_.mtu) {
            return Status::invalid_param;
        }
        if (batch_n_ == tx_batch && !flush_batch()) {
            return Status::no_resource;   // the socket takes nothing more now; nothing was taken
        }
        const bool faulty = faults_.enabled();
        if (faulty) {
            flush_batch();   // in order, ahead of this one
        }
        wire::Packet pkt;
        pkt.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
        pkt.bth.dest_qp = dst.qpn;
        pkt.bth.psn = psn_ & 0xffffff;
        pkt.deth.qkey = cfg_.qkey;
        pkt.deth.src_qp = qpn_;
        wire::IpContext ip;
        fill_ip_context(sock_.local(), dst.net, ip);
        uint8_t* buf = faulty ? tx_buf_.data() : slot_buf(batch_n_);   // batch_n_ < tx_batch here
        // The pieces go straight behind the headers' room (len <= mtu: a slot holds them); a
        // gather buffer that build() copied again cost a second copy of every payload.
        uint8_t* at = buf + wire::header_size(pkt.bth.opcode);
        for (size_t i = 0; i < iovcnt; ++i) {
            std::memcpy(at, iov[i].iov_base, iov[i].iov_len);
            at += iov[i].iov_len;
        }
        const size_t n = wire::build_in_place(pkt, len, ip, {buf, max_pkt_});
        if (n == 0) {
            return Status::invalid_param;
        }
        ++psn_;
        sockaddr_storage ss;
        const socklen_t sl = to_sockaddr(dst.net, ss);
        if (faulty) {
            return send_faulty(n, ss, sl, cls);
        }
        if (batch_n_ == 0 && !hold) {
            return transmit(buf, n, ss, sl, cls);   // alone: one sendto, refused -> no_resource
        }
        batch_[batch_n_++] = {n, ss, sl, cls};
        if (!hold || batch_n_ == tx_batch) {
            flush_batch();   // what the socket refuses stays queued, in order
        }
        return Status::ok;
    }

    uint8_t* slot_buf(unsigned i) { return batch_bufs_.data() + size_t(i) * max_pkt_; }

    // Sends the batch with sendmmsg; true when nothing is left. Runs of one destination and
    // length (the last may be shorter) go as one UDP_SEGMENT send: one trip through the
    // kernel's send path for up to a batch (32) of datagrams. The kernel numbers a run's IPv4
    // IDs 0, 1, 2, ... (DF, unconnected socket) and the ICRC covers the ID, so segment k's ICRC
    // is patched from ID 0 to k while it is in flight (undone for what stays queued). A full
    // socket buffer (EAGAIN, ENOBUFS) keeps the rest for the next flush; other errors lose that
    // run, like a wire.
    bool flush_batch() {
        unsigned done = 0;
        while (done < batch_n_) {
            const unsigned m = build_runs(done);   // all from one class socket
            const int r = classes_.at(batch_[done].cls).send_mmsg(batch_msgs_.data(), m);
            const int err = r < 0 ? errno : 0;
            const unsigned sent = r < 0 ? 0 : unsigned(r);
            for (unsigned q = 0; q < sent; ++q) {
                const Run& run = runs_[q];
                st_.tx_packets += run.n;
                for (unsigned k = 0; k < run.n; ++k) st_.tx_bytes += batch_[run.first + k].len;
                done += run.n;
            }
            for (unsigned q = sent; q < m; ++q) patch_run(runs_[q]);   // back to ID 0
            if (r > 0) {
                ++st_.tx_batches;
                continue;
            }
            if (err == EINTR) continue;
            if (err == EAGAIN || err == ENOBUFS) break;
            if (runs_[0].n > 1 && (err == EIO || err == EINVAL || err == EOPNOTSUPP)) {
                // A device without checksum offload refuses UDP_SEGMENT (EIO): one by one from
                // now on, this run included, rather than losing every run and its retransmissions.
                ROCE_WARN("ud: UDP_SEGMENT send refused (%s): sending datagrams one by one", std::strerror(err));
                gso_ = false;
                continue;
            }
            st_.tx_dropped += runs_[0].n;   // refused outright: lost
            done += runs_[0].n;
        }
        if (done == 0) {
            return batch_n_ == 0;
        }
        // Rare (a full socket buffer): move what is left to the front.
        for (unsigned k = done; k < batch_n_; ++k) {
            std::memmove(slot_buf(k - done), slot_buf(k), batch_[k].len);
            batch_[k - done] = batch_[k];
        }
        batch_n_ -= done;
        return batch_n_ == 0;
    }

    // The messages for batch_[from, end), a run each (ICRCs patched), where end is where the
    // batch or its first slot's class ends (one sendmmsg, one socket); returns how many.
    unsigned build_runs(unsigned from) {
        unsigned m = 0;
        unsigned end = from;
        while (end < batch_n_ && batch_[end].cls == batch_[from].cls) ++end;
        for (unsigned i = from; i < end; ++m) {
            const Slot& f = batch_[i];
            unsigned j = i + 1;
            if (gso_) {
                const unsigned cap = std::min<unsigned>(GsoIcrcPatches::max_segments, unsigned(65507 / f.len));
                while (j < end && j - i < cap && batch_[j].sl == f.sl && batch_[j].len <= f.len &&
                       std::memcmp(&batch_[j].sa, &f.sa, f.sl) == 0) {
                    const bool shorter = batch_[j].len < f.len;
                    ++j;
                    if (shorter) break;
                }
            }
            runs_[m] = {i, j - i};
            patch_run(runs_[m]);
            for (unsigned k = i; k < j; ++k) batch_iov_[k] = {slot_buf(k), batch_[k].len};
            mmsghdr& mm = batch_msgs_[m];
            mm = mmsghdr{};
            mm.msg_hdr.msg_name = const_cast<sockaddr_storage*>(&f.sa);
            mm.msg_hdr.msg_namelen = f.sl;
            mm.msg_hdr.msg_iov = &batch_iov_[i];
            mm.msg_hdr.msg_iovlen = j - i;
            if (j - i > 1) {
                mm.msg_hdr.msg_control = batch_cmsg_[m].b;
                mm.msg_hdr.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
                cmsghdr* cm = CMSG_FIRSTHDR(&mm.msg_hdr);
                cm->cmsg_level = IPPROTO_UDP;
                cm->cmsg_type = UDP_SEGMENT;
                cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                const uint16_t seg = uint16_t(f.len);
                std::memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
            }
            i = j;
        }
        return m;
    }

    // Applies segment k's IPv4-ID patch to each packet of an IPv4 run; applying it again undoes it.
    void patch_run(const Run& run) {
        if (run.n < 2 || batch_[run.first].sa.ss_family != AF_INET) return;
        for (unsigned k = 1; k < run.n; ++k) {
            const Slot& sl = batch_[run.first + k];
            xor_icrc(slot_buf(run.first + k) + sl.len - 4, gso_patches_.patch(sl.len, k));
        }
    }

    void reset_rx_header(unsigned i) {
        rx_msgs_[i] = mmsghdr{};
        rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
        rx_msgs_[i].msg_hdr.msg_iovlen = 1;
        rx_msgs_[i].msg_hdr.msg_name = &rx_sa_[i];
        rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
        rx_msgs_[i].msg_hdr.msg_control = rx_cmsg_[i].b;   // UDP_GRO: the run's segment size
        rx_msgs_[i].msg_hdr.msg_controllen = sizeof(rx_cmsg_[i].b);
    }

    size_t deliver(const mmsghdr& mh, const sockaddr_storage& sa, const iovec& iov,
                   FunctionRef<void(const ud::Datagram&)> fn) {
        WireAddr src;
        if (!from_sockaddr(reinterpret_cast<const sockaddr*>(&sa), mh.msg_hdr.msg_namelen, src)) {
            return 0;
        }
        size_t len = mh.msg_len;
        if (mh.msg_hdr.msg_flags & MSG_TRUNC) {
            ++st_.rx_packets;
            st_.rx_bytes += len;
            ++st_.malformed;
            return 0;
        }
        size_t seg = len;
        for (cmsghdr* cm = CMSG_FIRSTHDR(&mh.msg_hdr); cm; cm = CMSG_NXTHDR(const_cast<msghdr*>(&mh.msg_hdr), cm)) {
            if (cm->cmsg_level == IPPROTO_UDP && cm->cmsg_type == UDP_GRO) {
                int gs = 0;
                std::memcpy(&gs, CMSG_DATA(cm), sizeof(gs));
                if (gs > 0 && size_t(gs) < len) seg = size_t(gs);
            }
        }
        const auto* p = static_cast<const uint8_t*>(iov.iov_base);
        size_t handed = 0;
        do {
            const size_t l = std::min(seg, len);
            handed += deliver_one(src, {p, l}, fn);
            p += l;
            len -= l;
        } while (len > 0);
        return handed;
    }

    size_t deliver_one(const WireAddr& src, std::span<const uint8_t> data,
                       FunctionRef<void(const ud::Datagram&)> fn) {
        ++st_.rx_packets;
        st_.rx_bytes += data.size();
        wire::IpContext ip;
        fill_ip_context(src, sock_.local(), ip);
        wire::Packet pkt;
        const wire::ParseError e = wire::parse(data, ip, false, pkt);
        if (e != wire::ParseError::none || pkt.bth.opcode != uint8_t(wire::Opcode::ud_send_only) ||
            !pkt.has_deth) {
            ++st_.malformed;
            return 0;
        }
        if (pkt.payload.size() > max_rx_payload) {
            // No RoCE peer sends more (the largest IB MTU); a socket takes up to 64 KiB. A peer
            // whose MTU setting is larger than ours (up to this) is taken, as on a NIC whose
            // receive buffers are sized for the port, not for our setting.
            ++st_.malformed;
            return 0;
        }
        // The socket does not show the IPv4 ID: a GSO run's segment k has ID k (flush_batch).
        uint16_t id = 0;
        if (!wire::icrc_verify_any_ipv4_id(ip, data, &id) || id >= GsoIcrcPatches::max_segments) {
            ++st_.icrc_errors;
            return 0;
        }
        if (pkt.bth.dest_qp != qpn_ || pkt.deth.qkey != cfg_.qkey) {
            ++st_.wrong_qp;
            return 0;
        }
        fn(ud::Datagram{{src, pkt.deth.src_qp}, pkt.payload.data(), pkt.payload.size()});
        return 1;
    }

    Status transmit(const uint8_t* p, size_t n, sockaddr_storage& ss, socklen_t sl, ud::ClassId cls) {
        const ssize_t r = ::sendto(classes_.at(cls).fd(), p, n, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&ss), sl);
        if (r < 0) {
            if (errno == EAGAIN || errno == ENOBUFS) {
                ++st_.tx_dropped;
                return Status::no_resource;
            }
            // ECONNREFUSED from an earlier ICMP error, unreachable routes: the packet is lost,
            // like on a wire; the reliability layer retransmits or gives up on the peer.
            ++st_.tx_dropped;
            return Status::ok;
        }
        ++st_.tx_packets;
        st_.tx_bytes += n;
        return Status::ok;
    }

    Status send_faulty(size_t n, sockaddr_storage& ss, socklen_t sl, ud::ClassId cls) {
        const FaultInjector::Decision d = faults_.decide(tx_buf_[0]);
        if (d.drop) {
            ++st_.faults_dropped;
            return Status::ok;
        }
        if (d.delay) {   // sent by flush_held once due: late, behind later packets
            ++st_.faults_delayed;
            delayed_.push_back({now_ns() + uint64_t(cfg_.faults.delay_us) * 1000,
                                std::vector<uint8_t>(tx_buf_.begin(), tx_buf_.begin() + ptrdiff_t(n)), ss, sl, cls});
            return Status::ok;
        }
        if (d.truncate) {   // the receiver's length and ICRC checks must refuse what is left
            ++st_.faults_truncated;
            n = faults_.truncated_length(n);
        }
        if (d.corrupt) {
            ++st_.faults_corrupted;
            faults_.corrupt(tx_buf_.data(), n);
        }
        if (d.reorder && !has_held_) {
            ++st_.faults_reordered;   // goes out after the next packet (or at the next poll)
            held_.assign(tx_buf_.begin(), tx_buf_.begin() + ptrdiff_t(n));
            held_sa_ = ss;
            held_sl_ = sl;
            held_cls_ = cls;
            has_held_ = true;
            return Status::ok;
        }
        Status s = transmit(tx_buf_.data(), n, ss, sl, cls);
        if (d.duplicate) {
            ++st_.faults_duplicated;
            transmit(tx_buf_.data(), n, ss, sl, cls);
        }
        flush_held();
        return s;
    }

    void flush_held() {
        if (has_held_) {
            has_held_ = false;
            transmit(held_.data(), held_.size(), held_sa_, held_sl_, held_cls_);
        }
        const uint64_t t = delayed_.empty() ? 0 : now_ns();
        while (!delayed_.empty() && delayed_.front().due_ns <= t) {
            Delayed& d = delayed_.front();
            transmit(d.bytes.data(), d.bytes.size(), d.sa, d.sl, d.cls);
            delayed_.pop_front();
        }
    }

    UdQpConfig cfg_;
    UdpSocket sock_;
    ClassSockets classes_{sock_};   // ClassId = its socket id (0: sock_)
    FaultInjector faults_;
    uint32_t qpn_ = 0;
    uint32_t psn_ = 0;
    size_t max_pkt_ = 0;
    std::vector<uint8_t> tx_buf_;   // fault injection's packet
    // send_held's batch: packets built in place, sent by one sendmmsg
    struct Slot {
        size_t len = 0;
        sockaddr_storage sa{};
        socklen_t sl = 0;
        ud::ClassId cls = 0;
    };
    struct alignas(8) Cmsg {
        uint8_t b[CMSG_SPACE(sizeof(uint16_t))];
    };
    std::array<Slot, tx_batch> batch_;
    std::array<Run, tx_batch> runs_;
    std::array<mmsghdr, tx_batch> batch_msgs_{};
    std::array<iovec, tx_batch> batch_iov_{};   // one per slot, at the slot's index
    std::array<Cmsg, tx_batch> batch_cmsg_{};
    GsoIcrcPatches gso_patches_;
    std::vector<uint8_t> batch_bufs_;
    unsigned batch_n_ = 0;
    bool gso_ = false;   // runs go as UDP_SEGMENT sends (off: the kernel has none or refused one)
    unsigned rx_n_ = 0;   // entries per recvmmsg
    struct alignas(8) RxCmsg {
        uint8_t b[64];
    };
    std::vector<RxCmsg> rx_cmsg_;
    std::vector<uint8_t> rx_bufs_;
    std::vector<mmsghdr> rx_msgs_;
    std::vector<iovec> rx_iov_;
    std::vector<sockaddr_storage> rx_sa_;
    std::vector<uint8_t> held_;
    sockaddr_storage held_sa_{};
    socklen_t held_sl_ = 0;
    ud::ClassId held_cls_ = 0;
    bool has_held_ = false;
    struct Delayed {
        uint64_t due_ns;
        std::vector<uint8_t> bytes;
        sockaddr_storage sa;
        socklen_t sl;
        ud::ClassId cls;
    };
    std::deque<Delayed> delayed_;   // FaultConfig::delay
    ud::DatagramStats st_;
};

} // namespace

Status open_ud_qp(const UdQpConfig& cfg, std::unique_ptr<ud::DatagramQp>& out) {
    auto qp = std::make_unique<UdQpImpl>(cfg);
    const Status s = qp->init();
    if (s != Status::ok) {
        return s;
    }
    out = std::move(qp);
    return Status::ok;
}

} // namespace roce::sw
