// An engine's translation unit for tools/compile_time/run.sh: one step of each kind an engine
// calls (bfloat16 logits chains with sampling parameters, probability trees, a sharded chain of
// float logits), compiled header-only and against specverify::compiled.
#include <cstdint>
#include <vector>

#include <specverify/specverify.hpp>
#include <specverify/thread_communicator.hpp>

int main() {
  constexpr std::int32_t V = 64;
  const std::int32_t offsets[2] = {0, 2};
  const std::int32_t drafts[2] = {3, 5};
  std::vector<specverify::bfloat16> logits(3 * V, specverify::bfloat16{0x3f80});
  std::vector<float> p(3 * V, 1.0f / V);
  specverify::SamplingParams params;
  params.temperature = 0.7f;
  params.top_p = 0.9f;
  std::int32_t tokens[3], accepted[1], nodes[3];

  specverify::LogitsChainBatch<specverify::bfloat16> chain{1, V, offsets, drafts, logits.data()};
  chain.target_params = &params;
  const specverify::ChainOutput chain_out{tokens, 3, accepted};
  specverify::verify(specverify::Standard{}, chain, {1, 0}, chain_out);

  const std::int32_t node_offsets[2] = {0, 2}, parents[2] = {-1, 0};
  specverify::TreeBatch<float> tree{1, V, node_offsets, parents, drafts, p.data()};
  tree.drafted = specverify::Drafted::deterministic;
  specverify::verify(specverify::Standard{}, tree, {1, 0}, specverify::TreeOutput{tokens, 3, accepted, nodes});

  std::vector<float> float_logits(3 * V, 0.0f);
  specverify::LogitsChainBatch<float> sharded{1, V, offsets, drafts, float_logits.data()};
  sharded.target_params = &params;
  specverify::ThreadGroup one(1);
  specverify::verify(specverify::Standard{}, sharded, {1, 0}, chain_out, one.communicator(0));
  return accepted[0] >= 0 ? 0 : 1;
}
