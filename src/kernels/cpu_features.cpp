// CPUID/XGETBV detection and the process-wide active ISA. The instruction-set bits alone are
// not enough: the OS must also save the wider registers on context switch (XCR0), otherwise
// YMM/ZMM state is silently corrupted, so both are checked. AMX needs a third step: Linux keeps
// the 8 KiB tile data state off by default and enables it per process on request
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); a tile instruction without that
// permission faults (SIGILL), so AMX counts as supported only after the kernel said yes.
#include "kernels/cpu_features.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define WARDEN_X86 1
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define WARDEN_AMX_LINUX 1
#endif

namespace warden::kernels {

namespace {

#if WARDEN_X86
struct Regs {
    uint32_t a = 0, b = 0, c = 0, d = 0;
};

bool cpuid(uint32_t leaf, uint32_t sub, Regs& r) {
    if (static_cast<uint32_t>(__get_cpuid_max(0, nullptr)) < leaf) return false;
    __cpuid_count(leaf, sub, r.a, r.b, r.c, r.d);
    return true;
}

// XGETBV via inline asm: the _xgetbv intrinsic needs -mxsave, which this file must not use.
uint64_t xgetbv0() {
    uint32_t lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t v, int i) {
    return (v >> i) & 1u;
}

const char* g_amx_status = "not checked";
bool g_amx_bf16 = false;

// Asks Linux for the tile data state (once per process: the permission covers every thread,
// the pool's included). Returns false where the kernel refuses (too old, or a sigaltstack too
// small for the larger signal frame) or this is not Linux on x86-64.
bool request_tile_permission() {
#if WARDEN_AMX_LINUX
    constexpr long kArchReqXcompPerm = 0x1023;  // <asm/prctl.h>
    constexpr long kXfeatureXtiledata = 18;     // XCR0 bit of the tile data state
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
}

// Isa::AMX on top of an AVX-512 machine: CPUID leaf 7 EDX bits 24 (AMX-TILE), 25 (AMX-INT8), 22
// (AMX-BF16), XCR0 bits 17-18 (tile config and data state enabled by the OS), then the
// permission. Records why not in g_amx_status.
Isa with_amx(const Regs& l7, uint64_t xcr0) {
    const bool tile = bit(l7.d, 24), int8 = bit(l7.d, 25);
    if (!tile || !int8) {
        g_amx_status = "no AMX on this CPU (CPUID lacks AMX-TILE/AMX-INT8)";
        return Isa::AVX512;
    }
    if ((xcr0 & 0x60000) != 0x60000) {
        g_amx_status = "AMX present but the OS does not enable the tile state (XCR0)";
        return Isa::AVX512;
    }
    if (!request_tile_permission()) {
        g_amx_status = "AMX present but the kernel refused arch_prctl(ARCH_REQ_XCOMP_PERM)";
        return Isa::AVX512;
    }
    g_amx_bf16 = bit(l7.d, 22);
    g_amx_status = "available (AMX-TILE, AMX-INT8)";
    return Isa::AMX;
}

Isa detect_uncached() {
    g_amx_status = "no AMX on this CPU (AVX-512 level missing)";
    Regs l1;
    if (!cpuid(1, 0, l1)) return Isa::Scalar;
    const bool osxsave = bit(l1.c, 27), avx = bit(l1.c, 28), fma = bit(l1.c, 12),
               f16c = bit(l1.c, 29);
    if (!osxsave || !avx) return Isa::Scalar;
    const uint64_t xcr0 = xgetbv0();
    const bool os_ymm = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
    const bool os_zmm = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
    Regs l7, l7s1;
    if (!cpuid(7, 0, l7)) return Isa::Scalar;
    const bool avx2 = bit(l7.b, 5);
    if (!(avx2 && fma && f16c && os_ymm)) return Isa::Scalar;
    bool bf16 = false;
    if (l7.a >= 1 && cpuid(7, 1, l7s1)) bf16 = bit(l7s1.a, 5);
    const bool f = bit(l7.b, 16), dq = bit(l7.b, 17), bw = bit(l7.b, 30), vl = bit(l7.b, 31);
    const bool vnni = bit(l7.c, 11);
    if (f && dq && bw && vl && vnni && bf16 && os_zmm) return with_amx(l7, xcr0);
    return Isa::AVX2;
}
#else
const char* g_amx_status = "no AMX (not x86)";
bool g_amx_bf16 = false;
Isa detect_uncached() {
    return Isa::Scalar;
}
#endif

// Initial active ISA: detect_isa(), or WARDEN_ISA if set and supported. An unknown or
// unsupported value is reported once on stderr and ignored (the best supported ISA is used).
int initial_active() {
    const Isa best = detect_isa();
    const char* env = std::getenv("WARDEN_ISA");
    if (env == nullptr || *env == '\0') return static_cast<int>(best);
    Isa want;
    if (std::strcmp(env, "scalar") == 0) {
        want = Isa::Scalar;
    } else if (std::strcmp(env, "avx2") == 0) {
        want = Isa::AVX2;
    } else if (std::strcmp(env, "avx512") == 0) {
        want = Isa::AVX512;
    } else if (std::strcmp(env, "amx") == 0) {
        want = Isa::AMX;
    } else {
        std::fprintf(stderr,
                     "warden: WARDEN_ISA=%s is not one of scalar|avx2|avx512|amx; using %s\n", env,
                     isa_name(best));
        return static_cast<int>(best);
    }
    if (!isa_supported(want)) {
        if (want == Isa::AMX)
            std::fprintf(stderr, "warden: WARDEN_ISA=amx is not supported here (%s); using %s\n",
                         amx_status(), isa_name(best));
        else
            std::fprintf(stderr,
                         "warden: WARDEN_ISA=%s is not supported by this CPU/OS; using %s\n", env,
                         isa_name(best));
        return static_cast<int>(best);
    }
    return static_cast<int>(want);
}

std::atomic<int>& active_slot() {
    // Function-local static: initialised (and the env warning printed) exactly once.
    static std::atomic<int> slot{initial_active()};
    return slot;
}

}  // namespace

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar:
            return "scalar";
        case Isa::AVX2:
            return "avx2";
        case Isa::AVX512:
            return "avx512";
        case Isa::AMX:
            return "amx";
    }
    return "unknown";
}

