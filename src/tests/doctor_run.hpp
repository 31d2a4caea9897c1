// Runs the roce_doctor binary (ROCE_DOCTOR_PATH, set by src/gid/CMakeLists.txt) from the gid
// tests and captures its exit code and output (stdout and stderr).
#pragma once

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <string>

struct DoctorRun {
    int code = -1;
    std::string out;
};

inline DoctorRun doctor(const std::string& args) {
    DoctorRun r;
    const std::string cmd = std::string(ROCE_DOCTOR_PATH) + " " + args + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return r;
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
    const int status = ::pclose(p);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)
#define EXPECT_LACKS(text, part) EXPECT_EQ(std::string(text).find(part), std::string::npos) << "in: " << (text)
