"""GraphPlan (Blum & Furst) for graph tasks. Pure: no database, no Celery; the clock only
for an optional time limit (``seconds``: past it, PlanningError saying so).

A job says what it has (propositions that hold at the start) and what it wants. The
planner builds the planning graph: proposition layer 0 holds ``has``; action layer i holds
every task whose requirements are present and pairwise non-mutex in proposition layer
i-1, plus one frame (no-op) action per proposition; proposition layer i holds their
effects. A consumed proposition ``p`` appears as the negated literal ``¬p``.

Mutex rules, per layer:

- actions: inconsistent effects (one adds what the other negates), interference (one
  negates what the other requires), competing needs (their requirements are mutex);
- propositions: negation (``p`` and ``¬p``) and inconsistent support (every pair of
  actions that could produce them is mutex).

The graph grows until the goals are present and pairwise non-mutex; the plan is then
extracted backwards, layer by layer, remembering goal sets that failed at a level
(nogoods). No plan exists once the graph has levelled off (two layers alike) and a full
stage added no nogood at the levelled-off layer (Blum & Furst's termination test), or a
full stage failed with as many levels as there are tasks to choose from.

What this planner adds to the textbook algorithm, each documented where it lives:

- a task runs at most once per job: it consumes a hidden proposition "once <task>";
- only tasks that can contribute to the goals enter the graph (relevance);
- extraction orders goals and supporters by the level they first appear (Kambhampati &
  Nigenda), learns nogoods as the subset of goals to blame and backjumps to it;
- a stage gives up after a budget and the graph grows instead, since proving that no
  shorter plan exists can cost far more than finding a longer one;
- the plan keeps no task it works without, and each task moves to the earliest layer
  its predecessors allow.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from tasksapp.graphs.grounding import (
    ERR_TOO_MANY,
    MAX_GROUND_TASKS,
    GroundingError,
    objects_by_type,
)
from tasksapp.graphs.registry import (
    NEGATION,
    Registry,
    RegistrySnapshot,
    TaskSpec,
    default_registry,
)

ERR_NAMES = "{field} must be a collection of proposition names, not a string."
ERR_CANNOT_PRODUCE = "cannot produce {goal!r}: {reasons}"
ERR_NO_PROVIDER = "no task provides {prop!r}"
ERR_CYCLE = "every task that could provide it needs it first"
ERR_NEEDS_EXCLUSIVE = "task {task!r} needs {a!r} and {b!r}, which never hold together"
ERR_EXCLUSIVE = (
    "cannot produce {first!r} and {second!r} together: every way to one of them undoes the other"
)
ERR_NO_ORDER = "cannot produce {goals} together: no order of tasks makes them all hold at once"
ERR_TOO_LONG = (
    "no plan within {seconds:g} s: planning with {tasks} tasks to choose from takes longer;"
    " name fewer objects in has, or want fewer propositions"
)

_NONE: frozenset = frozenset()
ONCE = "once "  # + task name: hidden proposition "not run yet"; a task runs at most once
STAGE_BUDGET = 5_000  # supporters tried in a stage before the search goes one level deeper


class PlanningError(ValueError):
    """No plan: ``goals`` are the wanted propositions at fault, ``missing`` what no task
    provides."""

    def __init__(self, message: str, *, goals: Iterable[str], missing: Iterable[str] = ()):
        super().__init__(message)
        self.goals = frozenset(goals)
        self.missing = frozenset(missing)


class PlanningTooLong(PlanningError):
    """The planner's time limit passed before it found a plan or proved there is none."""


class _Deadline:
    """The time limit of one planning: ``check`` raises _OutOfTime once it has passed."""

    def __init__(self, seconds: float | None) -> None:
        self.at = None if seconds is None else time.monotonic() + seconds

    def check(self) -> None:
        if self.at is not None and time.monotonic() > self.at:
            raise _OutOfTime


class _OutOfTime(Exception):
    pass


NO_DEADLINE = _Deadline(None)


def negate(literal: str) -> str:
    return literal[len(NEGATION) :] if literal.startswith(NEGATION) else NEGATION + literal


