// operator new/delete over malloc/free, counting bytes while heap::counting is set. A separate
// translation unit, so no call site sees the replacement inlined (g++ would warn that free()
// releases memory from operator new, which is what the replacement means).
#include "heap_counter.hpp"

#include <cstdlib>
#include <new>

namespace specverify::testing::heap {
std::atomic<bool> counting{false};
std::atomic<std::int64_t> bytes{0};
}  // namespace specverify::testing::heap

void* operator new(std::size_t n) {
  namespace heap = specverify::testing::heap;
  if (heap::counting.load(std::memory_order_relaxed)) heap::bytes += static_cast<std::int64_t>(n);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// Arrays too: ASan's runtime answers operator new[] itself rather than through operator new.
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
