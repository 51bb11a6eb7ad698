"""amp_edu — a course on mixed-precision training in PyTorch, from the bits up.

One package or module per concept; the lessons in ``notebooks/`` import them. They are layered:
a module imports only its own package (with no cycle between modules) or the rows *below* its
own, never a row above, never by a string (``tests/test_layering.py`` reads this table and checks
every import in the package, lazy ones included):

============ ==============================================================
__main__     ``python -m amp_edu``: doctor, bench, grade
course       exercise generation and grading (``make exercises``, ``make grade``)
checks       graders for the exercises, one module per lesson (the judge's side)
plans        what the learner's kernel runs for a check: calls, values out (the kernel's side)
widgets      interactive explorers (thin; logic lives in plain functions)
hf           Trainer/Accelerate precision read from the objects; a loop equal to the Trainer's (14)
compile      torch.compile and autocast: graphs, casts, fused kernels  (13)
distributed  launch ranks; DDP/FSDP2 mixed precision; sharded scaler   (11)
study        recipes x seeds: convergence study with a computed verdict (08)
bench        matmul and training-step benchmarks                     (06)
train        one training loop that calls a recipe                   (02-08)
debug        finding the first non-finite layer, and friends         (09)
viz          plotting helpers shared by the lessons
recipes      precision recipes as objects, one method per loop event (02-12)
optim        bf16 weights (stochastic rounding, Kahan), 8/4-bit/fp8 Adam states (12)
fp4          NVFP4: e2m1 values in blocks of 16, e4m3 scales; the Hadamard transform (10)
fp8          fp8 training from scratch, bit-identical to torchao's   (10)
checkpoint   checkpoint/restore for a bit-exact AMP resume           (08)
memory       saved-activation bytes and peak memory                  (07)
scaler       GradScaler from scratch, bit-identical to torch's       (04)
autocast     autocast from scratch, torch's op policy                (05)
gradients    gradient capture and fp16-range histograms              (02-03)
models       MLP, CNN, transformer block                             (02)
data         small offline tasks                                     (02)
formats      every format's facts: bit layouts, exact rounding, names, fates (01, 10)
device       what this machine can do; smoke/full sizes            (00)
measure      timing, paired statistics, verdict sentences: measurement with no model in it
hooks        module hooks that are always removed
tree         the tensors in nested containers
validate     argument checks (ints that are not bools, finite numbers)
============ ==============================================================
"""

__version__ = "0.1.0"