@dataclass(frozen=True)
class Step:
    """One task of a plan. ``needs`` maps each required proposition to the task whose
    output holds it (None: from the job's ``has``); ``after`` is every task that must
    finish before this one starts (its providers, and earlier tasks it conflicts with)."""

    task: str
    layer: int
    needs: Mapping[str, str | None]
    after: frozenset[str]


@dataclass(frozen=True)
class Plan:
    """What to run for one job.

    ``layers``: task names; the tasks of a layer may run in parallel, each layer after the
    one before. ``steps``: one Step per task, in layer order, with the edges an executor
    follows (a task may start once its ``after`` are done, before its layer is complete).
    ``goals``: for each wanted proposition, the task whose output holds it (None: the job
    had it). ``fingerprint``: the registry's, when planned.
    """

    fingerprint: str
    has: frozenset[str]
    wants: frozenset[str]
    layers: tuple[tuple[str, ...], ...]
    steps: Mapping[str, Step]
    goals: Mapping[str, str | None]

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(name for layer in self.layers for name in layer)

    def ready(self, done: Iterable[str]) -> tuple[str, ...]:
        """Tasks not in ``done`` whose predecessors all are: the ones to start now."""
        done = frozenset(done)
        return tuple(t for t in self.tasks if t not in done and self.steps[t].after <= done)

    def as_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "has": sorted(self.has),
            "wants": sorted(self.wants),
            "layers": [list(layer) for layer in self.layers],
            "needs": {name: dict(step.needs) for name, step in self.steps.items()},
            "after": {name: sorted(step.after) for name, step in self.steps.items()},
            "goals": dict(self.goals),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        steps = {
            name: Step(
                name, index, MappingProxyType(data["needs"][name]), frozenset(data["after"][name])
            )
            for index, layer in enumerate(data["layers"])
            for name in layer
        }
        return cls(
            fingerprint=data["fingerprint"],
            has=frozenset(data["has"]),
            wants=frozenset(data["wants"]),
            layers=tuple(tuple(layer) for layer in data["layers"]),
            steps=MappingProxyType(steps),
            goals=MappingProxyType(dict(data["goals"])),
        )


# --- the planning graph ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Action:
    name: str
    pre: frozenset[str]
    effects: frozenset[str]
    noop: bool = False


@dataclass(frozen=True)
class _Level:
    """Action layer i and the proposition layer it produces (level 0: no actions)."""

    actions: tuple[_Action, ...]
    action_mutex: Mapping[_Action, set[_Action]]
    props: frozenset[str]
    supporters: Mapping[str, tuple[_Action, ...]]
    prop_mutex: Mapping[str, set[str]]

    def mutex_count(self) -> int:
        return sum(len(others) for others in self.prop_mutex.values())


def _consistent(literals: frozenset[str], mutex: Mapping[str, set[str]]) -> bool:
    return all(mutex.get(literal, _NONE).isdisjoint(literals) for literal in literals)


def _index(actions: Iterable[_Action], attribute: str) -> dict[str, list[_Action]]:
    index: dict[str, list[_Action]] = defaultdict(list)
    for action in actions:
        for literal in getattr(action, attribute):
            index[literal].append(action)
    return index


def _action_mutexes(
    actions: list[_Action], prop_mutex: Mapping[str, set[str]], deadline: _Deadline
) -> dict:
    by_effect, by_pre = _index(actions, "effects"), _index(actions, "pre")
    mutex = {}
    for action in actions:
        deadline.check()
        found: set[_Action] = set()
        for literal in action.effects:  # inconsistent effects; interference (it negates)
            found.update(by_effect.get(negate(literal), ()), by_pre.get(negate(literal), ()))
        for literal in action.pre:  # interference (the other negates); competing needs
            found.update(by_effect.get(negate(literal), ()))
            for other in prop_mutex.get(literal, ()):
                found.update(by_pre.get(other, ()))
        found.discard(action)
        mutex[action] = found
    return mutex


def _candidates(support: list[_Action], action_mutex: Mapping) -> set[str]:
    """Literals produced only by actions that are mutex with every supporter of a prop."""
    common = set.intersection(*(action_mutex[action] for action in support))
    return {literal for action in common for literal in action.effects}


