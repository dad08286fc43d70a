// Zero-copy views of the caller's arrays: NumPy (and anything else with the buffer protocol) or
// PyTorch tensors on the CPU or a CUDA device (and anything else with DLPack). Every check names
// the argument; nothing is ever copied or converted, so a wrong dtype, shape or layout is an
// error, and so are arrays of one call on different devices (call_device).
#pragma once

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <specverify/sampling.hpp>
#include <specverify/types.hpp>

namespace specverify::python {

namespace py = pybind11;

/// Element types the C++ structs point to. Seeds also take int64 (PyTorch has no uint64) and
/// bitmask words int32 (xgrammar's torch.int32 bitmasks): the same bits, reinterpreted in place.
/// Sampling parameters are NumPy structured arrays of SamplingParams' layout. Logits rows take
/// `logits`: any of float32, float16 and bfloat16 (the C++ logits batches' row types), the one
/// found recorded in Array::elem. uint8: the bytes an all_gather returns.
enum class Elem { int32, int64, float32, float16, bfloat16, logits, seed64, bits32, sampling_params, uint8 };

inline const char* elem_name(Elem elem) {
  switch (elem) {
    case Elem::int32: return "int32";
    case Elem::int64: return "int64";
    case Elem::float32: return "float32";
    case Elem::float16: return "float16";
    case Elem::bfloat16: return "bfloat16";
    case Elem::logits: return "float32, float16 or bfloat16";
    case Elem::seed64: return "uint64 (or int64)";
    case Elem::bits32: return "uint32 (or int32)";
    case Elem::sampling_params: return "SamplingParams (a NumPy array of sv.SamplingParams.dtype)";
    case Elem::uint8: return "uint8";
  }
  return "?";
}

inline std::size_t elem_bytes(Elem elem) {
  switch (elem) {
    case Elem::int64:
    case Elem::seed64: return 8;
    case Elem::sampling_params: return sizeof(SamplingParams);
    case Elem::float16:
    case Elem::bfloat16: return 2;
    case Elem::uint8: return 1;
    default: return 4;
  }
}

/// Alignment the C++ pointer needs (SamplingParams: that of its 4-byte fields).
inline std::size_t elem_alignment(Elem elem) {
  return elem == Elem::sampling_params ? alignof(SamplingParams) : elem_bytes(elem);
}

/// Bad shape, layout or device: sv.InvalidInput, a ValueError, like the C++ library's messages.
template <class... Parts>
[[noreturn]] void reject(const Parts&... parts) {
  std::string message = "specverify: ";
  ((message += parts), ...);
  throw invalid_input(message);
}

/// A caller's array, viewed in place. Holds the exporter (the Py_buffer or the DLPack tensor)
/// until the object holding this view dies, so the memory outlives every call that reads it.
struct Array {
  void* data = nullptr;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;  // in elements
  Elem elem = Elem::float32;          // what it holds (one of Elem::logits' types for rows)
  DLDevice device{kDLCPU, 0};         // kDLCPU, or kDLCUDA and the device's ordinal
  std::shared_ptr<void> exporter;
  py::object source;                  // what the caller passed, for attribute access

