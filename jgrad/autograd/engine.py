"""The backward engine, after torch/csrc/autograd/engine.cpp.

* A GraphTask holds one backward call: dependency counts, not-ready input
  buffers, ``exec_info`` (which nodes run for ``grad(inputs=)`` and
  ``backward(inputs=)``), captured gradients, final callbacks, leaf streams.
* Ready queues are ordered by reentrant depth, then highest ``sequence_nr``.
* CPU work runs on the calling thread; every other device (GPUs, and the
  virtual CPU devices ``cpu:1``... that ``--xla_force_host_platform_device_count``
  makes) gets one worker thread, unless multithreading is disabled.
* Reentrant backward (backward inside a hook or custom Function) recurses on
  the same thread up to ``MAX_DEPTH``, then continues on a pool thread
  (Note [Reentrant backwards]).

Why one file of ~860 lines: it is a port of engine.cpp, which is one file, and it is read side by side
with it (``GraphTask``, ``ReadyQueue``, ``InputBuffer``, ``init_to_execute``,
``evaluate_function``, ``validate_outputs``, ``thread_main``, reentrant backward and the device
threads keep engine.cpp's names and order). Splitting it would cut that correspondence, and every part
shares the GraphTask's state and the thread-local ``_tls``.

Imports ``_tensor``, ``_device``, ``node``, ``grad_mode``, ``anomaly`` (it installs its thread-local state
there) and ``streams_bridge`` (what it needs from streams). Never ``_dispatch``, the
recorder or the op library: "auto" mode's fast path installs itself (``fast_paths``, Note [Backward
plans] in ``jgrad/runtime/_backward_plan.py``), and ``OpNode`` (``_dispatch``) subclasses ``node.Node``.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import warnings

from ..core._device import _devices, from_jax
from ..core._dtype import _BY_NP
from ..core._tensor import Tensor
from . import anomaly as _anomaly, streams_bridge
from .grad_mode import state as _state
from .node import GraphRoot

NO_DEVICE = "no-device"
CPU_DEVICE = "cpu-device"
MAX_DEPTH = 24  # Python frames per level are many; PyTorch uses 60 C++ levels


class _EngineTLS(threading.local):
    def __init__(self):
        self.worker_device = NO_DEVICE
        self.current_depth = 0
        self.total_depth = 0
        self.local_ready_queue = None
        self.graph_task = None
        self.current_node = None  # engine.cpp's NodeGuard (anomaly mode links parents through it)
        self.node_inputs = ()  # the gradients the node being run received (checkpoint's recomputation waits on them)
        self.warning_buffer = None


_tls = _EngineTLS()
_anomaly._engine_tls = _tls  # a node made during a backward records the node that made it
_task_ids = itertools.count()
_trimming = [True]


def set_grad_trimming(enabled: bool) -> None:
    """Turn gradient trimming (per-node ``needs_input_grad`` from exec_info) on or off.

    On by default, as in PyTorch; off only to measure what it saves.
    """
    _trimming[0] = bool(enabled)


class _ExecInfo:
    __slots__ = ("needed", "captures")

    def __init__(self):
        self.needed = False
        self.captures = None

    def should_execute(self):
        return self.needed or bool(self.captures)


class _Future:
    __slots__ = ("_event", "value", "error")

    def __init__(self):
        self._event = threading.Event()
        self.value = None
        self.error = None

    def completed(self):
        return self._event.is_set()

    def set_result(self, value):
        self.value = value
        self._event.set()

    def set_error(self, e):
        self.error = e
        self._event.set()

    def wait(self):
        self._event.wait()


class GraphTask:
    """The state of one ``backward()`` / ``grad()`` call."""

    def __init__(self, keep_graph, create_graph, depth, cpu_ready_queue, graph_roots):
        self.id = next(_task_ids)
        self.keep_graph = keep_graph
        self.grad_mode = create_graph
        self.reentrant_depth = depth
        self.cpu_ready_queue = cpu_ready_queue
        self.graph_roots = graph_roots
        self.exit_on_error = False
        self.has_error = False
        self.future_completed = False
        self.outstanding_tasks = 0
        self.dependencies: dict = {}
        self.not_ready: dict = {}
        self.nodes_in_graph: set = set()
        self.exec_info: dict = {}
        self.captured_vars: list = []
        self.leaf_streams: set = set()
        self.caller_current_streams = None
        self.final_callbacks: list = []
        self.mutex = threading.RLock()
        self.callbacks_lock = threading.Lock()
        self.future = _Future()
        self.owner = None
        # The Python thread that waits on the future: warnings raised on any other
        # thread are buffered and replayed on it (engine.cpp's warning_handler_).
        self.owner_thread = threading.get_ident()
        self.warnings: list = []
        self.anomaly = (_state.anomaly_enabled, _state.anomaly_check_nan)
        self.multithreading = _state.multithreading_enabled

    def completed(self):
        return self.outstanding_tasks <= 0 or (self.exit_on_error and self.has_error)

    def init_to_execute(self, graph_root, outputs, accumulate_grad, min_topo_nr):
        """Mark which nodes must run so gradients reach ``outputs`` (engine.cpp's DFS)."""
        exec_info = self.exec_info
        output_idx = 0
        for fn, input_nr in outputs:
            info = exec_info.setdefault(fn, _ExecInfo())
            if accumulate_grad:
                info.needed = True
            else:
                if info.captures is None:
                    info.captures = []
                info.captures.append((input_nr, output_idx))
                output_idx += 1
        self.captured_vars = [None] * output_idx
        # The root starts as not needed (engine.cpp emplaces a default ExecInfo): it runs
        # only if some output is reachable from it, so an unreachable input runs nothing.
        exec_info.setdefault(graph_root, _ExecInfo())

        def should_execute(fn):
            info = exec_info.get(fn)
            return info is not None and info.should_execute()

        seen = set()
        stack = [(graph_root, iter(graph_root.next_edges))]
        while stack:
            fn, children = stack[-1]
            child = None
            for edge in children:
                if edge is None:
                    continue
                c = edge[0]
                if c in seen:
                    if should_execute(c):
                        exec_info.setdefault(fn, _ExecInfo()).needed = True
                    continue
                seen.add(c)
                child = c
                break
            if child is not None:
                if child.topological_nr < min_topo_nr:
                    continue
                stack.append((child, iter(child.next_edges)))
            else:
                stack.pop()
                if should_execute(fn) and stack:
                    exec_info.setdefault(stack[-1][0], _ExecInfo()).needed = True

    def set_exception_without_signal(self, exc, fn):
        with self.mutex:
            first = not self.has_error
            self.has_error = True
        if first and fn is not None and self.anomaly[0]:
            _anomaly.report_forward_trace(fn, exc)

    def set_exception(self, exc, fn):
        self.set_exception_without_signal(exc, fn)
        self._signal_error(exc)

    def _signal_error(self, exc):
        with self.mutex:
            if self.future_completed:
                return
            self.future_completed = True
        self.future.set_error(exc)

    def exec_post_processing(self):
        if self.not_ready:
            raise RuntimeError("could not compute gradients for some functions")
        previous = _tls.graph_task
        _tls.graph_task = self  # more callbacks can be queued by callbacks
        # Callbacks run with the task's thread-local state (ThreadLocalStateGuard: grad mode
        # is create_graph, anomaly and multithreading modes those of the caller).
        prev_state = _swap_state(self)
        try:
            streams_bridge.sync_leaf_streams(self)
            with streams_bridge.caller_streams(self):
                i = 0
                while True:
                    with self.callbacks_lock:
                        if i >= len(self.final_callbacks):
                            break
                        cb = self.final_callbacks[i]
                    cb()
                    i += 1
        finally:
            _restore_state(prev_state)
            _tls.graph_task = previous

    def mark_as_completed_and_run_post_processing(self):
        with self.mutex:
            if self.future_completed:
                done = True
            else:
                self.future_completed = True
                done = False
        if done:
            self.future.wait()
            return
        buf = _begin_warning_capture(self)
        try:
            self.exec_post_processing()
            with self.mutex:
                captured, self.captured_vars = self.captured_vars, []
            error = None
        except BaseException as e:  # noqa: BLE001 - any error must reach the caller
            error = e
        finally:
            _end_warning_capture(self, buf)  # before the owner wakes up and replays them
        if error is None:
            self.future.set_result(captured)
        else:
            self.future.set_error(error)


class NodeTask:
    __slots__ = ("graph_task", "fn", "inputs", "is_shutdown")

    def __init__(self, graph_task, fn, inputs, is_shutdown=False):
        self.graph_task, self.fn, self.inputs, self.is_shutdown = graph_task, fn, inputs, is_shutdown


class ReadyQueue:
    """Shutdown tasks first, then wake-up tasks, then deepest reentrant level, then latest node."""

    _tiebreak = itertools.count()

    def __init__(self):
        self.heap = []
        self.cv = threading.Condition(threading.Lock())

    def push(self, task: NodeTask, increment_outstanding=True):
        if task.is_shutdown:
            key = (0, 0, 0)
        elif task.fn is None:
            key = (1, 0, 0)
        else:
            key = (2, -task.graph_task.reentrant_depth, -task.fn.sequence_nr)
        if increment_outstanding and task.graph_task is not None:
            # engine.cpp bumps an atomic; here the task's mutex, taken before (never
            # inside) the queue's lock, so no two locks are ever held in opposite order.
            with task.graph_task.mutex:
                task.graph_task.outstanding_tasks += 1
        cv = self.cv
        with cv:
            heapq.heappush(self.heap, (key, next(self._tiebreak), task))
            if cv._waiters:  # (read under the lock, where wait() adds itself): no waiter, nothing to wake
                cv.notify()

    def pop(self) -> NodeTask:
        with self.cv:
            while not self.heap:
                self.cv.wait()
            return heapq.heappop(self.heap)[2]

    def __len__(self):
        return len(self.heap)


class InputBuffer:
    """Gradients arriving for one node, summed per input slot (input_buffer.cpp)."""

    __slots__ = ("buffer",)

    def __init__(self, size):
        self.buffer = [None] * size

    def add(self, pos, var, producer_stream, consumer_stream):
        if var is None:
            return
        if producer_stream is not consumer_stream:  # (one stream, or none: nothing to sync)
            var = streams_bridge.sync_for_accumulation(var, producer_stream, consumer_stream)
        old = self.buffer[pos]
        if old is None:
            self.buffer[pos] = var
        else:
            with streams_bridge.accumulation_stream(consumer_stream):
                self.buffer[pos] = old + var

    def device(self):
        for v in self.buffer:
            if v is not None and (v._device.type != "cpu" or v._device.index != 0):
                return v._device
        return None


# ---- the gradient checks of engine.cpp --------------------------------------
def validate_outputs(edges, grads, format_error):
    """Check count, shape (reducing broadcasts), dtype (casting) and device of gradients."""
    if len(grads) != len(edges):
        raise RuntimeError(format_error(f"invalid number of gradients - expected {len(edges)}, but got {len(grads)}"))
    for i, edge in enumerate(edges):
        if edge is None:
            continue
        grad = grads[i]
        if grad is None:
            continue
        d = grad._data
        if d is None:
            grad._fresh()  # a view (a hook or a custom backward returned one): its value now
            d = grad._data
        meta = edge[0].input_metadata[edge[1]]
        aval = getattr(d, "aval", None)  # a jax array's shape and dtype at once (its properties read it each)
        if (aval is not None and aval.shape == meta.shape and _BY_NP.get(aval.dtype) is meta.dtype
                and grad._device is meta.device):
            continue  # the common case: nothing to check further, nothing to change
        if grad.shape != meta.shape:
            if _expandable(meta.shape, grad.shape):
                grad = grad.sum_to_size(meta.shape)
            else:
                raise RuntimeError(format_error(
                    f"invalid gradient at index {i} - got {list(grad.shape)} but expected shape compatible "
                    f"with {list(meta.shape)}"))
        if grad.dtype is not meta.dtype:
            # engine.cpp: TORCH_CHECK(isFloatingType(grad) || input_is_complex == grad_is_complex),
            # then cast. So integer and bool gradients are cast too; only a complex gradient
            # for a real input (or an integer one for a complex input) is refused.
            if not grad.dtype.is_floating_point and meta.dtype.is_complex != grad.dtype.is_complex:
                raise RuntimeError(format_error(
                    f"invalid gradient at index {i} - expected dtype {meta.dtype} but got {grad.dtype}"))
            grad = grad.to(meta.dtype)
        if grad._device is not meta.device:
            if grad.ndim == 0:
                grad = grad.to(meta.device)
            else:
                raise RuntimeError(format_error(
                    f"invalid gradient at index {i} - expected device {meta.device} but got {grad._device}"))
        grads[i] = grad


def _expandable(shape, to_shape):
    if len(shape) > len(to_shape):
        return False
    for a, b in zip(reversed(shape), reversed(to_shape)):
        if a != b and a != 1:
            return False
    return True


# ---- hooks, in NOTE [Hooks ordering] order ------------------------------------
def _hook_name(hook):
    return getattr(hook, "__name__", "<unknown>")


def _apply_hook_result(hook, old, new, what):
    """python_hook.cpp check_single_result: None keeps the value, a tensor must match it."""
    if new is None:
        return old
    if not isinstance(new, Tensor):
        raise TypeError(f"expected a Tensor or None from {what} hook '{_hook_name(hook)}', "
                        f"but got {type(new).__name__}")
    if old is None:
        raise RuntimeError("can't replace a None gradient with a non-None value")
    if new.dtype is not old.dtype or new._device is not old._device:
        was, got = (old.dtype, new.dtype) if new.dtype is not old.dtype else (old._device, new._device)
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the type of value (was {was} got {got})")
    if new.shape != old.shape:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value: "
                           f"expected {list(old.shape)} but got {list(new.shape)}")
    return new._fresh()  # a view a hook returned: its value now (kernels read arrays)