const char* amx_status() {
    detect_isa();
    return g_amx_status;
}

bool amx_bf16_supported() {
    return detect_isa() == Isa::AMX && g_amx_bf16;
}

Isa detect_isa() {
    static const Isa detected = detect_uncached();
    return detected;
}

bool isa_supported(Isa isa) {
    return static_cast<int>(isa) <= static_cast<int>(detect_isa());
}

Isa active_isa() {
    return static_cast<Isa>(active_slot().load(std::memory_order_relaxed));
}

const char* cpu_vendor() {
    static const auto vendor = [] {
        std::array<char, 13> v{};
#if WARDEN_X86
        Regs r;
        if (cpuid(0, 0, r)) {  // EBX, EDX, ECX spell the vendor in that order
            std::memcpy(v.data(), &r.b, 4);
            std::memcpy(v.data() + 4, &r.d, 4);
            std::memcpy(v.data() + 8, &r.c, 4);
        }
#endif
        return v;
    }();
    return vendor.data();
}

int cpu_family() {
    static const int family = [] {
#if WARDEN_X86
        Regs r;
        if (!cpuid(1, 0, r)) return 0;
        const int base = static_cast<int>((r.a >> 8) & 0xf),
                  ext = static_cast<int>((r.a >> 20) & 0xff);
        return base == 0xf ? base + ext : base;
#else
        return 0;
#endif
    }();
    return family;
}

bool set_active_isa(Isa isa) {
    if (!isa_supported(isa)) return false;
    active_slot().store(static_cast<int>(isa), std::memory_order_relaxed);
    return true;
}

}  // namespace warden::kernels
