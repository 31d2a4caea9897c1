// roce_doctor's subcommands, one file each (roce_doctor.cpp dispatches), and what they share.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "gid/config.hpp"
#include "sw/device.hpp"

namespace roce::doctor {

// `roce_doctor gid ...` (doctor_gid.cpp) and `roce_doctor wire FILE [--json]` (doctor_wire.cpp).
int gid_main(int argc, char** argv);
void gid_usage(FILE* f);
int wire_main(int argc, char** argv);
void wire_usage(FILE* f);

// `roce_doctor counters [DIR] [--json] [--live] [--device]` (doctor_counters.cpp).
int counters_main(int argc, char** argv);

// `roce_doctor devices [--json]` (doctor_devices.cpp).
int devices_main(int argc, char** argv);

// The GID/traffic-class settings: UCX_RC_ROCE_* of the environment, then `extra` (NAME=VALUE
// without the prefix) over them. Errors: invalid_param, one line in `err`.
Status load_gid_config(const std::vector<std::pair<std::string, std::string>>& extra, gid::GidConfig& cfg,
                       std::string& err);

// The UDP ports the doctor's userspace devices bind, as the transports would: rc from
// UCX_RC_ROCE_PORT_RANGE, ud from UCX_UD_ROCE_PORT_RANGE (unset: ephemeral), both replaced by
// `override_text` (--port-range) when it is not null. Errors: invalid_param, one line in `err`.
Status doctor_port_ranges(const char* override_text, sw::PortRange& rc, sw::PortRange& ud, std::string& err);

// v as a JSON string literal (quotes and escapes included).
std::string json_string(const std::string& v);

} // namespace roce::doctor
