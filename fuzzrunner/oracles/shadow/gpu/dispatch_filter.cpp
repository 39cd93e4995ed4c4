// The device shadow's dispatch filter (dispatch_filter.py): a boxed fallback at a dispatch key ahead of torch's
// Python keys that lets an op past the shadow's Python dispatch mode when the mode would only run it.
//
// Per op, on a thread that included the key (the case's thread, while the oracle runs) and whose dispatch-mode
// stack is exactly the oracle's mode:
//   * an op the mode runs as it is (a view, a metadata op: PASS) runs natively;
//   * a PLAIN op (an aten op that neither changes a storage, allocates never-written memory nor takes an index)
//     runs natively when none of its tensor arguments on the oracle's device shares a byte with a tracked
//     region (the regions' index, as DeviceShadow keeps it: starts sorted, the running maximum of ends); a
//     result in fresh memory where a region lies is queued for the mode (``take_fresh``), as its
//     ``_allocations`` would have handled it;
//   * an op made of other ops above the Python keys (a CompositeImplicitAutograd kernel: ``reshape``, ``to``)
//     is never seen by the mode, only its parts: it runs on, its parts coming back here one by one;
//   * while the oracle is paused on this thread (its own ops: ``set_paused``), any op runs natively as a PASS op
//     does (no result queued), as the paused mode runs each op as it is;
//   * anything else (an op the mode has not named yet, a tensor subclass argument, another mode on the
//     stack) goes to the mode as before.
// "Natively" is past every Python key for the op and for the ops inside it: nothing there is tracked.

#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

constexpr auto kKey = c10::DispatchKey::TESTING_ONLY_GenericMode;
enum Category : int { UNKNOWN = 0, PASS = 1, PLAIN = 2, ALWAYS = 3 };

struct State {
  std::shared_mutex mu;
  std::vector<int64_t> starts, ends, max_end;             // the regions' index: starts sorted, their ends, the
                                                          // running maximum of ends (DeviceShadow's, mirrored)
  std::unordered_map<c10::OperatorName, int> categories;  // what the mode does with each op
  std::unordered_map<c10::OperatorName, bool> composite;  // whether an op is made of others above the Python keys
  std::vector<std::pair<int64_t, int64_t>> fresh;         // (address, bytes) of results where a region lies
  PyObject* mode = nullptr;                               // the oracle's mode, compared by address
  py::object mode_ref;                                    // held, so no other object takes its address meanwhile
  c10::DeviceType device = c10::DeviceType::CUDA;
  std::atomic<int64_t> native{0}, routed{0};
};

thread_local int t_paused = 0;  // the oracle's pause depth on this thread (GpuShadowOracle.pause, mirrored)

State& state() {
  static State* s = new State();  // never destroyed: ops may run while the interpreter exits
  return *s;
}

bool overlaps(const State& s, int64_t start, int64_t nbytes) {
  const int64_t end = start + std::max<int64_t>(nbytes, 1);
  const auto i = std::lower_bound(s.starts.begin(), s.starts.end(), end) - s.starts.begin() - 1;
  return i >= 0 && s.max_end[i] > start;
}

// 1: a tensor on the device with memory (address, bytes set); 0: not one to look at; -1: send the op to the mode
int span(const at::Tensor& t, c10::DeviceType device, int64_t* ptr, int64_t* nbytes) {
  if (!t.defined()) return 0;
  const auto* impl = t.unsafeGetTensorImpl();
  if (impl->key_set().has(c10::DispatchKey::Python)) return -1;  // a tensor subclass: its own dispatch
  if (t.layout() != c10::kStrided || t.device().type() != device) return 0;
  if (!impl->has_storage()) return -1;
  const auto& st = impl->storage();
  *ptr = reinterpret_cast<int64_t>(st.data());
  *nbytes = static_cast<int64_t>(st.nbytes());
  if (*ptr) return 1;
  return st.nbytes() ? -1 : 0;  // bytes but no address (a wrapper's storage): what it wraps is not seen here
}

// Keys under which an op's tensors are not what they seem (a functional or batched wrapper, vmap or grad
// levels, nested or sparse layouts): such an op goes to the mode, as every op did before the filter.
const c10::DispatchKeySet kWrapped({c10::DispatchKey::Functionalize, c10::DispatchKey::FuncTorchBatched,
                                    c10::DispatchKey::BatchedNestedTensor, c10::DispatchKey::FuncTorchVmapMode,
                                    c10::DispatchKey::Batched, c10::DispatchKey::VmapMode,
                                    c10::DispatchKey::FuncTorchGradWrapper, c10::DispatchKey::FuncTorchDynamicLayerBackMode,
                                    c10::DispatchKey::FuncTorchDynamicLayerFrontMode,
                                    c10::DispatchKey::NestedTensor, c10::DispatchKey::Sparse});