def _prop_mutexes(
    supporters: Mapping[str, list], action_mutex: Mapping, previous: _Level, deadline: _Deadline
) -> dict:
    """Mutex pairs only shrink from one level to the next (frame actions carry every
    compatible pair on), so an old proposition is checked against last level's mutexes."""
    mutex: dict[str, set[str]] = defaultdict(set)
    for prop, support in supporters.items():
        if negate(prop) in supporters:
            mutex[prop].add(negate(prop))
        old = prop in previous.props
        if old:
            candidates = previous.prop_mutex.get(prop, _NONE) & supporters.keys()
        else:
            candidates = _candidates(support, action_mutex) & supporters.keys()
        for other in candidates:  # each pair once: the smaller name, or the new one, checks
            if other <= prop and (old or other not in previous.props):
                continue
            deadline.check()
            if all(b in action_mutex[a] for a in support for b in supporters[other]):
                mutex[prop].add(other)
                mutex[other].add(prop)
    return mutex


def _task_action(spec: TaskSpec) -> _Action:
    """A task as an action; it also consumes its hidden "not run yet" proposition."""
    once = ONCE + spec.name
    negative = {negate(prop) for prop in spec.consumes | {once}}
    return _Action(spec.name, spec.requires | {once}, spec.provides | negative)


def _hidden(literal: str) -> bool:
    return literal.removeprefix(NEGATION).startswith(ONCE)


class PlanningGraph:
    """The planning graph, built one level at a time by :meth:`extend`.

    ``levelled_at`` is the first level equal to the one before (None until then); levels
    after it are the same object. ``first`` maps each literal to the level where it first
    appeared. The query methods take task and proposition names, for tests and tools.
    """

    def __init__(
        self, tasks: Iterable[TaskSpec], has: Iterable[str], deadline: _Deadline = NO_DEADLINE
    ) -> None:
        self.deadline = deadline
        specs = sorted(tasks, key=lambda spec: spec.name)
        self._tasks = [_task_action(spec) for spec in specs]
        self._noops: dict[str, _Action] = {}
        start = frozenset(has) | {ONCE + spec.name for spec in specs}
        self._levels = [_Level((), {}, start, {prop: () for prop in start}, {})]
        self.levelled_at: int | None = None
        self.first: dict[str, int] = dict.fromkeys(start, 0)

    @property
    def depth(self) -> int:
        return len(self._levels) - 1

    def level(self, index: int) -> _Level:
        return self._levels[index]

    def extend(self) -> None:
        previous = self._levels[-1]
        if self.levelled_at is not None:
            self._levels.append(previous)
            return
        level = self._next_level(previous)
        self._levels.append(level)
        for prop in level.props:
            self.first.setdefault(prop, self.depth)
        if level.props == previous.props and level.mutex_count() == previous.mutex_count():
            self.levelled_at = self.depth

    def _cost(self, action: _Action) -> tuple:
        """Supporters are tried cheapest first: by the level at which their last requirement
        first appeared, frame actions before tasks on a tie."""
        return (max((self.first[p] for p in action.pre), default=0), not action.noop, action.name)

    def _noop(self, literal: str) -> _Action:
        if literal not in self._noops:
            self._noops[literal] = _Action(
                literal, frozenset([literal]), frozenset([literal]), True
            )
        return self._noops[literal]

    def _next_level(self, previous: _Level) -> _Level:
        actions = [self._noop(literal) for literal in sorted(previous.props)]
        actions += [
            task
            for task in self._tasks
            if task.pre <= previous.props and _consistent(task.pre, previous.prop_mutex)
        ]
        action_mutex = _action_mutexes(actions, previous.prop_mutex, self.deadline)
        supporters = {  # "has run" (¬once) is never needed: no node for it
            literal: producers
            for literal, producers in _index(actions, "effects").items()
            if not literal.startswith(NEGATION + ONCE)
        }
        prop_mutex = _prop_mutexes(supporters, action_mutex, previous, self.deadline)
        ordered = {prop: tuple(sorted(found, key=self._cost)) for prop, found in supporters.items()}
        return _Level(tuple(actions), action_mutex, frozenset(ordered), ordered, prop_mutex)

    def propositions(self, level: int) -> frozenset[str]:
        """The job's propositions (and negations) in a layer, without hidden ones."""
        return frozenset(p for p in self._levels[level].props if not _hidden(p))

    def tasks(self, level: int) -> frozenset[str]:
        return frozenset(a.name for a in self._levels[level].actions if not a.noop)

    def propositions_mutex(self, level: int, first: str, second: str) -> bool:
        return second in self._levels[level].prop_mutex.get(first, _NONE)

    def tasks_mutex(self, level: int, first: str, second: str) -> bool:
        tasks = {a.name: a for a in self._levels[level].actions if not a.noop}
        return tasks[second] in self._levels[level].action_mutex[tasks[first]]

    def mutex_pairs(self, goals: frozenset[str], level: int) -> list[tuple[str, str]]:
        mutex = self._levels[level].prop_mutex
        pairs = [(a, b) for a in sorted(goals) for b in sorted(goals) if a < b]
        return [(a, b) for a, b in pairs if b in mutex.get(a, _NONE)]

    def goals_reachable(self, goals: frozenset[str], level: int) -> bool:
        return goals <= self.propositions(level) and _consistent(
            goals, self.level(level).prop_mutex
        )


