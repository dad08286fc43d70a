// A communicator behind one pointer and one function (docs/api.md "Sharded vocabulary"): the sharded
// verify is compiled once per rule and batch kind, whatever collective the caller passes (threads,
// MPI, Python's torch.distributed, a C callback), so the compiled library can hold it. A
// collective costs far more than the indirect call.
#pragma once

#include <cstddef>
#include <type_traits>

namespace specverify {

/// Refers to a communicator (any type with `void all_gather(const void* send, std::size_t bytes,
/// void* recv) const`) that outlives it.
class CommunicatorRef {
 public:
  template <class Comm, class = std::enable_if_t<!std::is_same_v<Comm, CommunicatorRef>>,
            class = decltype(std::declval<const Comm&>().all_gather(nullptr, std::size_t{}, nullptr))>
  CommunicatorRef(const Comm& comm)  // NOLINT(google-explicit-constructor): any communicator is one
      : comm_(&comm), gather_([](const void* c, const void* send, std::size_t bytes, void* recv) {
          static_cast<const Comm*>(c)->all_gather(send, bytes, recv);
        }) {}

  /// recv receives ranks * bytes: rank r's `bytes` at offset r * bytes.
  void all_gather(const void* send, std::size_t bytes, void* recv) const { gather_(comm_, send, bytes, recv); }

 private:
  const void* comm_;
  void (*gather_)(const void* comm, const void* send, std::size_t bytes, void* recv);
};

}  // namespace specverify
