"""The course's lesson list: the one place that says which lessons exist.

The README's lesson table is generated from it (``make readme``, i.e.
``python -m amp_edu.course.lessons --write``), and the tests read it: the lesson-shape test (every
listed lesson's files exist, README and package docstring agree), the course and browser tests
(which notebooks, solutions and exercises to run) and the check-by-check test. Adding a lesson is
one entry here plus its notebook (and, when it has an exercise, its solution and
``amp_edu/checks/lNN.py``), then ``make readme``.
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
    Lesson(12, "optimizer_precision", "the optimizer's precision",
           "keep small updates in bf16 weights (stochastic rounding, Kahan) and Adam's states in 8/4-bit or "
           "fp8, equal to torchao.optim", True),
    Lesson(13, "compile_and_mixed_precision", "torch.compile and mixed precision",
           "read what dynamo and Inductor make of an autocast region: casts, fusion, bits, saved bytes, "
           "compile time", True),
    Lesson(14, "trainer_and_accelerate", "Trainer and Accelerate",
           "see what `TrainingArguments(fp16=True)` and `Accelerator(mixed_precision=...)` do on your device, "
           "read from the objects; a hand loop equal to the Trainer's bit for bit", True),
)


README_HEADER = "| # | lesson | you will |\n|---|---|---|\n"


def readme_table() -> str:
    """The README's lesson table, generated from :data:`LESSONS` (a test checks README.md holds
    exactly this text)."""
    return README_HEADER + "".join(f"| {l.number:02d} | {l.title} | {l.you_will} |\n" for l in LESSONS)


def write_readme(path) -> bool:
    """Put :func:`readme_table` into the README at ``path`` in place of the table there (the
    block of lines starting at its header row). Returns whether the file changed."""
    from pathlib import Path
    path = Path(path)
    text = path.read_text()
    start = text.find(README_HEADER)
    if start < 0:
        raise ValueError(f"{path} has no lesson table starting with {README_HEADER.splitlines()[0]!r}")
    end = start
    for line in text[start:].splitlines(keepends=True):
        if not line.startswith("|"):
            break
        end += len(line)
    new = text[:start] + readme_table() + text[end:]
    if new != text:
        path.write_text(new)
    return new != text


def main(argv=None) -> int:
    """``python -m amp_edu.course.lessons``: print the README table; ``--write [README.md]``:
    update it in the README (``make readme``)."""
    import argparse
    from . import ROOT
    ap = argparse.ArgumentParser(prog="python -m amp_edu.course.lessons", description=main.__doc__)
    ap.add_argument("--write", nargs="?", const=str(ROOT / "README.md"), metavar="README",
                    help="write the table into this README (default: the checkout's README.md)")
    args = ap.parse_args(argv)
    if args.write is None:
        print(readme_table(), end="")
    else:
        print(f"{args.write}: {'updated' if write_readme(args.write) else 'already up to date'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