def _check_count(hook, res, n):
    if len(res) != n:
        raise RuntimeError(f"hook '{_hook_name(hook)}' has returned an incorrect number of values "
                           f"(got {len(res)}, but expected {n})")


def call_tensor_pre_hooks(fn, inputs):
    for idx, hook in fn._tensor_hooks():
        inputs[idx] = _apply_hook_result(hook, inputs[idx], hook(inputs[idx]), "tensor")
    if fn._retains_grad_hooks:
        for idx, hook in list(fn._retains_grad_hooks.items()):
            inputs[idx] = hook(inputs[idx])
    return inputs


def _call_pre_hooks(fn, inputs):
    for hook in list(fn._pre_hooks.values()):
        res = hook(tuple(inputs))
        if res is not None:
            res = list(res) if isinstance(res, (tuple, list)) else [res]
            _check_count(hook, res, len(inputs))
            # A None entry in a returned tuple makes that gradient undefined (PyTorch's _call_hooks).
            inputs = [None if n is None else _apply_hook_result(hook, o, n, "pre") for o, n in zip(inputs, res)]
    return inputs


def _call_post_hooks(fn, outputs, inputs):
    for hook in list(fn._post_hooks.values()):
        res = hook(tuple(outputs), tuple(inputs))
        if res is not None:
            res = list(res) if isinstance(res, (tuple, list)) else [res]
            _check_count(hook, res, len(outputs))
            outputs = [None if n is None else _apply_hook_result(hook, o, n, "post") for o, n in zip(outputs, res)]
    return outputs


