"""Hyperparameter sweeps: N jobs of one experiment, each with its own parameters, run with a concurrency
limit, optionally stopping bad trials early; a table of parameters × final metrics.

A sweep is a record on the share (``experiments/<exp>/sweeps/<name>.json``: its space, and each trial's job
name and parameters) plus ordinary jobs named ``<sweep>-<n>``: every tool that shows jobs shows them. The
driver (``Sweep.run``) is this client: it submits a trial when fewer than ``max_concurrent`` run, and
the next ``run()`` (from any process) goes on where the last one stopped — trials already submitted are
re-attached, never run twice. Each trial gets its parameters as ``--name value`` arguments after the
sweep's own ``args``; its script reports metrics with ``batchai_sdk.log_metric`` (or the shipped modules'
``metrics.jsonl``).

Early stop is the median stopping rule (Google Vizier's, also Ray Tune's ``MedianStoppingRule``): from
step ``grace`` on (the records' ``step``), a running trial whose best value so far is worse than the median
of at least ``min_trials`` other trials' values at the same step is terminated, its state ``terminated``
and the record saying why; a trial the rule never could compare says so in its row.

One process drives a sweep at a time (``_sweep_driver``: a lease on the share a dead driver loses), and a
trial silent for ``trial_hang_timeout`` is ended by its job's hang watchdog and counted failed.
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
from ._hints import cli_reason
from ._metrics import as_table, job_results, read_records, scalar, series
from ._models import JobState, validate_name
from .cost import Cost
from .exceptions import (
    AlreadyExistsError,
    BatchAIError,
    BatchAITimeoutError,
    NotFoundError,
    SweepDrivenError,
    ValidationError,
)
from .share import join

if TYPE_CHECKING:
    from ._sweep_driver import DriverLease
    from .experiment import Experiment
    from .job import Job

log = logging.getLogger("batchai_sdk")

__all__ = [
    "MIN_TRIALS",
    "TRIAL_HANG_TIMEOUT",
    "EarlyStop",
    "Sweep",
    "grid_points",
    "parse_param",
    "random_points",
]

_DISTRIBUTIONS = ("uniform", "loguniform", "randint")
_PARAM_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


Curve = Sequence[float] | Sequence[tuple[float, float]]  # a trial's values by step: bare, or (step, value)
TRIAL_HANG_TIMEOUT = 3600.0  # a sweep's default: a trial silent for an hour is ended, counted failed
MIN_TRIALS = 2  # EarlyStop.min_trials' default: a median of fewer other trials says little


@dataclass(frozen=True)
class EarlyStop:
    """The median stopping rule on ``metric`` (``mode`` "min" for a loss, "max" for an accuracy): from step
    ``grace`` on, a trial whose best value so far is worse than the median of the other trials' values at
    the same step stops. The step is the records' ``step`` (``epoch`` without one), else the number of
    records. The rule applies once at least ``min_trials`` other trials (default 2) have reached that
    step; a trial that ends before it ever could says so in its row's ``note``."""

    metric: str
    mode: str = "max"
    grace: int = 1
    min_trials: int = MIN_TRIALS

    def __post_init__(self) -> None:
        if not isinstance(self.metric, str) or not self.metric:
            raise ValidationError("early_stop.metric", self.metric, "a metric's name, e.g. 'val_loss'")
        if self.mode not in ("min", "max"):
            raise ValidationError("early_stop.mode", self.mode, "'min' or 'max'")
        if isinstance(self.grace, bool) or not isinstance(self.grace, int) or self.grace < 1:
            raise ValidationError("early_stop.grace", self.grace, "a whole number of steps >= 1")
        if isinstance(self.min_trials, bool) or not isinstance(self.min_trials, int) or self.min_trials < 1:
            raise ValidationError("early_stop.min_trials", self.min_trials, "a number of other trials >= 1")

    def to_dict(self) -> dict[str, Any]:
        """The rule as the sweep's record keeps it."""
        return {"metric": self.metric, "mode": self.mode, "grace": self.grace, "min_trials": self.min_trials}

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is better than ``b`` in this rule's ``mode``."""
        return a < b if self.mode == "min" else a > b

    def peers(self, step: float, others: Sequence[Curve]) -> list[float]:
        """The other trials' values at ``step``: of each one that reached it, its last value up to it."""
        values = []
        for curve in map(_points, others):
            if curve and curve[-1][0] >= step:
                values.append([v for x, v in curve if x <= step][-1] if curve[0][0] <= step else curve[0][1])
        return values

    def verdict(self, mine: Curve, others: Sequence[Curve]) -> bool | None:
        """``mine``: this trial's (step, value) points (or values, one a step); ``others``: the other
        trials'. True: stop it; False: it is no worse than the median; None: the rule cannot apply yet
        (within the grace, or fewer than ``min_trials`` others at its latest step)."""
        points = _points(mine)
        if not points or points[-1][0] < self.grace:
            return None
        peers = self.peers(points[-1][0], others)
        if len(peers) < self.min_trials:
            return None
        values = [v for _, v in points]
        best = min(values) if self.mode == "min" else max(values)
        import statistics  # deferred: `import batchai_sdk` stays light

        return self.better(statistics.median(peers), best)

    def applies(self, mine: Curve, others: Sequence[Curve]) -> bool:
        """Whether the rule could compare this trial at any of its steps (from ``grace`` on, with at
        least ``min_trials`` other trials there)."""
        return any(
            step >= self.grace and len(self.peers(step, others)) >= self.min_trials
            for step, _ in _points(mine)
        )

    def should_stop(self, mine: Curve, others: Sequence[Curve]) -> bool:
        """Whether ``verdict`` says stop."""
        return self.verdict(mine, others) is True


