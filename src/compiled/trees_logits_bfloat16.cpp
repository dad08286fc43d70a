// The compiled library's verify() for the built-in rules over trees of bfloat16 logits (compiled.hpp).
#define SPECVERIFY_INSTANCE
#include "specverify/compiled.hpp"

namespace specverify {
SPECVERIFY_INSTANCE_TREE_RULES(SPECVERIFY_VERIFY, LogitsTreeBatch<bfloat16>, TreeOutput)
}  // namespace specverify
