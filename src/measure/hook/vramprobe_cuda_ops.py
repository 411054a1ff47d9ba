"""What CUDA's kernels allocate where the CPU's differ, for the GPU
prediction from a CPU run of a user's command: vramprobe's hook rewrites
the last CPU step's trace (its allocations and frees, in order, as
[address, bytes, op]; bytes negative for a free) before the sweep scales
it and replays it through the caching allocator's model.

- Attention. CUDA runs scaled_dot_product_attention as one fused kernel
  (flash, or memory-efficient for fp32) where the CPU falls back to its
  math path (dropout in training, some masks). The math path keeps the
  scaled query and key, the L x L weights, their dropout noise and the
  dropped weights for the backward, and its backward makes L x L
  gradients; the fused kernel keeps its inputs, output and log-sum-exp,
  and its backward needs one fp32 scratch of the query's size.
- Normalization under autocast. CUDA's autocast runs layer_norm and
  group_norm in fp32: a half-precision input is copied to fp32 and the
  copy is saved for the backward (the input itself goes, unless something
  else holds it). The CPU's autocast runs them in the input's dtype. (Their
  fp32 output, which the next op casts down, lives for one op: not added.)
- Dropout. CUDA's fused dropout saves a bool mask, 1 byte an element; the
  CPU's saves its noise in the input's dtype, 2 or 4. The noise is cut to
  half its size, an upper bound of the mask's (no dtype in the profile).

The cheap profile the CPU trials run has no shapes, so `watch` notes each
such call's inputs by step. Plain Python, no torch here: the rules are
tested on hand-made profiles in tests/python/test_cuda_ops.py.
"""
import functools

MATH_ATTENTION = "aten::_scaled_dot_product_attention_math"
NORMS = ("aten::layer_norm", "aten::group_norm")
DROPOUTS = ("aten::dropout", "aten::dropout_")
BACKWARD = "autograd::engine::evaluate_function: "
# Without the call's shape (watch missed it): the fused forward's
# log-sum-exp, (batch, heads, query length) in fp32, is at most a 16th of
# the output for any head of 32 halves or 16 floats and up; the backward's
# scratch (flash's fp32 accumulator of the query's gradient) at most 2
# outputs.
LSE_FRACTION = 16
BACKWARD_SCRATCH = 2
# Addresses for what only CUDA allocates, above any real one.
SYNTHETIC_ADDRESS = 1 << 62


def watch(torch, calls, step):
    """Wraps torch.nn.functional's scaled_dot_product_attention, layer_norm
    and group_norm to note each call in `calls[step()]`, in order:
    ("attention", (input storages, the query's shape)) and ("norm", (the
    input's storage, its elements when autocast would copy it to fp32 on
    CUDA, else 0)). Only the step being run and the one before are kept."""
    functional = torch.nn.functional
    half = (torch.float16, torch.bfloat16)

    def note(kind, info):
        n = step()
        calls.setdefault(n, []).append((kind, info))
        for old in [s for s in calls if s < n - 1]:
            del calls[old]

    try:
        torch.is_autocast_enabled("cpu")
        autocast_on = torch.is_autocast_enabled
    except TypeError:  # torch < 2.4: no device argument

        def autocast_on(device):
            return torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()

    compiler = getattr(torch, "compiler", None)
    compiling = getattr(compiler, "is_compiling", lambda: False)

    def attention(original):
        def scaled_dot_product_attention(query, key, value, *args, **kwargs):
            if compiling():  # torch.compile traces the op, not the note
                return original(query, key, value, *args, **kwargs)
            try:
                inputs = {t.untyped_storage().data_ptr() for t in (query, key, value)}
                note("attention", (inputs, tuple(query.shape)))
            except Exception:  # a tensor subclass without a storage: nothing to note
                note("attention", None)
            return original(query, key, value, *args, **kwargs)

        return scaled_dot_product_attention

    def norm(original):
        def normalize(input, *args, **kwargs):
            if compiling():
                return original(input, *args, **kwargs)
            try:
                cast = input.dtype in half and autocast_on(input.device.type)
                note("norm", (input.untyped_storage().data_ptr(), input.numel() if cast else 0))
            except Exception:
                note("norm", None)
            return original(input, *args, **kwargs)

        return normalize

    for name, wrap in (("scaled_dot_product_attention", attention), ("layer_norm", norm), ("group_norm", norm)):
        original = getattr(functional, name, None)
        if original is None or hasattr(original, "__wrapped__"):
            continue
        wrapper = functools.wraps(original)(wrap(original))
        setattr(functional, name, wrapper)
        try:  # torch.jit.script: the wrapper is the aten op itself, as the original was
            torch.jit._builtins._register_builtin(wrapper, f"aten::{name}")
        except Exception:
            pass


