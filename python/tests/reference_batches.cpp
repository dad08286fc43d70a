// The C++ side of python/tests/test_against_cpp_batches.py: one rule on a chain, tree, logits-chain
// or logits-tree batch read from raw files, with every optional field the files give, writing
// tokens, accepted counts, accepted nodes (trees), logprobs and statistics; or sample() on B rows.
//
//   reference_batches DIR    reads DIR/spec.txt and the arrays beside it, writes DIR/out_*
//
// spec.txt: "KIND B V row_width seed offset drafted" (KIND: chain | tree | logits_chain |
// logits_tree | sample; drafted: 0 sampled, 1 without replacement, 2 deterministic), then the
// rule's words (reference_rules.hpp; none for sample). Arrays, native-endian and contiguous, each
// optional unless marked: offsets.i32 [B+1] (required), tokens.i32 [N] (required), parents.i32 [N]
// (trees), target.f32 [rows][V] (required), draft.f32 [rows][Vd], seeds.u64 [B], positions.i64 [B],
// scores.f32 [N], accept.f32 [N]; logits only: tparams.sp [B] (required), dparams.sp [B],
// d2t.i32 [Vd], uncond.f32 [U][V], first_row.i64 [B], gscale.f32 [B], allowed.u32 [N+B][words],
// hoffsets.i32 [B+1] with htokens.i32 and hcounts.i32 (history), boffsets.i32 [B+1] with
// btokens.i32 and bvalues.f32 (logit bias).
// sample: row b of target.f32 [B][V] drawn with tparams[b], seeds[b], positions[b] and sequence
// b's lists; writes out_tokens.i32 [B].
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <specverify/specverify.hpp>

#include "reference_rules.hpp"

namespace {

namespace sv = specverify;

/// The whole file (empty when it does not exist).
template <class T>
std::vector<T> read(const std::string& path) {
  if (!std::filesystem::exists(path)) return {};
  std::vector<T> v(std::filesystem::file_size(path) / sizeof(T));
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)))) {
    throw std::runtime_error("cannot read " + path);
  }
  return v;
}

template <class T>
const T* data_or_null(const std::vector<T>& v) {
  return v.empty() ? nullptr : v.data();
}

