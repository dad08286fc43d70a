// The compiled library's verify() for the built-in rules over chains of bfloat16 logits (compiled.hpp).
#define SPECVERIFY_INSTANCE
#include "specverify/compiled.hpp"

namespace specverify {
SPECVERIFY_INSTANCE_CHAIN_RULES(SPECVERIFY_VERIFY, LogitsChainBatch<bfloat16>, ChainOutput)
}  // namespace specverify
