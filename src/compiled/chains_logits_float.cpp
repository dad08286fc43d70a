// The compiled library's verify() for the built-in rules over chains of float logits (compiled.hpp).
#define SPECVERIFY_INSTANCE
#include "specverify/compiled.hpp"

namespace specverify {
SPECVERIFY_INSTANCE_CHAIN_RULES(SPECVERIFY_VERIFY, LogitsChainBatch<float>, ChainOutput)
}  // namespace specverify
