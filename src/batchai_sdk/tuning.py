"""Hyperparameter sweeps: N jobs of one experiment, each with its own parameters, run with a concurrency
limit, optionally stopping bad trials early; a table of parameters × final metrics.

A sweep is a record on the share (``experiments/<exp>/sweeps/<name>.json``: its space, and each trial's job
name and parameters) plus ordinary jobs named ``<sweep>-<n>``: every tool that shows jobs shows them. The
driver (``Sweep.run``) is this client: it submits a trial when fewer than ``max_concurrent`` run, and
the next ``run()`` (from any process) goes on where the last one stopped — trials already submitted are
re-attached, never run twice. Each trial gets its parameters as ``--name value`` arguments after the
sweep's own ``args``; its script reports metrics with ``batchai_sdk.log_metric`` (or the shipped modules'
``metrics.jsonl``).

Early stop is the median stopping rule (Google Vizier's, also Ray Tune's ``MedianStoppingRule``): after
``grace`` steps, a running trial whose best value so far is worse than the median of the other trials'
values at the same step is terminated, its state ``terminated`` and the record saying why.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _layout as layout
from ._metrics import job_results, read_records, scalar
from ._models import validate_name
from .cost import Cost
from .exceptions import AlreadyExistsError, BatchAIError, BatchAITimeoutError, NotFoundError, ValidationError
from .share import join

if TYPE_CHECKING:
    from .experiment import Experiment
    from .job import Job

log = logging.getLogger("batchai_sdk")

__all__ = ["EarlyStop", "Sweep", "grid_points", "parse_param", "random_points"]

_DISTRIBUTIONS = ("uniform", "loguniform", "randint")
_PARAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class EarlyStop:
    """The median stopping rule on ``metric`` (``mode`` "min" for a loss, "max" for an accuracy): from step
    ``grace`` on, a trial worse than the median of the others at the same step stops."""

    metric: str
    mode: str = "max"
    grace: int = 1

    def __post_init__(self) -> None:
        if self.mode not in ("min", "max"):
            raise ValidationError("early_stop.mode", self.mode, "'min' or 'max'")
        if isinstance(self.grace, bool) or not isinstance(self.grace, int) or self.grace < 1:
            raise ValidationError("early_stop.grace", self.grace, "a whole number of steps >= 1")

    def to_dict(self) -> dict[str, Any]:
        """The rule as the sweep's record keeps it."""
        return {"metric": self.metric, "mode": self.mode, "grace": self.grace}

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is better than ``b`` in this rule's ``mode``."""
        return a < b if self.mode == "min" else a > b

    def should_stop(self, mine: list[float], others: list[list[float]]) -> bool:
        """``mine``: this trial's values by step; ``others``: the other trials'. Stop when this trial's
        best so far is worse than the median of the others' values at its latest step."""
        step = len(mine)
        if step < self.grace:
            return False
        peers = [values[step - 1] for values in others if len(values) >= step]
        if len(peers) < 2:  # a median of one trial says nothing
            return False
        best = min(mine) if self.mode == "min" else max(mine)
        import statistics

        return self.better(statistics.median(peers), best)


def _check_space(space: Mapping[str, Any], field: str) -> None:
    if not isinstance(space, Mapping) or not space:
        raise ValidationError(field, space, "a dict of parameter name → values")
    for name, values in space.items():
        if not isinstance(name, str) or not _PARAM_NAME.match(name):
            raise ValidationError(f"{field} name", name, "letters, digits, '_' or '-', a letter first")
        if isinstance(values, tuple) and values and values[0] in _DISTRIBUTIONS:
            if field == "grid":
                raise ValidationError(f"grid[{name!r}]", values, "a list of values (distributions: random=)")
            kind, *bounds = values
            if (
                len(bounds) != 2
                or not all(isinstance(b, int | float) for b in bounds)
                or bounds[0] > bounds[1]
            ):
                raise ValidationError(f"{field}[{name!r}]", values, f"({kind!r}, low, high) with low <= high")
            if kind == "loguniform" and bounds[0] <= 0:
                raise ValidationError(f"{field}[{name!r}]", values, "loguniform bounds > 0")
        elif not isinstance(values, list | tuple) or not values:
            raise ValidationError(
                f"{field}[{name!r}]",
                values,
                "a non-empty list of values, or ('uniform'|'loguniform'|'randint', low, high)",
            )


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the last parameter varying fastest."""
    _check_space(grid, "grid")
    names = list(grid)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*(grid[n] for n in names))]


def _draw(rng: random.Random, values: Any) -> Any:
    if isinstance(values, tuple) and values and values[0] in _DISTRIBUTIONS:
        kind, low, high = values
        if kind == "uniform":
            return rng.uniform(low, high)
        if kind == "loguniform":
            return math.exp(rng.uniform(math.log(low), math.log(high)))
        return rng.randint(int(low), int(high))
    return rng.choice(list(values))


def random_points(space: Mapping[str, Any], trials: int, seed: int | None = None) -> list[dict[str, Any]]:
    """``trials`` draws from ``space``: a list is a choice, ``("uniform", lo, hi)``,
    ``("loguniform", lo, hi)`` or ``("randint", lo, hi)`` a distribution. The same seed draws the same."""
    _check_space(space, "random")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValidationError("trials", trials, "a number of trials >= 1")
    rng = random.Random(seed)
    return [{name: _draw(rng, values) for name, values in space.items()} for _ in range(trials)]


def parse_param(text: str) -> tuple[str, Any]:
    """The CLI's ``--param``: ``lr=0.1,0.01`` (values), ``lr=loguniform:1e-4:1e-1`` (a distribution)."""
    name, sep, rest = text.partition("=")
    if not sep or not _PARAM_NAME.match(name) or not rest:
        raise ValidationError("--param", text, "NAME=V1,V2,... or NAME=uniform|loguniform|randint:LOW:HIGH")
    head, _, bounds = rest.partition(":")
    if head in _DISTRIBUTIONS:
        try:
            low, high = (float(b) for b in bounds.split(":"))
        except ValueError:
            raise ValidationError("--param", text, f"{head}:LOW:HIGH with two numbers") from None
        return name, (head, low, high)
    return name, [scalar(v) for v in rest.split(",")]


