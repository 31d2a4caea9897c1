// Component `roce` and its load-time registration.
//
// UCX 1.13 loads UCT modules only by the names compiled into libuct, so this library is
// LD_PRELOADed (or, from UCX 1.21, found through UCX_PLUGIN_PATH) and registers itself from a
// constructor: uct_component_register() + uct_tl_register(), as UCT_SINGLE_TL_INIT does.
// The module uses internal UCX structures whose layout is fixed per UCX build, so the
// constructor first checks that the running UCX is the one it was built against.
#include "glue.hpp"
#include "ud_glue.hpp"

#include <dlfcn.h>

#include <cstdio>

#include "common/log.hpp"

namespace roce::uct {

uct_component_t component = {
    .name = "roce",
    .query_md_resources = query_md_resources,
    .md_open = md_open,
    .cm_open = [](uct_component_t*, uct_worker_h, const uct_cm_config_t*, uct_cm_h*) noexcept {
        return UCS_ERR_UNSUPPORTED;
    },
    .rkey_unpack = rkey_unpack,
    .rkey_ptr = rkey_ptr,
    .rkey_release = rkey_release,
    .md_config = {.name = "RoCE memory domain",
                  .prefix = "ROCE_",
                  .table = md_config_table,
                  .size = sizeof(MdConfig),
                  .list = {}},
    .cm_config = {.name = "", .prefix = "", .table = nullptr, .size = 0, .list = {}},
    .tl_list = {&component.tl_list, &component.tl_list},
    .list = {},
    .flags = 0,
    .md_vfs_init = [](uct_md_h) noexcept {},
};

uct_tl_t tl = {
    .name = "rc_roce",
    .query_devices = query_tl_devices,
    .iface_open = iface_open,
    .config = {.name = "rc_roce transport",
               .prefix = tl_config_prefix,
               .table = iface_config_table,
               .size = sizeof(IfaceConfig),
               .list = {}},
    .list = {},
};

namespace {

bool g_registered = false;

// The core's messages go to the UCX log (same format, filtering and destination as UCX's).
void ucs_log_sink(LogLevel level, const char* msg) {
    ucs_log_level_t ucs_level = UCS_LOG_LEVEL_DEBUG;
    switch (level) {
    case LogLevel::error: ucs_level = UCS_LOG_LEVEL_ERROR; break;
    case LogLevel::warn: ucs_level = UCS_LOG_LEVEL_WARN; break;
    case LogLevel::info: ucs_level = UCS_LOG_LEVEL_INFO; break;
    case LogLevel::debug: ucs_level = UCS_LOG_LEVEL_DEBUG; break;
    }
    // Attributed to the core ("roce-core"), not to this file, in UCX's file:line column.
    if (ucs_log_is_enabled(ucs_level)) {
        ucs_log_dispatch("roce-core", 0, "roce", ucs_level, &ucs_global_opts.log_component, "%s",
                         msg);
    }
}

// Returns an empty string when the running UCX matches the build, else why not.
std::string abi_mismatch() {
    char why[256];
    // libuct/libucs export no version; libucp does (and is loaded by every UCP user, ucx_info
    // and ucx_perftest). Pure UCT users are covered by the layout checks below.
    using get_version_t = void (*)(unsigned*, unsigned*, unsigned*);
    auto get_version = reinterpret_cast<get_version_t>(dlsym(RTLD_DEFAULT, "ucp_get_version"));
    if (get_version != nullptr) {
        unsigned major = 0, minor = 0, release = 0;
        get_version(&major, &minor, &release);
        if (major != UCT_VERNO_MAJOR || minor != UCT_VERNO_MINOR || release != UCT_VERNO_PATCH) {
            std::snprintf(why, sizeof(why),
                          "it was built against UCX %s but UCX %u.%u.%u is running",
                          UCT_VERNO_STRING, major, minor, release);
            return why;
        }
    }
    if (uct_base_iface_t_class.size != sizeof(uct_base_iface_t) ||
        uct_base_ep_t_class.size != sizeof(uct_base_ep_t)) {
        std::snprintf(why, sizeof(why),
                      "the running libuct's layout differs from UCX %s it was built against "
                      "(uct_base_iface_t %zu/%zu bytes, uct_base_ep_t %zu/%zu bytes)",
                      UCT_VERNO_STRING, uct_base_iface_t_class.size, sizeof(uct_base_iface_t),
                      uct_base_ep_t_class.size, sizeof(uct_base_ep_t));
        return why;
    }
    return {};
}

__attribute__((constructor)) void register_module() noexcept {
    try {
        std::string why = abi_mismatch();
        if (!why.empty()) {
            // One message, on stderr: the UCX log itself may be what does not match.
            std::fprintf(stderr, "uct-roce: not registering transport rc_roce: %s; rebuild "
                                 "libuct_roce against the installed UCX\n", why.c_str());
            return;
        }
        set_log_sink(ucs_log_sink);
        uct_component_register(&component);
        uct_tl_register(&component, &tl);
        uct_tl_register(&component, &ud_tl);
        g_registered = true;
    } catch (...) {
        std::fprintf(stderr, "uct-roce: not registering transport rc_roce: unexpected error\n");
    }
}

__attribute__((destructor)) void unregister_module() noexcept {
    if (!g_registered) {
        return;
    }
    set_log_sink(nullptr);   // back to stderr: libucs may be finalised before the core's threads
    uct_tl_unregister(&ud_tl);
    uct_tl_unregister(&tl);
    uct_component_unregister(&component);
    g_registered = false;
}

} // namespace

} // namespace roce::uct
