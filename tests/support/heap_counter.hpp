// Counts what the replaceable operator new hands out (heap_counter.cpp replaces it for the binary
// that links it): a test sets counting, calls the code under test, reads bytes.
#pragma once

#include <atomic>
#include <cstdint>

namespace specverify::testing::heap {
extern std::atomic<bool> counting;
extern std::atomic<std::int64_t> bytes;
}  // namespace specverify::testing::heap
