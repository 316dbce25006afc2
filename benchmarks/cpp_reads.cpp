// The reads a trace needs (run.py's bare_reads), made in C++: what the floor would be if PyTorch
// handed a Python tool each node's saved tensors in one call. Not part of tracekit: benchmarks only
// (cpp_reads.py compiles it with torch.utils.cpp_extension).
//
// A node's saved tensors are read with compiled autograd's collector (torch/csrc/dynamo/
// compiled_autograd.h: Node::compiled_args visits every saved variable of any built-in node, and
// unpacks it as the engine would; a value behind a saved-tensor hook is not unpacked). That is the
// only PyTorch facility that enumerates a node's saved variables without knowing its type, and it is
// a C++ one, shipped in the wheel's headers, with no stability promise.
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <ATen/Dispatch.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <typeindex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <c10/util/intrusive_ptr.h>

using torch::autograd::AccumulateGrad;
using torch::autograd::Node;
namespace ca = torch::dynamo::autograd;

namespace {

// A small tensor's values, as tolist() gives them (a number, or a flat list of up to 4), read from its
// memory as tolist reads it (no op dispatched: item() would cost a dispatch per value); None for a
// dtype it does not read (complex)
py::object values_of(const at::Tensor& t) {
  if (t.numel() > 4 || !t.has_storage() || !t.device().is_cpu()) return py::none();
  py::object out = py::none();
  try {
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, t.scalar_type(), "values_of", [&] {
      const scalar_t* data = t.const_data_ptr<scalar_t>();
      auto value = [&](int64_t linear) {
        int64_t offset = 0;
        for (int64_t d = t.dim() - 1; d >= 0; --d) {
          offset += (linear % t.size(d)) * t.stride(d);
          linear /= t.size(d);
        }
        if constexpr (std::is_same_v<scalar_t, bool>) return py::object(py::bool_(data[offset]));
        else if constexpr (std::is_integral_v<scalar_t>) return py::object(py::int_(static_cast<int64_t>(data[offset])));
        else return py::object(py::float_(static_cast<double>(data[offset])));
      };
      if (t.dim() == 0) {
        out = value(0);
      } else {
        py::list items;
        for (int64_t i = 0; i < t.numel(); ++i) items.append(value(i));
        out = items;
      }
    });
  } catch (const c10::Error&) {
    return py::none();
  }
  return out;
}

// The tensor's torch.dtype, the object t.dtype gives in Python (borrowed: one per dtype)
py::object dtype_of(const at::Tensor& t) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type())));
}

}  // namespace

// Every op node behind `outputs` in forward order, as (name, sequence number, inputs: positions, -1 for
// a leaf or an input without gradient); one tuple per saved tensor, laid out as skeleton.py's rows:
// (node position, storage address, shape, torch.dtype, bytes, storage index, producer's position or
// -1, version, values of at most 4 elements); and one tuple per storage: (address, bytes, a bare weak
// reference, as UntypedStorage._weak_ref gives it: the caller drops it, whether an op made the value
// or it gets no gradient, at its first saved tensor). A custom Function's node is read as saving
// nothing (bare_reads reads none of its values), as is a node the collector cannot read. Off the
// benchmarks' programs it reads what bare_reads does not: the saved tensors of the node a CopySlices
// wraps, and lists of saved tensors; and a tensor one node saves twice, once.
py::tuple read_graph(const std::vector<at::Tensor>& outputs) {
  std::vector<Node*> todo, order;
  std::unordered_set<Node*> seen;
  for (const auto& t : outputs)
    if (t.grad_fn()) todo.push_back(t.grad_fn().get());
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    if (dynamic_cast<AccumulateGrad*>(n) != nullptr) continue;
    order.push_back(n);
    for (const auto& e : n->next_edges())
      if (e.function && !seen.count(e.function.get())) todo.push_back(e.function.get());
  }
  std::sort(order.begin(), order.end(), [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); });
  std::unordered_map<Node*, int> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
  // Node::name() demangles at each call: one name per C++ type (kept for the process: no py::str is
  // destroyed after the interpreter); a custom Function's node type is one for every Function
  static auto& names = *new std::unordered_map<std::type_index, py::str>();
  std::unordered_map<c10::StorageImpl*, size_t> index;
  py::list nodes, saved, storages;
  for (size_t i = 0; i < order.size(); ++i) {
    Node* n = order[i];
    py::tuple inputs(n->next_edges().size());
    size_t k = 0;
    for (const auto& e : n->next_edges()) {
      auto it = e.function ? position.find(e.function.get()) : position.end();
      inputs[k++] = it == position.end() ? -1 : it->second;
    }
    // a custom Function's node (torch::autograd::PyNode, whose type information libtorch does not export)
    if (std::strcmp(typeid(*n).name(), "N5torch8autograd6PyNodeE") == 0) {
      nodes.append(py::make_tuple(py::str(n->name()), n->sequence_nr(), inputs));
      continue;
    }
    auto name = names.find(typeid(*n));
    if (name == names.end()) name = names.emplace(typeid(*n), py::str(n->name())).first;
    nodes.append(py::make_tuple(name->second, n->sequence_nr(), inputs));
    ca::AutogradCompilerCall compiler(ca::SizeInput::DYNAMIC);  // one per node: no sharing across nodes
    ca::NodeCall call(static_cast<uint32_t>(i), c10::intrusive_ptr<Node>::reclaim_copy(n));
    try {
      ca::CompiledNodeArgs args(compiler, call);
      n->compiled_args(args);
    } catch (const std::exception&) {
      continue;
    }
    for (const at::Tensor& t : compiler.tensor_args.inputs) {
      if (!t.defined() || !t.has_storage()) continue;
      const c10::Storage& storage = t.storage();
      c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
      Node* producer = t.grad_fn().get();
      auto found = index.find(impl);
      if (found == index.end()) {
        found = index.emplace(impl, index.size()).first;
        storages.append(py::make_tuple(reinterpret_cast<uintptr_t>(storage.data()), storage.nbytes(),
                                       reinterpret_cast<uintptr_t>(c10::raw::intrusive_ptr::make_weak(impl)),
                                       producer != nullptr || !t.requires_grad()));
      }
      auto at = producer ? position.find(producer) : position.end();
      py::tuple shape(t.dim());
      for (int64_t d = 0; d < t.dim(); ++d) shape[d] = t.sizes()[d];
      saved.append(py::make_tuple(i, reinterpret_cast<uintptr_t>(storage.data()), shape, dtype_of(t),
                                  t.numel() * t.element_size(), found->second,
                                  at == position.end() ? -1 : at->second, t._version(), values_of(t)));
    }
  }
  return py::make_tuple(nodes, saved, storages);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("read_graph", &read_graph, "The reads a trace needs, in C++ (benchmarks only).");
}