template <typename F>
bool each_tensor(const c10::IValue& v, F&& f) {  // false: stop (f said so)
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) {
      if (!f(t)) return false;
    }
    return true;
  }
  if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor() && !f(e.toTensor())) return false;
    }
  }
  return true;
}

bool ours_alone(const State& s) {
  if (s.mode == nullptr || c10::impl::TorchDispatchModeTLS::stack_len() != 1) return false;
  const auto& top = c10::impl::TorchDispatchModeTLS::get_stack_at(0);
  return top && top->ptr(&top->pyinterpreter()) == s.mode;
}

bool is_composite(State& s, const c10::OperatorHandle& op) {
  {
    std::shared_lock<std::shared_mutex> lock(s.mu);
    const auto found = s.composite.find(op.operator_name());
    if (found != s.composite.end()) return found->second;
  }
  const bool made = op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
  std::unique_lock<std::shared_mutex> lock(s.mu);
  s.composite.emplace(op.operator_name(), made);
  return made;
}

// The op on to the keys after this one, as it went before the filter (to the mode, where it is on the stack).
void as_before(State& s, const c10::OperatorHandle& op, c10::DispatchKeySet after, torch::jit::Stack* stack) {
  s.routed.fetch_add(1, std::memory_order_relaxed);
  c10::impl::ExcludeDispatchKeyGuard guard(kKey);
  op.redispatchBoxed(after, stack);
}

