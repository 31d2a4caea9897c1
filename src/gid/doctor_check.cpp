#include "gid/doctor_check.hpp"
#include "gid/doctor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/roce_mtu.hpp"
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

void check_usage(FILE* f) {
    std::fprintf(f,
                 "usage: roce_doctor check PEER [--port P] [--json] [--netdev IF] [--dev RDMA_DEV[:PORT]] [--mtu N]\n"
                 "                               [--port-range A-B]\n"
                 "  Checks the path to a `roce_doctor serve` on PEER (TCP/UDP port P, default %u), one line\n"
                 "  per check: reachability (route, control connection), netdev_mtu (local vs server netdev),\n"
                 "  path_mtu (largest DF datagram vs our RoCEv2 packets: RoCE MTU N, default UCX_RC_ROCE_MTU\n"
                 "  or auto: what fits the egress netdev, + headers), rc_sw and ud_sw (ping-pongs over the\n"
                 "  userspace device), rc_verbs (over the RDMA port --dev, else the first active one).\n"
                 "  --netdev: leave through IF. --port-range: the UDP ports the userspace device binds (as\n"
                 "  UCX_RC_ROCE_PORT_RANGE / UCX_UD_ROCE_PORT_RANGE, which are the defaults; a firewall's).\n"
                 "  Exit 0 if no check failed, 1 if one did, 2 on usage errors.\n",
                 unsigned(default_port));
}

namespace {

constexpr int connect_timeout_ms = 3000;
constexpr int hello_timeout_ms = 5000;
constexpr double pingpong_timeout_s = 5;
constexpr double verbs_pingpong_timeout_s = 10;   // rdma_cm setup on soft-RoCE under emulation is slow

struct CheckOptions {
    std::string peer;
    uint16_t port = default_port;
    bool json = false;
    std::string netdev;
    std::string dev;
    uint32_t roce_mtu = 0;   // 0: auto, as the transports pick it (the largest that fits the egress netdev)
    sw::PortRange rc_ports, ud_ports;   // what the userspace device binds for rc_sw / ud_sw
};

enum class Verdict { ok, fail, skip };

struct CheckLine {
    std::string name;
    Verdict verdict;
    std::string detail;
};

const char* verdict_text(Verdict v) { return v == Verdict::ok ? "ok" : v == Verdict::fail ? "FAIL" : "skip"; }

class Checker {
public:
    explicit Checker(const CheckOptions& opt) : opt_(opt) {}

    int run() {
        if (reachability()) {
            netdev_mtu();
            path_mtu();
            rc_sw();
            ud_sw();
            rc_verbs();
            std::string err;
            conn_->write_line(Message{"BYE", {}}.format(), 1000, err);
        } else {
            for (const char* n : {"netdev_mtu", "path_mtu", "rc_sw", "ud_sw", "rc_verbs"})
                add(n, Verdict::skip, "no control connection to the server");
        }
        int failed = 0;
        for (const auto& l : lines_) failed += l.verdict == Verdict::fail;
        if (opt_.json) print_json(failed);
        return failed ? 1 : 0;
    }

private:
    void add(const std::string& name, Verdict v, std::string detail) {
        if (v == Verdict::fail && pmtu_failed_ && name != "path_mtu")
            detail += " (the path MTU is too small for these packets: see path_mtu)";
        lines_.push_back({name, v, detail});
        if (!opt_.json) {
            // Printed as it happens: a slow check shows which one it is.
            std::printf("check %s: %s \u2014 %s\n", name.c_str(), verdict_text(v), detail.c_str());
            std::fflush(stdout);
        }
    }

    void print_json(int failed) const {
        std::printf("{\"peer\": %s, \"port\": %u, \"ok\": %s, \"failed\": %d, \"checks\": [", json_string(opt_.peer).c_str(),
                    unsigned(opt_.port), failed ? "false" : "true", failed);
        for (size_t i = 0; i < lines_.size(); ++i)
            std::printf("%s\n  {\"name\": %s, \"status\": \"%s\", \"detail\": %s}", i ? "," : "",
                        json_string(lines_[i].name).c_str(), verdict_text(lines_[i].verdict),
                        json_string(lines_[i].detail).c_str());
        std::printf("\n]}\n");
    }

