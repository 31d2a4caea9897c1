#include "sw/ud_qp.hpp"

#include <cstring>
#include <ctime>
#include <deque>
#include <random>
#include <sys/epoll.h>
#include <vector>

#include "common/clock.hpp"
#include "common/log.hpp"
#include "sw/fault.hpp"
#include "sw/udp_socket.hpp"
#include "wire/icrc.hpp"

namespace roce::sw {
namespace {

constexpr unsigned rx_batch = 32;

class UdQpImpl final : public ud::DatagramQp {
public:
    explicit UdQpImpl(const UdQpConfig& cfg) : cfg_(cfg), faults_(cfg.faults) {}

    Status init() {
        if (cfg_.mtu != 256 && cfg_.mtu != 512 && cfg_.mtu != 1024 && cfg_.mtu != 2048 &&
            cfg_.mtu != 4096) {
            return Status::invalid_param;
        }
        const Status s = sock_.open(cfg_.ip, cfg_.port, cfg_.traffic_class, cfg_.priority);
        if (s != Status::ok) {
            return s;
        }
        std::random_device rd;
        qpn_ = 2 + rd() % ((1u << 24) - 2);   // never 0 (SMI) or 1 (GSI)
        max_pkt_ = wire::packet_size(uint8_t(wire::Opcode::ud_send_only), cfg_.mtu);
        tx_buf_.resize(max_pkt_);
        held_.reserve(max_pkt_);
        rx_bufs_.resize(size_t(rx_batch) * (max_pkt_ + 64));
        rx_msgs_.resize(rx_batch);
        rx_iov_.resize(rx_batch);
        rx_sa_.resize(rx_batch);
        for (unsigned i = 0; i < rx_batch; ++i) {
            rx_iov_[i] = {rx_bufs_.data() + size_t(i) * (max_pkt_ + 64), max_pkt_ + 64};
            reset_rx_header(i);
        }
        return Status::ok;
    }

    ud::UdAddr address() const override { return {sock_.local(), qpn_}; }
    size_t max_payload() const override { return cfg_.mtu; }
    int event_fd() const override { return sock_.fd(); }
    ud::DatagramStats stats() const override { return st_; }

    Status send(const ud::UdAddr& dst, const iovec* iov, size_t iovcnt) override {
        if (dst.net.family != sock_.local().family) {
            return Status::unreachable;
        }
        size_t len = 0;
        for (size_t i = 0; i < iovcnt; ++i) len += iov[i].iov_len;
        if (len > cfg_.mtu) {
            return Status::invalid_param;
        }
        // Gather the payload behind the headers' room, then let build() write headers + ICRC.
        gather_.resize(len);
        size_t off = 0;
        for (size_t i = 0; i < iovcnt; ++i) {
            std::memcpy(gather_.data() + off, iov[i].iov_base, iov[i].iov_len);
            off += iov[i].iov_len;
        }
        wire::Packet pkt;
        pkt.bth.opcode = uint8_t(wire::Opcode::ud_send_only);
        pkt.bth.dest_qp = dst.qpn;
        pkt.bth.psn = psn_++ & 0xffffff;
        pkt.deth.qkey = cfg_.qkey;
        pkt.deth.src_qp = qpn_;
        wire::IpContext ip;
        fill_ip_context(sock_.local(), dst.net, ip);
        const size_t n = wire::build(pkt, gather_, ip, tx_buf_);
        if (n == 0) {
            return Status::invalid_param;
        }
        sockaddr_storage ss;
        const socklen_t sl = to_sockaddr(dst.net, ss);
        if (faults_.enabled()) {
            return send_faulty(n, ss, sl);
        }
        return transmit(tx_buf_.data(), n, ss, sl);
    }

    size_t poll(FunctionRef<void(const ud::Datagram&)> fn, size_t max) override {
        flush_held();
        size_t handed = 0;
        while (handed < max) {
            const unsigned want = unsigned(std::min<size_t>(rx_batch, max - handed));
            // The headers were set up once (init); recvmmsg rewrites only those it fills.
            const int got = sock_.recv_batch(rx_msgs_.data(), want);
            for (int i = 0; i < got; ++i) {
                handed += deliver(rx_msgs_[size_t(i)], rx_sa_[size_t(i)], rx_iov_[size_t(i)], fn);
                reset_rx_header(unsigned(i));
            }
            if (got < int(want)) break;
        }
        return handed;
    }

private:
    void reset_rx_header(unsigned i) {
        rx_msgs_[i] = mmsghdr{};
        rx_msgs_[i].msg_hdr.msg_iov = &rx_iov_[i];
        rx_msgs_[i].msg_hdr.msg_iovlen = 1;
        rx_msgs_[i].msg_hdr.msg_name = &rx_sa_[i];
        rx_msgs_[i].msg_hdr.msg_namelen = sizeof(sockaddr_storage);
    }

