"""What B1 and B2 share: the problem, the admission variables, memory and the objective."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slolab.instances.records import Instance
from slolab.models.slos_admission.problem import AdmissionProblem
from slolab.models.slos_admission.process import batch_process
from slolab.solvers.base import ExactModel

__all__ = ["AdmissionModel", "as_problem"]


def as_problem(instance: Instance | AdmissionProblem) -> AdmissionProblem:
    """The problem itself, or the one an ``"slos-admission"`` instance encodes."""
    if isinstance(instance, AdmissionProblem):
        return instance
    if isinstance(instance, Instance):
        return AdmissionProblem.from_instance(instance)
    raise TypeError(f"expected an Instance or AdmissionProblem, got {type(instance).__name__}")


class AdmissionModel(ExactModel):
    """Shared parts of B1 and B2: the problem, admission variables, memory, objective."""

    sense = "max"

    def __init__(self, instance: Instance | AdmissionProblem) -> None:
        super().__init__(instance)
        self.problem = as_problem(instance)
        self.process = batch_process(self.problem)
        #: PuLP variables of the last :meth:`milp` (power users): ``x[row]`` and model extras.
        self.variables: dict[str, Any] = {}

    def _admission_variables(self, prob: Any) -> tuple[dict[int, Any], Any]:
        """``x_i`` in {0, 1} per new row, and ``keep`` fixed to 1 that carries running terms."""
        x = {int(r): prob.add_variable(f"x_{int(r)}", cat="Binary") for r in self.problem.new_rows}
        keep = prob.add_variable("keep_running", lowBound=1, upBound=1)
        return x, keep

    def _coef(self, r: int, x: Mapping[int, Any], keep: Any) -> Any:
        """The decision of row ``r``: ``x_r`` when new, the constant-1 variable when running."""
        return keep if self.problem.running[r] else x[r]

    def _memory(self, prob: Any, x: Mapping[int, Any], keep: Any, pulp: Any) -> None:
        """``sum_r m_r x_r <= M`` over running (x = 1) and new rows."""
        p = self.problem
        prob += (
            pulp.lpSum(int(p.kv_tokens[r]) * self._coef(r, x, keep) for r in range(p.n_requests))
            <= p.kv_capacity_tokens,
            "memory",
        )

    def _objective(self, prob: Any, x: Mapping[int, Any], pulp: Any) -> None:
        """Maximize ``sum_i v_i x_i`` over new rows."""
        prob += pulp.lpSum(float(self.problem.value[i]) * xi for i, xi in x.items())

    def _admitted(self, x: Mapping[int, Any]) -> list[int]:
        return sorted(i for i, xi in x.items() if (xi.value() or 0.0) > 0.5)