    // Route (from the netdev/route model the GID policy uses), then the control connection.
    bool reachability() {
        std::string err;
        const auto ip = resolve_host(opt_.peer, err);
        if (!ip) return add("reachability", Verdict::fail, err), false;
        peer_ = *ip;
        if (gid::load_net_model(gid::SysRoot("/"), net_, err) != Status::ok)
            return add("reachability", Verdict::fail, "cannot read the netdevs and routes: " + err), false;
        const gid::Route* r = opt_.netdev.empty() ? net_.best_route(peer_) : net_.route_via(peer_, opt_.netdev);
        if (r == nullptr)
            return add("reachability", Verdict::fail,
                       "no route to " + peer_.str() + (opt_.netdev.empty() ? "" : " through " + opt_.netdev) +
                           " (`ip route get " + peer_.str() + "`)"),
                   false;
        route_ = *r;
        // To one of this host's own addresses the kernel sends over lo, whatever netdev holds it.
        egress_ = route_.local && net_.find("lo") ? "lo" : route_.dev;
        if (opt_.roce_mtu == 0) {   // UCX_*_MTU=auto: what the transports pick on this netdev
            const unsigned m = local_mtu();
            opt_.roce_mtu = m ? std::max(256u, gid::largest_roce_mtu(m, peer_.family() == gid::Family::inet6)) : 4096;
        }
        std::optional<SockAddr> src;
        if (!opt_.netdev.empty()) {
            // Leaving through IF means sending from IF's address.
            std::optional<gid::IpAddr> a = route_.src;
            for (const auto* ia : net_.addresses_of(opt_.netdev))
                if (!a && ia->usable && ia->prefix.family() == peer_.family()) a = ia->prefix.addr;
            if (!a)
                return add("reachability", Verdict::fail,
                           opt_.netdev + " has no " + std::string(gid::to_string(peer_.family())) + " address"),
                       false;
            src = SockAddr::from(*a, 0);
        }
        const SockAddr dst = SockAddr::from(peer_, opt_.port);
        Fd fd;
        const uint64_t t0 = now_ns();
        if (tcp_connect(dst, src ? &*src : nullptr, connect_timeout_ms, fd, err) != Status::ok)
            return add("reachability", Verdict::fail, "route " + route_.str() + "; " + err), false;
        const double connect_ms = double(now_ns() - t0) / 1e6;
        conn_.emplace(std::move(fd));
        local_ = local_addr(conn_->fd()).ip();
        Message hello{"HELLO", {}};
        hello.add("roce_mtu", std::to_string(opt_.roce_mtu));
        std::string line;
        if (conn_->write_line(hello.format(), hello_timeout_ms, err) != Status::ok ||
            conn_->read_line(line, hello_timeout_ms, err) != Status::ok)
            return add("reachability", Verdict::fail, "connected to " + dst.str() + " but no HELLO from the server: " + err),
                   false;
        if (!parse_message(line, server_, err))
            return add("reachability", Verdict::fail, dst.str() + " is not a roce_doctor server: " + err), false;
        if (server_.verb != "HELLO")
            return add("reachability", Verdict::fail,
                       "the server refused the session: " + server_.get("reason").value_or(server_.verb)),
                   false;
        char b[64];
        std::snprintf(b, sizeof(b), "%.1f ms", connect_ms);
        add("reachability", Verdict::ok,
            "route " + route_.str() + " (source " + local_.str() + (egress_ != route_.dev ? ", via lo: a local address" : "") + "); control connection to " + dst.str() + " in " + b +
                "; server netdev " + server_.get("netdev").value_or("unknown"));
        return true;
    }

    unsigned local_mtu() const {
        const gid::Netdev* n = net_.find(egress_);
        return n ? n->mtu : 0;
    }

