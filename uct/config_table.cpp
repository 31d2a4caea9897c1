// UCX configuration tables built from the one list in config_table.hpp.
#include "glue.hpp"

#include <cstddef>

// Type tokens of config_table.hpp that are not plain UCS_CONFIG_TYPE_<TOKEN> names.
#define UCS_CONFIG_TYPE_LOG_LEVEL UCS_CONFIG_TYPE_ENUM(ucs_log_level_names)

namespace roce::uct {

#define ROCE_CONFIG_FIELD_ENTRY(_field, _ctype, _name, _dfl, _type, _doc)                     \
    {_name, _dfl, _doc, offsetof(IfaceConfig, _field), UCS_CONFIG_TYPE_##_type},

// The field types must be what the parsers write.
#define ROCE_CONFIG_FIELD_CHECK(_field, _ctype, _name, _dfl, _type, _doc)                     \
    static_assert(std::is_same_v<decltype(IfaceConfig::_field), _ctype>);
ROCE_IFACE_CONFIG(ROCE_CONFIG_FIELD_CHECK)
#undef ROCE_CONFIG_FIELD_CHECK

ucs_config_field_t iface_config_table[] = {
    // Chain the generic UCT interface options (UCX_RC_ROCE_MAX_NUM_EPS, ...), as every TL does.
    {"", "", nullptr, offsetof(IfaceConfig, super), UCS_CONFIG_TYPE_TABLE(uct_iface_config_table)},
    ROCE_IFACE_CONFIG(ROCE_CONFIG_FIELD_ENTRY)
    {nullptr, nullptr, nullptr, 0, {}},
};
#undef ROCE_CONFIG_FIELD_ENTRY

ucs_config_field_t md_config_table[] = {
    {"", "", nullptr, offsetof(MdConfig, super), UCS_CONFIG_TYPE_TABLE(uct_md_config_table)},
    {nullptr, nullptr, nullptr, 0, {}},
};

} // namespace roce::uct
