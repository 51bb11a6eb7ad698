"""The course's lesson list: the one place that says which lessons exist.

Every other place that needs the list (the README table, the package docstring, the lesson-shape
test, the class grader, the browser test) reads it from here, so adding a lesson is one entry here
plus its notebook (and, when it has one, its solution and ``amp_edu/checks/lNN.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lesson:
    number: int
    slug: str          # notebooks/NN_<slug>.ipynb
    title: str         # the README table's "lesson" column
    you_will: str      # the README table's "you will" column
    exercise: bool     # has solutions/NN_<slug>.ipynb, exercises/NN_<slug>.ipynb and checks/lNN.py

    @property
    def stem(self) -> str:
        return f"{self.number:02d}_{self.slug}"

    @property
    def notebook(self) -> str:
        return f"notebooks/{self.stem}.ipynb"

    @property
    def solution(self) -> str | None:
        return f"solutions/{self.stem}.ipynb" if self.exercise else None

    @property
    def checks_module(self) -> str | None:
        return f"amp_edu.checks.l{self.number:02d}" if self.exercise else None


LESSONS: tuple[Lesson, ...] = (
    Lesson(0, "setup", "setup",
           "see what your device can do (Tensor Cores, native bf16, fp8, CPU bf16/fp16 units)", False),
    Lesson(1, "number_formats", "number formats",
           "take fp32/tf32/fp16/bf16/fp8 apart bit by bit; find the 2^-24 floor", True),
    Lesson(2, "where_fp16_breaks", "where fp16 breaks",
           "watch pure `.half()` training lose updates and underflow gradients", True),
    Lesson(3, "loss_scaling_by_hand", "loss scaling by hand",
           "move gradients into fp16's range with a loss scale", True),
    Lesson(4, "gradscaler_from_scratch", "GradScaler from scratch",
           "build dynamic loss scaling, bit-identical to `torch.amp.GradScaler`", True),
    Lesson(5, "autocast_from_scratch", "autocast from scratch",
           "build autocast's op policy and weight cache, checked against `torch.autocast`", True),
    Lesson(6, "tensor_cores", "Tensor Cores",
           "measure TFLOP/s per dtype, alignment, roofline", True),
    Lesson(7, "memory", "memory",
           "count saved-activation bytes, fp32 vs AMP", True),
    Lesson(8, "amp_training_recipe", "AMP training recipe",
           "the modern `torch.amp` loop, and a multi-seed convergence study", True),
    Lesson(9, "debugging", "debugging",
           "a gallery of AMP failures, reproduced and fixed", True),
    Lesson(10, "fp8_training", "fp8 training",
           "scale tensors into fp8 (per tensor, row-wise, delayed, MX blocks); a `Float8Linear` "
           "bit-identical to torchao's", True),
    Lesson(11, "distributed_mixed_precision", "distributed mixed precision",
           "DDP and FSDP2 mixed precision on several processes; a sharded GradScaler from scratch",
           True),
)


def by_number(n: int) -> Lesson:
    for lesson in LESSONS:
        if lesson.number == n:
            return lesson
    raise ValueError(f"no lesson {n!r}; the lessons are {[l.number for l in LESSONS]}")


README_HEADER = "| # | lesson | you will |\n|---|---|---|\n"


def readme_table() -> str:
    """The README's lesson table, generated from :data:`LESSONS` (a test checks README.md holds
    exactly this text)."""
    return README_HEADER + "".join(f"| {l.number:02d} | {l.title} | {l.you_will} |\n" for l in LESSONS)


if __name__ == "__main__":          # python -m amp_edu.course.lessons  → the README table
    print(readme_table(), end="")
