// The one verify path every batch type goes through, and the entry points that instantiate it
// (one translation unit per batch type, so the module builds in parallel).
#pragma once

#include <pybind11/pybind11.h>

#include <climits>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <specverify/specverify.hpp>

#include "batches.hpp"
#include "cuda_verify.hpp"
#include "rules.hpp"

namespace specverify::python {

/// max_threads as the C++ options take it: any Python int that fits in int32 (a negative one is
/// the C++ library's invalid_input, as in C++).
inline std::int32_t thread_cap(const py::int_& max_threads) {
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(max_threads.ptr(), &overflow);
  if (overflow != 0 || n < INT32_MIN || n > INT32_MAX) {
    reject("max_threads = ", std::string(py::repr(max_threads)), " does not fit in int32");
  }
  return static_cast<std::int32_t>(n);
}

/// Calls fn with the C++ batch: a logits batch's view holds the batch of its rows' type.
template <class View, class Fn>
decltype(auto) with_view(const View& view, Fn&& fn) {
  return fn(view);
}
template <class... Views, class Fn>
decltype(auto) with_view(const std::variant<Views...>& view, Fn&& fn) {
  return std::visit(fn, view);
}

/// A call's arguments viewed as they are now (a caller may have resized an array since its object
/// was built), outputs refused where they share memory with an input or another output, and the
/// device they are all on. Built with the GIL; the fresh views hold the arrays' exporters until
/// the call returns.
template <class PyBatch, class PyOut>
struct Fresh {
  PyBatch batch;
  PyOut out;
  PyRandomness randomness;
  CallDevice device;

  /// `more`: the call's inputs beyond the batch, randomness and rule (padded chains' counts).
  Fresh(py::handle rule, const PyBatch& batch_, const PyRandomness& randomness_, const PyOut& out_,
        const std::vector<Extent>& more = {})
      : batch(batch_.fresh()), out(out_.fresh()), randomness(randomness_.fresh()) {
    std::vector<Extent> inputs = batch.inputs();
    for (const Extent& e : randomness.inputs()) inputs.push_back(e);
    for (const Extent& e : more) inputs.push_back(e);
    add_rule_inputs(rule, inputs);
    expect_apart(out.outputs(), inputs);
    device = call_device(inputs, out.outputs());
  }

  /// For the calls that read their arrays on the host.
  void expect_host(const char* what) const {
    if (device.cuda) reject("the arrays are on CUDA device ", std::to_string(device.id), ", but ", what, " takes CPU arrays");
  }
};

/// The C++ views of the fresh arguments built with their copies of the indices (with the GIL), then
/// call(rule, batch, randomness, out, options) without the GIL (specverify::verify, or its sharded
/// form).
template <class PyBatch, class PyOut, class Call>
VerifyStats verify_on_cpu(py::handle rule, Fresh<PyBatch, PyOut>& now, std::int32_t threads, const Call& call) {
  PyBatch& batch_now = now.batch;
  const auto batch_view = batch_now.view();
  const auto out_view = now.out.view(batch_now.batch_size);
  const Randomness random_view = now.randomness.view(batch_now.batch_size, batch_now.drafts());
  return with_rule<PyBatch::kShape>(rule, batch_now.drafts(), [&](const auto& cpp_rule) {
    py::gil_scoped_release release;
    return with_view(batch_view, [&](const auto& rows) {
      return call(cpp_rule, rows, random_view, out_view, CpuOptions{threads});
    });
  });
}

/// torch, where it is imported and `tensor` is a torch.Tensor; else None.
inline py::object torch_of(py::handle tensor) {
  const py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("torch")) return py::none();
  py::object torch = modules["torch"];
  return py::isinstance(tensor, torch.attr("Tensor")) ? torch : py::none();
}

/// The cudaStream_t a CUDA call runs on: `stream` (an int, or an object with .cuda_stream such as
/// torch.cuda.Stream), else PyTorch's current stream on `device` where `tensor` is a torch tensor,
/// else 0 (the legacy default stream). A given stream other than PyTorch's current one first waits
/// for the work enqueued on that one, which produced the tensors, as DLPack's
/// __dlpack__(stream=...) orders an exchange.
inline std::uintptr_t stream_of(const py::object& stream, py::handle tensor, int device) {
  const py::object torch = torch_of(tensor);
  const auto current = [&] { return torch.attr("cuda").attr("current_stream")(device); };
  py::object handle = stream;
  if (handle.is_none()) {
    if (torch.is_none()) return 0;
    handle = current();
  }
  if (py::hasattr(handle, "cuda_stream")) handle = handle.attr("cuda_stream");
  if (!py::isinstance<py::int_>(handle)) {
    throw py::type_error("specverify: stream must be an int (a cudaStream_t), an object with .cuda_stream or None, "
                         "got " + std::string(py::str(py::type::handle_of(handle).attr("__name__"))));
  }
  const auto chosen = handle.cast<std::uintptr_t>();
  if (!torch.is_none() && !stream.is_none()) {
    const py::object producer = current();
    if (producer.attr("cuda_stream").cast<std::uintptr_t>() != chosen) {
      const py::object event = torch.attr("cuda").attr("Event")();
      event.attr("record")(producer);
      torch.attr("cuda").attr("ExternalStream")(chosen, py::arg("device") = device).attr("wait_event")(event);
    }
  }
  return chosen;
}

