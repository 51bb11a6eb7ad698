"""Dynamic loss scaling, written out in full: a drop-in for ``torch.amp.GradScaler``.

Why a scaler at all? fp16 gradients below 2^-24 round to zero. Multiplying the loss by a scale
``S`` multiplies every gradient by ``S`` (the chain rule is linear), lifting small gradients into
fp16's range; before the optimizer uses them we divide by ``S`` again. Too large an ``S`` and some
gradient overflows to inf (or an inf - inf makes a NaN). *Dynamic* loss scaling picks ``S`` by
trial and error, every iteration:

1. ``scale(loss)``    -- multiply the loss by ``S`` (a float32 0-dim tensor kept on the device);
2. ``unscale_(opt)``  -- multiply every gradient by ``1/S`` (computed in float64, stored as
   float32) and record whether any gradient held an inf or NaN (``found_inf``);
3. ``step(opt)``      -- run ``opt.step()`` only if ``found_inf`` is 0: a bad step is *skipped*;
4. ``update()``       -- the update rule (:func:`update_scale_`): after an overflow multiply ``S``
   by ``backoff_factor`` (0.5) and reset the *growth tracker*; otherwise count one more good
   step, and when ``growth_interval`` (2000) good steps in a row have happened multiply ``S`` by
   ``growth_factor`` (2.0), unless that would make the float32 ``S`` infinite.

Each optimizer moves through a small state machine between two ``update()`` calls::

    READY --unscale_()--> UNSCALED --step()--> STEPPED --update()--> READY
      \\_________________step() unscales first_____/

Calling ``unscale_`` twice, ``unscale_`` after ``step``, or ``step`` twice raises, because each
would divide the gradients by ``S`` twice or step on stale checks.

Everything a user can observe matches ``torch.amp.GradScaler``: the constructor and its checks,
the getters and setters, the state dict, the exception types and messages, and -- bit for bit --
the scale, the growth tracker, which steps are skipped and the parameters (``tests/scaler/test_scaler.py``
drives both side by side). Torch does steps 2 and 4 in two fused private kernels
(``_amp_foreach_non_finite_check_and_unscale_`` and ``_amp_update_scale_``); here they are
:func:`non_finite_check_and_unscale_` and :func:`update_scale_` (the rule itself, on plain
numbers, is :func:`update_rule`), written with public tensor ops. On a GPU, like torch's, they
never read a value back to Python, so the CPU does not wait for the GPU until ``step`` asks
whether to skip.

**DTensor gradients (FSDP2).** Under ``fully_shard`` every gradient is a ``DTensor`` and each rank
holds one shard of it. Torch's DTensor dispatcher has a rule for the fused check
(``found_inf_reduce_handler`` in ``torch/distributed/tensor/_dispatch.py``): run it on the local
shards, then replace ``found_inf`` by its MAX over the mesh dimensions that the group's first
gradient is sharded on (``Replicate`` dimensions are left alone), once per device-and-dtype group.
So an inf in any rank's shard makes *every* rank's ``found_inf`` 1 and every rank skips alike.
This class applies the same rule itself (:func:`max_over_mesh_`), with the same collective per
group, so its ``found_inf``, skip decisions, scale and parameters match torch's under FSDP2 too
(``tests/distributed/test_experiments.py``). FSDP's ``ShardedGradScaler`` then also *sums* the
result over the process group, so there it reads 2 on each of two ranks.

**Where each part lives.** Lesson 04 builds the pieces one at a time; this package keeps them apart
in the same order, so the code a lesson prints is the code that reads best:

=========================== ===================================================================
module                      what it holds
=========================== ===================================================================
:mod:`.kernels`             the two numerical pieces as a learner writes them: unscale with an
                            inf/NaN check (:func:`non_finite_check_and_unscale_`), the update
                            rule (:func:`update_rule`, :func:`update_scale_`), ``1/S`` in float64
:mod:`.contract`            torch's argument checks for those kernels, with its error messages
:mod:`.dtensor`             DTensor gradients (FSDP2): the MAX of ``found_inf`` over the mesh
:mod:`.grad_scaler`         :class:`GradScaler`: the state machine around the pieces
:mod:`._fast`               private: the same kernels tuned against torch's overhead (stacked
                            CPU sums, a GPU path that never syncs), proven equal to
                            :mod:`.kernels` by ``tests/scaler/test_fastpath.py``; the scaler
                            calls these
=========================== ===================================================================
"""

from .dtensor import is_dtensor, local_tensor, max_over_mesh_
from .grad_scaler import GradScaler, OptState, _refresh_per_optimizer_state
from .kernels import _to_float32, inverse_scale, non_finite_check_and_unscale_, unscale_by_, update_rule, update_scale_

__all__ = ["GradScaler", "OptState", "inverse_scale", "is_dtensor", "local_tensor", "max_over_mesh_",
           "non_finite_check_and_unscale_", "unscale_by_", "update_rule", "update_scale_"]
