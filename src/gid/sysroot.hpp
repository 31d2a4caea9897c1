// Where the policy reads the system from. Production uses "/" (the live /sys and /proc, plus
// getifaddrs and the kernel route tables); tests point it at a fixture directory that holds the
// same relative paths (sys/class/infiniband/..., sys/class/net/..., proc/net/vlan/config) and,
// because netlink cannot be faked, text files `addrs` (`ip -o addr` output) and `routes`
// (`ip -o route` output).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace roce::gid {

class SysRoot {
public:
    explicit SysRoot(std::string root = "/");

    // The live system: addresses and routes come from the kernel, not from text files.
    bool live() const { return live_; }
    const std::string& root() const { return root_; }
    std::string path(std::string_view rel) const;          // rel without a leading '/'

    // Whole file with trailing whitespace removed; nullopt when it cannot be read. sysfs answers
    // some reads with an error (gid_attrs/types/<i> of an unused entry gives EINVAL), and such an
    // attribute is treated exactly like a missing one.
    std::optional<std::string> read(std::string_view rel) const;
    bool exists(std::string_view rel) const;
    // Entry names of a directory, sorted naturally ("2" before "10"); empty when it is missing.
    std::vector<std::string> list(std::string_view rel) const;

private:
    std::string root_;
    bool live_;
};

} // namespace roce::gid
