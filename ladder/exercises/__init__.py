"""Exercises: one module per assignment's checker, and the notebooks made from the solutions.

- `grading`: Result (pass / fail, and why), printed as one line of feedback; raised as NotYet while a
  notebook is graded (nbgrader, or `python -m ladder grade`).
- `notebooks`: exercises/ from solutions/ (solution blocks blanked, hidden tests cut), nbgrader metadata,
  `grade()` by assignment id.
- `aNN_*`: the checker of assignment NN (solutions/NN_*.ipynb).
"""
from ladder.exercises.grading import NotYet, Result, grading
from ladder.exercises.notebooks import (answer_names, exercise_from_solution, solution_answers, strip_solutions,
                                        uses_answers, make_exercises)
from ladder.exercises.a01_vector_add import VectorAddIntensity
from ladder.exercises.a02_coalescing import check_mapping, warp_access_report, warp_indices, sectors_per_request
from ladder.exercises.a03_tile_intensity import TileIntensity
from ladder.exercises.a04_masks import TileMasks
from ladder.exercises.a05_online_softmax import OnlineSoftmax
from ladder.exercises.a06_pipeline_stages import PipelineStages
from ladder.exercises.a07_group_order import GroupOrder
from ladder.exercises.a08_causal_skip import CausalSkip
from ladder.exercises.a09_epilogue import BiasReluEpilogue
from ladder.exercises.a10_search_prune import SearchPrune
from ladder.exercises.a11_register_block import RegisterBlock
from ladder.exercises.a12_mma_fragments import MmaFragments
from ladder.exercises.a13_capstone_decision import CapstoneDecision
from ladder.exercises.a14_vector_add_op import VectorAddOp
from ladder.exercises.a15_attention_backward_ds import AttentionBackwardDs

__all__ = ["NotYet", "Result", "grading", "answer_names", "exercise_from_solution", "solution_answers",
           "strip_solutions", "uses_answers", "make_exercises", "VectorAddIntensity", "check_mapping",
           "warp_access_report", "warp_indices", "sectors_per_request", "TileIntensity", "TileMasks",
           "OnlineSoftmax", "PipelineStages", "GroupOrder", "CausalSkip", "BiasReluEpilogue", "SearchPrune",
           "RegisterBlock", "MmaFragments", "CapstoneDecision", "VectorAddOp",
           "AttentionBackwardDs"]
