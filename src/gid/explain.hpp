// Human-readable explanation of a port's GID table and of a selection: what `roce_doctor gid`
// prints. Plain text, one entry per line, so users can paste it into a bug report.
#pragma once
#include <string>
#include <string_view>

#include "gid/gid_table.hpp"
#include "gid/netdev.hpp"
#include "gid/select.hpp"
#include "gid/traffic_class.hpp"

namespace roce::gid {

// Header line plus one line per entry: index, GID, type, netdev (VLAN/bond/kind), state, address.
std::string format_gid_table(const PortInfo& port, const NetModel& net);

// "peer <label>: index N (<reason>)" or the error, then one line per other used entry with its
// verdict and reason. Unused entries are counted, not listed.
std::string format_selection(std::string_view label, const Selection& sel);

// The resolved traffic class, the CNP class, and warnings (ECN off, priority without a VLAN tag).
std::string format_traffic_class(const TrafficClass& tc, const CnpClass& cnp, bool vlan_tagged);

} // namespace roce::gid