# --- extracting a plan backwards ------------------------------------------------------


class _Nogoods:
    """Goal sets known to fail at one level; looked up exactly or by subset."""

    def __init__(self) -> None:
        self._sets: set[frozenset[str]] = set()
        self._by_first: dict[str, list[frozenset[str]]] = defaultdict(list)
        self._by_member: dict[str, list[frozenset[str]]] = defaultdict(list)

    def __len__(self) -> int:
        return len(self._sets)

    def add(self, goals: frozenset[str]) -> None:
        if goals not in self._sets:
            self._sets.add(goals)
            self._by_first[min(goals)].append(goals)
            for goal in goals:
                self._by_member[goal].append(goals)

    def covering(self, goals: frozenset[str], *, exact: bool) -> frozenset[str] | None:
        if goals in self._sets:
            return goals
        if exact:
            return None
        for first in goals:
            for nogood in self._by_first.get(first, ()):
                if nogood <= goals:
                    return nogood
        return None

    def covering_any_of(self, goals: frozenset[str], new: Iterable[str]) -> frozenset[str] | None:
        """A nogood within ``goals`` that holds one of the ``new`` goals."""
        for goal in new:
            for nogood in self._by_member.get(goal, ()):
                if nogood <= goals:
                    return nogood
        return None


class _OutOfBudget(Exception):
    pass


class _Budget:
    """Supporters the search may still try in this stage (None: no limit); every
    CHECK_EVERY of them, whether the time limit has passed."""

    CHECK_EVERY = 256

    def __init__(self, steps: int | None, deadline: _Deadline = NO_DEADLINE) -> None:
        self.left, self.deadline, self.spent = steps, deadline, 0

    def spend(self) -> None:
        self.spent += 1
        if self.spent % self.CHECK_EVERY == 0:
            self.deadline.check()
        if self.left is not None:
            self.left -= 1
            if self.left < 0:
                raise _OutOfBudget


