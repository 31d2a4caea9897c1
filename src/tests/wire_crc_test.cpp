// CRC-32 engine: known vectors, chaining, and every code path (bytewise, slice-by-16, PCLMULQDQ)
// agreeing on all lengths and alignments the datapath can produce.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "wire/icrc.hpp"

using namespace roce::wire;

namespace {

uint32_t crc_of(const std::string& s) {
    return crc32_ieee(0, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(Crc32, KnownVectors) {
    EXPECT_EQ(crc_of(""), 0u);
    EXPECT_EQ(crc_of("a"), 0xe8b7be43u);
    EXPECT_EQ(crc_of("123456789"), 0xcbf43926u);
    EXPECT_EQ(crc_of("The quick brown fox jumps over the lazy dog"), 0x414fa339u);
    std::vector<uint8_t> zeros(4096, 0), ones(4096, 0xff);
    // zlib: crc32(0, zeros, 4096) and crc32(0, 0xff x 4096)
    EXPECT_EQ(crc32_ieee(0, zeros.data(), 32), 0x190a55adu);
    EXPECT_EQ(crc32_ieee(0, ones.data(), 32), 0xff6cab0bu);
    EXPECT_EQ(crc32_ieee(0, zeros.data(), zeros.size()), detail::crc32_ieee_bytewise(0, zeros.data(), zeros.size()));
}

TEST(Crc32, Chaining) {
    const std::string s = "The quick brown fox jumps over the lazy dog";
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    for (size_t cut = 0; cut <= s.size(); ++cut)
        EXPECT_EQ(crc32_ieee(crc32_ieee(0, p, cut), p + cut, s.size() - cut), 0x414fa339u);
}

TEST(Crc32, AllPathsAgreeOnRandomInput) {
    std::mt19937_64 rng(42);
    std::vector<uint8_t> buf(5000 + 64);
    for (auto& b : buf)
        b = uint8_t(rng());
    for (size_t len = 0; len <= 5000; ++len) {
        const size_t mis = len % 17;   // every misalignment 0..16 recurs across lengths
        const uint8_t* p = buf.data() + mis;
        const uint32_t seed = uint32_t(rng());
        const uint32_t ref = detail::crc32_ieee_bytewise(seed, p, len);
        ASSERT_EQ(detail::crc32_ieee_portable(seed, p, len), ref) << "len " << len;
        ASSERT_EQ(crc32_ieee(seed, p, len), ref) << "len " << len << " mis " << mis;
        ASSERT_EQ(detail::crc32_ieee_128(seed, p, len), ref) << "len " << len << " mis " << mis;
        ASSERT_EQ(detail::crc32_ieee_256(seed, p, len), ref) << "len " << len << " mis " << mis;
    }
    for (size_t mis = 0; mis < 64; ++mis)
        for (size_t len : {63u, 64u, 65u, 79u, 80u, 127u, 128u, 255u, 256u, 272u, 383u, 384u, 511u, 512u,
                           1024u, 4096u, 4100u})
            ASSERT_EQ(crc32_ieee(0, buf.data() + mis, len), detail::crc32_ieee_bytewise(0, buf.data() + mis, len))
                << "len " << len << " mis " << mis;
}

TEST(Crc32, ReportsPath) {
    // Not an assertion: documents in the test log which path the checks above exercised.
    std::printf("crc32_ieee uses %s\n", detail::crc32_uses_vpclmul512() ? "512-bit VPCLMULQDQ folding"
                                         : detail::crc32_uses_vpclmul() ? "256-bit VPCLMULQDQ folding"
                                         : detail::crc32_uses_pclmul() ? "PCLMULQDQ folding" : "slice-by-16");
}

TEST(Crc32, CombineAndZeroShift) {
    std::mt19937 rng(7);
    std::vector<uint8_t> a(777), b(1234);
    for (auto& x : a) x = uint8_t(rng());
    for (auto& x : b) x = uint8_t(rng());
    std::vector<uint8_t> ab(a);
    ab.insert(ab.end(), b.begin(), b.end());
    const uint32_t ca = crc32_ieee(0, a.data(), a.size()), cb = crc32_ieee(0, b.data(), b.size());
    EXPECT_EQ(crc32_combine(ca, cb, b.size()), crc32_ieee(0, ab.data(), ab.size()));
    EXPECT_EQ(crc32_combine(ca, 0, 0), ca);
    // Zero-extension of a raw register equals running the table over zero bytes.
    std::vector<uint8_t> z(1000, 0);
    for (size_t n : {0u, 1u, 2u, 3u, 100u, 999u, 1000u}) {
        const uint32_t r = 0x12345678;
        // raw(r, zeros) = ~crc32_ieee(~r, zeros)
        EXPECT_EQ(detail::crc32_shift_zeros(r, n), ~detail::crc32_ieee_bytewise(~r, z.data(), n)) << n;
    }
}

} // namespace