def _points(curve: Curve) -> list[tuple[float, float]]:
    """(step, value) points; bare values count their steps from 1."""
    points: list[tuple[float, float]] = []
    for i, point in enumerate(curve):
        p: Any = point
        points.append((float(p[0]), float(p[1])) if isinstance(p, tuple) else (float(i + 1), float(p)))
    return points


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
    return join(layout.SHARE.experiment_record(experiment).rsplit("/", 1)[0], "sweeps", f"{name}.json")


def _step_text(step: float) -> str:
    return str(int(step)) if step == int(step) else str(step)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


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

    @property
    def trial_hang_timeout(self) -> float | None:
        """Seconds a trial may go without output before it is ended and counted failed (its slot freed):
        each trial's ``hang_timeout`` unless the sweep's job options set one; None: off."""
        value = self.record.get("trial_hang_timeout")
        return float(value) if value else None

    def _job(self, trial: Mapping[str, Any]) -> Job:
        options = dict(self.record["job"])
        if options.get("hang_timeout") is None and self.trial_hang_timeout:
            options["hang_timeout"] = self.trial_hang_timeout
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
        wait_for_driver: bool = False,
    ) -> Any:
        """Submit the trials, at most ``max_concurrent`` unfinished at once, stop bad ones early, and wait
        for all; returns ``results()``. Raises ``TimeoutError`` after ``timeout`` seconds (the submitted
        trials go on; ``run()`` again resumes).

        One driver at a time: while another process runs the sweep, ``SweepDrivenError`` says who (host,
        pid, last heard from), or with ``wait_for_driver`` this call waits and takes over when it stops. A
        driver that died is taken over at once on its own host, after ``DRIVER_LEASE`` (60 s) without a
        heartbeat elsewhere."""
        say = on_event or (lambda text: log.info("%s", text))
        deadline = None if timeout is None else time.monotonic() + timeout
        lease = self._take_driver(wait_for_driver, deadline, timeout, poll_interval, say)
        try:
            return self._drive(lease, deadline, timeout, poll_interval, say)
        finally:
            lease.release()

    def _take_driver(
        self,
        wait: bool,
        deadline: float | None,
        timeout: float | None,
        poll_interval: float,
        say: Callable[[str], None],
    ) -> DriverLease:
        from ._sweep_driver import acquire

        folder = sweep_record(self.experiment.name, self.name)[: -len(".json")] + ".driver"
        told = False
        while True:
            try:
                return acquire(self.experiment.workspace.share, folder, self.name)
            except SweepDrivenError as exc:
                if not wait:
                    raise
                if deadline is not None and time.monotonic() > deadline:
                    what = f"sweep {self.name!r}'s driver ({exc.driver}) to stop"
                    raise BatchAITimeoutError(what, timeout or 0) from None
                if not told:
                    say(f"sweep {self.name}: driven by {exc.driver}; waiting to take over")
                    told = True
                time.sleep(poll_interval)

    def _withdraw_unsent(self, say: Callable[[str], None]) -> None:
        """Trials a driver staged on the share but died before its cluster's scheduler had them read
        ``queued`` for ever: their folders go (as after a failed submit) and they are submitted again."""
        from ._submit import unstage

        for name, job in self.jobs().items():
            if job.state is not JobState.QUEUED:
                continue
            try:
                known = job._scheduler().job_state(self.experiment.name, name, timeout=30)
            except BatchAIError as exc:
                log.debug("sweep %s: could not ask the scheduler about %s: %s", self.name, name, exc)
                continue
            if known is not None and not known.get("found"):
                say(f"sweep {self.name}: {name} never reached its cluster's scheduler; submitting it again")
                unstage(job)

    def _drive(
        self,
        lease: DriverLease,
        deadline: float | None,
        timeout: float | None,
        poll_interval: float,
        say: Callable[[str], None],
    ) -> Any:
        self._withdraw_unsent(say)
        pending = [t for t in self.trials if t["job"] not in self.jobs()]
        while True:
            lease.beat()
            jobs = self.jobs()
            active = [j for j in jobs.values() if not j.state.ended]
            while pending and len(active) < self.max_concurrent:
                trial = pending.pop(0)
                job = self._job(trial).submit()
                active.append(job)
                say(f"sweep {self.name}: submitted {trial['job']} {trial['params']}")
            if self.early_stop is not None:
                self._apply_early_stop(jobs, say)
            if not pending and all(j.state.ended for j in self.jobs().values()):
                return self.results()
            if deadline is not None and time.monotonic() > deadline:
                raise BatchAITimeoutError(
                    f"sweep {self.name!r} ({len(pending)} trial(s) not submitted, {len(active)} unfinished; "
                    f"they go on, and experiment.get_sweep({self.name!r}).run() resumes)",
                    timeout or 0,
                )
            time.sleep(poll_interval)

    def _curve(self, job: Job, metric: str) -> list[tuple[float, float]]:
        """The trial's (step, value) points of ``metric``: its ``step`` (or ``epoch``), else the record's
        number."""
        try:
            records = read_records(job)
        except BatchAIError:
            return []
        _, xs, ys, _ = series(records, metric)
        return [(float(x), y) for x, y in zip(xs, ys, strict=True)]

    def _trial(self, name: str) -> dict[str, Any]:
        return next(t for t in self.record["trials"] if t["job"] == name)

    def _apply_early_stop(self, jobs: Mapping[str, Job], say: Callable[[str], None]) -> None:
        """Stop the running trials the rule condemns; note on each trial that ends without the rule ever
        having applied to it why it could not."""
        rule = self.early_stop
        assert rule is not None
        curves = {name: self._curve(job, rule.metric) for name, job in jobs.items()}
        changed = False
        for name, job in jobs.items():
            trial = self._trial(name)
            if trial.get("stopped") or trial.get("rule_note"):
                continue
            mine = curves.get(name) or []
            others = [c for other, c in curves.items() if other != name and c]
            ended = job.state.ended
            verdict = rule.verdict(mine, others) if mine and not ended else None
            if not trial.get("rule_applied") and rule.applies(mine, others):
                trial["rule_applied"] = True
                changed = True
            if verdict and not ended:
                step = _step_text(mine[-1][0])
                why = f"stopped early at step {step}: {rule.metric} worse than the median of the other trials"
                job.terminate(wait=False)
                trial["stopped"] = why
                changed = True
                say(f"sweep {self.name}: {name} {why}")
            elif ended and not trial.get("rule_applied"):
                trial["rule_note"] = self._why_not_applied(rule, mine, others)
                changed = True
        if changed:
            self._save()

    @staticmethod
    def _why_not_applied(rule: EarlyStop, mine: list[tuple[float, float]], others: list[Any]) -> str:
        if not mine:
            return f"early stop did not apply: no {rule.metric} logged"
        step = mine[-1][0]
        if step < rule.grace:
            return f"early stop did not apply: it ended at step {_step_text(step)}, within grace={rule.grace}"
        return (
            f"early stop did not apply: fewer than {rule.min_trials} other trial(s) had reached step "
            f"{_step_text(step)} (min_trials={rule.min_trials})"
        )

    def results(self, *, frame: bool = True) -> Any:
        """One row per trial: job, state, its parameters, its final metrics, its ``goodput`` (productive
        step time / wall time, ``job.goodput``; absent before it logs a step), and a ``note``: why it was
        stopped early, why it failed, or why early stop could not apply to it. A pandas DataFrame when
        pandas is installed (``frame=False``: a list of dicts)."""
        jobs = self.jobs()
        rows = []
        for trial in self.trials:
            job = jobs.get(trial["job"])
            row: dict[str, Any] = {"job": trial["job"], "state": job.state.value if job else "not submitted"}
            row.update(trial["params"])
            note = trial.get("stopped")
            if job is not None:
                row.update(job_results(job))
                goodput = _goodput(job)
                if goodput is not None:  # a trial that logged no step has no column of its own
                    row["goodput"] = goodput
                status = job.status
                if status.state is JobState.FAILED and not note:
                    note = _first_line(cli_reason(status.failure_reason) or "no reason recorded")
            note = note or trial.get("rule_note")
            if note:
                row["note"] = note
            rows.append(row)
        return as_table(rows) if frame else rows

    def plot_metrics(self, metrics: Sequence[str] | None = None) -> Any:
        """A matplotlib Figure overlaying the trials: one panel per metric (``metrics``, default every one
        logged), one line per trial labelled with its parameters, each on its own ``step``/``epoch``."""
        from ._metrics import plot_trials

        jobs = self.jobs()
        curves = {}
        for trial in self.trials:
            job = jobs.get(trial["job"])
            if job is None:
                continue
            params = " ".join(f"{k}={_argument(v)}" for k, v in trial["params"].items())
            try:
                curves[f"{trial['job']} {params}"] = read_records(job)
            except BatchAIError:
                curves[f"{trial['job']} {params}"] = []
        return plot_trials(f"sweep {self.name}", curves, list(metrics) if metrics else None)

    def best(self, metric: str, mode: str = "max") -> dict[str, Any] | None:
        """The row of ``results()`` with the best final ``metric`` (None when no trial logged it)."""
        rows = [r for r in self.results(frame=False) if isinstance(r.get(metric), float)]
        if not rows:
            return None
        best: dict[str, Any] = (min if mode == "min" else max)(rows, key=lambda r: r[metric])
        return best

    def estimate_cost(self, hours_per_trial: float | None = None) -> Cost | None:
        """What all the trials cost if each runs ``hours_per_trial`` (``Job.estimate_cost``'s default
        otherwise), before any is submitted; None when the cluster's price is unknown."""
        one = self._job(self.trials[0]).estimate_cost(hours_per_trial)
        return None if one is None else Cost(float(one) * len(self.trials))

    def table(self) -> str:
        """``results()`` as aligned text columns, for a terminal."""
        from ._display import format_cell, result_columns

        rows = self.results(frame=False)
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


