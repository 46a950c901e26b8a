#include "kernels/decode_tuning.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "kernels/cpu_features.h"

namespace warden::kernels {
namespace {

bool valid(const DecodeTuning& t) {
    const auto pf_ok = [](int64_t d) { return d >= 0 && d <= 16384 && d % 64 == 0; };
    return (t.panels == 1 || t.panels == 2) && pf_ok(t.q4_prefetch) && pf_ok(t.q8_prefetch) &&
           pf_ok(t.fp8_prefetch) && pf_ok(t.q4_avx2_prefetch) && t.grab_div >= 1 && t.grab_div <= 8;
}

// WARDEN_DECODE_TUNING on top of the vendor's table; anything malformed is reported once on
// stderr and the whole variable ignored, as WARDEN_ISA does.
DecodeTuning initial() {
    const DecodeTuning base = vendor_decode_tuning();
    const char* env = std::getenv("WARDEN_DECODE_TUNING");
    if (env == nullptr || *env == '\0') return base;
    DecodeTuning t;
    if (parse_decode_tuning(env, base, t)) return t;
    std::fprintf(stderr,
                 "warden: WARDEN_DECODE_TUNING=%s is not a list of panels=1|2, q4=, q8=, fp8= "
                 "(bytes, multiples of "
                 "64 up to 16384), half=0|1, q4avx2=0|1, q4avx2pf= (bytes), grabdiv=1..8; using "
                 "the %s table\n",
                 env, base.source);
    return base;
}

DecodeTuning& slot() {
    static DecodeTuning t = initial();
    return t;
}

}  // namespace

// Measured tables (bench_gemv_decode and the engine, alternating builds; docs/WEIGHT_QUANT.md,
// Decode tuning per CPU).
DecodeTuning decode_tuning_table(const char* vendor, int family) {
    if (std::strcmp(vendor, "AuthenticAMD") == 0) {
        DecodeTuning t;
        t.panels = 1;
        t.q4_prefetch = 0;
        t.q8_prefetch = 1024;
        t.fp8_prefetch = 1024;
        t.half_loads = true;
        // When the AVX2 kernel takes batch-1 int4, it prefetches 4096 bytes ahead rather than its
        // 2048 (tuned on a Zen 3 host): on Zen 5 the longer distance drew more bandwidth, in
        // bench_gemv_decode and in the engine.
        t.q4_avx2_prefetch = 4096;
        if (family == 0x19) {
            // Zen 4 runs 512-bit instructions on 256-bit units. In a Zen 4 VM's usual minutes
            // (~33 GB/s) both int4 kernels draw all the bandwidth there is; in its fast minutes
            // (~53 GB/s) the AVX2 kernel (36 GB/s per core in L2, against VNNI's 47) became the
            // limit, so VNNI draws more there (bench_tuning_ab).
            t.q4_avx2 = false;
            // Whole 64-byte loads, not two 32-byte halves joined by an insert (the Zen 5 choice):
            // on Zen 4 that insert is another 512-bit shuffle beside the kernel's permutes. In L2
            // (bench_gemv_l2, one core) whole loads computed int4 faster; from DRAM they drew
            // as much or more (bench_tuning_ab), and the engine was no slower.
            t.half_loads = false;
            t.source = "amd-zen4";
            return t;
        }
        // Zen 5: one int4 token drew more bandwidth through the AVX2 kernel than through the
        // VNNI one, for int4, int4-g128 and int4-asym (docs/WEIGHT_QUANT.md, Decode tuning per
        // CPU).
        t.q4_avx2 = true;
        // Batch-1 grabs of half the panels left, not a quarter: 8 grabs per 1B-shaped matmul call
        // instead of 17 (fewer restarts of each thread's weight stream), at a small cost in how
        // evenly threads finish. int4-g32 decoded faster this way in bench_tuning_ab and in the
        // engine, with identical text; a sixth drew less than a quarter. Not measured on Zen 4,
        // which keeps 2.
        t.grab_div = 1;
        t.source = "amd";
        return t;
    }
    return DecodeTuning{};
}

DecodeTuning vendor_decode_tuning() {
    return decode_tuning_table(cpu_vendor(), cpu_family());
}

bool parse_decode_tuning(const char* spec, const DecodeTuning& base, DecodeTuning& out) {
    DecodeTuning t = base;
    t.source = "env";
    std::string_view rest(spec);
    for (bool more = true; more;) {  // comma-separated key=value items, none empty
        const size_t comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        more = comma != std::string_view::npos;
        if (more) rest = rest.substr(comma + 1);
        const size_t eq = item.find('=');
        if (eq == std::string_view::npos) return false;
        const std::string_view key = item.substr(0, eq);
        const std::string value(item.substr(eq + 1));
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno != 0) return false;
        if (key == "panels" && (v == 1 || v == 2)) {
            t.panels = static_cast<int>(v);
        } else if (key == "q4") {
            t.q4_prefetch = v;
        } else if (key == "q8") {
            t.q8_prefetch = v;
        } else if (key == "fp8") {
            t.fp8_prefetch = v;
        } else if (key == "half" && (v == 0 || v == 1)) {
            t.half_loads = v == 1;
        } else if (key == "q4avx2" && (v == 0 || v == 1)) {
            t.q4_avx2 = v == 1;
        } else if (key == "q4avx2pf") {
            t.q4_avx2_prefetch = v;
        } else if (key == "grabdiv" && v >= 1 && v <= 8) {
            t.grab_div = static_cast<int>(v);
        } else {
            return false;
        }
    }
    if (!valid(t)) return false;
    out = t;
    return true;
}

const DecodeTuning& decode_tuning() {
    return slot();
}

bool set_decode_tuning(const DecodeTuning& t) {
    if (!valid(t)) return false;
    slot() = t;
    return true;
}

std::string decode_tuning_summary() {
    const DecodeTuning& t = decode_tuning();
    return "panels=" + std::to_string(t.panels) + " q4=" + std::to_string(t.q4_prefetch) +
           " q8=" + std::to_string(t.q8_prefetch) + " fp8=" + std::to_string(t.fp8_prefetch) +
           " half=" + std::to_string(t.half_loads ? 1 : 0) +
           " q4avx2=" + std::to_string(t.q4_avx2 ? 1 : 0) +
           " q4avx2pf=" + std::to_string(t.q4_avx2_prefetch) +
           " grabdiv=" + std::to_string(t.grab_div) + " (" + t.source + ")";
}

}  // namespace warden::kernels
