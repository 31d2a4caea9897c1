// RoCE path MTUs: IB's five (payload bytes per packet), the only values a BTH-based transport
// negotiates and rxe/NICs accept as active_mtu.
#pragma once

#include <cstdint>

namespace roce {

constexpr bool valid_roce_mtu(uint64_t m) { return m == 256 || m == 512 || m == 1024 || m == 2048 || m == 4096; }

} // namespace roce
