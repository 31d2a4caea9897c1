// Device locality through hwloc (see locality.hpp).
#include "gid/locality.hpp"

#include <hwloc.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace roce::gid {

namespace {

std::string bitmap_list(hwloc_const_bitmap_t set) {
    if (set == nullptr || hwloc_bitmap_iszero(set))
        return "";
    char* s = nullptr;
    if (hwloc_bitmap_list_asprintf(&s, set) < 0 || s == nullptr)
        return "";
    std::string out = s;
    std::free(s);
    return out;
}

std::string first_line(const std::string& path) {
    std::ifstream f(path);
    std::string l;
    std::getline(f, l);
    return l;
}

} // namespace

std::string PciAddr::str() const {
    char b[16];
    std::snprintf(b, sizeof(b), "%04x:%02x:%02x.%x", domain, bus, dev, func);
    return b;
}

const Topology* Topology::shared(std::string& err) {
    static std::string load_err;
    static const Topology* const topo = []() -> const Topology* {
        hwloc_topology_t t = nullptr;
        if (hwloc_topology_init(&t) != 0) {
            load_err = "hwloc_topology_init failed";
            return nullptr;
        }
        // Only what locates devices: PCI functions with OS devices under them, no bridges' details.
        hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
        if (hwloc_topology_load(t) != 0) {
            load_err = "hwloc_topology_load failed";
            hwloc_topology_destroy(t);
            return nullptr;
        }
        return new Topology(t);   // never destroyed: see the header
    }();
    if (topo == nullptr)
        err = load_err;
    return topo;
}

Topology::~Topology() { hwloc_topology_destroy(topo_); }

Locality Topology::of_osdev(const std::string& name) const {
    Locality l;
    hwloc_obj_t os = nullptr;
    while ((os = hwloc_get_next_osdev(topo_, os)) != nullptr)
        if (os->name != nullptr && name == os->name)
            break;
    if (os == nullptr) {
        l.note = "no PCI device (virtual)";
        return l;
    }
    for (hwloc_obj_t p = os->parent; p != nullptr; p = p->parent)
        if (p->type == HWLOC_OBJ_PCI_DEVICE) {
            l.pci = PciAddr{p->attr->pcidev.domain, p->attr->pcidev.bus, p->attr->pcidev.dev, p->attr->pcidev.func};
            break;
        }
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo_, os);
    if (anc != nullptr) {
        l.cpus = bitmap_list(anc->cpuset);
        l.numa_nodes = bitmap_list(anc->nodeset);
    }
    if (!l.known())
        l.note = "hwloc knows no CPUs for it";
    return l;
}

Locality Topology::of_netdev(const std::string& ifname) const {
    Locality l = of_osdev(ifname);
    if (!l.known() && !l.pci)
        l.note = "virtual netdev (no device): every CPU is as close";
    return l;
}

Locality Topology::of_rdma(const std::string& dev) const {
    Locality l = of_osdev(dev);
    if (l.known() || l.pci)
        return l;
    // Soft RoCE (rxe) and iWARP (siw) name the netdev they run on.
    const std::string parent = first_line("/sys/class/infiniband/" + dev + "/parent");
    if (parent.empty()) {
        l.note = "not a PCI device and no parent netdev";
        return l;
    }
    l = of_netdev(parent);
    l.via = "netdev " + parent;
    return l;
}

std::string Topology::process_cpus() const {
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    std::string out;
    if (set != nullptr && hwloc_get_cpubind(topo_, set, HWLOC_CPUBIND_THREAD) == 0)
        out = bitmap_list(set);
    hwloc_bitmap_free(set);
    return out;
}

int Topology::distance_rank(const Locality& l) const {
    if (!l.known())
        return 1;
    hwloc_bitmap_t mine = hwloc_bitmap_alloc();
    hwloc_bitmap_t dev = hwloc_bitmap_alloc();
    int rank = 1;
    if (mine != nullptr && dev != nullptr && hwloc_get_cpubind(topo_, mine, HWLOC_CPUBIND_THREAD) == 0 &&
        hwloc_bitmap_list_sscanf(dev, l.cpus.c_str()) == 0)
        rank = hwloc_bitmap_intersects(mine, dev) ? 0 : 2;
    hwloc_bitmap_free(mine);
    hwloc_bitmap_free(dev);
    return rank;
}

} // namespace roce::gid