    size_t deliver(const mmsghdr& mh, const sockaddr_storage& sa, const iovec& iov,
                   FunctionRef<void(const ud::Datagram&)> fn) {
        WireAddr src;
        if (!from_sockaddr(reinterpret_cast<const sockaddr*>(&sa), mh.msg_hdr.msg_namelen, src)) {
            return 0;
        }
        const size_t len = mh.msg_len;
        ++st_.rx_packets;
        st_.rx_bytes += len;
        if (mh.msg_hdr.msg_flags & MSG_TRUNC) {
            ++st_.malformed;
            return 0;
        }
        wire::IpContext ip;
        fill_ip_context(src, sock_.local(), ip);
        wire::Packet pkt;
        const std::span<const uint8_t> data(static_cast<const uint8_t*>(iov.iov_base), len);
        const wire::ParseError e = wire::parse(data, ip, true, pkt);
        if (e == wire::ParseError::bad_icrc) {
            ++st_.icrc_errors;
            return 0;
        }
        if (e != wire::ParseError::none || pkt.bth.opcode != uint8_t(wire::Opcode::ud_send_only) ||
            !pkt.has_deth) {
            ++st_.malformed;
            return 0;
        }
        if (pkt.bth.dest_qp != qpn_ || pkt.deth.qkey != cfg_.qkey) {
            ++st_.wrong_qp;
            return 0;
        }
        fn(ud::Datagram{{src, pkt.deth.src_qp}, pkt.payload.data(), pkt.payload.size()});
        return 1;
    }

    Status transmit(const uint8_t* p, size_t n, sockaddr_storage& ss, socklen_t sl) {
        const ssize_t r = ::sendto(sock_.fd(), p, n, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&ss), sl);
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

    Status send_faulty(size_t n, sockaddr_storage& ss, socklen_t sl) {
        const FaultInjector::Decision d = faults_.decide(tx_buf_[0]);
        if (d.drop) {
            ++st_.faults_dropped;
            return Status::ok;
        }
        if (d.delay) {   // sent by flush_held once due: late, behind later packets
            ++st_.faults_delayed;
            delayed_.push_back({now_ns() + uint64_t(cfg_.faults.delay_us) * 1000,
                                std::vector<uint8_t>(tx_buf_.begin(), tx_buf_.begin() + ptrdiff_t(n)), ss, sl});
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
            has_held_ = true;
            return Status::ok;
        }
        Status s = transmit(tx_buf_.data(), n, ss, sl);
        if (d.duplicate) {
            ++st_.faults_duplicated;
            transmit(tx_buf_.data(), n, ss, sl);
        }
        flush_held();
        return s;
    }

    void flush_held() {
        if (has_held_) {
            has_held_ = false;
            transmit(held_.data(), held_.size(), held_sa_, held_sl_);
        }
        const uint64_t t = delayed_.empty() ? 0 : now_ns();
        while (!delayed_.empty() && delayed_.front().due_ns <= t) {
            Delayed& d = delayed_.front();
            transmit(d.bytes.data(), d.bytes.size(), d.sa, d.sl);
            delayed_.pop_front();
        }
    }

    UdQpConfig cfg_;
    UdpSocket sock_;
    FaultInjector faults_;
    uint32_t qpn_ = 0;
    uint32_t psn_ = 0;
    size_t max_pkt_ = 0;
    std::vector<uint8_t> tx_buf_, gather_;
    std::vector<uint8_t> rx_bufs_;
    std::vector<mmsghdr> rx_msgs_;
    std::vector<iovec> rx_iov_;
    std::vector<sockaddr_storage> rx_sa_;
    std::vector<uint8_t> held_;
    sockaddr_storage held_sa_{};
    socklen_t held_sl_ = 0;
    bool has_held_ = false;
    struct Delayed {
        uint64_t due_ns;
        std::vector<uint8_t> bytes;
        sockaddr_storage sa;
        socklen_t sl;
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
