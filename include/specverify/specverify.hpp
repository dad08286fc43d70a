// specverify: speculative-decoding verification rules on one generic verify-and-resample core.
// Umbrella header for the host: layout types, rules, randomness, CPU verify, drafting controllers.
// The learned heads (Eigen) are in <specverify/heads.hpp>.
#pragma once

#include "specverify/controllers.hpp"
#include "specverify/cpu/verify.hpp"
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
#include "specverify/sample.hpp"
#include "specverify/sampling.hpp"
#include "specverify/tree_conversions.hpp"
#include "specverify/types.hpp"
