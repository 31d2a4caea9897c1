#include "gid/doctor_serve.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/roce_mtu.hpp"
#include "gid/doctor.hpp"
#include "gid/doctor_net.hpp"
#include "gid/doctor_pingpong.hpp"
#include "gid/doctor_pmtu.hpp"
#include "gid/doctor_proto.hpp"
#include "gid/doctor_verbs.hpp"
#include "gid/netdev.hpp"
#include "gid/sysroot.hpp"
#include "sw/device.hpp"
#include "sw/ud_qp.hpp"

namespace roce::doctor {

void serve_usage(FILE* f) {
    std::fprintf(f,
                 "usage: roce_doctor serve [--bind ADDR] [--port P] [--dev RDMA_DEV[:PORT]] [--once] [--idle S]\n"
                 "                          [--port-range A-B]\n"
                 "  The far end of `roce_doctor check`: control connections on TCP port P (default %u) of\n"
                 "  ADDR (default: any), path-MTU probes on UDP port P, echoes over the userspace device\n"
                 "  (RC, UD) and the RDMA port (--dev, else the first active one). One client at a time;\n"
                 "  clients silent for S seconds (15) are dropped. --once: exit after one session.\n"
                 "  --port-range: the UDP ports the userspace device binds (default UCX_RC_ROCE_PORT_RANGE\n"
                 "  and UCX_UD_ROCE_PORT_RANGE, else ephemeral): behind a firewall, the range it opens.\n",
                 unsigned(default_port));
}

namespace {

struct ServeOptions {
    std::string bind;
    uint16_t port = default_port;
    std::string dev;
    bool once = false;
    unsigned idle_s = 15;
    sw::PortRange rc_ports, ud_ports;   // the userspace device's (open_devices)
};

constexpr int hello_timeout_ms = 5000;
constexpr int write_timeout_ms = 2000;

// Reads whatever is queued on the UDP socket and acknowledges the probes among it.
void drain_probes(int udp) {
    static uint8_t buf[65536];
    for (;;) {
        SockAddr from;
        from.len = sizeof(from.ss);
        const ssize_t n = ::recvfrom(udp, buf, sizeof(buf), MSG_DONTWAIT, from.sa(), &from.len);
        if (n < 0) return;
        answer_probe(udp, buf, size_t(n), from);
    }
}

class Session {
public:
    Session(const ServeOptions& opt, LineConn conn, SockAddr peer, int udp)
        : opt_(opt), conn_(std::move(conn)), peer_(peer), udp_(udp) {}

    // True when the client ended the session properly (BYE or a close after the HELLO).
    bool run() {
        std::string line, err;
        Message hello;
        if (Status s = conn_.read_line(line, hello_timeout_ms, err); s != Status::ok)
            return fail(s == Status::invalid_param ? "malformed control message: " + err : "no HELLO: " + err);
        if (!parse_message(line, hello, err)) return fail("malformed control message: " + err);
        if (hello.verb != "HELLO") return fail("malformed control message: expected HELLO, got " + hello.verb);
        const auto mtu = hello.number("roce_mtu", 4096);
        if (!mtu || !valid_roce_mtu(*mtu)) return fail("malformed control message: roce_mtu must be 256, 512, 1024, 2048 or 4096");

        Message reply{"HELLO", {}};
        describe_netdev(reply);
        reply.add("udp_port", std::to_string(opt_.port));
        open_devices(uint32_t(*mtu), reply);
        if (conn_.write_line(reply.format(), write_timeout_ms, err) != Status::ok) return fail(err);
        return serve();
    }

private:
    bool fail(const std::string& why) {
        std::fprintf(stderr, "roce_doctor serve: client %s: %s; session closed\n", peer_.str().c_str(), why.c_str());
        std::string ignored;
        conn_.write_line(Message{"ERR", {}}.add("reason", why).format(), 500, ignored);
        conn_.close_gracefully(500);
        return false;
    }

    // The netdev holding the address the client reached, and its MTU, for the client's
    // netdev-MTU comparison. A client on this host talks to us over lo, whichever address it
    // used (the kernel's local table), and the check side reasons the same way.
    void describe_netdev(Message& reply) {
        local_ = local_addr(conn_.fd()).ip();
        gid::NetModel net;
        std::string err;
        if (gid::load_net_model(gid::SysRoot("/"), net, err) != Status::ok) return;
        const bool same_host = !net.holders_of(peer_.ip()).empty();
        for (const auto& name : same_host ? std::vector<std::string>{"lo"} : net.holders_of(local_))
            if (const gid::Netdev* n = net.find(name)) {
                reply.add("netdev", n->name).add("mtu", std::to_string(n->mtu));
                return;
            }
    }

