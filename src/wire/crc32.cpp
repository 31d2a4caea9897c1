// CRC-32 (IEEE, reflected). Slice-by-16 tables everywhere; on x86-64 CPUs with PCLMULQDQ the
// bulk of long buffers is folded 64 bytes at a time with carry-less multiplies (Gopal et al.,
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", Intel 2009), picked at run
// time so the binary needs no -m flags. The datapath runs this on every 4 KiB packet.
#include <array>
#include <bit>
#include <cstring>

#include "wire/icrc.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ROCE_CRC_PCLMUL 1
#endif

namespace roce::wire {
namespace {

constexpr uint32_t poly = 0xedb88320u;

using Tables = std::array<std::array<uint32_t, 256>, 16>;

constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k)
            c = c & 1 ? (c >> 1) ^ poly : c >> 1;
        t[0][i] = c;
    }
    for (size_t k = 1; k < 16; ++k)
        for (size_t i = 0; i < 256; ++i)
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
    return t;
}

constexpr Tables tab = make_tables();

inline uint32_t load_le32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    if constexpr (std::endian::native == std::endian::big)
        v = __builtin_bswap32(v);
    return v;
}

// Raw register update (no inversion).
inline uint32_t bytes_raw(uint32_t c, const uint8_t* p, size_t n) {
    while (n--)
        c = (c >> 8) ^ tab[0][(c ^ *p++) & 0xff];
    return c;
}

uint32_t slice16_raw(uint32_t c, const uint8_t* p, size_t n) {
    while (n >= 16) {
        const uint32_t a = load_le32(p) ^ c, b = load_le32(p + 4), d = load_le32(p + 8),
                       e = load_le32(p + 12);
        c = tab[15][a & 0xff] ^ tab[14][(a >> 8) & 0xff] ^ tab[13][(a >> 16) & 0xff] ^ tab[12][a >> 24] ^
            tab[11][b & 0xff] ^ tab[10][(b >> 8) & 0xff] ^ tab[9][(b >> 16) & 0xff] ^ tab[8][b >> 24] ^
            tab[7][d & 0xff] ^ tab[6][(d >> 8) & 0xff] ^ tab[5][(d >> 16) & 0xff] ^ tab[4][d >> 24] ^
            tab[3][e & 0xff] ^ tab[2][(e >> 8) & 0xff] ^ tab[1][(e >> 16) & 0xff] ^ tab[0][e >> 24];
        p += 16;
        n -= 16;
    }
    return bytes_raw(c, p, n);
}

#ifdef ROCE_CRC_PCLMUL
#define ROCE_PCLMUL_TARGET __attribute__((target("pclmul,sse2")))

ROCE_PCLMUL_TARGET inline __m128i ld(const uint8_t* q) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

// x * x^k folded onto the next 128 bits: (lo * k_lo) ^ (hi * k_hi) ^ next.
ROCE_PCLMUL_TARGET inline __m128i fold(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                       _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// Folds the four 128-bit lanes x1..x4 (the 64 bytes before p) and n more bytes (a multiple of
// 16) into a 32-bit raw register. Constants are x^k mod P for the bit-reflected polynomial:
// k1/k2 fold across 512 bits, k3/k4 across 128, k5 64->32, and the Barrett pair (P', mu).
// Inlined into each caller, so that after 256-bit code it is VEX-encoded too: legacy SSE code
// right after AVX code paid a state-transition penalty of ~100 ns per call here.
ROCE_PCLMUL_TARGET __attribute__((always_inline)) inline
uint32_t fold_lanes(__m128i x1, __m128i x2, __m128i x3, __m128i x4, const uint8_t* p, size_t n) {
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i pmu = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i mask32 = _mm_setr_epi32(-1, 0, -1, 0);
    while (n >= 64) {
        x1 = fold(x1, k1k2, ld(p));
        x2 = fold(x2, k1k2, ld(p + 16));
        x3 = fold(x3, k1k2, ld(p + 32));
        x4 = fold(x4, k1k2, ld(p + 48));
        p += 64;
        n -= 64;
    }
    x1 = fold(x1, k3k4, x2);
    x1 = fold(x1, k3k4, x3);
    x1 = fold(x1, k3k4, x4);
    for (; n >= 16; p += 16, n -= 16)
        x1 = fold(x1, k3k4, ld(p));

    // 128 -> 64 bits.
    __m128i x = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, k3k4, 0x10));
    // 64 -> 32 bits.
    x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, mask32), k5k0, 0x00));
    // Barrett reduction.
    __m128i t = _mm_clmulepi64_si128(_mm_and_si128(x, mask32), pmu, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, mask32), pmu, 0x00);
    x = _mm_xor_si128(x, t);
    return uint32_t(_mm_cvtsi128_si32(_mm_srli_si128(x, 4)));
}

// Folds n (>= 64, multiple of 16) bytes into the raw register c.
ROCE_PCLMUL_TARGET
uint32_t fold_raw(uint32_t c, const uint8_t* p, size_t n) {
    const __m128i x1 = _mm_xor_si128(ld(p), _mm_cvtsi32_si128(int(c)));
    return fold_lanes(x1, ld(p + 16), ld(p + 32), ld(p + 48), p + 64, n - 64);
}

