// The reads a trace needs (run.py's bare_reads), made in C++: what the floor would be if PyTorch
// handed a Python tool each node's saved tensors in one call. Not part of tracekit: benchmarks only
// (cpp_reads.py compiles it with torch.utils.cpp_extension).
//
// A node's saved tensors are read with compiled autograd's collector (torch/csrc/dynamo/
// compiled_autograd.h: Node::compiled_args visits every saved variable of any built-in node, and
// unpacks it as the engine would; a value behind a saved-tensor hook is not unpacked). That is the
// only PyTorch facility that enumerates a node's saved variables without knowing its type, and it is
// a C++ one, shipped in the wheel's headers, with no stability promise.
#include <torch/extension.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/dynamo/compiled_autograd.h>

#include <algorithm>
#include <typeindex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

using torch::autograd::AccumulateGrad;
using torch::autograd::Node;
namespace ca = torch::dynamo::autograd;

namespace {

// A small tensor's values, as tolist() gives them (a number, or a flat list of up to 4)
py::object values_of(const at::Tensor& t) {
  if (t.numel() > 4 || !t.has_storage() || !t.device().is_cpu()) return py::none();
  bool whole = at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
  if (t.dim() == 0) {
    auto v = t.item();
    return whole ? py::object(py::int_(v.toLong())) : py::object(py::float_(v.toDouble()));
  }
  auto flat = t.reshape(-1);
  py::list out;
  for (int64_t i = 0; i < flat.numel(); ++i) {
    auto v = flat[i].item();
    out.append(whole ? py::object(py::int_(v.toLong())) : py::object(py::float_(v.toDouble())));
  }
  return out;
}

// The tensor's torch.dtype, the object t.dtype gives in Python (borrowed: one per dtype)
py::object dtype_of(const at::Tensor& t) {
  return py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(torch::getTHPDtype(t.scalar_type())));
}

}  // namespace

// Every op node behind `outputs` in forward order, as (name, sequence number, inputs: positions, -1
// for a leaf or an input without gradient, saved: one tuple per saved tensor (node position, storage
// address, storage bytes, shape, torch.dtype, bytes, version, producer's position or -1, values of at
// most 4 elements), and a weak reference per storage, taken and dropped as bare_reads does);
// a node the collector cannot read (a custom Function) is read as saving nothing.
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
  static std::unordered_map<std::type_index, py::str> names;  // Node::name() demangles at each call
  std::unordered_map<c10::StorageImpl*, size_t> storages;
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> weaks;
  py::list nodes, saved;
  for (size_t i = 0; i < order.size(); ++i) {
    Node* n = order[i];
    py::tuple inputs(n->next_edges().size());
    size_t k = 0;
    for (const auto& e : n->next_edges()) {
      auto it = e.function ? position.find(e.function.get()) : position.end();
      inputs[k++] = it == position.end() ? -1 : it->second;
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
      if (storages.emplace(storage.unsafeGetStorageImpl(), weaks.size()).second)
        weaks.push_back(storage.getWeakStorageImpl());
      Node* producer = t.grad_fn().get();
      auto at = producer ? position.find(producer) : position.end();
      py::tuple shape(t.dim());
      for (int64_t d = 0; d < t.dim(); ++d) shape[d] = t.sizes()[d];
      saved.append(py::make_tuple(i, reinterpret_cast<uintptr_t>(storage.data()), storage.nbytes(), shape,
                                  dtype_of(t), t.numel() * t.element_size(), t._version(),
                                  at == position.end() ? -1 : at->second, values_of(t)));
    }
  }
  return py::make_tuple(nodes, saved, weaks.size());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("read_graph", &read_graph, "The reads a trace needs, in C++ (benchmarks only).");
}