    void open_devices(uint32_t mtu, Message& reply) {
        std::string err;
        sw::DeviceConfig cfg;
        cfg.ip = local_.str();
        cfg.mtu = mtu;
        cfg.ports = opt_.rc_ports;
        std::unique_ptr<sw::Device> dev;
        if (Status s = sw::Device::open(cfg, sw::Pd::create(), dev); s == Status::ok) {
            reply.add("rc_ip", local_.str()).add("rc_port", std::to_string(dev->address().port));
            rc_.emplace(std::move(dev));
        } else {
            reply.add("rc_skip", "the server cannot open the userspace device on " + cfg.ip + " (UDP port " +
                                     cfg.ports.str() + "): " + std::string(to_string(s)));
        }
        sw::UdQpConfig ucfg;
        ucfg.ip = local_.str();
        ucfg.mtu = mtu;
        ucfg.ports = opt_.ud_ports;
        std::unique_ptr<ud::DatagramQp> qp;
        if (Status s = sw::open_ud_qp(ucfg, qp); s == Status::ok) {
            const ud::UdAddr a = qp->address();
            reply.add("ud_ip", local_.str()).add("ud_port", std::to_string(a.net.port)).add("ud_qpn", std::to_string(a.qpn));
            ud_.emplace(std::move(qp));
        } else {
            reply.add("ud_skip", "the server cannot open a UD QP on " + ucfg.ip + " (UDP port " + ucfg.ports.str() +
                                     "): " + std::string(to_string(s)));
        }
        VerbsPort vp;
        std::unique_ptr<RcDevice> vdev;
        if (!pick_verbs_port(opt_.dev, vp, err)) {
            reply.add("verbs_skip", "server: " + err);
        } else if (open_verbs_device(vp, mtu, vdev, err) != Status::ok) {
            reply.add("verbs_skip", "server: " + err);
        } else {
            reply.add("verbs_ip", ip_of(vdev->address()).str())
                .add("verbs_port", std::to_string(vdev->address().port))
                .add("verbs_dev", vp.name());
            verbs_.emplace(std::move(vdev));
        }
    }

    // Echo loop until BYE, a close, a bad message or the idle limit.
    bool serve() {
        uint64_t last_activity = now_ns();
        const uint64_t idle_ns = uint64_t(opt_.idle_s) * 1'000'000'000ull;
        for (;;) {
            // Sleep in poll() on every source of work rather than spinning: on a loaded host a
            // spinning echo steals the CPU the client needs, and the latency it reports would
            // measure the scheduler. The 1 ms cap covers a wakeup a device might not signal.
            pollfd p[5] = {{conn_.fd(), POLLIN, 0}, {udp_, POLLIN, 0}, {-1, POLLIN, 0}, {-1, POLLIN, 0}, {-1, POLLIN, 0}};
            if (rc_) p[2].fd = rc_->arm();
            if (ud_) p[3].fd = ud_->arm();
            if (verbs_) p[4].fd = verbs_->arm();
            bool work = false;
            if (rc_) work |= rc_->poll();
            if (ud_) work |= ud_->poll();
            if (verbs_) work |= verbs_->poll();
            ::poll(p, 5, work || conn_.has_line() ? 0 : 1);
            bool active = work;
            if (p[1].revents & POLLIN) {
                drain_probes(udp_);
                active = true;
            }
            if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) || conn_.has_line()) {
                std::string line, err;
                const Status s = conn_.read_line(line, 1000, err);
                if (s == Status::io_error && err == "connection closed") return true;
                if (s != Status::ok)
                    return fail(s == Status::invalid_param ? "malformed control message: " + err : err);
                Message m;
                if (!parse_message(line, m, err)) return fail("malformed control message: " + err);
                if (m.verb == "BYE") return true;
                return fail("malformed control message: unexpected " + m.verb);
            }
            if (active) last_activity = now_ns();
            else if (now_ns() - last_activity > idle_ns)
                return fail("silent for " + std::to_string(opt_.idle_s) + " s");
        }
    }

