"""A stand-in for :class:`slolab.sim.verdict.AttainmentWatch` whose verdicts are scripted."""


class ListedVerdicts:
    """A stand-in for AttainmentWatch: its verdict is read from a list, one per check."""

    def __init__(self, every: int, verdicts: list) -> None:
        self.every, self.verdicts, self.verdict, self.asked = every, verdicts, None, []

    def __call__(self, engine) -> bool:
        self.asked.append(engine)
        self.verdict = self.verdicts.pop(0)
        return self.verdict is not None
