// The compiled library's verify() for the built-in rules over chains of probability rows (compiled.hpp).
#define SPECVERIFY_INSTANCE
#include "specverify/compiled.hpp"

namespace specverify {
SPECVERIFY_INSTANCE_CHAIN_RULES(SPECVERIFY_VERIFY, ChainBatch<float>, ChainOutput)
}  // namespace specverify
