// roce_config_doc: prints the rc_roce and ud_roce tunables (config_table.hpp, then the GID and traffic-class
// settings of gid::gid_config_vars) as a Markdown table, so the README documents exactly what
// `ucx_info -c` shows.
#include <cstdio>
#include <string>
#include <string_view>

#include "config_table.hpp"

namespace {

const char* type_text(std::string_view type) {
    if (type == "UINT") return "unsigned integer";
    if (type == "MEMUNITS") return "memory units (e.g. 64k, 1m)";
    if (type == "TIME") return "time (e.g. 2ms, 200us)";
    if (type == "DOUBLE") return "floating point";
    if (type == "BOOL") return "y/n";
    if (type == "ULONG") return "unsigned long";
    if (type == "LOG_LEVEL") return "log level";
    if (type == "STRING") return "string";
    if (type == "RANGE_SPEC") return "number or range a-b";
    return "value";
}

std::string escape(const char* text) {
    std::string out;
    for (const char* p = text; *p != '\0'; ++p) {
        if (*p == '|') out += '\\';
        out += *p;
    }
    return out;
}

} // namespace

template <typename Table>
void print_table(const char* prefix, const Table& table) {
    std::printf("| Variable | Default | Type | Description |\n");
    std::printf("|---|---|---|---|\n");
    for (const auto& e : table) {
        const std::string dfl = *e.dfl ? "`" + std::string(e.dfl) + "`" : "(empty)";
        std::printf("| `UCX_%s%s` | %s | %s | %s |\n", prefix, e.name, dfl.c_str(),
                    type_text(e.type), escape(e.doc).c_str());
    }
    // GID and traffic-class settings: their type column lists the valid choices.
    for (const auto& v : roce::uct::gid_config_doc) {
        std::printf("| `UCX_%s%s` | `%s` | %s | %s |\n", prefix, v.name.data(), v.dfl.data(),
                    escape(v.choices.data()).c_str(), escape(v.doc.data()).c_str());
    }
}

int main() {
    std::printf("rc_roce:\n\n");
    print_table(roce::uct::tl_config_prefix, roce::uct::config_doc);
    // Congestion control (rc_roce only): cc::cc_config_vars.
    for (const auto& v : roce::cc::cc_vars()) {
        std::printf("| `UCX_%s%.*s` | `%.*s` | %s | %s |\n", roce::uct::tl_config_prefix, int(v.name.size()),
                    v.name.data(), int(v.dfl.size()), v.dfl.data(), escape(std::string(v.choices).c_str()).c_str(),
                    escape(std::string(v.doc).c_str()).c_str());
    }
    std::printf("\nud_roce:\n\n");
    print_table(roce::uct::ud_tl_config_prefix, roce::uct::ud_config_doc);
    return 0;
}
