"""The hook's rewrite of a CPU step's trace as CUDA's kernels allocate
(src/measure/hook/vramprobe_cuda_ops.py) on hand-made profiles, where what
CUDA allocates follows from the rules. Plain Python, no torch:

    python3 tests/python/test_cuda_ops.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "src", "measure", "hook"))
import vramprobe_cuda_ops as ops  # noqa: E402

S = ops.SYNTHETIC_ADDRESS


class Fields:
    def __init__(self, seq):
        self.sequence_number = seq


class Node:
    """A profiler tree node: a name, its parent, its children, a start."""

    def __init__(self, name, parent=None, seq=-1, start=0):
        self.name, self.parent, self.children = name, parent, []
        self.extra_fields, self.start_time_ns = Fields(seq), start
        if parent is not None:
            parent.children.append(self)


def name_of(node):
    return node.name


class AttentionAsOnCuda(unittest.TestCase):
    def test_the_math_paths_tensors_give_way_to_the_fused_kernels(self):
        fwd, bwd = ("attention", 7, True), ("attention", 7, False)
        trace = [
            [1, 100, 0],  # q, k, v: before the attention
            [2, 10, 0],  # the scaled query, saved for the backward
            [3, 400, 0],  # the scores, freed inside
            [3, -400, 0],
            [4, 400, 0],  # the softmax, saved
            [5, 16, 0],  # the output
            [6, 50, 0],  # the next layer
            [7, 400, 0],  # the backward's L x L gradient, freed inside
            [2, -10, 0],  # the saved tensors freed
            [4, -400, 0],
            [7, -400, 0],
            [8, 16, 0],  # the query's gradient, leaving the attention
            [8, -16, 0],
        ]
        marks = [None, fwd, fwd, fwd, fwd, fwd, None, bwd, bwd, bwd, bwd, bwd, None]
        lse, scratch = 16 // ops.LSE_FRACTION, 16 * ops.BACKWARD_SCRATCH
        self.assertEqual(
            ops.rewrite(trace, marks),
            [
                [1, 100, 0],
                [5, 16, 0],
                [S, lse, 0],
                [6, 50, 0],
                [S + 1, scratch, 0],
                [8, 16, 0],
                [S + 1, -scratch, 0],
                [S, -lse, 0],
                [8, -16, 0],
            ],
        )

    def test_the_inputs_and_output_are_kept_until_the_backward_is_done(self):
        fwd, bwd = ("attention", 7, True), ("attention", 7, False)
        trace = [
            [1, 100, 0],  # q, k, v: one packed storage
            [2, 10, 0],  # the scaled query, saved
            [5, 16, 0],  # the output
            [1, -100, 0],  # the packed storage freed after the forward (the math path copied it)
            [1, 30, 0],  # and its address handed out again
            [1, -30, 0],
            [5, -16, 0],  # the output freed (the next op copied it)
            [2, -10, 1],  # the backward
            [8, 16, 1],
            [8, -16, 0],
        ]
        marks = [None, fwd, fwd, None, None, None, None, bwd, bwd, None]
        # (batch 2, 4 heads, 8 queries, head of 16), fp32
        calls = {"attention": [({1}, (2, 4, 8, 16))]}
        lse, scratch = 4 * 2 * 4 * 32, 4 * 2 * 4 * 128 * 16
        # Their own addresses: the ones they had may be in use again.
        packed, output = S + 2 * 1 + 0, S + 2 * 1 + 2
        self.assertEqual(
            ops.rewrite(trace, marks, calls),
            [
                [packed, 100, 0],
                [output, 16, 0],
                [S, lse, 0],
                [1, 30, 0],
                [1, -30, 0],
                [S + 1, scratch, 1],
                [8, 16, 1],
                [S + 1, -scratch, 1],
                [S, -lse, 1],
                [packed, -100, 1],
                [output, -16, 1],
                [8, -16, 0],
            ],
        )

    def test_the_outputs_copy_by_the_next_op_is_a_view_on_cuda(self):
        fwd, bwd = ("attention", 7, True), ("attention", 7, False)
        trace = [
            [5, 16, 0],  # the output
            [9, 16, 2],  # its copy by a reshape, saved by the next layer
            [6, 40, 0],
            [9, -16, 1],  # the next layer's backward
            [8, 16, 1],  # the attention's backward
            [8, -16, 0],
            [5, -16, 0],
        ]
        marks = [fwd, None, None, None, bwd, None, None]
        lse, scratch = 16 // ops.LSE_FRACTION, 16 * ops.BACKWARD_SCRATCH
        expected = [
            [5, 16, 0],
            [S, lse, 0],
            [6, 40, 0],
            [S + 1, scratch, 1],
            [8, 16, 1],
            [S + 1, -scratch, 1],
            [S, -lse, 1],
            [8, -16, 0],
            [5, -16, 0],
        ]
        self.assertEqual(ops.rewrite(trace, marks, is_copy=lambda i: trace[i][2] == 2), expected)
        # Not a copy (another op of the output's size): it stays.
        kept = ops.rewrite(trace, marks, is_copy=lambda i: False)
        self.assertEqual(kept[2], [9, 16, 2])

    def test_calls_that_do_not_match_the_attentions_are_not_used(self):
        fwd = ("attention", 7, True)
        trace = [[5, 16, 0]]
        two_calls = {"attention": [({1}, (1, 1, 8, 16))] * 2}
        self.assertEqual(
            ops.rewrite(trace, [fwd], two_calls), [[5, 16, 0], [S, 16 // ops.LSE_FRACTION, 0]]
        )

    def test_a_trace_without_math_attention_is_left_alone(self):
        trace = [[1, 100, 0], [1, -100, 0]]
        self.assertIs(ops.rewrite(trace, [None, None]), trace)

    def test_a_backward_is_the_ops_by_its_forward_ops_sequence_numbers(self):
        root = Node("aten::scaled_dot_product_attention", start=10)
        math = Node(ops.MATH_ATTENTION, root, seq=5, start=11)
        for seq in (5, 6):
            Node("aten::bmm", math, seq=seq)
        Node("aten::to", math, seq=7)  # copies nothing: 7 is the next op's number
        inside = Node("[memory]", Node("aten::bmm", math, seq=6))
        norm = Node("aten::layer_norm", seq=8, start=20)
        in_norm = Node("[memory]", Node("aten::native_layer_norm", norm, seq=8))
        ours = Node("[memory]", Node(ops.BACKWARD + "BmmBackward0", seq=6))
        next_ops = Node("[memory]", Node(ops.BACKWARD + "SumBackward0", seq=7))
        norms = Node("[memory]", Node(ops.BACKWARD + "NativeLayerNormBackward0", seq=8))
        earlier = Node("[memory]", Node(ops.BACKWARD + "AddmmBackward0", seq=3))
        outside = Node("[memory]", Node("aten::add"))
        self.assertEqual(
            ops.groups([inside, in_norm, ours, next_ops, norms, earlier, outside], name_of),
            [
                ("attention", 11, True),
                ("norm", 20, True),
                ("attention", 11, False),
                None,
                ("norm", 20, False),
                None,
                None,
            ],
        )


class Dropout(unittest.TestCase):
    def test_the_cpus_noise_is_cut_to_an_upper_bound_of_cudas_mask(self):
        fwd, bwd = ("dropout", 4, True), ("dropout", 4, False)
        trace = [
            [1, 40, 0],  # the noise: 10 floats
            [9, 1, 0],  # a scalar
            [9, -1, 0],
            [2, 40, 0],  # the output
            [3, 40, 1],  # the backward's gradient
            [1, -40, 1],
        ]
        marks = [fwd, fwd, fwd, fwd, bwd, bwd]
        self.assertEqual(
            ops.rewrite(trace, marks),
            [[1, 20, 0], [9, 1, 0], [9, -1, 0], [2, 40, 0], [3, 40, 1], [1, -20, 1]],
        )

    def test_a_dropout_inside_math_attention_is_the_attentions(self):
        math = Node(ops.MATH_ATTENTION, start=11)
        inside = Node("[memory]", Node("aten::empty_like", Node("aten::dropout", math, seq=2)))
        alone = Node("aten::dropout", seq=4, start=30)
        noise = Node("[memory]", Node("aten::empty_like", alone))
        self.assertEqual(
            ops.groups([inside, noise], name_of), [("attention", 11, True), ("dropout", 30, True)]
        )


class NormUnderAutocast(unittest.TestCase):
    FWD, BWD = ("norm", 3, True), ("norm", 3, False)

    def test_the_half_input_is_copied_to_fp32_and_the_copy_saved(self):
        trace = [
            [1, 20, 0],  # the input: 10 halves, held only by the norm
            [2, 20, 0],  # the norm's output
            [2, -20, 0],
            [3, 8, 1],  # the norm's backward
            [1, -20, 1],
        ]
        marks = [None, self.FWD, None, self.BWD, self.BWD]
        self.assertEqual(
            ops.rewrite(trace, marks, {"norm": [(1, 10)]}),
            [
                [1, 20, 0],
                [S, 40, 0],  # the fp32 copy
                [2, 20, 0],
                [1, -20, 0],  # the input goes once copied
                [2, -20, 0],
                [3, 8, 1],
                [S, -40, 1],  # the copy where the input went
            ],
        )

    def test_an_input_held_by_another_op_stays(self):
        trace = [[1, 20, 0], [2, 20, 0], [3, 8, 1], [1, -20, 2]]
        marks = [None, self.FWD, self.BWD, None]
        self.assertEqual(
            ops.rewrite(trace, marks, {"norm": [(1, 10)]}),
            [[1, 20, 0], [S, 40, 0], [2, 20, 0], [3, 8, 1], [S, -40, 1], [1, -20, 2]],
        )

    def test_without_autocast_or_a_matching_call_nothing_changes(self):
        trace = [[1, 20, 0], [2, 20, 0], [3, 8, 1], [1, -20, 1]]
        marks = [None, self.FWD, self.BWD, self.BWD]
        for calls in ({"norm": [(1, 0)]}, {"norm": []}, None):
            self.assertEqual(ops.rewrite(trace, marks, calls), trace)


if __name__ == "__main__":
    unittest.main()