class _Assignment:
    """Chooses one supporter per goal of one level, pairwise non-mutex, by backtracking.

    A goal already produced by a chosen action reuses it. Learned mode prunes a choice as
    soon as the requirements chosen so far contain a nogood of the level below, backjumps
    to the latest goal to blame and reports the goals involved in a failure
    (conflict-directed backjumping). Exact mode backtracks chronologically and reports all
    goals, as Blum & Furst's termination test expects at and above the level-off.
    """

    def __init__(
        self, goals: tuple[str, ...], layer: _Level, below: _Nogoods, budget: _Budget, exact: bool
    ) -> None:
        self.goals, self.layer, self.exact = goals, layer, exact
        self.below, self.budget = below, budget
        self.choice: list[_Action] = [None] * len(goals)  # type: ignore[list-item]
        self.owner = list(range(len(goals)))  # the goal whose decision chose the action
        self.needs: list[frozenset[str]] = [_NONE] * len(goals)  # requirements of choice[:k+1]
        self.options: list[Iterator[_Action] | None] = [None] * len(goals)
        self.why: list[set[int]] = [set() for _ in goals]
        self.decided: list[int] = []  # goals that chose their action, in order
        self.decided_actions: list[_Action] = []

    def run(self, descend: Callable[[list[_Action]], tuple[list | None, frozenset[str]]]):
        k = 0
        while True:
            if k == len(self.goals):
                layers, conflict = descend(self.decided_actions)
                if layers is not None:
                    return layers, _NONE
                blame = self._blame(conflict, len(self.goals))
            elif self._advance(k):
                k += 1
                continue
            else:
                blame = self.why[k]
            k = self._jump(blame)
            if k < 0:
                failed = range(len(self.goals)) if self.exact else blame
                return None, frozenset(self.goals[i] for i in failed)

    def _advance(self, k: int) -> bool:
        """Give goal k its next supporter; False once its supporters are exhausted."""
        if self.options[k] is None and self._reuse(k):
            return True
        if self.options[k] is None:
            self.options[k] = iter(self.layer.supporters[self.goals[k]])
            self.owner[k], self.why[k] = k, {k}
        self._forget(k)
        for action in self.options[k]:
            self.budget.spend()
            self.choice[k] = action
            blame = self._conflicts(k, action)
            if not blame:
                self.decided.append(k)
                self.decided_actions.append(action)
                return True
            self.why[k] |= blame
        self.options[k] = None
        return False

    def _forget(self, k: int) -> None:
        """Drop the decisions of goal k and later ones."""
        while self.decided and self.decided[-1] >= k:
            self.decided.pop()
            self.decided_actions.pop()

    def _reuse(self, k: int) -> bool:
        goal = self.goals[k]
        pairs = zip(self.decided, self.decided_actions, strict=True)
        chooser = next((i for i, action in pairs if goal in action.effects), None)
        if chooser is None:
            return False
        self.choice[k], self.owner[k] = self.choice[chooser], chooser
        self.needs[k], self.options[k] = self.needs[k - 1], iter(())
        return True

    def _conflicts(self, k: int, action: _Action) -> set[int]:
        """Goals to blame if ``action`` cannot support goal k; empty if it can."""
        mutex = self.layer.action_mutex[action]
        if not mutex.isdisjoint(self.decided_actions):
            pairs = zip(self.decided, self.decided_actions, strict=True)
            return {k, next(i for i, other in pairs if other in mutex)}
        before = self.needs[k - 1] if k else _NONE
        self.needs[k] = before | action.pre
        if self.exact:
            return set()
        known = self.below.covering_any_of(self.needs[k], action.pre - before)
        return set() if known is None else self._blame(known, k + 1)

    def _blame(self, conflict: frozenset[str], upto: int) -> set[int]:
        culprits = {i for i in range(upto) if self.choice[i].pre & conflict}
        return culprits | {self.owner[i] for i in culprits}

    def _jump(self, blame: set[int]) -> int:
        """The latest decision to revisit (-1: none), keeping the blame with it."""
        targets = self.decided if self.exact else [i for i in self.decided if i in blame]
        if not targets:
            return -1
        target = max(targets)
        self.why[target] |= blame
        self._forget(target + 1)
        for later in range(target + 1, len(self.goals)):
            self.options[later] = None
        return target


class _Search:
    """Backward plan extraction, memoising failed goal sets (nogoods) per level."""

    def __init__(self, graph: PlanningGraph) -> None:
        self._graph = graph
        self.deadline = graph.deadline
        self.nogoods: dict[int, _Nogoods] = defaultdict(_Nogoods)
        self.budget = _Budget(None, self.deadline)

    def extract(self, goals: frozenset[str], level: int) -> tuple[list | None, frozenset[str]]:
        """(action layers 1..level, ∅), or (None, a subset of goals that cannot hold)."""
        if level == 0:
            return [], _NONE
        exact = self._graph.levelled_at is not None and level >= self._graph.levelled_at
        known = self.nogoods[level].covering(goals, exact=exact)
        if known is not None:
            return None, known
        layer = self._graph.level(level)
        first = self._graph.first
        ordered = tuple(sorted(goals, key=lambda g: (-first[g], len(layer.supporters[g]), g)))
        below = self.nogoods[level - 1]
        layers, conflict = _Assignment(ordered, layer, below, self.budget, exact).run(
            lambda actions: self._descend(actions, level)
        )
        if layers is None:
            self.nogoods[level].add(conflict)
        return layers, conflict

    def _descend(self, actions: list[_Action], level: int) -> tuple[list | None, frozenset]:
        layers, conflict = self.extract(frozenset().union(*(a.pre for a in actions)), level - 1)
        return (None if layers is None else [*layers, tuple(actions)]), conflict


