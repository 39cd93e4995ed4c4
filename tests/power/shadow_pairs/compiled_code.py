"""Generated and compiled code: ``torch.compile``'d functions and modules whose bug is only on the
compiled branch of ``torch.compiler.is_compiling()`` (as vLLM's custom ops branch), graph breaks,
recompiles, in-place writes inside a graph, custom ops called from compiled code, and
``torch.fx`` GraphModules. Each report must be at the user's line, never in generated code."""

from concurrent.futures import ThreadPoolExecutor

import torch
import torch.fx

from fuzzrunner.tracking import track

from .harness import pair

U, S, OOB = "uninitialized-read", "stale-read", "out-of-bounds"


@torch.compile
def _head_sum(buf, n: int):
    if torch.compiler.is_compiling():
        return buf[:n].sum()  # BAD:compiled_branch_reads_unwritten,compiled_on_a_worker_thread
    return buf[:2].sum()  # the eager branch reads only what every twin wrote


@pair("compiled", U, "{alloc}")
def compiled_branch_reads_unwritten(ctx, bug):
    buf = torch.empty(4)  # ALLOC
    buf[:3] = 1.0
    _head_sum(buf, 4 if bug else 3)


@pair("compiled", U, "{alloc}")
def compiled_on_a_worker_thread(ctx, bug):
    buf = torch.empty(4)  # ALLOC
    buf[:3] = 1.0
    with ThreadPoolExecutor(1) as ex:
        ex.submit(_head_sum, buf, 4 if bug else 3).result()


@torch.compile
def _fill_prefix(buf, n: int):
    buf[:n] = 7  # an in-place write inside the graph: seen as the write it is


@pair("compiled", U, "{alloc}")
def compiled_in_place_write_then_eager_read(ctx, bug):
    buf = torch.empty(6, dtype=torch.int64)  # ALLOC
    _fill_prefix(buf, 5 if bug else 6)
    s = buf.sum()  # BAD


class _Scale(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.width = width

    def forward(self, x, positions):
        if torch.compiler.is_compiling():
            return x * positions[:self.width]  # BAD:compiled_module_reads_stale
        return x


_SCALE = torch.compile(_Scale(6))  # one module: a fresh one per run would recompile each time


@pair("compiled", S, "positions")
def compiled_module_reads_stale(ctx, bug):
    pos = track(torch.zeros(8), "positions", per_step=True)
    model = _SCALE
    ctx.step()
    pos[:6 if not bug else 5] = 1.0
    model(torch.ones(6), pos)


@torch.compile
def _with_graph_break(buf, out):
    out[:2] = buf[:2] * 2
    torch._dynamo.graph_break()
    out[2:] = buf[2:] * 3  # BAD:graph_break_between_write_and_read
    return out


@pair("compiled", U, "{alloc}")
def graph_break_between_write_and_read(ctx, bug):
    buf = torch.empty(6)  # ALLOC
    buf[:5 if bug else 6] = 1.0
    _with_graph_break(buf, torch.zeros(6))


@torch.compile(dynamic=False)
def _take_rows(table, ids):
    if torch.compiler.is_compiling():
        return table[ids].sum(0)  # BAD:recompiled_for_a_new_shape
    return table[0]


@pair("compiled", U, "{alloc}")
def recompiled_for_a_new_shape(ctx, bug):
    table = torch.empty(5, 2)  # ALLOC
    table[:4] = 1.0
    _take_rows(table, torch.tensor([0, 1]))
    ctx.step()
    _take_rows(table, torch.tensor([0, 1, 4 if bug else 3]))  # a new shape: compiled again, still checked


@torch.library.custom_op("shadow_pairs::row_sums", mutates_args=())
def _row_sums(x: torch.Tensor, n: int) -> torch.Tensor:
    return x[:n].sum(1)  # BAD:custom_op_inside_compiled_region


@_row_sums.register_fake
def _(x, n):
    return x.new_empty(n)


@torch.compile
def _via_custom_op(x, n: int):
    return _row_sums(x, n) * 2


@pair("compiled", U, "{alloc}")
def custom_op_inside_compiled_region(ctx, bug):
    x = torch.empty(4, 3)  # ALLOC
    x[:3] = 1.0
    _via_custom_op(x, 4 if bug else 3)


@torch.compile
def _new_partial(n: int, k: int):
    out = torch.empty(n)  # ALLOC:compiled_returns_partly_written
    out[:k] = 0.5
    return out


@pair("compiled", U, "{alloc}")
def compiled_returns_partly_written(ctx, bug):
    out = _new_partial(6, 5 if bug else 6)
    m = out.mean()  # BAD


class _Gather(torch.nn.Module):
    def forward(self, table, ids):
        rows = torch.index_select(table, 0, ids)
        return rows.sum()


@pair("fx", U, "{alloc}")
def fx_graph_module_without_stack_traces(ctx, bug):
    gm = torch.fx.symbolic_trace(_Gather())
    table = torch.empty(4, 2)  # ALLOC
    table[:3] = 1.0
    gm(table, torch.tensor([0, 3 if bug else 2]))  # BAD


class _Tail(torch.nn.Module):
    def forward(self, buf, n: int):
        head = buf[:n]
        return head * 2  # BAD:fx_graph_module_with_stack_traces


@pair("fx", U, "{alloc}")
def fx_graph_module_with_stack_traces(ctx, bug):
    tracer = torch.fx.Tracer()
    tracer.record_stack_traces = True
    n = 5 if bug else 4
    gm = torch.fx.GraphModule(_Tail(), tracer.trace(_Tail(), concrete_args={"n": n}))
    buf = torch.empty(6)  # ALLOC
    buf[:4] = 3.0
    gm(buf, n)


# -- ops registered with Library.impl (vLLM's direct_register_custom_op): reads at their own lines --
_impl_lib = torch.library.Library("shadow_pairs_impl", "FRAGMENT")
_impl_lib.define("window_sum(Tensor x, int start, int n) -> Tensor")
_impl_lib.define("fill_rows_(Tensor(a!) out, int n, float value) -> ()")
_impl_lib.define("fresh_rows(int n, int k) -> Tensor")


def _window_sum(x, start, n):
    window = x[start:start + n]
    return window.sum(0)  # BAD:library_impl_read_inside_body


def _fill_rows(out, n, value):
    out[:n] = value


def _fresh_rows(n, k):
    out = torch.empty(n, 2)  # ALLOC:library_impl_returns_partly_written
    out[:k] = 1.0
    return out


_impl_lib.impl("window_sum", _window_sum, "CPU")
_impl_lib.impl("fill_rows_", _fill_rows, "CPU")
_impl_lib.impl("fresh_rows", _fresh_rows, "CompositeExplicitAutograd")


@pair("custom-op", U, "{alloc}")
def library_impl_read_inside_body(ctx, bug):
    x = torch.empty(8, 2)  # ALLOC
    x[:6] = 1.0
    torch.ops.shadow_pairs_impl.window_sum(x, 3 if bug else 2, 4)


@pair("custom-op", U, "{alloc}")
def library_impl_partial_write_in_body(ctx, bug):
    out = torch.empty(5, 3)  # ALLOC
    torch.ops.shadow_pairs_impl.fill_rows_(out, 4 if bug else 5, 2.0)
    m = out.max()  # BAD


@pair("custom-op", U, "{alloc}")
def library_impl_returns_partly_written(ctx, bug):
    rows = torch.ops.shadow_pairs_impl.fresh_rows(4, 3 if bug else 4)
    s = rows.sum(0)  # BAD
