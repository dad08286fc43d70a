// The learned heads (needs Eigen): SPRINTER's verifier, SpecDec++'s acceptance head, their
// safetensors loading and saving, and training. Feed their outputs to the drafting controllers of
// <specverify/controllers.hpp> or to the Sprinter / SpecDecPP rules.
#pragma once

#include "specverify/heads/acceptance_head.hpp"
#include "specverify/heads/linear_verifier.hpp"
#include "specverify/heads/safetensors.hpp"
#include "specverify/heads/training.hpp"