# --- no plan: saying why --------------------------------------------------------------


def _quoted_list(names: Iterable[str]) -> str:
    quoted = [repr(name) for name in sorted(names)]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _providers(tasks: Iterable[TaskSpec]) -> dict[str, list[TaskSpec]]:
    providers: dict[str, list[TaskSpec]] = defaultdict(list)
    for spec in sorted(tasks, key=lambda spec: spec.name):
        for prop in spec.provides:
            providers[prop].append(spec)
    return providers


def _relevant(tasks: Iterable[TaskSpec], wants: frozenset[str]) -> list[TaskSpec]:
    """Tasks that provide a wanted proposition or a requirement of a relevant task. With no
    negative requirements or goals, no other task can be part of a plan."""
    providers, relevant, seen, stack = _providers(tasks), {}, set(), list(wants)
    while stack:
        prop = stack.pop()
        if prop not in seen:
            seen.add(prop)
            for spec in providers.get(prop, ()):
                relevant[spec.name] = spec
                stack.extend(spec.requires)
    return list(relevant.values())


def _why_unreachable(goal: str, graph: PlanningGraph, providers: Mapping) -> tuple[list, set]:
    """Reasons found on every way to ``goal``, and the propositions no task provides."""
    level, reachable = graph.depth, graph.propositions(graph.depth)
    missing, exclusive, seen, stack = set(), set(), set(), [goal]
    while stack:
        prop = stack.pop()
        if prop in seen:
            continue
        seen.add(prop)
        if not providers.get(prop):
            missing.add(prop)
        for spec in providers.get(prop, ()):
            needs = [need for need in sorted(spec.requires) if need not in reachable]
            stack.extend(needs)
            for first, second in [] if needs else graph.mutex_pairs(spec.requires, level)[:1]:
                exclusive.add(ERR_NEEDS_EXCLUSIVE.format(task=spec.name, a=first, b=second))
    reasons = [ERR_NO_PROVIDER.format(prop=prop) for prop in sorted(missing)]
    return reasons + sorted(exclusive), missing


def _explain(graph: PlanningGraph, goals: frozenset[str], tasks: list[TaskSpec]) -> PlanningError:
    unreachable = sorted(goals - graph.propositions(graph.depth))
    if unreachable:
        providers, clauses, missing = _providers(tasks), [], set()
        for goal in unreachable:
            reasons, absent = _why_unreachable(goal, graph, providers)
            missing.update(absent)
            reason = "; ".join(reasons) or ERR_CYCLE
            clauses.append(ERR_CANNOT_PRODUCE.format(goal=goal, reasons=reason))
        return PlanningError("; ".join(clauses), goals=unreachable, missing=missing)
    pairs = graph.mutex_pairs(goals, graph.depth)
    clauses = [ERR_EXCLUSIVE.format(first=a, second=b) for a, b in pairs]
    message = "; ".join(clauses) or ERR_NO_ORDER.format(goals=_quoted_list(goals))
    return PlanningError(message, goals={g for pair in pairs for g in pair} or goals)


# --- stages: extend, extract, stop ----------------------------------------------------


def _attempt(search: _Search, goals: frozenset[str], level: int, budget: int):
    """One stage: (action layers or None, whether the search ran to its end)."""
    search.budget = _Budget(budget, search.deadline)
    try:
        layers, _ = search.extract(goals, level)
    except _OutOfBudget:
        return None, False
    return layers, True


def _nogoods_settled(counts: list[int | None]) -> bool:
    """Blum & Furst's test: every stage since the level-off searched fully, and the last
    one added no nogood at the level-off."""
    return len(counts) >= 2 and None not in counts and counts[-1] == counts[-2]


