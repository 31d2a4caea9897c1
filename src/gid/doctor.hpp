// roce_doctor's subcommands, one file each (roce_doctor.cpp dispatches), and what they share.
#pragma once

#include <string>

namespace roce::doctor {

// `roce_doctor counters [DIR] [--json] [--live] [--device]` (doctor_counters.cpp).
int counters_main(int argc, char** argv);

// v as a JSON string literal (quotes and escapes included).
std::string json_string(const std::string& v);

} // namespace roce::doctor
