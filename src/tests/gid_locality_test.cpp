// Device locality (hwloc) on the real host: the process's CPUs, virtual netdevs without a device,
// PCI netdevs located at their function, and the ordering the transports' device lists use.
#include <gtest/gtest.h>

#include <dirent.h>
#include <filesystem>
#include <regex>
#include <string>

#include "gid/locality.hpp"

using namespace roce::gid;

TEST(GidLocality, ProcessCpusAndVirtualNetdev) {
    std::string err;
    const Topology* t = Topology::shared(err);
    ASSERT_NE(t, nullptr) << err;
    EXPECT_FALSE(t->process_cpus().empty());
    const Locality lo = t->of_netdev("lo");
    EXPECT_FALSE(lo.known());
    EXPECT_FALSE(lo.pci.has_value());
    EXPECT_NE(lo.note.find("virtual"), std::string::npos) << lo.note;
    EXPECT_EQ(t->distance_rank(lo), 1);
    const Locality none = t->of_rdma("no_such_rdma_device0");
    EXPECT_FALSE(none.known());
    EXPECT_FALSE(none.note.empty());
}

TEST(GidLocality, PciNetdevIsLocatedAtItsFunction) {
    std::string err;
    const Topology* t = Topology::shared(err);
    ASSERT_NE(t, nullptr) << err;
    const std::regex bdf("[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-7]");
    int checked = 0;
    for (const auto& e : std::filesystem::directory_iterator("/sys/class/net")) {
        std::error_code ec;
        const auto dev = std::filesystem::canonical(e.path() / "device", ec);
        if (ec)
            continue;
        std::string want;   // the last PCI function on the device's sysfs path
        for (const auto& part : dev)
            if (std::regex_match(part.string(), bdf))
                want = part.string();
        if (want.empty())
            continue;
        const Locality l = t->of_netdev(e.path().filename().string());
        ASSERT_TRUE(l.pci.has_value()) << e.path() << ": " << l.note;
        EXPECT_EQ(l.pci->str(), want);
        EXPECT_TRUE(l.known()) << l.note;
        ++checked;
    }
    if (checked == 0)
        GTEST_SKIP() << "no netdev backed by a PCI function here";
}

TEST(GidLocality, CloseDevicesFirstUnknownNextFarLast) {
    std::string err;
    const Topology* t = Topology::shared(err);
    ASSERT_NE(t, nullptr) << err;
    Locality close, unknown, far;
    close.cpus = t->process_cpus();
    far.cpus = "100000";   // a CPU this process cannot be running on
    const auto order = order_by_locality(*t, {"far", "unknown", "close", "unknown2"}, [&](const std::string& n) {
        return n == "close" ? close : n == "far" ? far : unknown;
    });
    EXPECT_EQ(order, (std::vector<std::string>{"close", "unknown", "unknown2", "far"}));
}