# Ways to run a whole backward pass other than node by node, tried in order by ``execute``: each
# returns what ``execute`` would, or NotImplemented. ``jgrad.runtime._backward_plan`` installs one (Note
# [Backward plans]); the engine never imports it.
fast_paths: list = []

# Observers of node execution (the profiler): each has ``node_begin(task, fn)`` and
# ``node_end(task, fn, outputs)`` (outputs None when it raised), called on the thread that runs it.
node_observers: list = []


def _observed_call(task, fn, inputs):
    observers = list(node_observers)
    for obs in observers:
        obs.node_begin(task, fn)
    outputs = None
    try:
        outputs = call_function(task, fn, inputs)
        return outputs
    finally:
        for obs in observers:
            obs.node_end(task, fn, outputs)


def call_function(task, fn, inputs):
    if fn._tensor_pre_hooks is not None or fn._retains_grad_hooks or fn._leaf_hooks:
        inputs = call_tensor_pre_hooks(fn, inputs)
    if fn._pre_hooks:
        inputs = _call_pre_hooks(fn, inputs)
    prev, _tls.node_inputs = _tls.node_inputs, inputs
    try:
        outputs = fn.apply(list(inputs) if fn._post_hooks else inputs)
    finally:
        _tls.node_inputs = prev
    validate_outputs(fn.next_edges, outputs, lambda msg: f"Function {fn.name()} returned an {msg}")
    if fn._post_hooks:
        return _call_post_hooks(fn, outputs, inputs)
    return outputs


