// Choosing the GID table entry to use towards one peer (or, without a peer, the entry an
// interface would advertise). Every entry of the table gets a verdict and a one-line reason, so
// the choice can be explained (roce_doctor gid) and tested.
//
// Order of preference, as UCX and NCCL do it, applied to entries that survive the checks below:
//   RoCE v2 before v1 (v2 is routable, v1 is L2 only), then IPv4 before IPv6 (ADDR_FAMILY=auto),
//   then global before link-local (link-local only reaches one L2 segment, so it is used only
//   when it is all there is), then the most specific route to the peer, then the lowest index.
// An entry is never used when it is unused (all-zero GID / unreadable type), its netdev is
// missing, down, a tunnel or a bond slave, or its address is no longer configured on its netdev
// (stale or mismatched entry).
//
// Peers whose GID tables differ: the peer advertises its usable GIDs (advertised_gids); we only
// pair a local entry with a peer entry of the same RoCE version, family and scope, so the two
// sides agree on the class of entry even though their indexes differ.
#pragma once
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "gid/config.hpp"
#include "gid/gid_table.hpp"
#include "gid/netdev.hpp"

namespace roce::gid {

// What the peer told us about one of its entries. version nullopt: unknown (e.g. a bare IP
// address given on the command line) - any version matches.
struct PeerGid {
    Gid gid;
    std::optional<RoceVersion> version;
    auto operator<=>(const PeerGid&) const = default;
};

enum class Verdict : uint8_t {
    chosen,
    unused,             // all-zero GID or unreadable/unknown type
    no_netdev,          // no ndev attribute, or the netdev does not exist
    netdev_down,
    tunnel,             // address lives on a vxlan/geneve/... device
    enslaved,           // netdev is a bond slave: its addresses belong to the bond
    stale,              // the GID's address is not (or not usably) configured on its netdev
    excluded,           // by configuration (version, family, subnets, netdev, index)
    peer_mismatch,      // the peer has no entry of this version / family / scope
    unreachable,        // the peer is not reachable from this entry (reachability mode)
    validation_failed,  // the validation callback (e.g. ibv_create_ah) refused it
    outranked,          // usable, but a better entry was chosen
};

std::string_view to_string(Verdict v);

struct Candidate {
    unsigned index = 0;
    Verdict verdict = Verdict::unused;
    std::string why;
};

// Called, in order of preference, on each candidate until one passes. The verbs backend passes
// a function that creates (and destroys) an address handle with sgid_index = entry.index and
// dgid = peer->gid; `why` receives the failure text (e.g. strerror). peer is null without a peer.
using Validator = std::function<bool(const GidEntry& entry, const PeerGid* peer, std::string& why)>;

struct Selection {
    Status status = Status::no_device;
    std::string error;                  // one line, when status != ok
    std::optional<unsigned> index;      // the chosen entry
    std::optional<PeerGid> peer;        // the peer entry it talks to
    std::string reason;                 // why it was chosen
    std::vector<Candidate> entries;     // one per table index, in index order

    const Candidate& at(unsigned i) const { return entries.at(i); }
};

// Chooses the entry of `port` to use towards `peer` (an empty span: the interface's own best
// entry, no reachability test). `cfg` should have passed check_gid_config for this port; a fixed
// GID_INDEX is still validated here (down / stale / peer cannot be reached -> error).
Selection select_gid(const PortInfo& port, const NetModel& net, const GidConfig& cfg,
                     std::span<const PeerGid> peer = {}, const Validator& validate = {});

// The entries this side should advertise to peers at connection setup, best first: every entry
// that passes the local checks and the configuration filters.
std::vector<PeerGid> advertised_gids(const PortInfo& port, const NetModel& net, const GidConfig& cfg);

} // namespace roce::gid