// The same lanes 256 bits wide (VPCLMULQDQ on AVX2 registers, no AVX-512 frequency licence):
// 4 registers = 8 lanes = 128 bytes per step, folded across 1024 bits; then the lanes are
// folded down to the four of fold_lanes (across 512 bits: the SSE loop's constants).
#define ROCE_VPCLMUL_TARGET __attribute__((target("avx2,vpclmulqdq,pclmul,sse2")))

ROCE_VPCLMUL_TARGET inline __m256i fold256(__m256i x, __m256i k, __m256i next) {
    return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(x, k, 0x00),
                                             _mm256_clmulepi64_epi128(x, k, 0x11)), next);
}

ROCE_VPCLMUL_TARGET inline __m256i ld256(const uint8_t* q) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
}

// Four registers (the 128 bytes before p, y0 first) and n more bytes (a multiple of 16) into a
// raw register. Inlined into both wide paths.
ROCE_VPCLMUL_TARGET __attribute__((always_inline)) inline
uint32_t fold_tail_256(__m256i y0, __m256i y1, __m256i y2, __m256i y3, const uint8_t* p, size_t n) {
    const __m256i k1024 = _mm256_set_epi64x(0x014a7fe880, 0x01e88ef372, 0x014a7fe880, 0x01e88ef372);
    const __m256i k512 = _mm256_set_epi64x(0x01c6e41596, 0x0154442bd4, 0x01c6e41596, 0x0154442bd4);
    while (n >= 128) {
        y0 = fold256(y0, k1024, ld256(p));
        y1 = fold256(y1, k1024, ld256(p + 32));
        y2 = fold256(y2, k1024, ld256(p + 64));
        y3 = fold256(y3, k1024, ld256(p + 96));
        p += 128;
        n -= 128;
    }
    // y0,y1 (lanes 0-3) folded across 512 bits onto y2,y3 (lanes 4-7).
    y2 = fold256(y0, k512, y2);
    y3 = fold256(y1, k512, y3);
    alignas(32) uint8_t lanes[64];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), y2);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 32), y3);
    return fold_lanes(ld(lanes), ld(lanes + 16), ld(lanes + 32), ld(lanes + 48), p, n);
}

// n >= 128, multiple of 16.
ROCE_VPCLMUL_TARGET
uint32_t fold_raw_256(uint32_t c, const uint8_t* p, size_t n) {
    const __m256i y0 = _mm256_xor_si256(ld256(p), _mm256_set_epi64x(0, 0, 0, int64_t(c)));
    return fold_tail_256(y0, ld256(p + 32), ld256(p + 64), ld256(p + 96), p + 128, n - 128);
}

// The same 512 bits wide: 4 registers = 256 bytes per step, folded across 2048 bits (constants
// x^2080 and x^2016 mod P, reflected and shifted as fold_lanes'), then down to the 256-bit tail.
// The folds are bound by the multiplier's throughput, not its latency: eight 256-bit chains were
// no faster than four (26 vs 28 GB/s per core for 4 KiB, Zen 5), 512-bit registers twice as fast.
// Only CPUs with AVX-512 *and* VPCLMULQDQ take it (Ice Lake and later, Zen 4 and later), where
// 512-bit code costs little or no clock frequency.
#define ROCE_VPCLMUL512_TARGET __attribute__((target("avx512f,avx512vl,avx2,vpclmulqdq,pclmul,sse2")))

ROCE_VPCLMUL512_TARGET inline __m512i fold512(__m512i x, __m512i k, __m512i next) {
    return _mm512_xor_si512(_mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
                                             _mm512_clmulepi64_epi128(x, k, 0x11)), next);
}

ROCE_VPCLMUL512_TARGET inline __m512i ld512(const uint8_t* q) { return _mm512_loadu_si512(q); }

// n >= 256, multiple of 16.
ROCE_VPCLMUL512_TARGET
uint32_t fold_raw_512(uint32_t c, const uint8_t* p, size_t n) {
    const __m512i k2048 = _mm512_set_epi64(0x01322d1430, 0x011542778a, 0x01322d1430, 0x011542778a,
                                           0x01322d1430, 0x011542778a, 0x01322d1430, 0x011542778a);
    const __m512i k1024 = _mm512_set_epi64(0x014a7fe880, 0x01e88ef372, 0x014a7fe880, 0x01e88ef372,
                                           0x014a7fe880, 0x01e88ef372, 0x014a7fe880, 0x01e88ef372);
    __m512i z0 = _mm512_xor_si512(ld512(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, int64_t(c)));
    __m512i z1 = ld512(p + 64), z2 = ld512(p + 128), z3 = ld512(p + 192);
    p += 256;
    n -= 256;
    while (n >= 256) {
        z0 = fold512(z0, k2048, ld512(p));
        z1 = fold512(z1, k2048, ld512(p + 64));
        z2 = fold512(z2, k2048, ld512(p + 128));
        z3 = fold512(z3, k2048, ld512(p + 192));
        p += 256;
        n -= 256;
    }
    // z0,z1 folded across 1024 bits onto z2,z3: the 128 bytes before p.
    z2 = fold512(z0, k1024, z2);
    z3 = fold512(z1, k1024, z3);
    // (The maskz extracts: GCC 12's plain ones warn of an uninitialised register inside.)
    return fold_tail_256(_mm512_maskz_extracti64x4_epi64(0xff, z2, 0), _mm512_maskz_extracti64x4_epi64(0xff, z2, 1),
                         _mm512_maskz_extracti64x4_epi64(0xff, z3, 0), _mm512_maskz_extracti64x4_epi64(0xff, z3, 1),
                         p, n);
}

