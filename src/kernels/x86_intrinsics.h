#pragma once
// <immintrin.h> for the files that call x86 SIMD intrinsics, with GCC 12's false
// -Wmaybe-uninitialized / -Wuninitialized inside avx512fintrin.h (intrinsics built on
// _mm512_undefined_*, GCC bug 105593) silenced. The diagnostic points into the system header, so
// it can only be silenced for the whole including file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#endif
