// Inlining the CPU kernels ask for whatever the caller's optimisation level. Engines often build
// with -O2 (RelWithDebInfo) or lower, where compilers stop inlining the layers of small xsimd
// functions a vector operation goes through and pass vectors through memory instead.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
/// A helper called from a loop body: inlined at every optimisation level.
#define SPECVERIFY_ALWAYS_INLINE [[gnu::always_inline]] inline
/// A kernel: everything it calls (xsimd's operators included) is inlined into it.
#define SPECVERIFY_FLATTEN [[gnu::flatten]]
/// A lambda that runs once per vector (the weight functions handed to the draw): inlined, or
/// each call passes its vector through memory.
#define SPECVERIFY_LAMBDA_INLINE __attribute__((always_inline))
#else
#define SPECVERIFY_ALWAYS_INLINE inline
#define SPECVERIFY_FLATTEN
#define SPECVERIFY_LAMBDA_INLINE
#endif
