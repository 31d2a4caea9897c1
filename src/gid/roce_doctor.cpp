// roce_doctor: diagnostics for RoCE setups.
//   `gid`: prints each RoCE port's GID table, the entry chosen per peer (or per local subnet when
//   no peer is given) and why every other entry was rejected, and the traffic class that would
//   be used.
//   `wire`: reads a packet capture (tcpdump -w / dumpcap -P) and prints, per RoCEv2 flow, the
//   traffic class its packets really carried: what the switches see.
//   `counters`: the live counters rc_roce interfaces write with UCX_RC_ROCE_STATS_DIR=DIR, one
//   block per interface (processes that have exited are marked) with its peers and QPs, or JSON
//   (doctor_counters.cpp).
//   `devices`: RDMA ports and the userspace device's netdevs with their MTUs, GIDs, traffic class,
//   PFC/ECN settings and locality, and checks of each (doctor_devices.cpp).
//   `serve` / `check PEER`: a pair of hosts end to end (doctor_serve.hpp, doctor_check.hpp): the
//   route, the netdev and path MTU against our RoCEv2 packet size, and data-checked ping-pongs
//   over the userspace device (RC, UD) and the verbs backend, against a `serve` on PEER.
//
//   roce_doctor gid [--sysfs DIR] [--dev NAME[:PORT]] [--netdev IF] [--peer ADDR]... [--set NAME=VALUE]...
//   roce_doctor wire FILE.pcap
//   roce_doctor counters [DIR] [--json] [--live] [--device]
//   roce_doctor devices [--json]
//   roce_doctor serve [--bind ADDR] [--port P] [--dev RDMA_DEV[:PORT]] [--once] [--idle S]
//   roce_doctor check PEER [--port P] [--json] [--netdev IF] [--dev RDMA_DEV[:PORT]] [--mtu N]
//
// --sysfs DIR reads DIR/sys/..., DIR/proc/..., DIR/addrs and DIR/routes instead of the live
// system (the test fixtures have this layout). Settings come from UCX_RC_ROCE_* in the
// environment, then --set. --netdev shows the table the userspace device synthesises for IF.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gid/config.hpp"
#include "gid/doctor.hpp"
#include "gid/doctor_check.hpp"
#include "gid/doctor_serve.hpp"
#include "gid/explain.hpp"
#include "gid/gid_table.hpp"
#include "gid/netdev.hpp"
#include "gid/select.hpp"
#include "gid/synth.hpp"
#include "gid/traffic_class.hpp"
#include "wire/pcap.hpp"

using namespace roce::gid;
using roce::Status;