def sweep_record(experiment: str, name: str) -> str:
    """The sweep's record on the share, beside the experiment's jobs."""
    return join(layout.experiment_record(experiment).rsplit("/", 1)[0], "sweeps", f"{name}.json")


def _argument(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


class Sweep:
    """A hyperparameter sweep of one experiment (``Experiment.sweep``). ``run()`` drives it; ``results()``
    is its table."""

    def __init__(self, experiment: Experiment, record: dict[str, Any]) -> None:
        self.experiment = experiment
        self.record = record

    @property
    def name(self) -> str:
        """The sweep's name, unique in its experiment; its jobs are ``<name>-000``, ``<name>-001``, ..."""
        return str(self.record["name"])

    @property
    def trials(self) -> list[dict[str, Any]]:
        """Each trial: ``{"job": name, "params": {...}}`` (and ``"stopped"`` when stopped early)."""
        return list(self.record["trials"])

    @property
    def max_concurrent(self) -> int:
        """How many trials may be unfinished at once."""
        return int(self.record["max_concurrent"])

    @property
    def early_stop(self) -> EarlyStop | None:
        """The early-stop rule, None when trials always run to their end."""
        data = self.record.get("early_stop")
        return EarlyStop(**data) if data else None

    def _save(self) -> None:
        self.experiment.workspace.share.write_json(sweep_record(self.experiment.name, self.name), self.record)

    def _job(self, trial: Mapping[str, Any]) -> Job:
        options = dict(self.record["job"])
        args = [*options.pop("args", [])]
        for key, value in trial["params"].items():
            args += [f"--{key}", _argument(value)]
        return self.experiment.create_job(trial["job"], args=args, exist_ok=True, **options)

    def jobs(self) -> dict[str, Job]:
        """The trials' jobs that were submitted, by name."""
        found = {}
        for trial in self.trials:
            try:
                found[trial["job"]] = self.experiment.get_job(trial["job"])
            except NotFoundError:
                continue
        return found

    def run(
        self,
        *,
        timeout: float | None = None,
        poll_interval: float = 2.0,
        on_event: Callable[[str], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Submit the trials, at most ``max_concurrent`` unfinished at once, stop bad ones early, and wait
        for all; returns ``results()``. Raises ``TimeoutError`` after ``timeout`` seconds (the submitted
        trials go on; ``run()`` again resumes)."""
        say = on_event or (lambda text: log.info("%s", text))
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = [t for t in self.trials if t["job"] not in self.jobs()]
        while True:
            jobs = self.jobs()
            active = [j for j in jobs.values() if not j.state.ended]
            while pending and len(active) < self.max_concurrent:
                trial = pending.pop(0)
                job = self._job(trial).submit()
                active.append(job)
                say(f"sweep {self.name}: submitted {trial['job']} {trial['params']}")
            if self.early_stop is not None and active:
                self._stop_bad_trials(active, jobs, say)
            if not pending and all(j.state.ended for j in self.jobs().values()):
                return self.results()
            if deadline is not None and time.monotonic() > deadline:
                raise BatchAITimeoutError(
                    f"sweep {self.name!r} ({len(pending)} trial(s) not submitted, {len(active)} unfinished; "
                    f"they go on, and experiment.get_sweep({self.name!r}).run() resumes)",
                    timeout or 0,
                )
            time.sleep(poll_interval)

    def _curve(self, job: Job, metric: str) -> list[float]:
        try:
            records = read_records(job)
        except BatchAIError:
            return []
        values = [r.get(metric) for r in records]
        return [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]

    def _stop_bad_trials(
        self, active: list[Job], jobs: Mapping[str, Job], say: Callable[[str], None]
    ) -> None:
        rule = self.early_stop
        assert rule is not None
        curves = {name: self._curve(job, rule.metric) for name, job in jobs.items()}
        for job in active:
            if job.state.ended or not curves.get(job.name):
                continue
            others = [c for name, c in curves.items() if name != job.name and c]
            if rule.should_stop(curves[job.name], others):
                step = len(curves[job.name])
                why = f"stopped early at step {step}: {rule.metric} worse than the median of the other trials"
                job.terminate(wait=False)
                for trial in self.record["trials"]:
                    if trial["job"] == job.name:
                        trial["stopped"] = why
                self._save()
                say(f"sweep {self.name}: {job.name} {why}")

    def results(self) -> list[dict[str, Any]]:
        """One row per trial: job, state, its parameters, its final metrics, and why it stopped early."""
        jobs = self.jobs()
        rows = []
        for trial in self.trials:
            job = jobs.get(trial["job"])
            row: dict[str, Any] = {"job": trial["job"], "state": job.state.value if job else "not submitted"}
            row.update(trial["params"])
            if job is not None:
                row.update(job_results(job))
            if trial.get("stopped"):
                row["note"] = trial["stopped"]
            rows.append(row)
        return rows

    def best(self, metric: str, mode: str = "max") -> dict[str, Any] | None:
        """The row of ``results()`` with the best final ``metric`` (None when no trial logged it)."""
        rows = [r for r in self.results() if isinstance(r.get(metric), float)]
        if not rows:
            return None
        return (min if mode == "min" else max)(rows, key=lambda r: r[metric])

    def estimate_cost(self, hours_per_trial: float | None = None) -> Cost | None:
        """What all the trials cost if each runs ``hours_per_trial`` (``Job.estimate_cost``'s default
        otherwise), before any is submitted; None when the cluster's price is unknown."""
        one = self._job(self.trials[0]).estimate_cost(hours_per_trial)
        return None if one is None else Cost(float(one) * len(self.trials))

    def table(self) -> str:
        """``results()`` as aligned text columns, for a terminal."""
        from ._display import format_cell, result_columns

        rows = self.results()
        columns = result_columns(rows)
        cells = [[format_cell(r.get(c)) for c in columns] for r in rows]
        widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
        lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
        lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Sweep({self.experiment.name}/{self.name}, {len(self.trials)} trials)"

    def _repr_html_(self) -> str:
        from html import escape

        return f"<pre>{escape(self.table())}</pre>"


def create_sweep(
    experiment: Experiment,
    name: str,
    *,
    grid: Mapping[str, Sequence[Any]] | None = None,
    random_space: Mapping[str, Any] | None = None,
    trials: int | None = None,
    seed: int | None = None,
    max_concurrent: int = 2,
    early_stop: EarlyStop | None = None,
    exist_ok: bool = False,
    job_options: Mapping[str, Any],
) -> Sweep:
    """``Experiment.sweep``: the points, checked, and the record written before any job is submitted."""
    validate_name(name, "sweep name")
    share = experiment.workspace.share
    path = sweep_record(experiment.name, name)
    existing = share.read_json_or_none(path)
    if existing is not None:
        if exist_ok:
            return Sweep(experiment, existing)
        raise AlreadyExistsError(
            "sweep",
            name,
            f"experiment {experiment.name!r}",
            f"experiment.get_sweep({name!r}), or exist_ok=True",
        )
    if (grid is None) == (random_space is None):
        raise ValidationError(
            "grid", grid, "either grid= or random= (with trials=), not both and not neither"
        )
    if grid is not None:
        points = grid_points(grid)
    else:
        assert random_space is not None
        points = random_points(random_space, trials if trials is not None else 10, seed)
    if isinstance(max_concurrent, bool) or not isinstance(max_concurrent, int) or max_concurrent < 1:
        raise ValidationError("max_concurrent", max_concurrent, "a number of jobs >= 1")
    options = {k: os.fspath(v) if isinstance(v, os.PathLike) else v for k, v in job_options.items()}
    if options.get("secrets"):
        raise ValidationError(
            "secrets",
            "<hidden>",
            "none on a sweep (its record keeps every trial's options): use the cluster's "
            "node setup or an environment file",
        )
    for reserved in ("name", "exist_ok"):
        if reserved in options:
            raise ValidationError(reserved, options[reserved], "not given to a sweep (it names its trials)")
    options["args"] = list(options.get("args") or ())
    cluster = options.get("cluster")
    if cluster is not None and not isinstance(cluster, str):
        options["cluster"] = cluster.name
    record: dict[str, Any] = {
        "name": name,
        "experiment": experiment.name,
        "max_concurrent": max_concurrent,
        "early_stop": early_stop.to_dict() if early_stop else None,
        "space": {"grid": grid}
        if grid is not None
        else {
            "random": {k: list(v) if isinstance(v, tuple) else v for k, v in (random_space or {}).items()},
            "seed": seed,
        },
        "job": options,
        "trials": [{"job": f"{name}-{i:03d}", "params": p} for i, p in enumerate(points)],
    }
    sweep = Sweep(experiment, record)
    sweep._job(record["trials"][0]).check()  # a bad script or cluster fails now, not at the first submit
    sweep._save()
    return sweep