def node_inputs():
    """The gradients the node the engine is running on this thread received (empty outside a backward)."""
    return tuple(_tls.node_inputs or ())


def task_should_compute_output(edge) -> bool:
    """Whether the running graph task needs the gradient along ``edge`` (exec_info trimming)."""
    if edge is None:
        return False
    task = _tls.graph_task
    if task is None or not task.exec_info or not _trimming[0]:
        return True
    info = task.exec_info.get(edge[0])
    return info is not None and info.should_execute()


def output_mask(edges) -> tuple:
    """``task_should_compute_output`` of each of a node's edges (its ``needs_input_grad``), in one call."""
    task = _tls.graph_task
    if task is None or not task.exec_info or not _trimming[0]:
        return tuple([e is not None for e in edges])
    return tuple([task_should_compute_output(e) for e in edges])


def current_graph_task_id() -> int:
    task = _tls.graph_task
    return task.id if task is not None else -1


def current_execution_order():
    """The nodes the running backward will execute, in order (engine.cpp)."""
    task = _tls.graph_task
    if task is None:
        # torch._C._current_graph_task_execution_order raises on an empty order.
        raise RuntimeError("current_execution_order should only be called during the backward pass")
    if task.multithreading:
        raise RuntimeError(
            "get_current_graph_task_execution_order expects the current backward to be executed with multithreading "
            "disabled, e.g. by running:\n\n>>> with jgrad.autograd.set_multithreading_enabled(False):\n"
            "...     jgrad.autograd.grad(...)\n")
    check = bool(task.exec_info)

    def should_execute(fn):
        info = task.exec_info.get(fn)
        return info is not None and info.should_execute()

    # Dependencies must be counted too (upstream's fix of this function): an AccumulateGrad
    # (sequence_nr UINT64_MAX) with several inputs runs only once all of them arrived.
    # Counted afresh here: the task's own counts are consumed as the backward runs.
    deps: dict = {}
    seen = set(task.graph_roots)
    stack = list(task.graph_roots)
    while stack:
        fn = stack.pop()
        for edge in fn.next_edges:
            if edge is None or (check and not should_execute(edge[0])):
                continue
            nxt = edge[0]
            deps[nxt] = deps.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    out = []
    heap = [(-fn.sequence_nr, next(ReadyQueue._tiebreak), fn) for fn in dict.fromkeys(task.graph_roots)
            if fn not in deps]
    heapq.heapify(heap)
    while heap:
        fn = heapq.heappop(heap)[2]
        out.append(fn)
        for edge in fn.next_edges:
            if edge is None or (check and not should_execute(edge[0])):
                continue
            nxt = edge[0]
            deps[nxt] -= 1
            if deps[nxt] == 0:
                heapq.heappush(heap, (-nxt.sequence_nr, next(ReadyQueue._tiebreak), nxt))
    return out