  bool present() const { return static_cast<bool>(exporter); }
  std::int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  template <class T> T* as() const { return static_cast<T*>(data); }
  /// The row stride as the C++ structs take it: 0 (= row length) where there is no second row.
  std::int64_t row_stride() const { return shape[0] > 1 ? strides[0] : 0; }
};

namespace detail {

inline std::string describe_shape(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

/// Whether a buffer-protocol format string is `elem` (native or little-endian byte order).
inline bool format_is(const char* format, Py_ssize_t itemsize, Elem elem) {
  std::string f = format ? format : "B";
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.erase(0, 1);
  if (f.size() != 1) return false;
  const char c = f[0];
  switch (elem) {
    case Elem::int32: return itemsize == 4 && (c == 'i' || c == 'l');
    case Elem::float32: return itemsize == 4 && c == 'f';
    case Elem::float16: return itemsize == 2 && c == 'e';
    case Elem::bfloat16: return false;  // no buffer-protocol format: torch.bfloat16 comes through DLPack
    case Elem::logits:
      return format_is(format, itemsize, Elem::float32) || format_is(format, itemsize, Elem::float16);
    case Elem::int64: return itemsize == 8 && (c == 'l' || c == 'q');
    case Elem::seed64: return itemsize == 8 && (c == 'L' || c == 'Q' || c == 'l' || c == 'q');
    case Elem::bits32: return itemsize == 4 && (c == 'I' || c == 'L' || c == 'i' || c == 'l');
    case Elem::sampling_params: return false;  // a struct: its NumPy dtype is checked instead
    case Elem::uint8: return itemsize == 1 && c == 'B';
  }
  return false;
}

inline bool dtype_is(const DLDataType& t, Elem elem) {
  if (t.lanes != 1) return false;
  switch (elem) {
    case Elem::int32: return t.code == kDLInt && t.bits == 32;
    case Elem::float32: return t.code == kDLFloat && t.bits == 32;
    case Elem::float16: return t.code == kDLFloat && t.bits == 16;
    case Elem::bfloat16: return t.code == kDLBfloat && t.bits == 16;
    case Elem::logits:
      return dtype_is(t, Elem::float32) || dtype_is(t, Elem::float16) || dtype_is(t, Elem::bfloat16);
    case Elem::int64: return t.code == kDLInt && t.bits == 64;
    case Elem::seed64: return (t.code == kDLUInt || t.code == kDLInt) && t.bits == 64;
    case Elem::bits32: return (t.code == kDLUInt || t.code == kDLInt) && t.bits == 32;
    case Elem::sampling_params: return false;  // DLPack has no structs
    case Elem::uint8: return t.code == kDLUInt && t.bits == 8;
  }
  return false;
}

/// A Python error as one line, "Type: first line of its message" (what() adds the traceback).
inline std::string one_line(const py::error_already_set& error) {
  std::string text = py::str(error.value());
  text = text.substr(0, text.find('\n'));
  return std::string(py::str(error.type().attr("__name__"))) + (text.empty() ? "" : ": " + text);
}

/// Whether a tensor-like object says `flag()` (torch's is_neg, is_conj, requires_grad attribute).
inline bool says(py::handle obj, const char* flag, bool call) {
  if (!py::hasattr(obj, flag)) return false;
  const py::object value = call ? obj.attr(flag)() : obj.attr(flag);
  return value.ptr() == Py_True;
}

inline std::string dtype_of(py::handle obj, const std::string& fallback) {
  if (py::hasattr(obj, "dtype")) return py::str(obj.attr("dtype"));
  return fallback;
}

[[noreturn]] inline void wrong_dtype(const char* name, Elem elem, const std::string& got) {
  throw py::type_error(std::string("specverify: ") + name + " must hold " + elem_name(elem) +
                       ", got " + got + " (arrays are never converted or copied)");
}

inline Array from_buffer(py::handle obj, const char* name, Elem elem, bool writable) {
  auto view = std::shared_ptr<Py_buffer>(new Py_buffer{}, [](Py_buffer* b) {
    PyBuffer_Release(b);
    delete b;
  });
  if (PyObject_GetBuffer(obj.ptr(), view.get(), PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
    const py::error_already_set error;
    reject(name, ": its buffer cannot be read in place with strides (", one_line(error), ")");
  }
  const bool struct_checked = elem == Elem::sampling_params && view->itemsize == sizeof(SamplingParams);
  if (!struct_checked && !format_is(view->format, view->itemsize, elem)) {
    wrong_dtype(name, elem, dtype_of(obj, std::string("buffer format '") +
                                              (view->format ? view->format : "B") + "'"));
  }
  if (writable && view->readonly) reject(name, " is read-only; verify writes into it");
  Array a;
  a.data = view->buf;
  a.elem = elem != Elem::logits ? elem : view->itemsize == 2 ? Elem::float16 : Elem::float32;
  for (int d = 0; d < view->ndim; ++d) {
    if (view->strides[d] % view->itemsize != 0) {
      reject(name, ": stride of ", view->strides[d], " bytes is not a whole number of elements");
    }
    a.shape.push_back(view->shape[d]);
    a.strides.push_back(view->strides[d] / view->itemsize);
  }
  a.exporter = view;
  return a;
}

inline Array from_dlpack(py::handle obj, const char* name, Elem elem) {
  // DLPack carries neither torch's lazy negation nor conjugation: the memory holds the values
  // before them.
  if (says(obj, "is_neg", true) || says(obj, "is_conj", true)) {
    reject(name, " is a negated or conjugated view (its memory holds other values); pass tensor.resolve_neg() "
           "or tensor.resolve_conj()");
  }
  if (says(obj, "requires_grad", false)) {
    reject(name, ": cannot be viewed through DLPack (it requires grad; pass tensor.detach())");
  }
  if (py::hasattr(obj, "__dlpack_device__")) {
    int device_type = 0;
    try {
      device_type = obj.attr("__dlpack_device__")()[py::int_(0)].cast<int>();
    } catch (const py::error_already_set& error) {
      reject(name, ": cannot tell its device (", one_line(error), "); it must be a CPU or CUDA array");
    }
    if (device_type != kDLCPU && device_type != kDLCUDA) {
      reject(name, " must be on the CPU or a CUDA device, got DLPack device type ", std::to_string(device_type),
             " (nothing is copied between devices)");
    }
  }
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")();
  } catch (const py::error_already_set& error) {
    reject(name, ": cannot be viewed through DLPack (", one_line(error), ")");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!managed) {
    PyErr_Clear();
    reject(name, ": __dlpack__ did not return an unused DLPack capsule");
  }
  // Consumed: the capsule's destructor must no longer free it; our exporter does.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  auto owner = std::shared_ptr<DLManagedTensor>(managed, [](DLManagedTensor* m) {
    if (m->deleter) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDA) {
    reject(name, " must be on the CPU or a CUDA device, got DLPack device type ",
           std::to_string(t.device.device_type));
  }
  if (!dtype_is(t.dtype, elem)) {
    wrong_dtype(name, elem, dtype_of(obj, "DLPack code " + std::to_string(t.dtype.code) + ", " +
                                              std::to_string(t.dtype.bits) + " bits"));
  }
  Array a;
  a.device = t.device;
  a.data = static_cast<char*>(t.data) + t.byte_offset;
  a.elem = elem != Elem::logits        ? elem
           : t.dtype.bits == 32        ? Elem::float32
           : t.dtype.code == kDLBfloat ? Elem::bfloat16
                                       : Elem::float16;
  std::int64_t compact = 1;
  a.shape.assign(t.shape, t.shape + t.ndim);
  a.strides.resize(static_cast<std::size_t>(t.ndim));
  for (int d = t.ndim - 1; d >= 0; --d) {
    a.strides[d] = t.strides ? t.strides[d] : compact;  // no strides: compact row-major
    compact *= t.shape[d];
  }
  a.exporter = owner;
  return a;
}

/// SamplingParams arrays: a NumPy array whose dtype is SamplingParams' layout (sv.SamplingParams.dtype,
/// which sv.sampling_params builds). Anything else would need a conversion: a TypeError.
inline void expect_sampling_params_dtype(py::handle obj, const char* name) {
  const auto expected = py::dtype::of<SamplingParams>();
  if (py::isinstance<py::array>(obj) && py::reinterpret_borrow<py::array>(obj).dtype().equal(expected)) return;
  const std::string got = py::isinstance<py::array>(obj)
                              ? std::string(py::str(obj.attr("dtype")))
                              : std::string(py::str(py::type::handle_of(obj).attr("__name__")));
  throw py::type_error(std::string("specverify: ") + name +
                       " must be a NumPy array of sv.SamplingParams.dtype " + std::string(py::str(static_cast<py::handle>(expected))) +
                       " (sv.sampling_params builds one), got " + got + " (arrays are never converted or copied)");
}

}  // namespace detail

/// Views `obj` in place as an `ndim`-dimensional array of `elem`, elements within its last
/// dimension contiguous (rows may be strided). Raises TypeError for something that is not an
/// array of `elem`, InvalidInput for the wrong rank, layout, alignment, device or a read-only
/// output. None gives an absent view where `optional`.
inline Array as_array(py::handle obj, const char* name, Elem elem, int ndim,
                      bool writable = false, bool optional = false) {
  if (obj.is_none()) {
    if (optional) return {};
    throw py::type_error(std::string("specverify: ") + name + " is required, got None");
  }
  if (elem == Elem::sampling_params) detail::expect_sampling_params_dtype(obj, name);
  Array a;
  if (PyObject_CheckBuffer(obj.ptr())) {
    a = detail::from_buffer(obj, name, elem, writable);
  } else if (py::hasattr(obj, "__dlpack__")) {
    a = detail::from_dlpack(obj, name, elem);
  } else {
    throw py::type_error(std::string("specverify: ") + name +
                         " must be a NumPy array or a tensor (buffer protocol or DLPack), got " +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  a.source = py::reinterpret_borrow<py::object>(obj);
  for (const std::int64_t extent : a.shape) {
    if (extent < 0) {
      reject(name, " has a negative shape ", detail::describe_shape(a.shape), " (every extent must be >= 0)");
    }
  }
  if (static_cast<int>(a.shape.size()) != ndim) {
    reject(name, " must have ", std::to_string(ndim), " dimension", ndim == 1 ? "" : "s",
           ", got shape ", detail::describe_shape(a.shape));
  }
  const std::size_t align = elem_alignment(a.elem);
  if (reinterpret_cast<std::uintptr_t>(a.data) % align != 0) {
    reject(name, ": its data is not aligned to ", std::to_string(align), " bytes");
  }
  for (int d = 0; d < ndim; ++d) {
    if (a.strides[d] < 0) reject(name, ": negative strides (reversed views) are not supported");
  }
  const int last = ndim - 1;
  if (a.shape[last] > 1 && a.strides[last] != 1) {
    reject(name, ndim == 1 ? " must be contiguous" : ": elements within a row must be contiguous",
           " (stride ", std::to_string(a.strides[last]), " elements; only rows may be strided)");
  }
  return a;
}

/// Checks that dimension `dim` of `a` has `expected` entries.
inline void expect_extent(const Array& a, const char* name, int dim, std::int64_t expected,
                          const std::string& why) {
  if (a.shape[dim] != expected) {
    reject(name, " has shape ", detail::describe_shape(a.shape), ", but ", why);
  }
}

/// Checks that the rows of a 2-D view do not overlap.
inline void expect_rows_apart(const Array& a, const char* name) {
  if (a.shape[0] > 1 && a.strides[0] < a.shape[1]) {
    reject(name, ": rows overlap (row stride ", std::to_string(a.strides[0]), " < ",
           std::to_string(a.shape[1]), " columns)");
  }
}

inline std::int32_t as_int32(std::int64_t n, const char* what) {
  if (n > INT32_MAX) reject(what, " = ", std::to_string(n), " does not fit in int32");
  return static_cast<std::int32_t>(n);
}

/// A Python float as the float32 a C++ field holds, rounded to the nearest one; refused (naming
/// `what`, "Class field") where a finite value would become infinite or a nonzero one 0, as
/// sv.sampling_params refuses them. NaN and infinities are kept: the library names them.
inline float as_float32(double x, const char* what) {
  // The smallest magnitude that rounds to infinity: halfway between FLT_MAX and 2^128 (the tie
  // goes to infinity, FLT_MAX's significand being odd). Below it the conversion is defined.
  constexpr double kRoundsToInf = 0x1.ffffffp+127;
  const bool overflows = std::isfinite(x) && std::fabs(x) >= kRoundsToInf;
  const float f = overflows ? 0.0f : static_cast<float>(x);
  if (overflows || (x != 0.0 && f == 0.0f)) {
    reject(what, " = ", std::string(py::repr(py::float_(x))), " does not fit in float32 (it would round to ",
           overflows ? "inf" : "0", ")");
  }
  return f;
}

/// `member` as a read-write property of `cls` whose setter converts as as_float32 does.
template <class Class, class T>
void float32_property(Class& cls, const char* name, const char* what, float T::*member) {
  cls.def_property(
      name, [member](const T& self) { return self.*member; },
      [member, what](T& self, double value) { self.*member = as_float32(value, what); });
}

inline py::object source_or_none(const Array& a) { return a.present() ? a.source : py::none(); }

/// The array as it is now, viewed again: a caller may have resized or replaced its memory since
/// the object holding `a` was built (checks as at construction).
inline Array again(const Array& a, const char* name, Elem elem, int ndim, bool writable = false) {
  return as_array(source_or_none(a), name, elem, ndim, writable, true);
}

/// An argument's bytes, [begin, end) from its lowest to its highest element.
struct Extent {
  const char* name;
  std::uintptr_t begin = 0, end = 0;
  bool present = false;
  DLDevice device{kDLCPU, 0};
  bool copied = false;  // a host array the call copies to the others' device (sampling parameters)

  Extent copied_by_call() const {
    Extent e = *this;
    e.copied = true;
    return e;
  }
};

inline Extent extent_of(const Array& a, const char* name, Elem elem) {
  Extent e{name};
  if (!a.present()) return e;
  e.present = true;
  e.device = a.device;
  std::int64_t last = 0;
  for (std::size_t d = 0; d < a.shape.size(); ++d) {
    if (a.shape[d] == 0) return e;
    last += (a.shape[d] - 1) * a.strides[d];
  }
  e.begin = reinterpret_cast<std::uintptr_t>(a.data);
  e.end = e.begin + static_cast<std::uintptr_t>(last + 1) * elem_bytes(elem);
  return e;
}

/// Outputs may share memory with nothing verify reads or writes: an output over an input would
/// change what is read (or write into the caller's inputs), two outputs would overwrite each other.
inline void expect_apart(const std::vector<Extent>& outputs, const std::vector<Extent>& inputs) {
  const auto overlap = [](const Extent& a, const Extent& b) {
    return a.begin < a.end && b.begin < b.end && a.begin < b.end && b.begin < a.end &&
           a.device.device_type == b.device.device_type && a.device.device_id == b.device.device_id;
  };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = i + 1; j < outputs.size(); ++j) {
      if (overlap(outputs[i], outputs[j])) reject(outputs[i].name, " and ", outputs[j].name, " overlap in memory");
    }
    for (const Extent& in : inputs) {
      if (overlap(outputs[i], in)) reject(outputs[i].name, " overlaps ", in.name, " in memory (an output cannot share an input's memory)");
    }
  }
}

/// Where one call's arrays are: all on the CPU, or all on one CUDA device.
struct CallDevice {
  bool cuda = false;
  int id = 0;
};

inline std::string describe_device(const DLDevice& d) {
  return d.device_type == kDLCUDA ? "CUDA device " + std::to_string(d.device_id) : std::string("the CPU");
}

/// The device of every array present in `inputs` and `outputs`, or InvalidInput naming the first
/// argument that is elsewhere than the first one (nothing is copied between devices but the
/// arrays the call copies, which are on the host).
inline CallDevice call_device(const std::vector<Extent>& inputs, const std::vector<Extent>& outputs) {
  const Extent* first = nullptr;
  for (const std::vector<Extent>* list : {&inputs, &outputs}) {
    for (const Extent& e : *list) {
      if (!e.present || e.copied) continue;
      if (!first) {
        first = &e;
      } else if (e.device.device_type != first->device.device_type || e.device.device_id != first->device.device_id) {
        reject(e.name, " is on ", describe_device(e.device), ", but ", first->name, " is on ",
               describe_device(first->device), " (a call's arrays must all be on one device; nothing is copied "
               "between devices)");
      }
    }
  }
  if (!first || first->device.device_type != kDLCUDA) return {};
  return {true, first->device.device_id};
}

/// For what reads its arrays on the host (sample, the padded and sharded calls for now).
inline void expect_host(const Array& a, const char* name, const char* what) {
  if (a.present() && a.device.device_type != kDLCPU) {
    reject(name, " is on ", describe_device(a.device), ", but ", what, " takes CPU arrays");
  }
}

}  // namespace specverify::python