    const ServeOptions& opt_;
    LineConn conn_;
    SockAddr peer_;
    int udp_;
    gid::IpAddr local_;
    std::optional<RcEcho> rc_, verbs_;
    std::optional<UdEcho> ud_;
};

// Listening sockets on ADDR (default: IPv6 any, which takes IPv4 too; IPv4 any where IPv6 is off).
bool open_listeners(const ServeOptions& opt, Fd& tcp, Fd& udp, SockAddr& where, std::string& err) {
    std::vector<gid::IpAddr> tries;
    if (!opt.bind.empty()) {
        const auto ip = resolve_host(opt.bind, err);
        if (!ip) return false;
        tries.push_back(*ip);
    } else {
        tries = {*gid::IpAddr::parse("::"), *gid::IpAddr::parse("0.0.0.0")};
    }
    for (const auto& ip : tries) {
        where = SockAddr::from(ip, opt.port);
        if (tcp_listen(where, tcp, err) == Status::ok && udp_socket(where.family(), &where, false, udp, err) == Status::ok)
            return true;
        tcp.reset();
    }
    return false;
}

} // namespace

int serve_main(int argc, char** argv) {
    ServeOptions opt;
    const char* port_range = nullptr;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
        const char* v = nullptr;
        if (a == "-h" || a == "--help") { serve_usage(stdout); return 0; }
        if (a == "--once") { opt.once = true; continue; }
        if (a != "--bind" && a != "--port" && a != "--dev" && a != "--idle" && a != "--port-range") {
            std::fprintf(stderr, "roce_doctor serve: unknown option '%s'\n", a.c_str());
            serve_usage(stderr);
            return 2;
        }
        if ((v = value()) == nullptr) {
            std::fprintf(stderr, "roce_doctor serve: %s needs a value\n", a.c_str());
            return 2;
        }
        char* end = nullptr;
        const unsigned long n = std::strtoul(v, &end, 10);
        const bool number = *v && *end == '\0';
        if (a == "--bind") opt.bind = v;
        else if (a == "--port-range") port_range = v;
        else if (a == "--dev") opt.dev = v;
        else if (a == "--port" && number && n > 0 && n < 65536) opt.port = uint16_t(n);
        else if (a == "--idle" && number && n > 0 && n <= 3600) opt.idle_s = unsigned(n);
        else {
            std::fprintf(stderr, "roce_doctor serve: %s %s: not a valid number\n", a.c_str(), v);
            return 2;
        }
    }
    Fd tcp, udp;
    SockAddr where;
    std::string err;
    if (doctor_port_ranges(port_range, opt.rc_ports, opt.ud_ports, err) != Status::ok) {
        std::fprintf(stderr, "roce_doctor serve: %s\n", err.c_str());
        return 2;
    }
    if (!open_listeners(opt, tcp, udp, where, err)) {
        std::fprintf(stderr, "roce_doctor serve: %s\n", err.c_str());
        return 1;
    }
    std::printf("roce_doctor serve: listening on %s (TCP control, UDP probes)%s\n", where.str().c_str(),
                opt.once ? ", one session" : "");
    std::fflush(stdout);
    for (;;) {
        pollfd p[2] = {{tcp.get(), POLLIN, 0}, {udp.get(), POLLIN, 0}};
        if (::poll(p, 2, -1) < 0 && errno != EINTR) {
            std::fprintf(stderr, "roce_doctor serve: poll: %s\n", std::strerror(errno));
            return 1;
        }
        if (p[1].revents & POLLIN) drain_probes(udp.get());
        if (!(p[0].revents & POLLIN)) continue;
        SockAddr peer;
        peer.len = sizeof(peer.ss);
        Fd conn(::accept4(tcp.get(), peer.sa(), &peer.len, SOCK_CLOEXEC));
        if (!conn) continue;
        const uint64_t t0 = now_ns();
        std::fprintf(stderr, "roce_doctor serve: session with %s\n", peer.str().c_str());
        const bool ok = Session(opt, LineConn(std::move(conn)), peer, udp.get()).run();
        std::fprintf(stderr, "roce_doctor serve: session with %s ended%s after %.1f s\n", peer.str().c_str(),
                     ok ? "" : " (failed)", double(now_ns() - t0) / 1e9);
        if (opt.once) return ok ? 0 : 1;
    }
}

} // namespace roce::doctor
