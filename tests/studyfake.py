"""A study with made-up results, for the tests of amp_edu.study and its widget (no training runs)."""

from amp_edu import study
from amp_edu.train import History


def fake(final: dict, steps=10) -> study.Study:
    """A study whose runs end at the given held-out losses/accuracies: {recipe: [(loss, acc), ...]}."""
    runs = {}
    for r, vals in final.items():
        runs[r] = []
        for loss, acc in vals:
            h = History(r, loss=[loss] * steps, accuracy=[acc] * steps, eval_steps=[5, steps],
                        eval_loss=[loss + 0.1, loss], eval_accuracy=[acc - 0.1, acc])
            runs[r].append(h)
    n = len(next(iter(final.values())))
    return study.Study("fake", None, steps, tuple(range(n)), tuple(final), runs)