    void netdev_mtu() {
        const auto srv = server_.number("mtu", 1u << 20);
        const std::string srv_dev = server_.get("netdev").value_or("?");
        if (!srv || local_mtu() == 0)
            return add("netdev_mtu", Verdict::skip,
                       !srv ? "the server did not report the netdev of " + opt_.peer : "local netdev " + egress_ + " unknown");
        const std::string both = "local " + egress_ + " MTU " + std::to_string(local_mtu()) + ", server " + srv_dev +
                                 " MTU " + std::to_string(*srv);
        if (*srv == local_mtu()) return add("netdev_mtu", Verdict::ok, both);
        const std::string low = *srv < local_mtu() ? srv_dev + " (server)" : egress_ + " (local)";
        add("netdev_mtu", Verdict::fail,
            both + ": MTU mismatch; frames larger than the smaller MTU are dropped at " + low +
                "; set the same MTU on both ends (ip link set dev NAME mtu N)");
    }

    // What the path must carry: one RoCEv2 packet of every device we will use.
    struct Need {
        std::string what;
        unsigned roce_mtu;
    };

    void path_mtu() {
        const auto udp_port = server_.number("udp_port", 65535);
        if (!udp_port) return add("path_mtu", Verdict::skip, "the server did not report its UDP port");
        const gid::Family fam = peer_.family();
        std::vector<Need> needs{{"the userspace device", opt_.roce_mtu}};
        VerbsPort vp;
        std::string why;
        if (pick_verbs_port(opt_.dev, vp, why) && vp.active_mtu)
            needs.push_back({"the verbs device " + vp.name(), std::min(vp.active_mtu, opt_.roce_mtu)});
        const SockAddr src = SockAddr::from(local_, 0);
        PmtuResult res;
        std::string err;
        if (probe_path_mtu(SockAddr::from(peer_, uint16_t(*udp_port)), &src, opt_.rc_ports,
                           local_mtu() ? local_mtu() : 65535, res, err) != Status::ok)
            return add("path_mtu", Verdict::fail, err);
        std::string detail = "path MTU " + std::to_string(res.path_mtu) + " bytes (" + std::to_string(res.probes) +
                             " DF probes)";
        for (const Need& n : needs) {
            const unsigned pkt = n.roce_mtu + roce_overhead(fam);
            const std::string pkt_text = std::to_string(pkt) + "-byte RoCEv2 packets of " + n.what + " (RoCE MTU " +
                                         std::to_string(n.roce_mtu) + " + " + std::to_string(roce_overhead(fam)) +
                                         " bytes IP/UDP/BTH/RETH/ICRC)";
            if (pkt <= res.path_mtu) {
                detail += "; fits " + pkt_text;
                continue;
            }
            const unsigned fit = roce_mtu_fitting(res.path_mtu, fam);
            const std::string srv_dev = server_.get("netdev").value_or("the server's netdev");
            std::string fix = fit ? "set UCX_RC_ROCE_MTU=" + std::to_string(fit) + " (and UCX_UD_ROCE_MTU) or raise the MTU of "
                                  : "raise the MTU of ";
            fix += res.path_mtu < local_mtu() ? "the hops between " + egress_ + " and " + srv_dev
                                              : egress_ + " and " + srv_dev;
            fix += " to at least " + std::to_string(pkt);
            pmtu_failed_ = true;
            return add("path_mtu", Verdict::fail,
                       "path MTU " + std::to_string(res.path_mtu) + " bytes is smaller than the " + pkt_text +
                           " (local " + egress_ + " MTU " + std::to_string(local_mtu()) + ", server " + srv_dev +
                           " MTU " + server_.get("mtu").value_or("?") + "): larger packets are dropped; " + fix);
        }
        add("path_mtu", Verdict::ok, detail);
    }

    // The server's address of a transport, or the reason it has none.
    std::optional<gid::IpAddr> server_ip(const char* key, const char* skip_key, std::string& why) const {
        if (auto ip = gid::IpAddr::parse(server_.get(key).value_or(""))) return ip;
        why = server_.get(skip_key).value_or(std::string("the server did not offer it (no ") + key + ")");
        return std::nullopt;
    }

