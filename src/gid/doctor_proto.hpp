// The control protocol between `roce_doctor check` (client) and `roce_doctor serve`: one TCP
// connection, one text line per message, so a capture or `nc` shows what was said.
//
//   line    = VERB SP "roce_doctor/1" *(SP key "=" value) LF     (at most 2048 bytes)
//   value   = %-encoded (space, '%', '=' and control bytes as %XX)
//
//   client: HELLO roce_doctor/1 roce_mtu=4096                  what its devices will use
//   server: HELLO roce_doctor/1 netdev=lo mtu=65536 udp_port=18515 rc_ip=.. rc_port=..
//           ud_ip=.. ud_port=.. ud_qpn=.. [verbs_ip=.. verbs_port=.. verbs_dev=rxe0:1 | verbs_skip=why]
//           [rc_skip=why] [ud_skip=why]
//   either: ERR roce_doctor/1 reason=..                         then the connection is closed
//   client: BYE roce_doctor/1                                   end of the session
//
// Path-MTU probes travel over UDP to udp_port (doctor_pmtu.hpp), the ping-pongs over the devices
// the server opened for this session (rc_*, ud_*, verbs_*).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace roce::doctor {

constexpr std::string_view proto_version = "roce_doctor/1";
constexpr uint16_t default_port = 18515;

struct Message {
    std::string verb;
    std::vector<std::pair<std::string, std::string>> fields;

    Message& add(std::string key, std::string value) {
        fields.emplace_back(std::move(key), std::move(value));
        return *this;
    }
    std::optional<std::string> get(std::string_view key) const;
    // The field as an unsigned number no larger than max; nullopt when absent or malformed.
    std::optional<unsigned long> number(std::string_view key, unsigned long max) const;
    std::string format() const;
};

// False (err: what is wrong, quoting a prefix of the line) on anything that is not a message of
// this protocol version.
bool parse_message(std::string_view line, Message& out, std::string& err);

} // namespace roce::doctor
