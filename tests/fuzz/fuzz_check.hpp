// What the fuzz targets share: CHECK, which aborts (a libFuzzer finding) naming the source line of
// a broken invariant, two values and, where a target says how, the case at hand; and the float
// edges their palettes draw from.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <limits>

namespace fuzz {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kBelowOne = 0x1.fffffep-1f;  // the largest float below 1

/// Prints the input at hand before a broken invariant aborts (a target's own; none by default).
inline void (*describe_case)() = nullptr;

inline void check_at(const char* file, int line, bool ok, long long a = 0, long long b = 0) {
  if (ok) return;
  std::fprintf(stderr, "%s:%d: invariant broken (%lld, %lld)\n", file, line, a, b);
  if (describe_case) describe_case();
  std::abort();
}

}  // namespace fuzz

#define CHECK(...) ::fuzz::check_at(__FILE__, __LINE__, __VA_ARGS__)