    void rc_sw() {
        std::string why, err;
        const auto ip = server_ip("rc_ip", "rc_skip", why);
        const auto port = server_.number("rc_port", 65535);
        if (!ip || !port) return add("rc_sw", Verdict::skip, why.empty() ? "no rc_port from the server" : why);
        sw::DeviceConfig cfg;
        cfg.ip = local_.str();
        cfg.mtu = opt_.roce_mtu;
        cfg.ports = opt_.rc_ports;
        std::unique_ptr<sw::Device> dev;
        if (Status s = sw::Device::open(cfg, sw::Pd::create(), dev); s != Status::ok)
            return add("rc_sw", Verdict::fail, "cannot open the userspace device on " + cfg.ip + " (UDP port " +
                                                   cfg.ports.str() + "): " + std::string(to_string(s)));
        PingReport rep;
        if (rc_pingpong(*dev, wire_addr(*ip, uint16_t(*port)), {{8, 200}, {65536, 20}}, pingpong_timeout_s, rep, err) !=
            Status::ok)
            return add("rc_sw", Verdict::fail, "RC SEND ping-pong with " + dev->address().to_string() + " -> " +
                                                   wire_addr(*ip, uint16_t(*port)).to_string() + ": " + err);
        add("rc_sw", Verdict::ok, "RC SEND ping-pong, every byte checked: " + rep.text());
    }

    void ud_sw() {
        std::string why, err;
        const auto ip = server_ip("ud_ip", "ud_skip", why);
        const auto port = server_.number("ud_port", 65535);
        const auto qpn = server_.number("ud_qpn", 0xffffff);
        if (!ip || !port || !qpn) return add("ud_sw", Verdict::skip, why.empty() ? "no UD QP address from the server" : why);
        sw::UdQpConfig cfg;
        cfg.ip = local_.str();
        cfg.mtu = opt_.roce_mtu;
        cfg.ports = opt_.ud_ports;
        std::unique_ptr<ud::DatagramQp> qp;
        if (Status s = sw::open_ud_qp(cfg, qp); s != Status::ok)
            return add("ud_sw", Verdict::fail, "cannot open a UD QP on " + cfg.ip + " (UDP port " + cfg.ports.str() +
                                                   "): " + std::string(to_string(s)));
        const ud::UdAddr peer{wire_addr(*ip, uint16_t(*port)), uint32_t(*qpn)};
        PingReport rep;
        const size_t big = qp->max_payload();
        if (ud_pingpong(*qp, peer, {{8, 50}, {big, 10}}, pingpong_timeout_s, rep, err) != Status::ok)
            return add("ud_sw", Verdict::fail, "UD ping-pong with " + peer.to_string() + ": " + err);
        add("ud_sw", Verdict::ok, "UD datagram ping-pong, every byte checked: " + rep.text());
    }

    void rc_verbs() {
        VerbsPort vp;
        std::string why, err;
        if (!pick_verbs_port(opt_.dev, vp, why)) {
            // An RDMA device named on the command line that is not there is a failure; no RDMA
            // device at all is what a host without RDMA looks like.
            return add("rc_verbs", opt_.dev.empty() ? Verdict::skip : Verdict::fail, why);
        }
        const auto ip = server_ip("verbs_ip", "verbs_skip", why);
        const auto port = server_.number("verbs_port", 65535);
        if (!ip || !port) return add("rc_verbs", Verdict::skip, why);
        std::unique_ptr<RcDevice> dev;
        if (open_verbs_device(vp, opt_.roce_mtu, dev, err) != Status::ok) return add("rc_verbs", Verdict::fail, err);
        PingReport rep;
        const WireAddr peer = wire_addr(*ip, uint16_t(*port));
        if (rc_pingpong(*dev, peer, {{8, 200}, {65536, 20}}, verbs_pingpong_timeout_s, rep, err) != Status::ok)
            return add("rc_verbs", Verdict::fail, "RC SEND ping-pong on " + vp.name() + " with " +
                                                      server_.get("verbs_dev").value_or("?") + " at " + peer.to_string() +
                                                      ": " + err);
        add("rc_verbs", Verdict::ok, vp.name() + " -> " + server_.get("verbs_dev").value_or("?") + " at " +
                                         peer.to_string() + ", every byte checked: " + rep.text());
    }

