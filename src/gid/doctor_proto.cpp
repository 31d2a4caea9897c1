#include "gid/doctor_proto.hpp"

#include <cstdlib>

namespace roce::doctor {

namespace {

std::string encode(std::string_view v) {
    static const char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const char c : v) {
        const auto u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u >= 0x7f || c == '%' || c == '=') {
            out += '%';
            out += hex[u >> 4];
            out += hex[u & 15];
        } else {
            out += c;
        }
    }
    return out;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

bool decode(std::string_view v, std::string& out) {
    out.clear();
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] != '%') { out += v[i]; continue; }
        if (i + 2 >= v.size()) return false;
        const int h = hex_digit(v[i + 1]), l = hex_digit(v[i + 2]);
        if (h < 0 || l < 0) return false;
        out += char(h << 4 | l);
        i += 2;
    }
    return true;
}

// For error messages: printable ASCII as is, anything else as '?', at most 60 characters.
std::string quote(std::string_view line) {
    std::string q;
    for (const char c : line.substr(0, 60)) q += (c >= 0x20 && c < 0x7f) ? c : '?';
    return "'" + q + (line.size() > 60 ? "...'" : "'");
}

} // namespace

std::optional<std::string> Message::get(std::string_view key) const {
    for (const auto& [k, v] : fields)
        if (k == key) return v;
    return std::nullopt;
}

std::optional<unsigned long> Message::number(std::string_view key, unsigned long max) const {
    const auto v = get(key);
    if (!v || v->empty() || v->size() > 12) return std::nullopt;
    char* end = nullptr;
    const unsigned long n = std::strtoul(v->c_str(), &end, 10);
    if (*end != '\0' || (*v)[0] == '-' || n > max) return std::nullopt;
    return n;
}

std::string Message::format() const {
    std::string out = verb + " " + std::string(proto_version);
    for (const auto& [k, v] : fields) out += " " + k + "=" + encode(v);
    return out;
}

bool parse_message(std::string_view line, Message& out, std::string& err) {
    out = Message{};
    std::vector<std::string_view> tok;
    for (size_t i = 0; i < line.size();) {
        const size_t sp = line.find(' ', i);
        const size_t end = sp == std::string_view::npos ? line.size() : sp;
        if (end > i) tok.push_back(line.substr(i, end - i));
        i = end + 1;
    }
    if (tok.size() < 2 || tok[1] != proto_version) {
        err = "not a " + std::string(proto_version) + " control message: " + quote(line);
        return false;
    }
    for (const char c : tok[0])
        if (c < 'A' || c > 'Z') {
            err = "bad verb in control message " + quote(line);
            return false;
        }
    out.verb = std::string(tok[0]);
    for (size_t i = 2; i < tok.size(); ++i) {
        const size_t eq = tok[i].find('=');
        std::string v;
        if (eq == std::string_view::npos || eq == 0 || !decode(tok[i].substr(eq + 1), v)) {
            err = "bad field " + quote(tok[i]) + " in control message " + quote(line);
            return false;
        }
        out.fields.emplace_back(std::string(tok[i].substr(0, eq)), std::move(v));
    }
    return true;
}

} // namespace roce::doctor