# ---- warnings raised in worker threads reach the caller ----------------------
# engine.cpp installs the graph task's warning handler on every thread that runs
# one of its nodes and replays the buffered warnings on the caller once the
# future completes (PR 66235). Python's equivalent hook is warnings._showwarnmsg:
# the C warn() looks it up on the module at each call, after the filters ran in
# the warning thread, and catch_warnings() leaves it alone (it swaps
# showwarning/_showwarnmsg_impl), so a backward started inside pytest.warns or
# catch_warnings(record=True) still gets the warnings on the caller.
_original_showwarnmsg = warnings._showwarnmsg


def _relay_showwarnmsg(msg):
    buf = _tls.warning_buffer
    if buf is None:
        return _original_showwarnmsg(msg)
    buf.append(msg)


warnings._showwarnmsg = _relay_showwarnmsg


def _begin_warning_capture(task):
    """Start buffering this thread's warnings for ``task`` unless it is the owner thread."""
    if threading.get_ident() == task.owner_thread:
        return None
    prev = _tls.warning_buffer
    _tls.warning_buffer = []
    return prev, _tls.warning_buffer


def _end_warning_capture(task, token):
    if token is None:
        return
    prev, buf = token
    _tls.warning_buffer = prev
    if buf:
        with task.mutex:
            task.warnings.extend(buf)


