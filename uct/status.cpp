// roce::Status -> ucs_status_t, and the last line of defence against exceptions.
#include "glue.hpp"

#include <cstdio>

namespace roce::uct {

ucs_status_t to_ucs(Status s) {
    switch (s) {
    case Status::ok: return UCS_OK;
    case Status::in_progress: return UCS_INPROGRESS;
    case Status::no_resource: return UCS_ERR_NO_RESOURCE;
    case Status::invalid_param: return UCS_ERR_INVALID_PARAM;
    case Status::no_device: return UCS_ERR_NO_DEVICE;
    case Status::unreachable: return UCS_ERR_UNREACHABLE;
    case Status::remote_access: return UCS_ERR_INVALID_ADDR;     // bad rkey, bounds or rights
    case Status::remote_invalid: return UCS_ERR_INVALID_PARAM;
    case Status::timeout: return UCS_ERR_ENDPOINT_TIMEOUT;       // retries exhausted
    case Status::canceled: return UCS_ERR_CANCELED;
    case Status::io_error: return UCS_ERR_IO_ERROR;
    case Status::unsupported: return UCS_ERR_UNSUPPORTED;
    case Status::busy: return UCS_ERR_BUSY;
    case Status::reset: return UCS_ERR_CONNECTION_RESET;
    }
    return UCS_ERR_IO_ERROR;
}

ucs_status_t exception_status(const char* where) noexcept {
    try {
        throw;
    } catch (const std::bad_alloc&) {
        ucs_error("rc_roce: %s: out of memory", where);
        return UCS_ERR_NO_MEMORY;
    } catch (const std::exception& e) {
        ucs_error("rc_roce: %s: unexpected exception: %s", where, e.what());
        return UCS_ERR_IO_ERROR;
    } catch (...) {
        ucs_error("rc_roce: %s: unexpected exception", where);
        return UCS_ERR_IO_ERROR;
    }
}

} // namespace roce::uct
