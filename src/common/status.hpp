// One status type for the whole core; uct/ maps it onto ucs_status_t in one place.
#pragma once
#include <cstdint>
#include <string_view>

namespace roce {

enum class Status : int8_t {
    ok = 0,
    in_progress,       // operation accepted, completion reported later
    no_resource,       // send queue / window full: retry later (UCX: NO_RESOURCE)
    invalid_param,     // caller passed something impossible
    no_device,         // unknown device / address that is not local
    unreachable,       // peer cannot be reached (address family, no route)
    remote_access,     // peer NAKed with remote access error (bad rkey, bounds, rights)
    remote_invalid,    // peer NAKed with invalid request
    timeout,           // retries exhausted / peer silent
    canceled,          // QP destroyed or flushed with the operation outstanding
    io_error,          // socket-level failure
    unsupported,
    busy,              // a resource another process holds (every UDP port of the range bound)
    reset,             // the peer restarted; nothing of ours was lost with it (UCX: CONNECTION_RESET)
};

constexpr std::string_view to_string(Status s) {
    switch (s) {
    case Status::ok: return "ok";
    case Status::in_progress: return "in progress";
    case Status::no_resource: return "no resource";
    case Status::invalid_param: return "invalid parameter";
    case Status::no_device: return "no such device";
    case Status::unreachable: return "destination unreachable";
    case Status::remote_access: return "remote access error";
    case Status::remote_invalid: return "remote invalid request";
    case Status::timeout: return "timed out";
    case Status::canceled: return "canceled";
    case Status::io_error: return "I/O error";
    case Status::unsupported: return "unsupported";
    case Status::busy: return "in use";
    case Status::reset: return "peer restarted";
    }
    return "unknown";
}

} // namespace roce
