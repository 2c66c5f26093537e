// Tensors as NumPy arrays without a copy, and DLPack capsules of such arrays
// (for torch.from_dlpack and jax.dlpack). Declared in python/src/arrays.hpp.
#include "python/src/arrays.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

namespace af::py {

namespace pyb = pybind11;

namespace {

pyb::dtype numpy_type(dtype t) {
  switch (t) {
    case dtype::u8:
      return pyb::dtype::of<uint8_t>();
    case dtype::i32:
      return pyb::dtype::of<int32_t>();
    case dtype::i64:
      return pyb::dtype::of<int64_t>();
    case dtype::f16:
      return pyb::dtype("float16");
    case dtype::f32:
      return pyb::dtype::of<float>();
    case dtype::f64:
      return pyb::dtype::of<double>();
    case dtype::bf16:
      return pyb::dtype::of<uint16_t>();
    case dtype::bytes:
      break;
  }
  throw std::invalid_argument("no NumPy type for this tensor");
}

pyb::array strings(const tensor& t) {
  auto n = t.elements();
  pyb::array out{pyb::dtype("O"), t.shape()};
  auto** slots = static_cast<PyObject**>(out.mutable_data());
  for (int64_t i = 0; i < n; ++i) {
    auto s = t.string_at(i);
    PyObject* b = PyBytes_FromStringAndSize(s.data(),
                                            static_cast<Py_ssize_t>(s.size()));
    if (b == nullptr)
      throw pyb::error_already_set();
    Py_XDECREF(slots[i]); // NumPy fills new object arrays with None
    slots[i] = b;
  }
  return out;
}

// A DLManagedTensor with the shape and strides it points to, and the array
// it views (a strong reference, dropped by the deleter).
struct managed {
  DLManagedTensor tensor{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  PyObject* owner = nullptr;
};

void delete_managed(DLManagedTensor* t) {
  auto* m = static_cast<managed*>(t->manager_ctx);
  {
    // The consumer (a torch tensor) may let go on any thread.
    pyb::gil_scoped_acquire gil;
    Py_XDECREF(m->owner);
  }
  delete m;
}

DLDataType dl_type(const pyb::dtype& dt, bool bf16) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(dt.itemsize() * 8);
  switch (dt.kind()) {
    case 'u':
      // bfloat16 travels as uint16; a view of another width is not.
      d.code = bf16 && dt.itemsize() == 2 ? kDLBfloat : kDLUInt;
      break;
    case 'i':
      d.code = kDLInt;
      break;
    case 'f':
      d.code = kDLFloat;
      break;
    case 'b':
      d.code = kDLUInt; // bool as 8-bit unsigned (DLPack 0.6 has no bool)
      break;
    default:
      throw pyb::buffer_error(std::string{"DLPack cannot carry arrays of "
                                          "kind '"}
                              + dt.kind() + "'");
  }
  return d;
}

} // namespace

pyb::array to_numpy(const tensor& t) {
  if (t.type() == dtype::bytes)
    return strings(t);
  auto dt = numpy_type(t.type());
  // The capsule shares the buffer: the array keeps it alive, whatever
  // happens to the job (or its actor system) after.
  auto* keep = new std::shared_ptr<const buffer>(t.storage());
  pyb::capsule base{keep, [](void* p) {
                      delete static_cast<std::shared_ptr<const buffer>*>(p);
                    }};
  const void* data = t.data();
  static const char empty = 0;
  if (data == nullptr)
    data = &empty; // a tensor of no elements
  pyb::array a{dt, t.shape(), data, base};
  // Read-only: the buffer may be shared (a cache stage hands out the same
  // buffers every epoch).
  pyb::detail::array_proxy(a.ptr())->flags &=
    ~pyb::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return a;
}

pyb::dict to_dict(const batch& b) {
  pyb::dict d;
  for (auto& f : b.fields)
    d[pyb::str(f.name)] = to_numpy(f.value);
  return d;
}

pyb::capsule to_dlpack(const pyb::array& array, bool bf16) {
  auto m = std::make_unique<managed>();
  auto& t = m->tensor.dl_tensor;
  auto dt = array.dtype();
  t.dtype = dl_type(dt, bf16);
  t.data = const_cast<void*>(array.data());
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(array.ndim());
  auto item = static_cast<int64_t>(dt.itemsize());
  for (pyb::ssize_t i = 0; i < array.ndim(); ++i) {
    m->shape.push_back(static_cast<int64_t>(array.shape(i)));
    auto s = static_cast<int64_t>(array.strides(i));
    if (s % item != 0)
      throw pyb::buffer_error("DLPack: a stride that is not a whole "
                              "number of elements");
    m->strides.push_back(s / item);
  }
  t.shape = m->shape.data();
  t.strides = m->strides.data();
  t.byte_offset = 0;
  m->owner = array.ptr();
  Py_INCREF(m->owner);
  m->tensor.manager_ctx = m.get();
  m->tensor.deleter = delete_managed;
  auto* raw = &m.release()->tensor;
  // A consumer renames the capsule "used_dltensor" and calls the deleter
  // itself; a capsule nobody consumed cleans up here.
  PyObject* cap = PyCapsule_New(raw, "dltensor", [](PyObject* c) {
    if (PyCapsule_IsValid(c, "dltensor") == 0)
      return;
    auto* mt =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
    if (mt != nullptr && mt->deleter != nullptr)
      mt->deleter(mt);
  });
  if (cap == nullptr) {
    raw->deleter(raw);
    throw pyb::error_already_set();
  }
  return pyb::reinterpret_steal<pyb::capsule>(cap);
}

} // namespace af::py