def _replay_warnings(task):
    """Re-emit (on the calling thread) the warnings other threads raised for ``task``."""
    with task.mutex:
        msgs, task.warnings = task.warnings, []
    for msg in msgs:
        # The filters already ran where the warning was raised; a caller that is itself
        # a worker of an outer backward buffers it again for that backward's caller.
        warnings._showwarnmsg(msg)


def _swap_state(task):
    prev = (_state.grad_enabled, _state.anomaly_enabled, _state.anomaly_check_nan, _state.multithreading_enabled)
    _state.grad_enabled = task.grad_mode
    _state.anomaly_enabled, _state.anomaly_check_nan = task.anomaly
    _state.multithreading_enabled = task.multithreading
    return prev


def _restore_state(prev):
    _state.grad_enabled, _state.anomaly_enabled, _state.anomaly_check_nan, _state.multithreading_enabled = prev


class Engine:
    """The default engine (one per process)."""

    def __init__(self):
        self.max_recursion_depth = MAX_DEPTH
        self.device_queues: dict = {}
        self._started = False
        self._start_lock = threading.Lock()
        self._pool_lock = threading.Condition(threading.Lock())
        self._pool_queue: list = []
        self._pool_workers = 0

    # -- threads ------------------------------------------------------------
    def _start_device_threads(self):
        with self._start_lock:
            if self._started:
                return
            devs = [from_jax(d) for d in _devices("cpu")[1:]]
            for kind in ("gpu", "tpu"):
                devs += [from_jax(d) for d in _devices(kind)]
            ready = []
            for dev in devs:
                q = ReadyQueue()
                self.device_queues[dev] = q
                started = threading.Event()
                t = threading.Thread(target=self._device_thread, args=(dev, q, started),
                                     name=f"jgrad-autograd-{dev}", daemon=True)
                t.start()
                ready.append(started)
            for e in ready:
                e.wait()
            self._started = True

    def _device_thread(self, dev, queue, started):
        _tls.worker_device = dev
        _tls.local_ready_queue = queue
        started.set()
        self.thread_main(None)

    def _reentrant_thread(self):
        while True:
            with self._pool_lock:
                self._pool_workers += 1  # counts idle workers, as engine.cpp's num_workers_
                while not self._pool_queue:
                    self._pool_lock.wait()
                self._pool_workers -= 1
                task = self._pool_queue.pop(0)
            _tls.worker_device = task.owner
            _tls.local_ready_queue = task.cpu_ready_queue
            _tls.total_depth = task.reentrant_depth
            _tls.current_depth = 0
            self.thread_main(task)

    def _add_thread_pool_task(self, task):
        with self._pool_lock:
            create = self._pool_workers <= len(self._pool_queue)
            self._pool_queue.append(task)
            self._pool_lock.notify()
        if create:
            threading.Thread(target=self._reentrant_thread, name="jgrad-autograd-reentrant", daemon=True).start()

    def ready_queue(self, cpu_queue, device):
        if device is None or not _state.multithreading_enabled:
            return cpu_queue
        return self.device_queues.get(device, cpu_queue)

    def _ready_queue_by_owner(self, cpu_queue, owner):
        return cpu_queue if owner is CPU_DEVICE else self.device_queues.get(owner, cpu_queue)

    # -- the loop -------------------------------------------------------------
    def thread_main(self, graph_task):
        while graph_task is None or not graph_task.future.completed():
            task = _tls.local_ready_queue.pop()
            if task.is_shutdown:
                break
            local = task.graph_task
            if local is None:
                continue
            if task.fn is not None and not local.has_error:
                self._run_task(local, task)
            with local.mutex:
                local.outstanding_tasks -= 1
            if local.completed():
                local.mark_as_completed_and_run_post_processing()
                if _tls.worker_device is not local.owner:
                    self._ready_queue_by_owner(local.cpu_ready_queue, local.owner).push(NodeTask(local, None, None))

    def _run_task(self, local, task):
        # ThreadLocalStateGuard + GraphTaskGuard + NodeGuard + WarningHandlerGuard of thread_main.
        tls, st = _tls, _state
        prev = (tls.graph_task, tls.current_node, st.grad_enabled, st.anomaly_enabled, st.anomaly_check_nan,
                st.multithreading_enabled)
        tls.graph_task, tls.current_node = local, task.fn
        st.grad_enabled = local.grad_mode
        st.anomaly_enabled, st.anomaly_check_nan = local.anomaly
        st.multithreading_enabled = local.multithreading
        capture = None if threading.get_ident() == local.owner_thread else _begin_warning_capture(local)
        error = None
        try:
            self.evaluate_function(local, task.fn, task.inputs, local.cpu_ready_queue)
        except BaseException as e:  # noqa: BLE001 - delivered to the caller with its traceback
            error = e
            # The anomaly report is a warning of this thread: emit it while it is still captured.
            local.set_exception_without_signal(e, task.fn)
        finally:
            (tls.graph_task, tls.current_node, st.grad_enabled, st.anomaly_enabled, st.anomaly_check_nan,
             st.multithreading_enabled) = prev
            if capture is not None:
                _end_warning_capture(local, capture)
        if error is not None:
            local._signal_error(error)  # only now may the owner wake up and replay the warnings

    def evaluate_function(self, task, fn, input_buffer, cpu_queue):
        with streams_bridge.node_stream(fn):
            exec_info = task.exec_info
            inputs = input_buffer.buffer
            if exec_info:
                info = exec_info.get(fn)
                if info is None:
                    return
                if not info.needed:
                    # Tensor pre-hooks run even for captured inputs= (NOTE [Hooks ordering]).
                    inputs = call_tensor_pre_hooks(fn, list(inputs))
                if info.captures:
                    with task.mutex:
                        for input_nr, output_idx in info.captures:
                            task.captured_vars[output_idx] = inputs[input_nr]
                        if fn._stream is not None:
                            task.leaf_streams.add(fn._stream)
                if not info.needed:
                    return
            if node_observers:
                outputs = _observed_call(task, fn, inputs)
            else:
                outputs = call_function(task, fn, inputs)
            if not task.keep_graph:
                fn.release_variables()
            if not outputs:
                if fn._stream is not None:
                    with task.mutex:
                        task.leaf_streams.add(fn._stream)
                return
            if _state.anomaly_enabled and _state.anomaly_check_nan:
                _anomaly.check_nan(fn, outputs)
            self._dispatch_outputs(task, fn, outputs, cpu_queue)

    def _dispatch_outputs(self, task, fn, outputs, cpu_queue):
        exec_info = task.exec_info
        producer_stream = fn._stream
        with task.mutex:
            for i, edge in enumerate(fn.next_edges):
                if edge is None:
                    continue
                nxt, input_nr = edge
                deps = task.dependencies
                count = deps.get(nxt)
                if count is None:
                    raise RuntimeError(f"dependency not found for {nxt.name()}")
                ready = count == 1
                if ready:
                    del deps[nxt]
                else:
                    deps[nxt] = count - 1
                buf = task.not_ready.get(nxt)
                if buf is None:
                    if exec_info:
                        info = exec_info.get(nxt)
                        if info is None or not info.should_execute():
                            continue
                    buf = InputBuffer(len(nxt.input_metadata))
                    buf.add(input_nr, outputs[i], producer_stream, nxt._stream)
                    if ready:
                        task.outstanding_tasks += 1  # push's count, under the task's mutex held here already
                        self.ready_queue(cpu_queue, buf.device()).push(NodeTask(task, nxt, buf), False)
                    else:
                        task.not_ready[nxt] = buf
                else:
                    buf.add(input_nr, outputs[i], producer_stream, nxt._stream)
                    if ready:
                        del task.not_ready[nxt]
                        task.outstanding_tasks += 1
                        self.ready_queue(cpu_queue, buf.device()).push(NodeTask(task, nxt, buf), False)

    # -- entry point ------------------------------------------------------------
    def execute(self, root_edges, grads, keep_graph, create_graph, accumulate_grad, outputs):
        """Run backward from ``root_edges`` seeded with ``grads``; return captured grads."""
        validate_outputs(root_edges, grads, lambda msg: msg)
        if accumulate_grad and create_graph:
            _warn_create_graph_cycle()
        if not accumulate_grad and not outputs:
            raise ValueError("grad requires non-empty inputs.")
        for fast in fast_paths:  # "auto" mode: a pass with no user code in it, as one recorded step
            res = fast(self, root_edges, grads, keep_graph, create_graph, accumulate_grad, outputs)
            if res is not NotImplemented:
                return res
        if not self._started:
            self._start_device_threads()
        if _tls.local_ready_queue is None:
            _tls.local_ready_queue = ReadyQueue()
        reentrant = _tls.worker_device is not NO_DEVICE
        roots = [e[0] for e in root_edges]
        task = GraphTask(keep_graph, create_graph, _tls.total_depth + 1 if reentrant else 0,
                         _tls.local_ready_queue, roots)
        single = len(root_edges) == 1
        graph_root = root_edges[0][0] if single else GraphRoot(root_edges, grads)
        min_topo = min((e[0].topological_nr for e in outputs), default=0) if outputs else 0
        self._compute_dependencies(graph_root, task, min_topo)
        if outputs:
            task.init_to_execute(graph_root, outputs, accumulate_grad, min_topo)
        if single:
            buf = InputBuffer(len(graph_root.input_metadata))
            g = grads[0]
            buf.add(root_edges[0][1], g, g._stream if g is not None else None, graph_root._stream)
        else:
            buf = InputBuffer(0)
        self._execute_with_graph_task(task, graph_root, buf)
        task.future.wait()
        if task.warnings:
            _replay_warnings(task)
        if task.future.error is not None:
            raise task.future.error
        return task.future.value

    def _compute_dependencies(self, root, task, min_topo):
        deps, seen = task.dependencies, task.nodes_in_graph
        queue = [root]
        uses_streams = False
        while queue:
            fn = queue.pop()
            if fn.topological_nr < min_topo:
                continue
            if fn._stream is not None:
                uses_streams = True
            for edge in fn.next_edges:
                if edge is not None:
                    nxt = edge[0]
                    deps[nxt] = deps.get(nxt, 0) + 1
                    if nxt not in seen:
                        seen.add(nxt)
                        queue.append(nxt)
        if uses_streams:
            streams_bridge.stash_current_streams(task)

    def _execute_with_graph_task(self, task, root, buf):
        queue = self.ready_queue(task.cpu_ready_queue, buf.device())
        if _tls.worker_device is NO_DEVICE:
            _tls.worker_device = CPU_DEVICE
            task.owner = CPU_DEVICE
            queue.push(NodeTask(task, root, buf))
            try:
                self.thread_main(task)
            finally:
                _tls.worker_device = NO_DEVICE
        else:
            task.owner = _tls.worker_device
            queue.push(NodeTask(task, root, buf))
            if _tls.current_depth >= self.max_recursion_depth:
                self._add_thread_pool_task(task)
            else:
                _tls.total_depth += 1
                _tls.current_depth += 1
                try:
                    self.thread_main(task)
                finally:
                    _tls.current_depth -= 1
                    _tls.total_depth -= 1

    def queue_callback(self, callback):
        task = _tls.graph_task
        if task is None:
            raise RuntimeError("Final callbacks can only be installed during backward pass.")
        with task.callbacks_lock:
            task.final_callbacks.append(callback)


_warned_cycle = [False]


def _warn_create_graph_cycle():
    if not _warned_cycle[0]:
        _warned_cycle[0] = True
        warnings.warn(
            "Using backward() with create_graph=True will create a reference cycle between the parameter "
            "and its gradient which can cause a memory leak. We recommend using autograd.grad when creating "
            "the graph to avoid this. If you have to use this function, make sure to reset the .grad fields "
            "of your parameters to None after use to break the cycle and avoid the leak.", UserWarning,
            stacklevel=4)


engine = Engine()
