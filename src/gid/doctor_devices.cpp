// `roce_doctor devices`: the RDMA ports and the netdevs the userspace device can use, with what
// operators otherwise collect from ibv_devinfo, show_gids, ip link, dcb and sysfs by hand: port
// state and MTU against the netdev's, GIDs, the traffic class rc_roce would use, PFC and RoCE ECN
// settings where the driver exposes them, hardware counters, and locality (hwloc). Each check
// prints `check NAME: ok|FAIL - detail`; the exit status is 1 when one failed.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/roce_mtu.hpp"
#include "gid/config.hpp"
#include "gid/doctor.hpp"
#include "gid/gid_table.hpp"
#include "gid/locality.hpp"
#include "gid/netdev.hpp"
#include "gid/sysroot.hpp"
#include "gid/traffic_class.hpp"
#if ROCE_DOCTOR_VERBS
#include "verbs/ports.hpp"
#endif

namespace roce::doctor {

Status doctor_port_ranges(const char* override_text, sw::PortRange& rc, sw::PortRange& ud, std::string& err) {
    const std::pair<const char*, sw::PortRange*> vars[] = {{"UCX_RC_ROCE_PORT_RANGE", &rc},
                                                            {"UCX_UD_ROCE_PORT_RANGE", &ud}};
    for (const auto& [var, out] : vars) {
        const char* text = override_text ? override_text : std::getenv(var);
        const std::string from = override_text ? "--port-range " : std::string(var) + "=";
        if (text == nullptr || *text == '\0') {
            *out = sw::PortRange();
            continue;
        }
        const auto r = sw::parse_port_range(text);
        if (!r) {
            err = from + text + ": not a UDP port or a range a-b of them (0: an ephemeral port)";
            return Status::invalid_param;
        }
        *out = *r;
    }
    return Status::ok;
}

Status load_gid_config(const std::vector<std::pair<std::string, std::string>>& extra, gid::GidConfig& cfg,
                       std::string& err) {
    // Environment first, then `extra` (--set): later settings override earlier ones, and the
    // cross-checks (TRAFFIC_CLASS with DSCP, ...) see the merged result.
    std::vector<std::pair<std::string, std::string>> settings;
    for (const auto& v : gid::gid_config_vars) {
        const std::string env = std::string(gid::config_prefix) + std::string(v.name);
        if (const char* val = std::getenv(env.c_str()))
            settings.emplace_back(std::string(v.name), val);
    }
    settings.insert(settings.end(), extra.begin(), extra.end());
    return gid::parse_gid_config(settings, cfg, err);
}

namespace {

int usage(FILE* f) {
    std::fprintf(f,
                 "usage: roce_doctor devices [--json]\n"
                 "  RDMA ports (state, MTU against their netdev's, GIDs, traffic class, PFC/ECN, hardware\n"
                 "  counters, NUMA node and CPUs) and the netdevs the userspace device can use (address, MTU\n"
                 "  and the RoCE MTU auto picks, speed, locality), closest to this process first. Checks\n"
                 "  print `check NAME: ok|FAIL - detail`; exit status 1 when one failed.\n");
    return f == stderr ? 2 : 0;
}

std::string first_line(const std::string& path) {
    std::ifstream f(path);
    std::string l;
    std::getline(f, l);
    return l;
}

// A command's first output line (stdout and stderr), for tools whose answer we only show.
std::string command_line(const std::string& cmd) {
    std::string out;
    if (FILE* p = ::popen((cmd + " 2>&1").c_str(), "r")) {
        char buf[512];
        if (std::fgets(buf, sizeof(buf), p))
            out = buf;
        ::pclose(p);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
        out.pop_back();
    return out;
}

// PFC as `dcb` (iproute2) reports it; most virtual and many NIC drivers have no DCB at all.
std::string pfc_of(const std::string& ifname) {
    const std::string l = command_line("timeout 2 dcb pfc show dev " + ifname);
    if (l.empty() || l.find("not supported") != std::string::npos || l.find("No such") != std::string::npos)
        return "not available (" + (l.empty() ? std::string("no dcb tool") : l) + ")";
    return l;
}

// The RoCE ECN switches mlx5-style drivers expose per priority (roce_np: notification point,
// marks answered with CNPs; roce_rp: reaction point, rate cut on CNPs).
std::string roce_ecn_of(const std::string& ifname) {
    std::string out;
    for (const char* role : {"roce_np", "roce_rp"}) {
        std::string on;
        for (int prio = 0; prio < 8; ++prio)
            if (first_line("/sys/class/net/" + ifname + "/ecn/" + role + "/enable/" + std::to_string(prio)) == "1")
                on += (on.empty() ? "" : ",") + std::to_string(prio);
        if (!on.empty())
            out += std::string(out.empty() ? "" : "; ") + role + " on for priorities " + on;
    }
    return out.empty() ? "not exposed by the driver (no /sys/class/net/" + ifname + "/ecn)" : out;
}

std::string locality_text(const gid::Locality& l) {
    if (!l.known())
        return l.note.empty() ? "unknown" : l.note;
    std::string s = "NUMA node " + (l.numa_nodes.empty() ? std::string("?") : l.numa_nodes) + ", CPUs " + l.cpus;
    if (l.pci)
        s += ", pci " + l.pci->str();
    if (!l.via.empty())
        s += " (via " + l.via + ")";
    return s;
}

struct Check {
    std::string name;
    bool ok;
    std::string detail;
};

struct Row {   // one device (RDMA port or netdev), as printed and as JSON fields
    std::string kind, name;
    std::vector<std::pair<std::string, std::string>> fields;
    gid::Locality where;
};

} // namespace

int devices_main(int argc, char** argv) {
    bool json = false;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-h" || a == "--help") return usage(stdout);
        if (a == "--json") json = true;
        else {
            std::fprintf(stderr, "roce_doctor devices: unexpected argument '%s'\n", a.c_str());
            return usage(stderr);
        }
    }
    std::string err;
    gid::GidConfig cfg;
    if (load_gid_config({}, cfg, err) != Status::ok) {
        std::fprintf(stderr, "error: %s\n", err.c_str());
        return 2;
    }
    const gid::SysRoot root("/");
    gid::NetModel net;
    if (gid::load_net_model(root, net, err) != Status::ok) {
        std::fprintf(stderr, "error: %s\n", err.c_str());
        return 1;
    }
    const gid::Topology* topo = gid::Topology::shared(err);
    std::vector<Row> rows;
    std::vector<Check> checks;
    auto netdev_mtu = [&](const std::string& n) { const gid::Netdev* d = net.find(n); return d ? d->mtu : 0u; };