def _goodput(job: Job) -> float | None:
    """The trial's goodput as a fraction (``job.goodput``), None when it logged no step."""
    try:
        value = job.goodput.goodput
    except BatchAIError:
        return None
    return None if value is None else round(value, 4)


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
    trial_hang_timeout: float | None = None,
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
    hang = TRIAL_HANG_TIMEOUT if trial_hang_timeout is None else trial_hang_timeout
    if isinstance(hang, bool) or not isinstance(hang, int | float) or not 0 <= hang < math.inf:
        raise ValidationError("trial_hang_timeout", hang, "seconds > 0, 0 to turn it off, or None")
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
    if options.get("mounts"):  # kept in the record as data: a storage key would be kept with them
        from .mounts import mount_to_dict, validate_mounts

        mounts = validate_mounts(options["mounts"])
        if any(getattr(m, "account_key", None) for m in mounts):
            raise ValidationError(
                "mounts",
                "<hidden>",
                "no storage key on a sweep (its record keeps every trial's options): mount the storage "
                "on the cluster (its node setup) instead",
            )
        options["mounts"] = [mount_to_dict(m) for m in mounts]
    options["args"] = list(options.get("args") or ())
    cluster = options.get("cluster")
    if cluster is not None and not isinstance(cluster, str):
        options["cluster"] = cluster.name
    record: dict[str, Any] = {
        "name": name,
        "experiment": experiment.name,
        "max_concurrent": max_concurrent,
        "early_stop": early_stop.to_dict() if early_stop else None,
        "trial_hang_timeout": float(hang),
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
