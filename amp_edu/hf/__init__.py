"""What ``Trainer(fp16=True)`` and Accelerate really do (lesson 14), read from the objects.

=============  ================================================================================
``tiny``       a 2-layer GPT-2 from a config and the Zen of Python as character windows: no
               download (``HF_HUB_OFFLINE=1``)
``flags``      the widely copied ``TrainingArguments`` call and its fix; what each precision
               flag does on this device, read from ``trainer.accelerator`` and the model
``accel``      ``Accelerator(mixed_precision=...)`` in a plain loop, equal to the Trainer
``loop``       the Trainer's loop and a hand loop equal to it bit for bit, with the six
               matching points as switches (:class:`Match`), and :func:`diff_runs`
``sources``    file:line citations into transformers/accelerate at the pinned versions,
               checked against the installed files
=============  ================================================================================

``transformers`` and ``accelerate`` are imported only when a function needs them.
"""

from .flags import (COPIED_CALL, FlagReport, fix_copied_call, inspect_flag, precision_warning,
                    try_training_args)
from .loop import (OFF, SETTINGS, Diff, Match, Plan, Run, ScaleRecorder, diff_runs, hand_run, make_trainer,
                   plan_for, trainer_device, trainer_run, training_args)
from .sources import CITES, PINNED, where
from ._lib import load, quiet
from .accel import MIXED_PRECISION, accelerate_run
from .tiny import Sizes, tiny_gpt2, zen_lm_dataset, zen_vocab

__all__ = ["Sizes", "tiny_gpt2", "zen_lm_dataset", "zen_vocab", "SETTINGS", "Match", "OFF", "Plan", "plan_for",
           "Run", "Diff", "training_args", "make_trainer", "trainer_run", "hand_run", "diff_runs", "ScaleRecorder",
           "trainer_device", "COPIED_CALL", "try_training_args", "fix_copied_call", "FlagReport", "inspect_flag",
           "precision_warning", "CITES", "PINNED", "where", "load", "quiet", "MIXED_PRECISION", "accelerate_run"]
