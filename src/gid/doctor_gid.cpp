// `roce_doctor gid`: each RoCE port's GID table (or, with --netdev or without RDMA devices, the
// table the userspace device synthesises from a netdev's addresses), the entry chosen per peer
// (or per local subnet when no peer is given) and why every other entry was rejected, and the
// traffic class that would be used. Text, or JSON with --json.
//
// --sysfs DIR reads DIR/sys/..., DIR/proc/..., DIR/addrs and DIR/routes instead of the live
// system (the test fixtures have this layout). Settings come from UCX_RC_ROCE_* in the
// environment, then --set.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gid/config.hpp"
#include "gid/doctor.hpp"
#include "gid/explain.hpp"
#include "gid/gid_table.hpp"
#include "gid/netdev.hpp"
#include "gid/select.hpp"
#include "gid/synth.hpp"
#include "gid/sysroot.hpp"
#include "gid/traffic_class.hpp"

namespace roce::doctor {

using namespace roce::gid;

void gid_usage(FILE* f) {
    std::fprintf(f,
                 "usage: roce_doctor gid [--sysfs DIR] [--dev NAME[:PORT]] [--netdev IF] [--peer ADDR]... "
                 "[--set NAME=VALUE]... [--json]\n"
                 "  Shows the GID table of every RoCE port, the entry chosen per peer (or per local subnet)\n"
                 "  and why each other entry was rejected, and the traffic class.\n"
                 "  NAME is a UCX_RC_ROCE_ setting without the prefix:");
    for (const auto& v : gid_config_vars) std::fprintf(f, " %.*s", int(v.name.size()), v.name.data());
    std::fprintf(f, "\n");
}

namespace {

struct Options {
    std::string sysfs = "/";
    std::string dev;
    unsigned port = 0;   // 0: every port
    std::vector<std::string> netdevs;
    std::vector<std::pair<std::string, IpAddr>> peers;
    std::vector<std::pair<std::string, std::string>> settings;
    bool json = false;
};

struct Output {
    std::string json;   // the ports' objects, comma-separated (--json)
};

bool vlan_tagged(const PortInfo& port, const NetModel& net, const Selection& sel) {
    if (!sel.index) return false;
    const Netdev* n = net.find(port.gids[*sel.index].ndev);
    return n && n->vlan_id;
}

std::string selection_json(const std::string& label, const PortInfo& port, const Selection& s) {
    std::string o = "{\"label\": " + json_string(label) + ", \"ok\": " + (s.status == Status::ok ? "true" : "false");
    if (s.status != Status::ok)
        o += ", \"error\": " + json_string(s.error);
    if (s.index)
        o += ", \"index\": " + std::to_string(*s.index) + ", \"gid\": " +
             json_string(port.gids[*s.index].gid.raw.str()) + ", \"reason\": " + json_string(s.reason);
    o += ", \"rejected\": [";
    bool first = true;
    for (const Candidate& c : s.entries) {
        if (c.verdict == Verdict::chosen || c.verdict == Verdict::unused) continue;
        o += std::string(first ? "" : ", ") + "{\"index\": " + std::to_string(c.index) + ", \"verdict\": " +
             json_string(std::string(to_string(c.verdict))) + ", \"why\": " + json_string(c.why) + "}";
        first = false;
    }
    return o + "]}";
}

std::string port_json(const PortInfo& port, const std::string& config_error,
                      const std::vector<std::pair<std::string, Selection>>& sels, const TrafficClass& tc,
                      const CnpClass& cnp) {
    std::string o = "\n  {\"dev\": " + json_string(port.dev) + ", \"port\": " + std::to_string(port.port) +
                    ", \"synthesised\": " + (port.synthesised ? "true" : "false") +
                    ", \"link_layer\": " + json_string(port.link_layer) + ", \"gids\": [";
    bool first = true;
    for (const GidEntry& g : port.gids) {
        if (!g.used()) continue;
        o += std::string(first ? "" : ", ") + "{\"index\": " + std::to_string(g.index) + ", \"gid\": " +
             json_string(g.gid.raw.str()) + ", \"type\": " + json_string(g.type_text) + ", \"ndev\": " +
             json_string(g.ndev) + "}";
        first = false;
    }
    o += "]";
    if (!config_error.empty())
        return o + ", \"error\": " + json_string(config_error) + "}";
    o += ", \"selections\": [";
    for (size_t i = 0; i < sels.size(); ++i)
        o += (i ? ", " : "") + selection_json(sels[i].first, port, sels[i].second);
    char tcb[160];
    std::snprintf(tcb, sizeof(tcb),
                  "], \"traffic_class\": {\"tos\": %u, \"dscp\": %u, \"ecn\": %u, \"priority\": %u}, "
                  "\"cnp\": {\"tos\": %u, \"priority\": %u}}",
                  unsigned(tc.tos), unsigned(tc.dscp()), unsigned(tc.ecn()), unsigned(tc.priority), unsigned(cnp.tos),
                  unsigned(cnp.priority));
    return o + tcb;
}

// One port: table, selections, traffic class (text, or a JSON object appended to out.json).
// Returns false when nothing could be chosen.
bool report_port(const PortInfo& port, const NetModel& net, const GidConfig& cfg, const Options& opt, Output& out) {
    std::string err;
    if (check_gid_config(cfg, port, err) != Status::ok) {
        if (opt.json)
            out.json += (out.json.empty() ? "" : ",") + port_json(port, err, {}, {}, {});
        else
            std::printf("%serror: %s\n\n", format_gid_table(port, net).c_str(), err.c_str());
        return false;
    }
    std::vector<std::pair<std::string, Selection>> sels;
    sels.emplace_back("interface default", select_gid(port, net, cfg));
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
        sels.emplace_back(label, select_gid(port, net, cfg, std::span(&peer, 1)));
    }
    bool ok = true;
    for (const auto& s : sels) ok &= s.second.status == Status::ok;
    const TrafficClass tc = resolve_traffic_class(cfg, port.default_tclass);
    const CnpClass cnp = cnp_class(cfg, tc);
    if (opt.json) {
        out.json += (out.json.empty() ? "" : ",") + port_json(port, "", sels, tc, cnp);
        return ok;
    }
    std::fputs(format_gid_table(port, net).c_str(), stdout);
    for (const auto& [label, sel] : sels)
        std::fputs(format_selection(label, sel).c_str(), stdout);
    std::fputs(format_traffic_class(tc, cnp, vlan_tagged(port, net, sels.front().second)).c_str(), stdout);
    std::printf("\n");
    return ok;
}

} // namespace

