// The compiled library's verify() for the built-in rules over chains and trees of float logits
// (compiled.hpp). Chains and trees of one row type share its row kernels, which one translation
// unit compiles once (docs/performance.md "Build time").
#define SPECVERIFY_INSTANCE
#include "specverify/compiled.hpp"

namespace specverify {
SPECVERIFY_INSTANCE_CHAIN_RULES(SPECVERIFY_VERIFY, LogitsChainBatch<float>, ChainOutput)
SPECVERIFY_INSTANCE_TREE_RULES(SPECVERIFY_VERIFY, LogitsTreeBatch<float>, TreeOutput)
}  // namespace specverify