void filter(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  auto& s = state();
  const auto after = ks & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kKey);
  if (!after.has(c10::DispatchKey::Python) || !(after & kWrapped).empty()) {
    // No Python key (the mode would not see it: ``_DisableTorchDispatch``), or wrapped tensors: as before.
    as_before(s, op, after, stack);
    return;
  }
  if (is_composite(s, op)) {
    // Made of other ops above the Python keys (``reshape``, ``matmul``, ``to``): with autograd keys its parts
    // come back here one by one; without them (``torch.inference_mode``) the mode sees it whole, as before.
    s.native.fetch_add(1, std::memory_order_relaxed);
    op.redispatchBoxed(after, stack);
    return;
  }
  int category = UNKNOWN;
  std::vector<int64_t> inputs;
  bool route = true;
  {
    std::shared_lock<std::shared_mutex> lock(s.mu);
    if (ours_alone(s)) {
      if (t_paused > 0) {
        category = PASS;  // the paused mode runs any op as it is, and looks at nothing
      } else {
        const auto found = s.categories.find(op.operator_name());
        category = found == s.categories.end() ? UNKNOWN : found->second;
      }
      if (category == PASS || category == PLAIN) {
        route = false;
        const auto n = op.schema().arguments().size();
        for (auto it = stack->end() - static_cast<std::ptrdiff_t>(n); it != stack->end() && !route; ++it) {
          each_tensor(*it, [&](const at::Tensor& t) {
            int64_t ptr = 0, nbytes = 0;
            const int got = span(t, s.device, &ptr, &nbytes);
            if (got < 0 || (got > 0 && category == PLAIN && overlaps(s, ptr, nbytes))) {
              route = true;  // a subclass (a view of one too), or tracked memory
              return false;
            }
            if (got > 0) inputs.push_back(ptr);
            return true;
          });
        }
      }
    }
  }
  if (route) {
    as_before(s, op, after, stack);
    return;
  }
  s.native.fetch_add(1, std::memory_order_relaxed);
  {
    c10::impl::ExcludeDispatchKeyGuard guard(
        c10::DispatchKeySet({kKey, c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
    op.redispatchBoxed(after.remove(c10::DispatchKey::Python).remove(c10::DispatchKey::PythonTLSSnapshot), stack);
  }
  if (category != PLAIN) return;  // a view shares its input's memory
  const auto r = op.schema().returns().size();
  std::vector<std::pair<int64_t, int64_t>> fresh;
  {
    std::shared_lock<std::shared_mutex> lock(s.mu);
    for (auto it = stack->end() - static_cast<std::ptrdiff_t>(r); it != stack->end(); ++it) {
      each_tensor(*it, [&](const at::Tensor& t) {
        int64_t ptr = 0, nbytes = 0;
        if (span(t, s.device, &ptr, &nbytes) > 0 &&
            std::find(inputs.begin(), inputs.end(), ptr) == inputs.end() && overlaps(s, ptr, nbytes)) {
          fresh.emplace_back(ptr, nbytes);
        }
        return true;
      });
    }
  }
  if (!fresh.empty()) {
    std::unique_lock<std::shared_mutex> lock(s.mu);
    s.fresh.insert(s.fresh.end(), fresh.begin(), fresh.end());
  }
}

// -- the Python side's calls (with the GIL) ------------------------------------------------------------------

void set_mode(py::object mode, const std::string& device) {
  auto& s = state();
  const auto type = c10::Device(device).type();
  py::object before;  // let go after the lock: its destructor may run Python, and torch ops, which take it
  {
    std::unique_lock<std::shared_mutex> lock(s.mu);
    s.mode = mode.is_none() ? nullptr : mode.ptr();
    before = std::move(s.mode_ref);
    s.mode_ref = std::move(mode);
    s.device = type;
  }
}

void running_max(State& s, size_t i) {  // the running maximum of ends, from position i on (C speed: no early stop)
  for (size_t k = i; k < s.starts.size(); ++k) s.max_end[k] = k ? std::max(s.max_end[k - 1], s.ends[k]) : s.ends[k];
}

void set_regions(std::vector<int64_t> starts, std::vector<int64_t> ends) {
  TORCH_CHECK(starts.size() == ends.size(), "the regions' starts and ends differ in number");
  auto& s = state();
  std::unique_lock<std::shared_mutex> lock(s.mu);
  s.starts = std::move(starts);
  s.ends = std::move(ends);
  s.max_end.assign(s.ends.size(), 0);
  running_max(s, 0);
}

void insert_region(size_t i, int64_t start, int64_t end) {
  auto& s = state();
  std::unique_lock<std::shared_mutex> lock(s.mu);
  TORCH_CHECK(i <= s.starts.size(), "a region inserted past the index's end");
  const auto at = static_cast<std::ptrdiff_t>(i);
  s.starts.insert(s.starts.begin() + at, start);
  s.ends.insert(s.ends.begin() + at, end);
  s.max_end.insert(s.max_end.begin() + at, end);
  running_max(s, i);
}

void erase_region(size_t i) {
  auto& s = state();
  std::unique_lock<std::shared_mutex> lock(s.mu);
  TORCH_CHECK(i < s.starts.size(), "a region erased past the index's end");
  const auto at = static_cast<std::ptrdiff_t>(i);
  s.starts.erase(s.starts.begin() + at);
  s.ends.erase(s.ends.begin() + at);
  s.max_end.erase(s.max_end.begin() + at);
  running_max(s, i);
}

bool any_overlapping(int64_t start, int64_t nbytes) {
  auto& s = state();
  std::shared_lock<std::shared_mutex> lock(s.mu);
  return overlaps(s, start, nbytes);
}

void categorize(const std::string& name, const std::string& overload, int category) {
  auto& s = state();
  std::unique_lock<std::shared_mutex> lock(s.mu);
  s.categories[c10::OperatorName(name, overload)] = category;
}

std::vector<std::pair<int64_t, int64_t>> take_fresh() {
  auto& s = state();
  std::unique_lock<std::shared_mutex> lock(s.mu);
  std::vector<std::pair<int64_t, int64_t>> out;
  out.swap(s.fresh);
  return out;
}

bool has_fresh() {
  auto& s = state();
  std::shared_lock<std::shared_mutex> lock(s.mu);
  return !s.fresh.empty();
}

void set_paused(int depth) { t_paused = depth; }

void include(bool on) { c10::impl::tls_set_dispatch_key_included(kKey, on); }

bool included() { return c10::impl::tls_is_dispatch_key_included(kKey); }

std::pair<int64_t, int64_t> counts() { return {state().native.load(), state().routed.load()}; }

}  // namespace

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&filter>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("set_mode", &set_mode);
  m.def("set_regions", &set_regions);
  m.def("insert_region", &insert_region);
  m.def("erase_region", &erase_region);
  m.def("any_overlapping", &any_overlapping);
  m.def("categorize", &categorize);
  m.def("take_fresh", &take_fresh);
  m.def("has_fresh", &has_fresh);
  m.def("set_paused", &set_paused);
  m.def("include", &include);
  m.def("included", &included);
  m.def("counts", &counts);
}