    // RDMA ports
#if ROCE_DOCTOR_VERBS
    for (const auto& p : verbs::query_ports()) {
        Row r{"rdma", p.port.name(), {}, {}};
        gid::PortInfo info;
        std::string ndev;
        unsigned used = 0, v2 = 0;
        if (gid::read_port(root, p.port.dev_name, p.port.port, info, err) == Status::ok) {
            for (const auto& g : info.gids) {
                used += g.used();
                v2 += g.used() && g.version == gid::RoceVersion::v2;
                if (ndev.empty() && g.used())
                    ndev = g.ndev;
            }
        }
        r.fields = {{"state", p.state},
                    {"link_layer", p.ethernet ? "Ethernet" : "InfiniBand"},
                    {"active_mtu", std::to_string(p.active_mtu)},
                    {"max_mtu", std::to_string(p.max_mtu)},
                    {"netdev", ndev.empty() ? "?" : ndev},
                    {"netdev_mtu", std::to_string(netdev_mtu(ndev))},
                    {"gids", std::to_string(used) + " used, " + std::to_string(v2) + " RoCE v2 (roce_doctor gid shows them)"},
                    {"traffic_class", gid::resolve_traffic_class(cfg, info.default_tclass).str()},
                    {"device_tclass", info.default_tclass ? std::to_string(*info.default_tclass) : "not set by the driver"},
                    {"pfc", ndev.empty() ? "?" : pfc_of(ndev)},
                    {"roce_ecn", ndev.empty() ? "?" : roce_ecn_of(ndev)},
                    {"hw_counters", std::to_string(verbs::read_port_hw_counters(p.port.dev_name, p.port.port).size()) +
                                        " (rc_roce's counter files carry them as hw_*)"}};
        if (topo) r.where = topo->of_rdma(p.port.dev_name);
        rows.push_back(std::move(r));
        if (!p.ethernet)
            continue;   // InfiniBand ports are listed, not RoCE's business
        checks.push_back({p.port.name() + " state", p.active, p.active ? "PORT_ACTIVE" : p.state + ": rc_roce does not list it"});
        checks.push_back({p.port.name() + " RoCE v2 GID", v2 > 0,
                          v2 ? std::to_string(v2) + " entries" : "no RoCE v2 entry: the netdev has no IP address?"});
        if (const unsigned nm = netdev_mtu(ndev); nm) {
            const unsigned need = gid::roce_packet_bytes(p.active_mtu, false);
            checks.push_back({p.port.name() + " MTU", need <= nm,
                              "active MTU " + std::to_string(p.active_mtu) + " needs " + std::to_string(need) +
                                  "-byte frames, " + ndev + " has MTU " + std::to_string(nm) +
                                  (need <= nm ? "" : ": packets would be dropped; lower the port MTU or raise the netdev's")});
        }
    }
#endif

