#include "gid/sysroot.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

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
    std::ifstream in(path(rel));
    if (!in) return std::nullopt;
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return std::nullopt;   // EINVAL from a sysfs show() lands here
    std::string s = ss.str();
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
