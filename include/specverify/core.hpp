// specverify's backend-free layer (CMake target specverify::core, no dependency): the layout and
// output types, the rules, randomness (Philox), sampling parameters, 16-bit row types, tree
// conversions and the drafting controllers. The backends' umbrellas include it:
// <specverify/specverify.hpp> adds the CPU verify (xsimd), <specverify/cuda.cuh> the CUDA one.
// A backend of one's own walks drafts with core/walk.hpp over this layer alone.
#pragma once

#include "specverify/controllers.hpp"
#include "specverify/dtypes.hpp"
#include "specverify/philox.hpp"
#include "specverify/rule.hpp"
#include "specverify/rules/block.hpp"
#include "specverify/rules/coupled.hpp"
#include "specverify/rules/ears.hpp"
#include "specverify/rules/fsd.hpp"
#include "specverify/rules/specdecpp.hpp"
#include "specverify/rules/sprinter.hpp"
#include "specverify/rules/standard.hpp"
#include "specverify/rules/traversal.hpp"
#include "specverify/sampling.hpp"
#include "specverify/tree_conversions.hpp"
#include "specverify/types.hpp"
