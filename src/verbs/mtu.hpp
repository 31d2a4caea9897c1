// ibv_mtu <-> bytes. The enum is log2(bytes) - 7 (IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5); one place
// for the conversion so that the port query, the UD QP and the CM's RTR step cannot disagree.
#pragma once

#include <cstdint>
#include <infiniband/verbs.h>
#include <string>

#include "gid/sysroot.hpp"

namespace roce::verbs {

inline uint32_t mtu_bytes(ibv_mtu m) { return 128u << unsigned(m); }

// A configured MTU in bytes as the enum; anything else is 4096 (`auto` arrives as 4096, and the
// port's active MTU caps whatever is asked for).
inline ibv_mtu mtu_enum(uint32_t mtu) {
    switch (mtu) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
    }
}

// The largest path MTU whose RoCE packets fit netdev `ndev`'s MTU as it is now (sysfs under
// `root`), 4096 when it cannot be read (no name, another network namespace). rxe sizes its port by its lower netdev only: a VLAN (or macvlan) on it with
// a smaller MTU drops port-sized packets (DF), so a QP using that netdev's GID must stay below
// this as well as the port's active MTU (ports.cpp).
ibv_mtu netdev_mtu_cap(const gid::SysRoot& root, const std::string& ndev, bool ipv6);

} // namespace roce::verbs