def _solve(graph: PlanningGraph, goals: frozenset[str], tasks: list[TaskSpec], bound: int):
    """Extend the graph and extract until a plan is found or none can exist.

    A stage gives up after ``budget`` tries (doubling each time) and the graph grows a
    level: proving that no shorter plan exists can cost far more than finding a longer
    one. "No plan" needs a full stage: Blum & Furst's test, or ``bound`` levels (a task
    runs at most once, so no plan needs more levels than there are tasks)."""
    search, budget, counts = _Search(graph), STAGE_BUDGET, []
    while True:
        if graph.goals_reachable(goals, graph.depth):
            layers, complete = _attempt(search, goals, graph.depth, budget)
            if layers is not None:
                return layers
            budget *= 2
            if graph.levelled_at is not None:
                counts.append(len(search.nogoods[graph.levelled_at]) if complete else None)
            if complete and (graph.depth >= bound or _nogoods_settled(counts)):
                raise _explain(graph, goals, tasks)
        elif graph.levelled_at is not None:
            raise _explain(graph, goals, tasks)
        graph.extend()


# --- from extracted layers to a Plan --------------------------------------------------


def _conflict(first: TaskSpec, second: TaskSpec) -> bool:
    """Running these two in either order gives different results (a consumes is involved)."""
    return bool(
        first.consumes & (second.requires | second.provides)
        or second.consumes & (first.requires | first.provides)
    )


def _step(spec: TaskSpec, layer: int, latest: Mapping[str, str], earlier: list[TaskSpec]) -> Step:
    needs = {prop: latest.get(prop) for prop in sorted(spec.requires)}
    after = {name for name in needs.values() if name is not None}
    after.update(other.name for other in earlier if _conflict(other, spec))
    return Step(spec.name, layer, MappingProxyType(needs), frozenset(after))


def _holds(layers: list[list[str]], specs: Mapping[str, TaskSpec], has, wants) -> bool:
    """Whether running ``layers`` in order, starting from ``has``, ends with ``wants``."""
    state = set(has)
    for layer in layers:
        if not all(specs[name].requires <= state for name in layer):
            return False
        state.difference_update(*(specs[name].consumes for name in layer))
        state.update(*(specs[name].provides for name in layer))
    return wants <= state


def _without_redundant(layers: list[list[str]], specs, has, wants) -> list[list[str]]:
    """Drop, latest first, every task that the plan still works without."""
    for name in [name for layer in reversed(layers) for name in reversed(layer)]:
        trial = [[other for other in layer if other != name] for layer in layers]
        if _holds(trial, specs, has, wants):
            layers = trial
    return [layer for layer in layers if layer]


def _steps(layers: list[list[str]], specs: Mapping[str, TaskSpec]) -> tuple[dict, dict]:
    """Steps in plan order, and the last provider of each proposition."""
    latest: dict[str, str] = {}
    steps: dict[str, Step] = {}
    for index, layer in enumerate(layers):
        earlier = [specs[name] for name in steps]
        steps.update((name, _step(specs[name], index, latest, earlier)) for name in layer)
        for name in reversed(layer):  # on a tie the first name in the layer provides
            latest.update(dict.fromkeys(specs[name].provides, name))
    return steps, latest


def _compacted(steps: dict[str, Step]) -> tuple[tuple[tuple[str, ...], ...], dict[str, Step]]:
    """Each task moves to the earliest layer after all of its predecessors."""
    depth: dict[str, int] = {}
    for name, step in steps.items():
        depth[name] = 1 + max((depth[other] for other in step.after), default=-1)
    layers = tuple(
        tuple(sorted(name for name in depth if depth[name] == index))
        for index in range(1 + max(depth.values(), default=-1))
    )
    order = [name for layer in layers for name in layer]
    return layers, {name: replace(steps[name], layer=depth[name]) for name in order}