    CheckOptions opt_;   // roce_mtu resolved once the egress netdev is known
    std::vector<CheckLine> lines_;
    gid::NetModel net_;
    gid::IpAddr peer_, local_;
    gid::Route route_;
    std::string egress_;   // the netdev packets to the peer leave through
    std::optional<LineConn> conn_;
    Message server_;
    bool pmtu_failed_ = false;   // ping-pong failures then point at it: the likely cause
};

} // namespace

int check_main(int argc, char** argv) {
    CheckOptions opt;
    // The MTU rc_roce would use: UCX_RC_ROCE_MTU, overridden by --mtu.
    const char* env_mtu = std::getenv("UCX_RC_ROCE_MTU");
    std::string mtu_text = env_mtu ? env_mtu : "", mtu_from = "UCX_RC_ROCE_MTU=";
    std::optional<std::string> port_range;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") { check_usage(stdout); return 0; }
        if (a == "--json") { opt.json = true; continue; }
        if (a[0] != '-') {
            if (!opt.peer.empty()) {
                std::fprintf(stderr, "roce_doctor check: more than one PEER ('%s', '%s')\n", opt.peer.c_str(), a.c_str());
                return 2;
            }
            opt.peer = a;
            continue;
        }
        if (a != "--port" && a != "--netdev" && a != "--dev" && a != "--mtu" && a != "--port-range") {
            std::fprintf(stderr, "roce_doctor check: unknown option '%s'\n", a.c_str());
            check_usage(stderr);
            return 2;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "roce_doctor check: %s needs a value\n", a.c_str());
            return 2;
        }
        const std::string v = argv[++i];
        if (a == "--netdev") opt.netdev = v;
        else if (a == "--dev") opt.dev = v;
        else if (a == "--mtu") { mtu_text = v; mtu_from = "--mtu "; }
        else if (a == "--port-range") port_range = v;
        else {
            char* end = nullptr;
            const unsigned long n = std::strtoul(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || n == 0 || n > 65535) {
                std::fprintf(stderr, "roce_doctor check: --port %s: not a port number\n", v.c_str());
                return 2;
            }
            opt.port = uint16_t(n);
        }
    }
    if (opt.peer.empty()) {
        std::fprintf(stderr, "roce_doctor check: no PEER given\n");
        check_usage(stderr);
        return 2;
    }
    if (!mtu_text.empty() && mtu_text != "auto") {
        char* end = nullptr;
        const unsigned long n = std::strtoul(mtu_text.c_str(), &end, 10);
        if (*end != '\0' || !valid_roce_mtu(n)) {
            std::fprintf(stderr, "roce_doctor check: %s%s: the RoCE MTU is 256, 512, 1024, 2048, 4096 or auto\n",
                         mtu_from.c_str(), mtu_text.c_str());
            return 2;
        }
        opt.roce_mtu = uint32_t(n);
    }
    if (std::string err; doctor_port_ranges(port_range ? port_range->c_str() : nullptr, opt.rc_ports, opt.ud_ports,
                                            err) != Status::ok) {
        std::fprintf(stderr, "roce_doctor check: %s\n", err.c_str());
        return 2;
    }
    if (!opt.netdev.empty()) {
        gid::NetModel net;
        std::string err;
        if (gid::load_net_model(gid::SysRoot("/"), net, err) == Status::ok && !net.find(opt.netdev)) {
            std::string names;
            for (const auto& n : net.netdevs) names += (names.empty() ? "" : ", ") + n.name;
            std::fprintf(stderr, "roce_doctor check: --netdev %s: unknown netdev; valid: %s\n", opt.netdev.c_str(),
                         names.c_str());
            return 2;
        }
    }
    return Checker(opt).run();
}

} // namespace roce::doctor
