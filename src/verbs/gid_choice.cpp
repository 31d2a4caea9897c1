#include "verbs/gid_choice.hpp"

#include <arpa/inet.h>
#include <cstring>
#include <fstream>
#include <sys/stat.h>

#include "common/log.hpp"

namespace roce::verbs {

namespace {
bool read_line(const std::string& path, std::string& out) {
    std::ifstream f(path);
    return bool(std::getline(f, out));
}

// "fe80:0000:0000:0000:5054:00ff:fe12:3456" -> 16 bytes
bool parse_gid(const std::string& s, uint8_t* g) {
    return inet_pton(AF_INET6, s.c_str(), g) == 1;
}

bool usable(const uint8_t* g, WireAddr& a) {
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const uint8_t zero[16] = {};
    if (std::memcmp(g, zero, 16) == 0)
        return false;
    a = {};
    if (std::memcmp(g, v4mapped, 12) == 0) {
        a.family = AF_INET;
        std::memcpy(a.ip, g + 12, 4);
        return true;
    }
    if (g[0] == 0xfe && (g[1] & 0xc0) == 0x80)   // link-local: needs a scope, not supported
        return false;
    a.family = AF_INET6;
    std::memcpy(a.ip, g, 16);
    return true;
}
} // namespace

Status choose_gid(const std::string& dev, uint8_t port, int override_index, GidChoice& out,
                  const std::string& sysfs_root) {
    const std::string base = sysfs_root + "/" + dev + "/ports/" + std::to_string(port);
    struct stat st;
    if (::stat(base.c_str(), &st) != 0) {
        ROCE_ERROR("verbs: %s port %u: no such port (%s missing)", dev.c_str(), unsigned(port), base.c_str());
        return Status::no_device;
    }
    auto try_index = [&](int i, bool want_v4) -> bool {
        std::string gs, type;
        if (!read_line(base + "/gids/" + std::to_string(i), gs) ||
            !read_line(base + "/gid_attrs/types/" + std::to_string(i), type))
            return false;
        if (type != "RoCE v2")
            return false;
        uint8_t g[16];
        WireAddr a;
        if (!parse_gid(gs, g) || !usable(g, a) || (want_v4 && a.family != AF_INET))
            return false;
        out.index = i;
        std::memcpy(out.gid, g, 16);
        out.addr = a;
        return true;
    };
    if (override_index >= 0) {
        if (try_index(override_index, false))
            return Status::ok;
        ROCE_ERROR("verbs: %s port %u: GID index %d is not a RoCE v2 GID with a routable address",
                   dev.c_str(), unsigned(port), override_index);
        return Status::no_device;
    }
    for (int i = 0; i < 256; ++i) {
        if (try_index(i, true))
            return Status::ok;
    }
    ROCE_ERROR("verbs: %s port %u: no RoCE v2 GID with an IPv4 address (is the netdev up with an "
               "IPv4 address?)", dev.c_str(), unsigned(port));
    return Status::no_device;
}

} // namespace roce::verbs