/// The CUDA half of verify_batch (cuda_verify.hpp): the C++ views point at the arrays on the
/// device (nothing is copied to the host; the sampling parameters are copied to the device), the
/// bounds the CPU path checks on its copies are checked on the device, and `out` keeps the verify
/// until sv.check where it does not synchronise. `num_draft_tokens` (device int32 [B], chains
/// only): padded chains (core/padded_chain.hpp).
template <class PyBatch, class PyOut>
py::object verify_on_cuda(py::handle rule, Fresh<PyBatch, PyOut>& now, PyOut& out, const py::object& stream,
                          bool synchronize, const std::int32_t* num_draft_tokens = nullptr) {
  using Variant = std::conditional_t<PyBatch::kShape == Shape::chain, CudaChainRule, CudaTreeRule>;
  constexpr bool kLogits = std::is_same_v<PyBatch, PyLogitsChainBatch> || std::is_same_v<PyBatch, PyLogitsTreeBatch>;
  if (!now.batch.shard.whole()) reject("a sharded batch takes verify(..., all_gather=fn) and CPU arrays");
  const CudaCall call{now.device.id, stream_of(stream, now.batch.target_rows().source, now.device.id), synchronize};
  const auto batch_view = now.batch.device_view();
  const auto out_view = now.out.view(now.batch.batch_size);
  const Randomness random_view = now.randomness.view(now.batch.batch_size, now.batch.drafts());
  DeviceBounds bounds{OffsetsTotal{now.batch.offsets.offsets_name, now.batch.drafts()}};
  if constexpr (kLogits) now.batch.fields.add_bounds(bounds);
  out.pending.reset();  // an earlier, unchecked verify into `out` is reported no more
  const CudaResult result = with_rule<PyBatch::kShape>(rule, now.batch.drafts(), [&](const auto& cpp_rule) -> CudaResult {
    // Every rule of the shape is one of Variant's: a rule CUDA lacked would not compile here.
    py::gil_scoped_release release;
    if constexpr (PyBatch::kShape == Shape::chain) {
      return cuda_verify(Variant{cpp_rule}, batch_view, random_view, out_view, bounds, call, num_draft_tokens);
    } else {
      return cuda_verify(Variant{cpp_rule}, batch_view, random_view, out_view, bounds, call);
    }
  });
  out.pending = result.pending;
  if (result.pending) return py::none();
  return py::cast(result.stats);
}

/// verify() for any batch kind, on the CPU or, where the arrays are on a CUDA device, on it.
/// Returns VerifyStats, or None where a CUDA call did not synchronise.
template <class PyBatch, class PyOut>
py::object verify_batch(py::handle rule, const PyBatch& batch, const PyRandomness& randomness, PyOut& out,
                        const py::int_& max_threads, const py::object& stream, bool synchronize) {
  const std::int32_t threads = thread_cap(max_threads);
  Fresh<PyBatch, PyOut> now(rule, batch, randomness, out);
  if (now.device.cuda) return verify_on_cuda(rule, now, out, stream, synchronize);
  if (!stream.is_none()) reject("stream is for arrays on a CUDA device; these are on the CPU");
  out.pending.reset();
  return py::cast(verify_on_cpu(rule, now, threads, [](const auto&... args) { return specverify::verify(args...); }));
}

py::object verify_chains(py::handle rule, const PyChainBatch& batch, const PyRandomness& randomness,
                         PyChainOutput& out, const py::int_& max_threads, const py::object& stream, bool synchronize);
py::object verify_logits_chains(py::handle rule, const PyLogitsChainBatch& batch, const PyRandomness& randomness,
                                PyChainOutput& out, const py::int_& max_threads, const py::object& stream,
                                bool synchronize);
py::object verify_trees(py::handle rule, const PyTreeBatch& batch, const PyRandomness& randomness,
                        PyTreeOutput& out, const py::int_& max_threads, const py::object& stream, bool synchronize);
py::object verify_logits_trees(py::handle rule, const PyLogitsTreeBatch& batch, const PyRandomness& randomness,
                               PyTreeOutput& out, const py::int_& max_threads, const py::object& stream,
                               bool synchronize);

/// verify(..., all_gather=fn): this rank's slice of a sharded ChainBatch, the ranks gathered by fn.
VerifyStats verify_chains_sharded(py::handle rule, const PyChainBatch& batch, const PyRandomness& randomness,
                                  const PyChainOutput& out, const py::function& all_gather,
                                  const py::int_& max_threads);
/// verify(..., all_gather=fn) over a sharded LogitsChainBatch.
VerifyStats verify_logits_chains_sharded(py::handle rule, const PyLogitsChainBatch& batch,
                                         const PyRandomness& randomness, const PyChainOutput& out,
                                         const py::function& all_gather, const py::int_& max_threads);
/// verify(..., all_gather=fn) over a sharded TreeBatch.
VerifyStats verify_trees_sharded(py::handle rule, const PyTreeBatch& batch, const PyRandomness& randomness,
                                 const PyTreeOutput& out, const py::function& all_gather,
                                 const py::int_& max_threads);
/// verify(..., all_gather=fn) over a sharded LogitsTreeBatch.
VerifyStats verify_logits_trees_sharded(py::handle rule, const PyLogitsTreeBatch& batch,
                                        const PyRandomness& randomness, const PyTreeOutput& out,
                                        const py::function& all_gather, const py::int_& max_threads);

/// Binds _verify_padded and _accept_uniforms, the C++ half of specverify.padded.
void bind_padded(py::module_& m);

}  // namespace specverify::python