def as_on_cuda(trace, events, name_of, calls=None):
    """`trace` (made from the profiler's allocation `events`, one for one)
    as CUDA's kernels would allocate it, given the step's `calls` (watch)."""

    def is_copy(i):
        node = events[i].parent
        while node is not None and name_of(node) != "aten::clone":
            node = node.parent
        return node is not None

    by_kind = {}
    for kind, info in calls or ():
        by_kind.setdefault(kind, []).append(info)
    return rewrite(trace, groups(events, name_of), by_kind, is_copy)


def groups(events, name_of):
    """For each allocation event, the op it is part of whose CUDA kernel
    allocates otherwise, as (kind, that op's key, True in its forward or
    False in its backward), or None. A backward function is the op's when
    the forward op that made it ran inside the op: the same sequence
    number."""
    marks, numbers = [], {}
    for e in events:
        node, found = e.parent, None
        while node is not None:
            name = name_of(node)
            # The nearest op of a kind, but attention over all: its math
            # path runs a dropout of its own.
            if name == MATH_ATTENTION:
                found = ("attention", node)
                break
            if found is None and (name in NORMS or name in DROPOUTS):
                found = ("norm" if name in NORMS else "dropout", node)
            node = node.parent
        mark = None
        if found is not None:
            kind, node = found
            # Its start, not id(): each .parent is a new Python object.
            mark = (kind, node.start_time_ns, True)
            if mark[1] not in numbers:
                numbers[mark[1]] = (kind, _sequence_numbers(node, name_of))
        marks.append(mark)
    backward_of = {}
    for key, (kind, seen) in numbers.items():
        backward_of.update((n, (kind, key)) for n in seen)
    for i, e in enumerate(events):
        node = e.parent if marks[i] is None else None
        while node is not None:
            if name_of(node).startswith(BACKWARD):
                owner = backward_of.get(node.extra_fields.sequence_number)
                marks[i] = None if owner is None else (owner[0], owner[1], False)
                break
            node = node.parent
    return marks


def _sequence_numbers(node, name_of):
    """The autograd sequence numbers of the ops under `node` that make a
    backward function. An `aten::to` that copies nothing makes none: it
    carries the next op's number, which may be outside `node`."""
    seen, stack = [], list(node.children)
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        number = getattr(n.extra_fields, "sequence_number", -1)
        if number is None or number < 0:
            continue
        if name_of(n) == "aten::to" and not any(name_of(c) == "aten::_to_copy" for c in n.children):
            continue
        seen.append(number)
    return seen


def rewrite(trace, marks, calls=None, is_copy=None):
    """`trace` with each marked op (`marks[i]`, from groups) allocating as
    its CUDA kernel does (see the module's doc). `calls` maps a kind to its
    calls in order (watch); a kind's calls are used when there is one for
    each of its ops in the trace. `is_copy(i)`: event i is a copy
    (aten::clone). Only for the GPU prediction: the CPU's own records keep
    what the CPU allocated."""
    found = {}
    for i, mark in enumerate(marks):
        if mark is not None:
            found.setdefault((mark[0], mark[1]), ([], []))[0 if mark[2] else 1].append(i)
    found = [(key[0], f, b) for key, (f, b) in found.items() if f]
    if not found:
        return trace
    calls = calls or {}
    matched = {}
    for kind in {g[0] for g in found}:
        noted = calls.get(kind, ())
        matched[kind] = iter(noted) if len(noted) == sum(g[0] == kind for g in found) else None
    r = _Rewrite(trace)
    for k, (kind, forward, backward) in enumerate(found):
        call = next(matched[kind]) if matched[kind] is not None else None
        if kind == "attention":
            r.attention(k, forward, backward, call, is_copy, len(found))
        elif kind == "norm":
            r.norm(k, forward, backward, call)
        else:
            r.dropout(forward)
    return r.result()


