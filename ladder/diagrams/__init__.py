"""A picture per rung idea: which elements a warp touches, what sits in shared memory or registers, the order tiles
run in, the ring of pipeline stages, the blocks of attention's score matrix. One module per topic, in course order:

style               what every diagram draws with: colours, the figure, cells, boxes, arrows, the key, a schedule
                    of who holds which tile at each step, an autotuning search as a grid
vector_add          01
matmul              02a, and 03's versions of the same pictures for the Triton rungs (02b's rung 9 tile order too)
matmul_hopper       02b-02c
attention           04a-04c
attention_backward  04d
attention_hopper    04e-04f

A notebook names the module in each call (`diagrams.matmul.matmul_shared_tile()`). Every diagram is drawn from the
rung's own constants (kernels/*.py, kernels/cuda/*.py, kernels/triton/*.py) or, where a number lives only in a
.cu file, from that file (ladder.lessons.source's `cu_define`, `cu_expression`), so a picture stays true when a
constant changes. Each function returns a Figure made without pyplot (a lesson cell shows it once; tests draw it on
CPU and run ladder.figcheck on it).

Colours follow the roofline: a backend's colour (roofline.BACKEND_COLORS) for what its threads touch, the
tensor-core roof's red for tensor-core work, the fp32 roof's orange for CUDA-core registers.
"""
# every topic loaded here, so that a notebook's `diagrams.<module>` resolves
from ladder.diagrams import (attention, attention_backward, attention_hopper, matmul, matmul_hopper,  # noqa: F401
                             style, vector_add)
