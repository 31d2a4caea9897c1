#include "gid/sysroot.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

namespace roce::gid {
namespace fs = std::filesystem;

SysRoot::SysRoot(std::string root) : root_(std::move(root)) {
    while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
    live_ = root_.empty() || root_ == "/";
    if (root_.empty()) root_ = "/";
}

std::string SysRoot::path(std::string_view rel) const {
    while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
    return (root_ == "/" ? std::string("/") : root_ + "/") + std::string(rel);
}

std::optional<std::string> SysRoot::read(std::string_view rel) const {
    // read(2), not a stream: a sysfs show() that fails (EINVAL) fails the read, which an
    // ifstream hands to `<<` as an exception it swallows - the value then read as "".
    const int fd = ::open(path(rel).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    std::string s;
    char buf[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            ::close(fd);
            return std::nullopt;
        }
        if (n == 0) break;
        s.append(buf, size_t(n));
    }
    ::close(fd);
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
        s.pop_back();
    return s;
}

bool SysRoot::exists(std::string_view rel) const {
    std::error_code ec;
    return fs::exists(path(rel), ec);
}

std::vector<std::string> SysRoot::list(std::string_view rel) const {
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator it(path(rel), ec), end; !ec && it != end; it.increment(ec))
        names.push_back(it->path().filename().string());
    // Natural order so GID indexes and port numbers come out numerically.
    std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
        const bool da = !a.empty() && std::all_of(a.begin(), a.end(), ::isdigit);
        const bool db = !b.empty() && std::all_of(b.begin(), b.end(), ::isdigit);
        if (da && db && a.size() != b.size()) return a.size() < b.size();
        return a < b;
    });
    return names;
}

} // namespace roce::gid
