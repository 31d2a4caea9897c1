// UCX configuration tables built from the one list in config_table.hpp (and gid::gid_config_vars).
#include "glue.hpp"

#include <cmath>
#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

// Type tokens of config_table.hpp that are not plain UCS_CONFIG_TYPE_<TOKEN> names.
#define UCS_CONFIG_TYPE_LOG_LEVEL UCS_CONFIG_TYPE_ENUM(ucs_log_level_names)

namespace roce::uct {

#define ROCE_CONFIG_FIELD_ENTRY(_field, _ctype, _name, _dfl, _type, _doc)                     \
    {_name, _dfl, _doc, offsetof(IfaceConfig, _field), UCS_CONFIG_TYPE_##_type},
#define ROCE_UD_CONFIG_FIELD_ENTRY(_field, _ctype, _name, _dfl, _type, _doc)                  \
    {_name, _dfl, _doc, offsetof(UdIfaceConfig, _field), UCS_CONFIG_TYPE_##_type},

// The field types must be what the parsers write.
#define ROCE_CONFIG_FIELD_CHECK(_field, _ctype, _name, _dfl, _type, _doc)                     \
    static_assert(std::is_same_v<decltype(IfaceConfig::_field), _ctype>);
#define ROCE_UD_CONFIG_FIELD_CHECK(_field, _ctype, _name, _dfl, _type, _doc)                  \
    static_assert(std::is_same_v<decltype(UdIfaceConfig::_field), _ctype>);
ROCE_IFACE_CONFIG(ROCE_CONFIG_FIELD_CHECK)
ROCE_UD_IFACE_CONFIG(ROCE_UD_CONFIG_FIELD_CHECK)
#undef ROCE_CONFIG_FIELD_CHECK
#undef ROCE_UD_CONFIG_FIELD_CHECK

namespace {
constexpr size_t n_typed = std::size(config_doc);
constexpr size_t n_ud_typed = std::size(ud_config_doc);
}

// The chained generic table, the typed fields, the GID settings (filled below) and the end mark
// (zeroed: a null name).
ucs_config_field_t iface_config_table[1 + n_typed + n_gid_settings + n_cc_settings + 1] = {
    // Chain the generic UCT interface options (UCX_RC_ROCE_MAX_NUM_EPS, ...), as every TL does.
    {"", "", nullptr, offsetof(IfaceConfig, super), UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},
    ROCE_IFACE_CONFIG(ROCE_CONFIG_FIELD_ENTRY)
};
#undef ROCE_CONFIG_FIELD_ENTRY

ucs_config_field_t ud_iface_config_table[1 + n_ud_typed + n_gid_settings + 1] = {
    {"", "", nullptr, offsetof(UdIfaceConfig, super), UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},
    ROCE_UD_IFACE_CONFIG(ROCE_UD_CONFIG_FIELD_ENTRY)
};
#undef ROCE_UD_CONFIG_FIELD_ENTRY

namespace {

ucs_status_t check_time(const char* prefix, const char* name, double v) {
    if (std::isfinite(v) && v >= 0)
        return UCS_OK;
    // (as the user wrote the common cases: "inf", "-1s")
    if (std::isfinite(v))
        ucs_error("%s%s=%gs: not a time; valid: a finite time of 0 or more (e.g. 500us, 2ms, 30s)", prefix, name, v);
    else
        ucs_error("%s%s=%s: not a time; valid: a finite time of 0 or more (e.g. 500us, 2ms, 30s)", prefix, name,
                  std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
    return UCS_ERR_INVALID_PARAM;
}

} // namespace

// Only the TIME fields: the lambda's body is discarded for the others' types.
#define ROCE_CHECK_TIME_FIELD(_field, _ctype, _name, _dfl, _type, _doc)                        \
    if (const ucs_status_t st = [&](const auto& v) {                                           \
            if constexpr (std::string_view(#_type) == "TIME")                                  \
                return check_time(prefix, _name, v);                                        \
            else                                                                               \
                return UCS_OK;                                                                 \
        }(c._field); st != UCS_OK)                                                             \
        return st;

ucs_status_t check_time_settings(const IfaceConfig& c, const char* prefix) {
    ROCE_IFACE_CONFIG(ROCE_CHECK_TIME_FIELD)
    return UCS_OK;
}

ucs_status_t check_time_settings(const UdIfaceConfig& c, const char* prefix) {
    ROCE_UD_IFACE_CONFIG(ROCE_CHECK_TIME_FIELD)
    return UCS_OK;
}
#undef ROCE_CHECK_TIME_FIELD

namespace {

// The GID and traffic-class settings from their one table (gid::gid_config_vars), as strings that
// iface_open parses; the documentation gets the valid choices appended. Filled when the module
// loads: UCX reads the table only when it parses or prints a configuration, later.
struct GidFields {
    std::string docs[n_gid_settings];
    GidFields() {
        for (size_t i = 0; i < n_gid_settings; ++i) {
            const gid::ConfigVar& v = gid::gid_config_vars[i];
            docs[i] = std::string(v.doc) + " Valid: " + std::string(v.choices) + ".";
            iface_config_table[1 + n_typed + i] =
                    ucs_config_field_t{v.name.data(), v.dfl.data(), docs[i].c_str(),
                                       offsetof(IfaceConfig, gid) + i * sizeof(char*), UCS_CONFIG_TYPE_STRING};
            ud_iface_config_table[1 + n_ud_typed + i] =
                    ucs_config_field_t{v.name.data(), v.dfl.data(), docs[i].c_str(),
                                       offsetof(UdIfaceConfig, gid) + i * sizeof(char*), UCS_CONFIG_TYPE_STRING};
        }
    }
};
const GidFields gid_fields;

// The congestion-control settings from cc::cc_config_vars, the same way (rc_roce only).
struct CcFields {
    std::string names[n_cc_settings], dfls[n_cc_settings], docs[n_cc_settings];
    CcFields() {
        for (size_t i = 0; i < n_cc_settings; ++i) {
            const cc::CcVar& v = cc::cc_config_vars[i];
            names[i] = v.name;   // the cc table's views are not NUL-terminated by contract
            dfls[i] = v.dfl;
            docs[i] = std::string(v.doc) + " Valid: " + std::string(v.choices) + ".";
            iface_config_table[1 + n_typed + n_gid_settings + i] =
                    ucs_config_field_t{names[i].c_str(), dfls[i].c_str(), docs[i].c_str(),
                                       offsetof(IfaceConfig, cc) + i * sizeof(char*), UCS_CONFIG_TYPE_STRING};
        }
    }
};
const CcFields cc_fields;

} // namespace

ucs_config_field_t md_config_table[] = {
    {"", "", nullptr, offsetof(MdConfig, super), UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},
    {"NETNS", "",
     "Network namespace of the userspace device (rc_roce and ud_roce): a name under /var/run/netns "
     "(ip netns add) or a path such as /proc/<pid>/ns/net. Its netdevs are the transport devices and "
     "its sockets are created there, while the process itself stays in its own namespace (where "
     "mpirun's PMIx server reaches it). Empty: the process's namespace.",
     offsetof(MdConfig, netns), UCS_CONFIG_TYPE_STRING},
    {"RCACHE", "try",
     "Registration cache of the verbs memory domains (roce_<rdma device>), as UCX's ib memory "
     "domain has: regions stay registered after UCP releases them (rendezvous buffers are "
     "registered per message) and are dropped when their memory is unmapped. yes: fail to open "
     "the memory domain without it; try: without it when it cannot be created; no: every "
     "registration pins its pages. Tuned by UCX_ROCE_RCACHE_* (MAX_SIZE, MAX_REGIONS, ...).",
     offsetof(MdConfig, rcache), UCS_CONFIG_TYPE_TERNARY},
    {"", "", nullptr, offsetof(MdConfig, rcache_config), UCS_CONFIG_TYPE_TABLE(uct_md_config_rcache_table)},
    {nullptr, nullptr, nullptr, 0, {}},
};

} // namespace roce::uct
