// Device locality (hwloc): which NUMA nodes and CPUs are close to an RDMA device or a netdev, for
// `roce_doctor devices` and to list the transports' devices closest to the process first (and tell
// UCX their PCI function, so UCP's own distance estimates apply).
//
// hwloc finds PCI devices and their OS devices (netdevs, RDMA devices). Soft devices (rxe, siw)
// have no PCI function: they are as close as the netdev they run on (sysfs `parent`). Virtual
// netdevs (lo, veth, bridges) have no locality at all: every CPU is as close as any other.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct hwloc_topology;

namespace roce::gid {

struct PciAddr {
    uint16_t domain = 0;
    uint8_t bus = 0, dev = 0, func = 0;
    std::string str() const;   // "0000:00:03.0"
};

struct Locality {
    std::optional<PciAddr> pci;   // the PCI function behind the device
    std::string via;              // how it was located when not directly ("netdev eth0" for rxe)
    std::string numa_nodes;       // "0", "0-1"; empty: unknown / no NUMA information
    std::string cpus;             // CPUs close to it, as a list ("0-15"); empty: unknown
    std::string note;             // why it is unknown
    bool known() const { return !cpus.empty(); }
};

class Topology {
public:
    // The host's topology with its I/O devices, loaded once per process and kept: hwloc unloads
    // its PCI plugin when the last topology is destroyed, and that plugin (libpciaccess) loses
    // ~370 KB on the way (LeakSanitizer) — and the topology of a host does not change under a
    // running job. nullptr (reason in `err`) when hwloc fails.
    static const Topology* shared(std::string& err);
    ~Topology();
    Topology(const Topology&) = delete;
    Topology& operator=(const Topology&) = delete;

    Locality of_netdev(const std::string& ifname) const;
    Locality of_rdma(const std::string& dev) const;   // by name, else by its netdev (rxe, siw)
    std::string process_cpus() const;                 // the calling thread's binding, as a list
    // 0: its CPUs include some the process runs on; 1: unknown; 2: none of them.
    int distance_rank(const Locality& l) const;

private:
    explicit Topology(hwloc_topology* t) : topo_(t) {}
    Locality of_osdev(const std::string& name) const;
    hwloc_topology* topo_;
};

// `names` reordered (stably) by distance_rank of locate(name): devices close to the process first.
template <class Locate>
std::vector<std::string> order_by_locality(const Topology& t, std::vector<std::string> names, Locate locate);

} // namespace roce::gid

#include <algorithm>

template <class Locate>
std::vector<std::string> roce::gid::order_by_locality(const Topology& t, std::vector<std::string> names, Locate locate) {
    std::vector<std::pair<int, std::string>> ranked;
    for (auto& n : names)
        ranked.emplace_back(t.distance_rank(locate(n)), std::move(n));
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::string> out;
    for (auto& r : ranked)
        out.push_back(std::move(r.second));
    return out;
}