class _Rewrite:
    """The edits to one trace: events dropped, events added before or after
    an event, addresses changed."""

    def __init__(self, trace):
        self.trace = [list(e) for e in trace]
        self.free_of, open_at, self.frees = {}, {}, {}
        for j, (ptr, size, _) in enumerate(trace):
            if size > 0:
                open_at[ptr] = j
            else:
                self.frees.setdefault(ptr, []).append(j)
                if ptr in open_at:
                    self.free_of[open_at.pop(ptr)] = j
        self.allocation_of = {j: i for i, j in self.free_of.items()}
        self.dropped, self.before, self.after = set(), {}, {}

    def result(self):
        out = []
        for i, event in enumerate(self.trace):
            out.extend(self.before.get(i, ()))
            if i not in self.dropped:
                out.append(event)
            out.extend(self.after.get(i, ()))
        return out

    def drop_all_but(self, indices, kept):
        """Drops the allocations among `indices` not in `kept`, and their frees."""
        for i in indices:
            if self.trace[i][1] > 0 and i not in kept:
                self.dropped.add(i)
                if i in self.free_of:
                    self.dropped.add(self.free_of[i])

    def first_free_after(self, ptr, index):
        return next((j for j in self.frees.get(ptr, ()) if j > index), None)

    def attention(self, k, forward, backward, call, is_copy, ops):
        trace, free_of = self.trace, self.free_of
        last = forward[-1]
        surviving = [i for i in forward if trace[i][1] > 0 and free_of.get(i, len(trace)) > last]
        if not surviving:
            return
        output = surviving[-1]  # the last op's result: attention @ value
        size, op = trace[output][1], trace[output][2]
        if call is None:
            lse, scratch = max(size // LSE_FRACTION, 1), BACKWARD_SCRATCH * size
        else:
            shape = call[1]
            rows = 1
            for n in shape[:-2]:
                rows *= n
            # Memory-efficient attention pads the length to 32, flash's
            # accumulator to 128 (PyTorch's flash and cutlass kernels).
            lse = 4 * rows * -(-shape[-2] // 32) * 32
            scratch = 4 * rows * -(-shape[-2] // 128) * 128 * shape[-1]
        saved_frees = sorted(free_of[i] for i in surviving if i != output and i in free_of)
        self.drop_all_but(forward, {output})
        address = SYNTHETIC_ADDRESS + 2 * k
        self.after.setdefault(output, []).append([address, lse, op])
        if not backward:
            if saved_frees:
                self.before.setdefault(saved_frees[0], []).append([address, -lse, op])
            return
        done = backward[-1]
        # The output's copy the next op makes (a reshape after
        # transpose(1, 2)): the fused kernels lay the output out with the
        # heads inside, so that copy is a view on CUDA.
        copy = next((j for j in range(last + 1, len(trace)) if trace[j][1] > 0), None)
        if (
            copy is not None
            and is_copy is not None
            and trace[copy][1] == size
            and free_of.get(output, len(trace)) > copy
            and free_of.get(copy, len(trace)) < done
            and is_copy(copy)
        ):
            self.drop_all_but([copy], set())
        leaving = {i for i in backward if trace[i][1] > 0 and free_of.get(i, len(trace)) > done}
        self.drop_all_but(backward, leaving)
        self.before.setdefault(backward[0], []).append([address + 1, scratch, trace[backward[0]][2]])
        ends = self.after.setdefault(done, [])
        ends.append([address + 1, -scratch, trace[done][2]])
        ends.append([address, -lse, trace[done][2]])
        # The output, and the inputs by their first free after the forward.
        kept = {output}
        for ptr in call[0] if call is not None else ():
            free = self.first_free_after(ptr, last)
            if free in self.allocation_of:
                kept.add(self.allocation_of[free])
        for made in sorted(kept):
            # Its free moves to the backward's end, under an address of its
            # own (the CPU allocator may hand the address out again before
            # then).
            free = free_of.get(made)
            if free is None or free >= done or free in self.dropped:
                continue
            trace[made][0] = SYNTHETIC_ADDRESS + 2 * ops + made
            self.dropped.add(free)
            ends.append([trace[made][0], trace[free][1], trace[done][2]])

    def norm(self, k, forward, backward, call):
        if call is None or not call[1]:
            return  # not copied to fp32 (or not known to be)
        trace = self.trace
        ptr, elements = call
        size, op, last = 4 * elements, trace[forward[0]][2], forward[-1]
        address = SYNTHETIC_ADDRESS + 2 * k
        self.before.setdefault(forward[0], []).append([address, size, op])
        free = self.first_free_after(ptr, last)
        if free is not None and backward and backward[0] <= free <= backward[-1] and free not in self.dropped:
            # Only the norm held its input: on CUDA the input goes once
            # copied, and the copy where the input went.
            self.dropped.add(free)
            self.after.setdefault(last, []).append([trace[free][0], trace[free][1], op])
            self.after.setdefault(free, []).append([address, -size, trace[free][2]])
        else:
            end = backward[-1] if backward else last
            self.after.setdefault(end, []).append([address, -size, trace[end][2]])

    def dropout(self, forward):
        # The noise (empty_like), then the output of its size (input * noise).
        allocs = [i for i in forward if self.trace[i][1] > 0]
        if len(allocs) < 2 or self.trace[allocs[0]][1] != self.trace[allocs[-1]][1]:
            return
        noise = allocs[0]
        mask = max(self.trace[noise][1] // 2, 1)
        self.trace[noise][1] = mask
        if noise in self.free_of:
            self.trace[self.free_of[noise]][1] = -mask