bool detect_pclmul() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul");
}
// Dynamic initialisation: a CRC computed by another translation unit's static constructor
// before this runs sees `false` and takes the table path, which gives the same result.
const bool have_pclmul = detect_pclmul();
// __builtin_cpu_supports checks that the OS saves the AVX state too.
const bool have_vpclmul = have_pclmul && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq");
const bool have_vpclmul512 = have_vpclmul && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
#else
const bool have_pclmul = false;
const bool have_vpclmul = false;
const bool have_vpclmul512 = false;
#endif

// The register-wide part of crc32_ieee: the raw register after the bytes it consumed, folded
// at most `width` bits at a time (128, 256 or 512; the tests take each path).
uint32_t bulk_raw(uint32_t c, const uint8_t*& p, size_t& n, unsigned width) {
#ifdef ROCE_CRC_PCLMUL
    if (have_pclmul && n >= 64) {
        const size_t bulk = n & ~size_t(15);
        if (width >= 512 && have_vpclmul512 && bulk >= 256)
            c = fold_raw_512(c, p, bulk);
        else if (width >= 256 && have_vpclmul && bulk >= 128)
            c = fold_raw_256(c, p, bulk);
        else
            c = fold_raw(c, p, bulk);
        p += bulk;
        n -= bulk;
    }
#else
    (void)width;
#endif
    return c;
}

// a * b mod P in the reflected representation (x^0 = bit 31); a must be nonzero.
uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = 1u << 31, r = 0;
    for (;;) {
        if (a & m) {
            r ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ poly : b >> 1;
    }
    return r;
}

// x^(2^k) mod P, k = 0..31, for zero-extension (as zlib's crc32_combine).
constexpr std::array<uint32_t, 32> x2n = [] {
    std::array<uint32_t, 32> t{};
    uint32_t p = 1u << 30;   // x^1
    for (auto& v : t) {
        v = p;
        // square: p = p*p mod P (constexpr copy of multmodp)
        uint32_t a = p, b = p, m = 1u << 31, r = 0;
        for (;;) {
            if (a & m) {
                r ^= b;
                if ((a & (m - 1)) == 0)
                    break;
            }
            m >>= 1;
            b = b & 1 ? (b >> 1) ^ poly : b >> 1;
        }
        p = r;
    }
    return t;
}();

// x^(n * 2^k) mod P.
uint32_t x2nmodp(size_t n, unsigned k) {
    uint32_t p = 1u << 31;   // x^0
    while (n) {
        if (n & 1)
            p = multmodp(x2n[k & 31], p);
        n >>= 1;
        ++k;
    }
    return p;
}

} // namespace

namespace detail {

uint32_t crc32_ieee_portable(uint32_t crc, const uint8_t* p, size_t n) {
    return ~slice16_raw(~crc, p, n);
}

uint32_t crc32_ieee_bytewise(uint32_t crc, const uint8_t* p, size_t n) {
    return ~bytes_raw(~crc, p, n);
}

bool crc32_uses_pclmul() { return have_pclmul; }
bool crc32_uses_vpclmul() { return have_vpclmul; }
bool crc32_uses_vpclmul512() { return have_vpclmul512; }

uint32_t crc32_ieee_128(uint32_t crc, const uint8_t* p, size_t n) {
    const uint32_t c = bulk_raw(~crc, p, n, 128);
    return ~slice16_raw(c, p, n);
}

uint32_t crc32_ieee_256(uint32_t crc, const uint8_t* p, size_t n) {
    const uint32_t c = bulk_raw(~crc, p, n, 256);
    return ~slice16_raw(c, p, n);
}

uint32_t crc32_shift_zeros(uint32_t r, size_t n) { return n ? multmodp(x2nmodp(n, 3), r) : r; }
uint32_t crc32_mulmod(uint32_t a, uint32_t b) { return a ? multmodp(a, b) : 0; }
uint32_t crc32_x8n(size_t n) { return x2nmodp(n, 3); }

} // namespace detail

uint32_t crc32_ieee(uint32_t crc, const uint8_t* p, size_t n) {
    const uint32_t c = bulk_raw(~crc, p, n, 512);
    return ~slice16_raw(c, p, n);
}

uint32_t crc32_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
    return detail::crc32_shift_zeros(crc_a, len_b) ^ crc_b;
}

} // namespace roce::wire
