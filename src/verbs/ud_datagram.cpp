#include "verbs/ud_datagram.hpp"

#include <netinet/in.h>

#include <cstring>
#include <type_traits>

namespace roce::verbs {
namespace {

static_assert(std::is_same_v<ud::ClassAdvert, gid::TcAdvert>);

WireAddr gid_to_net(const uint8_t gid[16]) {
    static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    WireAddr a;
    a.port = rocev2_port;
    if (std::memcmp(gid, v4_prefix, 12) == 0) {
        a.family = AF_INET;
        std::memcpy(a.ip, gid + 12, 4);
    } else {
        a.family = AF_INET6;
        std::memcpy(a.ip, gid, 16);
    }
    return a;
}

UdDest net_to_dest(const ud::UdAddr& a) {
    UdDest d;
    if (a.net.family == AF_INET) {
        d.gid[10] = d.gid[11] = 0xff;
        std::memcpy(d.gid + 12, a.net.ip, 4);
    } else {
        std::memcpy(d.gid, a.net.ip, 16);
    }
    d.qpn = a.qpn;
    return d;
}

class UdDatagram final : public ud::DatagramQp {
public:
    explicit UdDatagram(std::unique_ptr<UdQp> qp) : qp_(std::move(qp)) {}

    ud::UdAddr address() const override { return {gid_to_net(qp_->address().gid), qp_->qpn()}; }
    size_t max_payload() const override { return qp_->max_msg(); }
    int event_fd() const override { return qp_->event_fd(); }
    void arm() override { qp_->arm(); }
    ud::DatagramStats stats() const override {
        ud::DatagramStats s = st_;
        const UdQp::Errors e = qp_->errors();
        s.tx_errors += e.send;
        s.rx_errors += e.recv;
        s.ah_evicted = qp_->ah_stats().evicted;
        return s;
    }

    ud::ClassAdvert class_advert() const override { return gid::encode_tc_advert(qp_->traffic_class()); }
    ud::ClassId class_for(const ud::ClassAdvert& peer) override {
        return qp_->class_id(gid::class_with(qp_->traffic_class(), peer));
    }

    Status send(const ud::UdAddr& dst, ud::ClassId cls, const iovec* iov, size_t iovcnt) override {
        size_t len = 0;
        for (size_t i = 0; i < iovcnt; ++i) len += iov[i].iov_len;
        // wr_id 0: no completion reported (the QP retires its slot by itself).
        const Status s = qp_->post_send(0, net_to_dest(dst), iov, iovcnt, nullptr, cls);
        if (s == Status::ok) {
            ++st_.tx_packets;
            st_.tx_bytes += len;
        } else if (s == Status::no_resource) {
            ++st_.tx_dropped;
        } else {
            ++st_.tx_errors;   // no address handle for the peer (unreachable), or a bad request
        }
        return s;
    }

    // Sends retire themselves (the QP reclaims its ring when full) and report nothing (wr_id 0):
    // the CQ is read here only, as messages are handed out.
    size_t poll(FunctionRef<void(const ud::Datagram&)> fn, size_t max) override {
        const size_t n = qp_->poll_recv(
                [&](const UdMessage& m) {
                    ++st_.rx_packets;
                    st_.rx_bytes += m.len;
                    fn(ud::Datagram{{gid_to_net(m.src.gid), m.src.qpn}, m.data, m.len});
                },
                max);
        emptied_ = n < max;   // the receive CQ had no more
        return n;
    }
    bool emptied() const override { return emptied_; }

private:
    std::unique_ptr<UdQp> qp_;
    ud::DatagramStats st_;
    bool emptied_ = false;
};

} // namespace

Status open_ud_datagram(const UdConfig& cfg, std::shared_ptr<Pd> pd,
                        std::unique_ptr<ud::DatagramQp>& out) {
    std::unique_ptr<UdQp> qp;
    if (Status s = UdQp::open(cfg, std::move(pd), qp); s != Status::ok) {
        return s;
    }
    out = std::make_unique<UdDatagram>(std::move(qp));
    return Status::ok;
}

} // namespace roce::verbs