namespace {

int usage(FILE* f) {
    std::fprintf(f,
                 "usage: roce_doctor gid [--sysfs DIR] [--dev NAME[:PORT]] [--netdev IF] [--peer ADDR]... "
                 "[--set NAME=VALUE]...\n"
                 "  Shows the GID table of every RoCE port, the entry chosen per peer (or per local subnet)\n"
                 "  and why each other entry was rejected, and the traffic class.\n"
                 "  NAME is a UCX_RC_ROCE_ setting without the prefix:");
    for (const auto& v : gid_config_vars) std::fprintf(f, " %.*s", int(v.name.size()), v.name.data());
    std::fprintf(f,
                 "\n"
                 "usage: roce_doctor wire FILE.pcap\n"
                 "  One line per RoCEv2 flow (UDP port 4791, or any port when the ICRC verifies) of the\n"
                 "  capture and traffic class:\n"
                 "  flow SRC -> DST KIND packets=N tos=T dscp=D ecn=E  (KIND: rc, uc, ud, cnp, other)\n"
                 "usage: roce_doctor devices [--json]\n"
                 "  RDMA ports and the userspace device's netdevs: state, MTUs, GIDs, traffic class, PFC/ECN,\n"
                 "  NUMA node and CPUs (hwloc), with checks (exit 1 when one fails).\n"
                 "usage: roce_doctor counters [DIR] [--json] [--live] [--device]\n"
                 "  Live counters of rc_roce / ud_roce interfaces (UCX_*_ROCE_STATS_DIR): device, per peer, per QP.\n");
    roce::doctor::serve_usage(f);
    roce::doctor::check_usage(f);
    return f == stderr ? 2 : 0;
}

// `roce_doctor wire FILE`: the traffic class each RoCEv2 flow of a capture carried.
int wire_main(int argc, char** argv) {
    if (argc != 3 || argv[2][0] == '-') return usage(argc == 3 && !std::strcmp(argv[2], "--help") ? stdout : stderr);
    std::vector<roce::wire::PcapFrame> frames;
    std::string err;
    if (roce::wire::read_pcap(argv[2], frames, err) != Status::ok) {
        std::fprintf(stderr, "error: %s: %s\n", argv[2], err.c_str());
        return 1;
    }
    static const char* const ecn_names[] = {"not-ect", "ect1", "ect0", "ce"};
    // (src, dst, kind, tos) -> packets, in order of first appearance.
    std::vector<std::pair<std::string, unsigned>> flows;
    for (const auto& f : frames) {
        // UDP port 4791, or any port when the payload is a RoCEv2 packet whose ICRC verifies (the
        // userspace device's traces: ephemeral ports).
        if (f.udp_payload.empty()) continue;
        roce::wire::Packet pkt;
        if (f.ip.dst_port != 4791 && roce::wire::parse(f.payload(), f.ip, true, pkt) != roce::wire::ParseError::none)
            continue;
        const uint8_t op = f.udp_payload[0];
        const char* kind = op == 0x81 ? "cnp" : op < 0x20 ? "rc" : op < 0x40 ? "uc" : (op >= 0x60 && op < 0x80) ? "ud" : "other";
        IpAddr src, dst;
        if (f.ip.ipv6) {
            src = IpAddr::from_bytes(f.ip.src_ip);
            dst = IpAddr::from_bytes(f.ip.dst_ip);
        } else {
            src = IpAddr::v4(uint32_t(f.ip.src_ip[0]) << 24 | uint32_t(f.ip.src_ip[1]) << 16 | uint32_t(f.ip.src_ip[2]) << 8 | f.ip.src_ip[3]);
            dst = IpAddr::v4(uint32_t(f.ip.dst_ip[0]) << 24 | uint32_t(f.ip.dst_ip[1]) << 16 | uint32_t(f.ip.dst_ip[2]) << 8 | f.ip.dst_ip[3]);
        }
        const std::string key = "flow " + src.str() + " -> " + dst.str() + " " + kind + " tos=" + std::to_string(f.tos) +
                                " dscp=" + std::to_string(f.tos >> 2) + " ecn=" + ecn_names[f.tos & 3];
        auto it = std::find_if(flows.begin(), flows.end(), [&](const auto& x) { return x.first == key; });
        if (it == flows.end()) flows.emplace_back(key, 1);
        else ++it->second;
    }
    for (const auto& [key, n] : flows) {
        // "flow A -> B rc packets=N tos=..." : the count goes after the kind.
        const auto tos = key.find(" tos=");
        std::printf("%s packets=%u%s\n", key.substr(0, tos).c_str(), n, key.substr(tos).c_str());
    }
    if (flows.empty()) std::printf("no RoCEv2 packets (UDP port 4791 or a valid ICRC) in %s (%zu frames)\n", argv[2], frames.size());
    return 0;
}

struct Options {
    std::string sysfs = "/";
    std::string dev;
    unsigned port = 0;   // 0: every port
    std::vector<std::string> netdevs;
    std::vector<std::pair<std::string, IpAddr>> peers;
    std::vector<std::pair<std::string, std::string>> settings;
};

bool vlan_tagged(const PortInfo& port, const NetModel& net, const Selection& sel) {
    if (!sel.index) return false;
    const Netdev* n = net.find(port.gids[*sel.index].ndev);
    return n && n->vlan_id;
}

// One port: table, selections, traffic class. Returns false when nothing could be chosen.
bool report_port(const PortInfo& port, const NetModel& net, const GidConfig& cfg, const Options& opt) {
    std::fputs(format_gid_table(port, net).c_str(), stdout);
    std::string err;
    if (check_gid_config(cfg, port, err) != Status::ok) {
        std::printf("error: %s\n\n", err.c_str());
        return false;
    }
    bool ok = true;
    Selection iface = select_gid(port, net, cfg);
    std::fputs(format_selection("interface default", iface).c_str(), stdout);
    ok &= iface.status == Status::ok;

    std::vector<std::pair<std::string, IpAddr>> targets = opt.peers;
    if (targets.empty()) {
        // No peer given: one synthetic peer per local subnet (its network address), which answers
        // "which entry would talk to that subnet".
        std::set<IpPrefix> subnets;
        for (const auto& g : advertised_gids(port, net, cfg))
            for (const auto& a : net.addrs)
                if (a.prefix.addr == g.gid.raw && !a.prefix.addr.is_link_local()) subnets.insert(a.prefix.network());
        for (const auto& s : subnets) targets.emplace_back("subnet " + s.str(), s.addr);
    }
    for (const auto& [label, addr] : targets) {
        const PeerGid peer{Gid{addr}, std::nullopt};
        Selection sel = select_gid(port, net, cfg, std::span(&peer, 1));
        std::fputs(format_selection(label, sel).c_str(), stdout);
        ok &= sel.status == Status::ok;
    }
    const TrafficClass tc = resolve_traffic_class(cfg, port.default_tclass);
    std::fputs(format_traffic_class(tc, cnp_class(cfg, tc), vlan_tagged(port, net, iface)).c_str(), stdout);
    std::printf("\n");
    return ok;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) return usage(stderr);
    if (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) return usage(stdout);
    if (!std::strcmp(argv[1], "wire")) return wire_main(argc, argv);
    if (!std::strcmp(argv[1], "counters")) return roce::doctor::counters_main(argc, argv);
    if (!std::strcmp(argv[1], "devices")) return roce::doctor::devices_main(argc, argv);
    if (!std::strcmp(argv[1], "serve")) return roce::doctor::serve_main(argc, argv);
    if (!std::strcmp(argv[1], "check")) return roce::doctor::check_main(argc, argv);
    if (std::strcmp(argv[1], "gid") != 0) {
        std::fprintf(stderr, "roce_doctor: unknown subcommand '%s'; valid: gid, wire, counters, devices, serve, check\n",
                     argv[1]);
        return 2;
    }
    Options opt;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "roce_doctor: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "-h" || a == "--help") return usage(stdout);
        if (a == "--sysfs") opt.sysfs = value();
        else if (a == "--dev") {
            opt.dev = value();
            if (auto c = opt.dev.find(':'); c != std::string::npos) {
                opt.port = static_cast<unsigned>(std::strtoul(opt.dev.c_str() + c + 1, nullptr, 10));
                opt.dev.resize(c);
            }
        } else if (a == "--netdev") opt.netdevs.push_back(value());
        else if (a == "--peer") {
            const std::string p = value();
            auto ip = IpAddr::parse(p);
            if (!ip) {
                std::fprintf(stderr, "roce_doctor: --peer %s: not an IPv4 or IPv6 address\n", p.c_str());
                return 2;
            }
            opt.peers.emplace_back("peer " + p, *ip);
        } else if (a == "--set") {
            const std::string kv = value();
            const auto eq = kv.find('=');
            if (eq == std::string::npos) {
                std::fprintf(stderr, "roce_doctor: --set %s: expected NAME=VALUE\n", kv.c_str());
                return 2;
            }
            opt.settings.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
        } else {
            std::fprintf(stderr, "roce_doctor gid: unknown option '%s'\n", a.c_str());
            return usage(stderr);
        }
    }

    std::string err;
    GidConfig cfg;
    if (roce::doctor::load_gid_config(opt.settings, cfg, err) != Status::ok) {
        std::fprintf(stderr, "error: %s\n", err.c_str());
        return 2;
    }

    const SysRoot root(opt.sysfs);
    NetModel net;
    if (load_net_model(root, net, err) != Status::ok) {
        std::fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
    }

    bool ok = true;
    int shown = 0;
    for (const auto& dev : list_rdma_devices(root)) {
        if (!opt.dev.empty() && dev != opt.dev) continue;
        for (unsigned p : list_ports(root, dev)) {
            if (opt.port && p != opt.port) continue;
            PortInfo port;
            if (read_port(root, dev, p, port, err) != Status::ok) {
                std::printf("error: %s\n", err.c_str());
                ok = false;
                continue;
            }
            ok &= report_port(port, net, cfg, opt);
            ++shown;
        }
    }
    if (!opt.dev.empty() && shown == 0) {
        PortInfo port;
        read_port(root, opt.dev, opt.port ? opt.port : 1, port, err);
        std::fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
    }
    std::vector<std::string> netdevs = opt.netdevs;
    if (shown == 0 && netdevs.empty()) {
        std::printf("no RDMA devices under %s; the userspace device would synthesise these tables:\n\n",
                    root.path("sys/class/infiniband").c_str());
        for (const auto& n : net.netdevs)
            if (n.up() && !net.addresses_of(n.name).empty()) netdevs.push_back(n.name);
    }
    for (const auto& nd : netdevs) {
        if (!net.find(nd)) {
            std::string names;
            for (const auto& n : net.netdevs) names += (names.empty() ? "" : ", ") + n.name;
            std::fprintf(stderr, "error: --netdev %s: unknown netdev; valid: %s\n", nd.c_str(), names.c_str());
            return 2;
        }
        ok &= report_port(synthesize_port(net, nd), net, cfg, opt);
    }
    return ok ? 0 : 1;
}