def _build_plan(
    levels: list,
    specs: Mapping[str, TaskSpec],
    *,
    fingerprint: str,
    has: frozenset,
    wants: frozenset,
) -> Plan:
    chosen = [sorted(action.name for action in actions if not action.noop) for actions in levels]
    steps, latest = _steps(_without_redundant(chosen, specs, has, wants), specs)
    layers, steps = _compacted(steps)
    return Plan(
        fingerprint=fingerprint,
        has=has,
        wants=wants,
        layers=layers,
        steps=MappingProxyType(steps),
        goals=MappingProxyType({goal: latest.get(goal) for goal in sorted(wants)}),
    )


# --- entry points ---------------------------------------------------------------------


def _propositions(names: Iterable[str] | Mapping[str, Any], *, field: str) -> frozenset[str]:
    if isinstance(names, str):
        raise PlanningError(ERR_NAMES.format(field=field), goals=())
    return frozenset(names)


def _objects(tasks: Iterable[TaskSpec], has: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The objects ``has`` names for the parameter types of the tasks, as a cache key."""
    types = [kind for spec in tasks for _, kind in spec.params]
    try:
        return tuple(objects_by_type(has, types).items())
    except GroundingError as exc:
        raise PlanningError(str(exc), goals=()) from exc


def _grounded(tasks: Iterable[TaskSpec], objects: Mapping[str, tuple[str, ...]]) -> list:
    """Plain tasks, and every ground task of the parameterised ones. Refused before any
    is built when they would be too many (three parameters over 100 objects: a million)."""
    ground, count = [], 0
    for spec in tasks:
        count += math.prod(len(objects.get(kind, ())) for _, kind in spec.params)
        if count > MAX_GROUND_TASKS:
            raise PlanningError(ERR_TOO_MANY.format(most=MAX_GROUND_TASKS), goals=())
    for spec in tasks:
        ground += spec.grounded(objects)
    return ground


def plan_tasks(
    *,
    tasks: Iterable[TaskSpec],
    has: Iterable[str] | Mapping[str, Any],
    wants: Iterable[str],
    fingerprint: str = "",
    objects: tuple[tuple[str, tuple[str, ...]], ...] | None = None,
    seconds: float | None = None,
) -> Plan:
    """Plan without the cache. ``has`` may be the job's values: only its keys are used,
    and the lists of object names it holds for parameterised tasks (or ``objects``).
    ``seconds``: the time limit (None: none); past it, PlanningTooLong."""
    deadline = _Deadline(seconds)
    tasks = list(tasks)
    objects = _objects(tasks, has) if objects is None else objects
    specs = {spec.name: spec for spec in _grounded(tasks, dict(objects))}
    has, wants = _propositions(has, field="has"), _propositions(wants, field="wants")
    relevant = _relevant(specs.values(), wants)
    try:
        graph = PlanningGraph(relevant, has, deadline)
        levels = _solve(graph, wants, list(specs.values()), bound=len(relevant))
    except _OutOfTime:
        message = ERR_TOO_LONG.format(seconds=seconds, tasks=len(relevant))
        raise PlanningTooLong(message, goals=()) from None
    return _build_plan(levels, specs, fingerprint=fingerprint, has=has, wants=wants)


@lru_cache(maxsize=256)
def _cached_plan(
    snapshot: RegistrySnapshot,
    has: frozenset[str],
    wants: frozenset[str],
    objects: tuple,
    seconds: float | None,
) -> Plan:
    return plan_tasks(
        tasks=snapshot.specs,
        has=has,
        wants=wants,
        fingerprint=snapshot.fingerprint,
        objects=objects,
        seconds=seconds,
    )


def graph_plan(
    *,
    has: Iterable[str] | Mapping[str, Any],
    wants: Iterable[str],
    registry: Registry | None = None,
    seconds: float | None = None,
) -> Plan:
    """The plan for a job, cached by (registry fingerprint, has keys, wants, the objects
    named for parameterised tasks, the time limit). ``seconds``: PlanningTooLong past it
    (not cached: a later call tries again)."""
    snapshot = (default_registry if registry is None else registry).snapshot()
    objects = _objects(snapshot.specs, has)
    has, wants = _propositions(has, field="has"), _propositions(wants, field="wants")
    return _cached_plan(snapshot, has, wants, objects, seconds)


plan_cache_info = _cached_plan.cache_info
plan_cache_clear = _cached_plan.cache_clear
