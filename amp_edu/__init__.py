"""amp_edu — a course on mixed-precision training in PyTorch, from the bits up.

One module per concept; the lessons in ``notebooks/`` import them:

============ ==============================================================
device       what this machine can do; smoke/full sizes            (00)
formats      every format's facts: bit layouts, exact rounding, names, fates (01, 10)
widgets      interactive explorers (thin; logic lives in plain functions)
data         small offline tasks; models: MLP, CNN, transformer block (02)
gradients    gradient capture and fp16-range histograms              (02-03)
recipes      precision recipes as objects, one method per loop event (02-10)
train        one training loop that calls a recipe                   (02-08)
scaler       GradScaler from scratch, bit-identical to torch's       (04)
autocast     autocast from scratch, torch's op policy                (05)
bench        matmul and training-step benchmarks                     (06)
memory       saved-activation bytes and peak memory                  (07)
checkpoint   checkpoint/restore for a bit-exact AMP resume           (08)
study        recipes x seeds: convergence study with a computed verdict (08)
debug        finding the first non-finite layer, and friends         (09)
fp8          fp8 training from scratch, bit-identical to torchao's   (10)
distributed  launch ranks; DDP/FSDP2 mixed precision; sharded scaler (11)
optim        bf16 weights (stochastic rounding, Kahan), 8/4-bit/fp8 Adam states (12)
compile      torch.compile and autocast: graphs, casts, fused kernels (13)
hf           Trainer/Accelerate precision read from the objects; a loop equal to the Trainer's (14)
viz          plotting helpers shared by the lessons
hooks        module hooks that are always removed
tree         the tensors in nested containers
validate     argument checks (ints that are not bools, finite numbers)
checks       graders for the exercises, one module per lesson
course       exercise generation and grading (``make exercises``, ``make grade``)
============ ==============================================================
"""

__version__ = "0.1.0"