int gid_main(int argc, char** argv) {
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
        if (a == "-h" || a == "--help") { gid_usage(stdout); return 0; }
        if (a == "--json") { opt.json = true; continue; }
        if (a == "--sysfs") opt.sysfs = value();
        else if (a == "--dev") {
            opt.dev = value();
            if (auto c = opt.dev.find(':'); c != std::string::npos) {
                // (0 means every port: a port that does not parse must not read as that)
                const std::string_view p = std::string_view(opt.dev).substr(c + 1);
                unsigned n = 0;
                const auto r = std::from_chars(p.data(), p.data() + p.size(), n);
                if (p.empty() || r.ec != std::errc() || r.ptr != p.data() + p.size() || n == 0 || n > 255) {
                    std::fprintf(stderr, "roce_doctor: --dev %s: the port is a number 1..255 (DEV:PORT)\n",
                                 opt.dev.c_str());
                    return 2;
                }
                opt.port = n;
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
            gid_usage(stderr);
            return 2;
        }
    }

    std::string err;
    GidConfig cfg;
    if (load_gid_config(opt.settings, cfg, err) != Status::ok) {
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
    Output out;
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
            ok &= report_port(port, net, cfg, opt, out);
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
        if (!opt.json)
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
        ok &= report_port(synthesize_port(net, nd), net, cfg, opt, out);
    }
    if (opt.json)
        std::printf("{\"ports\": [%s%s], \"ok\": %s}\n", out.json.c_str(), out.json.empty() ? "" : "\n",
                    ok ? "true" : "false");
    return ok ? 0 : 1;
}

} // namespace roce::doctor
