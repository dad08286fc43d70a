// What the compiled library holds (CMake target specverify::compiled; the C API's library holds
// the same): verify() for the built-in rules over every built-in batch kind on the CPU, unsharded
// and sharded. A translation unit that links the target gets SPECVERIFY_COMPILED, and with it these
// instantiations declared `extern`: it calls the library's instead of compiling its own. The bits
// are the same either way; a rule of the caller's own is instantiated where it is used, as before.
// The library is compiled for one instruction set (its build's flags): link it into code built
// for the same one.
#pragma once

#include "specverify/core.hpp"
#include "specverify/cpu/sharded_verify.hpp"
#include "specverify/cpu/verify.hpp"

/// The built-in rules with a tree form, and those with a chain form only (SpecDecPP decides where
/// a chain stops, around any rule with a per-draft test; Block decides a chain jointly). A new
/// built-in rule is one entry here.
#define SPECVERIFY_TREE_RULES(X, ...)                                                                   \
  X(Standard, __VA_ARGS__) X(Greedy, __VA_ARGS__) X(Ears, __VA_ARGS__) X(Fsd, __VA_ARGS__)             \
  X(ReducibleFsd, __VA_ARGS__) X(Sprinter, __VA_ARGS__) X(Coupled, __VA_ARGS__) X(Traversal, __VA_ARGS__)
#define SPECVERIFY_CHAIN_RULES(X, ...)                                                                  \
  SPECVERIFY_TREE_RULES(X, __VA_ARGS__)                                                                 \
  X(Block, __VA_ARGS__) X(SpecDecPP<Standard>, __VA_ARGS__) X(SpecDecPP<Greedy>, __VA_ARGS__)         \
  X(SpecDecPP<Ears>, __VA_ARGS__) X(SpecDecPP<Fsd>, __VA_ARGS__) X(SpecDecPP<ReducibleFsd>, __VA_ARGS__) \
  X(SpecDecPP<Sprinter>, __VA_ARGS__) X(SpecDecPP<Coupled>, __VA_ARGS__)

/// The rules the C API names (specverify.h's sv_rule_kind): the C libraries' copies for the other
/// instruction sets hold these alone (SPECVERIFY_C_RULES_ONLY, src/CMakeLists.txt).
#define SPECVERIFY_C_TREE_RULES(X, ...)                                                                 \
  X(Standard, __VA_ARGS__) X(Greedy, __VA_ARGS__) X(Ears, __VA_ARGS__) X(Fsd, __VA_ARGS__)             \
  X(ReducibleFsd, __VA_ARGS__) X(Coupled, __VA_ARGS__) X(Traversal, __VA_ARGS__)
#define SPECVERIFY_C_CHAIN_RULES(X, ...) SPECVERIFY_C_TREE_RULES(X, __VA_ARGS__) X(Block, __VA_ARGS__)

/// The lists the library's translation units (src/compiled/) expand.
#ifdef SPECVERIFY_C_RULES_ONLY
#define SPECVERIFY_INSTANCE_TREE_RULES SPECVERIFY_C_TREE_RULES
#define SPECVERIFY_INSTANCE_CHAIN_RULES SPECVERIFY_C_CHAIN_RULES
#else
#define SPECVERIFY_INSTANCE_TREE_RULES SPECVERIFY_TREE_RULES
#define SPECVERIFY_INSTANCE_CHAIN_RULES SPECVERIFY_CHAIN_RULES
#endif

/// One rule over one batch kind: the unsharded verify and the sharded one. `extern` for the
/// library's users (SPECVERIFY_INSTANCE below); the library's own translation units define
/// SPECVERIFY_INSTANCE empty and expand the lists for the kinds each holds.
#define SPECVERIFY_VERIFY(Rule, Batch, Output)                                                          \
  SPECVERIFY_INSTANCE template VerifyStats verify<Rule>(const Rule&, const Batch&, const Randomness&,   \
                                                        const Output&, const CpuOptions&);              \
  SPECVERIFY_INSTANCE template VerifyStats cpu::shard::verify_sharded<Rule>(                           \
      const Rule&, const Batch&, const Randomness&, const Output&, const CommunicatorRef&, const CpuOptions&);

/// Every batch kind: the rules a kind takes, the kind, its output.
#define SPECVERIFY_ALL_KINDS(X)                                                                        \
  SPECVERIFY_CHAIN_RULES(X, ChainBatch<float>, ChainOutput)                                           \
  SPECVERIFY_CHAIN_RULES(X, LogitsChainBatch<float>, ChainOutput)                                     \
  SPECVERIFY_CHAIN_RULES(X, LogitsChainBatch<float16>, ChainOutput)                                   \
  SPECVERIFY_CHAIN_RULES(X, LogitsChainBatch<bfloat16>, ChainOutput)                                  \
  SPECVERIFY_TREE_RULES(X, TreeBatch<float>, TreeOutput)                                              \
  SPECVERIFY_TREE_RULES(X, LogitsTreeBatch<float>, TreeOutput)                                        \
  SPECVERIFY_TREE_RULES(X, LogitsTreeBatch<float16>, TreeOutput)                                      \
  SPECVERIFY_TREE_RULES(X, LogitsTreeBatch<bfloat16>, TreeOutput)

#if defined(SPECVERIFY_COMPILED) && !defined(SPECVERIFY_INSTANCE)
#define SPECVERIFY_INSTANCE extern
namespace specverify {
SPECVERIFY_ALL_KINDS(SPECVERIFY_VERIFY)
}  // namespace specverify
#undef SPECVERIFY_INSTANCE
#endif
