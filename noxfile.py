"""Sessions for developers and CI. They run in the environment that ``./dev`` prepares (.venv), not in
venvs of their own: the training stack (TensorFlow 2.15.1 + a Horovod build) is too heavy to rebuild per
session. ``./dev <session>`` = bootstrap + ``nox -s <session>``."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "tests"]


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format) over the package, tests, examples and benchmarks; mypy (strict) over the
    package, train/ included."""
    checked = ("src", "tests", "examples", "benchmarks", "noxfile.py")
    session.run("ruff", "check", *checked)
    session.run("ruff", "format", "--check", *checked)
    session.run("mypy")


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite (real mpirun, sshd nodes, Horovod training, HTTP-level Azure, docs, notebook), on
    three workers: most tests wait (on sshd nodes, mpirun, Slurm, timeouts), so they share the 2 cores of a CI
    machine. Each test runs in its room (tests/conftest.py: Slurm, namespace nodes, training and timed tests,
    else its module); ``pytest -q`` alone still runs them one after another."""
    parallel = ["-n", "3", "--dist", "loadgroup", "--no-loadscope-reorder"]
    session.run("pytest", *parallel, *(session.posargs or ["-q", "--durations=15"]))


@nox.session
def unit(session: nox.Session) -> None:
    """The fast tier (a few minutes on 2 cores): every test but those that train, start sshd nodes,
    namespaces, Slurm or mpirun, or are marked slow. CI still runs everything (``tests``)."""
    fast = "not (train or ssh or mpi or slurm or nsnodes or slow)"
    session.run("pytest", "-q", "-m", fast, *session.posargs)


@nox.session
def quickstart(session: nox.Session) -> None:
    """The tutorial end to end on the local backend (digits data, 2 Horovod ranks)."""
    session.run("python", "examples/quickstart.py", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site strictly into site/."""
    session.run("mkdocs", "build", "--strict")


@nox.session
def benchmarks(session: nox.Session) -> None:
    """Every benchmark; each prints its figures."""
    import pathlib

    for bench in sorted(pathlib.Path("benchmarks").glob("bench_*.py")):
        session.run("python", str(bench))