template <class T>
void write(const std::string& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

struct Files {
  explicit Files(const std::string& dir)
      : offsets(read<std::int32_t>(dir + "offsets.i32")),
        tokens(read<std::int32_t>(dir + "tokens.i32")),
        parents(read<std::int32_t>(dir + "parents.i32")),
        d2t(read<std::int32_t>(dir + "d2t.i32")),
        target(read<float>(dir + "target.f32")),
        draft(read<float>(dir + "draft.f32")),
        uncond(read<float>(dir + "uncond.f32")),
        gscale(read<float>(dir + "gscale.f32")),
        scores(read<float>(dir + "scores.f32")),
        accept(read<float>(dir + "accept.f32")),
        seeds(read<std::uint64_t>(dir + "seeds.u64")),
        positions(read<std::int64_t>(dir + "positions.i64")),
        first_row(read<std::int64_t>(dir + "first_row.i64")),
        allowed(read<std::uint32_t>(dir + "allowed.u32")),
        tparams(read<sv::SamplingParams>(dir + "tparams.sp")),
        dparams(read<sv::SamplingParams>(dir + "dparams.sp")),
        hoffsets(read<std::int32_t>(dir + "hoffsets.i32")),
        htokens(read<std::int32_t>(dir + "htokens.i32")),
        hcounts(read<std::int32_t>(dir + "hcounts.i32")),
        boffsets(read<std::int32_t>(dir + "boffsets.i32")),
        btokens(read<std::int32_t>(dir + "btokens.i32")),
        bvalues(read<float>(dir + "bvalues.f32")) {}
  std::vector<std::int32_t> offsets, tokens, parents, d2t;
  std::vector<float> target, draft, uncond, gscale, scores, accept;
  std::vector<std::uint64_t> seeds;
  std::vector<std::int64_t> positions, first_row;
  std::vector<std::uint32_t> allowed;
  std::vector<sv::SamplingParams> tparams, dparams;
  std::vector<std::int32_t> hoffsets, htokens, hcounts, boffsets, btokens;
  std::vector<float> bvalues;
};

/// The logits fields every logits batch shares.
template <class Batch>
void logits_fields(Batch& batch, const Files& f) {
  batch.target_logits = f.target.data();
  batch.draft_logits = data_or_null(f.draft);
  batch.target_params = data_or_null(f.tparams);
  batch.draft_params = data_or_null(f.dparams);
  batch.draft_vocab_size = static_cast<std::int32_t>(f.d2t.size());
  batch.draft_to_target = data_or_null(f.d2t);
  batch.unconditional_logits = data_or_null(f.uncond);
  batch.unconditional_first_row = data_or_null(f.first_row);
  batch.guidance_scale = data_or_null(f.gscale);
  batch.allowed_tokens = data_or_null(f.allowed);
  batch.history_offsets = data_or_null(f.hoffsets);
  batch.history_tokens = data_or_null(f.htokens);
  batch.history_counts = data_or_null(f.hcounts);
  batch.bias_offsets = data_or_null(f.boffsets);
  batch.bias_tokens = data_or_null(f.btokens);
  batch.bias_values = data_or_null(f.bvalues);
}

/// Sequence b's entries of a list: its first and how many (none where the list is absent).
std::pair<std::int32_t, std::int32_t> list_slice(const std::vector<std::int32_t>& offsets, std::int32_t b) {
  if (offsets.empty()) return {0, 0};
  return {offsets[b], offsets[b + 1] - offsets[b]};
}

/// sample() on each of the B rows, with its sequence's parameters, seed, position and lists.
std::vector<std::int32_t> sample_rows(std::int32_t B, std::int32_t V, const Files& f) {
  std::vector<std::int32_t> tokens(B);
  for (std::int32_t b = 0; b < B; ++b) {
    const auto [h, history_size] = list_slice(f.hoffsets, b);
    const auto [o, bias_size] = list_slice(f.boffsets, b);
    tokens[b] = sv::sample(f.target.data() + std::size_t(b) * V, V, f.tparams[b], f.seeds[b], f.positions[b],
                           data_or_null(f.htokens) + h, data_or_null(f.hcounts) + h, history_size,
                           data_or_null(f.btokens) + o, data_or_null(f.bvalues) + o, bias_size);
  }
  return tokens;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: reference_batches DIR\n";
    return 2;
  }
  const std::string dir = std::string(argv[1]) + "/";
  try {
    std::ifstream spec(dir + "spec.txt");
    std::string kind;
    std::int32_t B = 0, V = 0, width = 0, drafted = 0;
    std::uint64_t seed = 0, offset = 0;
    spec >> kind >> B >> V >> width >> seed >> offset >> drafted;
    if (!spec) throw std::runtime_error("bad spec.txt");
    if (kind == "sample") {
      write(dir + "out_tokens.i32", sample_rows(B, V, Files(dir)));
      return 0;
    }
    std::string rule_line;
    std::getline(spec >> std::ws, rule_line);
    std::istringstream words(rule_line);
    const Files f(dir);

    sv::Randomness randomness;
    randomness.seed = seed;
    randomness.offset = offset;
    randomness.sequence_seeds = data_or_null(f.seeds);
    randomness.positions = data_or_null(f.positions);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(B) * width), accepted(B), nodes(tokens.size());
    std::vector<float> logprobs(tokens.size());
    const reference::RuleInputs inputs{data_or_null(f.scores), data_or_null(f.accept)};
    sv::VerifyStats s;
    const bool chain = kind == "chain" || kind == "logits_chain";
    if (chain) {
      const sv::ChainOutput out{tokens.data(), width, accepted.data(), logprobs.data()};
      reference::with_rule<true>(words, inputs, [&](const auto& rule) {
        if (kind == "chain") {
          const sv::ChainBatch<float> batch{B, V, f.offsets.data(), data_or_null(f.tokens), f.target.data(),
                                            data_or_null(f.draft)};
          s = sv::verify(rule, batch, randomness, out);
        } else {
          sv::LogitsChainBatch<float> batch{B, V, f.offsets.data(), data_or_null(f.tokens)};
          logits_fields(batch, f);
          s = sv::verify(rule, batch, randomness, out);
        }
      });
    } else {
      const sv::TreeOutput out{tokens.data(), width, accepted.data(), nodes.data(), logprobs.data()};
      const auto how = static_cast<sv::Drafted>(drafted);
      reference::with_rule<false>(words, inputs, [&](const auto& rule) {
        if (kind == "tree") {
          sv::TreeBatch<float> batch{B, V, f.offsets.data(), data_or_null(f.parents), data_or_null(f.tokens),
                                     f.target.data(), data_or_null(f.draft)};
          batch.drafted = how;
          s = sv::verify(rule, batch, randomness, out);
        } else if (kind == "logits_tree") {
          sv::LogitsTreeBatch<float> batch{B, V, f.offsets.data(), data_or_null(f.parents), data_or_null(f.tokens)};
          batch.drafted = how;
          logits_fields(batch, f);
          s = sv::verify(rule, batch, randomness, out);
        } else {
          throw std::runtime_error("unknown kind " + kind);
        }
      });
    }
    std::ofstream(dir + "out_stats.txt") << s.drafted << ' ' << s.accepted << ' ' << s.relaxed << ' '
                                         << s.target_checked << '\n';
    write(dir + "out_tokens.i32", tokens);
    write(dir + "out_accepted.i32", accepted);
    write(dir + "out_logprobs.f32", logprobs);
    if (!chain) write(dir + "out_nodes.i32", nodes);
  } catch (const std::exception& e) {
    std::cerr << "reference_batches: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