    // Netdevs of the userspace device, with the MTU settings of the environment checked.
    for (const auto& d : net.netdevs) {
        // As the transports list them: up, with an address that needs no scope id (IPv4 first).
        std::vector<const gid::IfAddr*> addrs;
        for (const gid::IfAddr* a : net.addresses_of(d.name))
            if (a->usable && !a->prefix.addr.is_link_local())
                addrs.push_back(a);
        std::stable_partition(addrs.begin(), addrs.end(),
                              [](const gid::IfAddr* a) { return a->prefix.addr.family() == gid::Family::inet; });
        if (!d.up() || addrs.empty())
            continue;
        const bool v6 = addrs.front()->prefix.addr.family() == gid::Family::inet6;
        const std::string speed = first_line("/sys/class/net/" + d.name + "/speed");
        Row r{"netdev", d.name, {}, {}};
        r.fields = {{"address", addrs.front()->prefix.str()},
                    {"mtu", std::to_string(d.mtu)},
                    {"roce_mtu_auto", std::to_string(gid::largest_roce_mtu(d.mtu, v6))},
                    {"speed_mbps", speed.empty() || speed[0] == '-' ? "unknown" : speed},
                    {"traffic_class", gid::resolve_traffic_class(cfg, std::nullopt).str()},
                    {"pfc", pfc_of(d.name)}};
        if (topo) r.where = topo->of_netdev(d.name);
        rows.push_back(std::move(r));
        for (const char* var : {"UCX_RC_ROCE_MTU", "UCX_UD_ROCE_MTU"}) {
            const char* v = std::getenv(var);
            if (v == nullptr || !std::strcmp(v, "auto"))
                continue;
            char* end = nullptr;
            const unsigned long m = std::strtoul(v, &end, 10);
            if (*end != '\0' || !valid_roce_mtu(m)) {   // as the transports refuse it
                checks.push_back({d.name + " " + var, false,
                                  std::string(var) + "=" + v + " is not a RoCE MTU (256, 512, 1024, 2048, 4096 or "
                                  "auto): the transport refuses to open"});
                continue;
            }
            const unsigned need = gid::roce_packet_bytes(unsigned(m), v6);
            const bool fits = need <= d.mtu;
            checks.push_back({d.name + " " + var, fits,
                              std::string(var) + "=" + v + " needs " + std::to_string(need) + "-byte packets, " +
                                  d.name + " has MTU " + std::to_string(d.mtu) +
                                  (fits ? "" : ": the transport refuses to open on it; use auto or " +
                                                   std::to_string(gid::largest_roce_mtu(d.mtu, v6)))});
        }
    }
    if (topo) {   // RDMA ports, then netdevs; each closest to this process first, as the transports list them
        auto key = [&](const Row& r) { return std::pair(r.kind == "rdma" ? 0 : 1, topo->distance_rank(r.where)); };
        std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return key(a) < key(b); });
    }

    bool failed = false;
    for (const auto& c : checks) failed |= !c.ok;
    const std::string cpus = topo ? topo->process_cpus() : "";
    if (json) {
        std::printf("{\"process_cpus\": %s, \"hwloc\": %s, \"devices\": [", json_string(cpus).c_str(),
                    topo ? "true" : json_string(err).c_str());
        for (size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            std::printf("%s\n  {\"kind\": %s, \"name\": %s", i ? "," : "", json_string(r.kind).c_str(), json_string(r.name).c_str());
            for (const auto& [k, v] : r.fields) std::printf(", %s: %s", json_string(k).c_str(), json_string(v).c_str());
            std::printf(", \"numa_nodes\": %s, \"cpus\": %s, \"pci\": %s, \"locality\": %s}", json_string(r.where.numa_nodes).c_str(),
                        json_string(r.where.cpus).c_str(), json_string(r.where.pci ? r.where.pci->str() : "").c_str(),
                        json_string(locality_text(r.where)).c_str());
        }
        std::printf("%s],\n \"checks\": [", rows.empty() ? "" : "\n");
        for (size_t i = 0; i < checks.size(); ++i)
            std::printf("%s{\"name\": %s, \"ok\": %s, \"detail\": %s}", i ? ", " : "", json_string(checks[i].name).c_str(),
                        checks[i].ok ? "true" : "false", json_string(checks[i].detail).c_str());
        std::printf("], \"ok\": %s}\n", failed ? "false" : "true");
        return failed ? 1 : 0;
    }
    std::printf("process CPUs: %s\n", topo ? cpus.c_str() : ("unknown (" + err + ")").c_str());
    struct stat st;
    if (rows.empty() || rows.front().kind != "rdma")
        std::printf("\nRDMA ports: none (%s)\n", ::stat("/sys/class/infiniband", &st) != 0
                                                    ? "the kernel has no RDMA support: no /sys/class/infiniband"
                                                    : "no RDMA device has a port");
    std::string kind;
    for (const Row& r : rows) {
        if (r.kind != kind) {
            kind = r.kind;
            std::printf("\n%s\n", kind == "rdma" ? "RDMA ports (rc_roce/ud_roce device names DEV:PORT):"
                                                : "netdevs of the userspace device (rc_roce/ud_roce device names):");
        }
        std::printf("  %s\n", r.name.c_str());
        for (const auto& [k, v] : r.fields) std::printf("    %-14s %s\n", k.c_str(), v.c_str());
        std::printf("    %-14s %s\n", "locality", locality_text(r.where).c_str());
    }
    std::printf("\n");
    for (const auto& c : checks)
        std::printf("check %s: %s - %s\n", c.name.c_str(), c.ok ? "ok" : "FAIL", c.detail.c_str());
    return failed ? 1 : 0;
}

} // namespace roce::doctor
