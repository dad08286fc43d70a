// The compiled library's verify() for the built-in rules over trees of probability rows (compiled.hpp).
#define SPECVERIFY_INSTANCE
#include "specverify/compiled.hpp"

namespace specverify {
SPECVERIFY_INSTANCE_TREE_RULES(SPECVERIFY_VERIFY, TreeBatch<float>, TreeOutput)
}  // namespace specverify
