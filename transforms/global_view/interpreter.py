"""The statement walk the global style's abstract interpreters share: which statement does
what to the state, blocks in order, an if / else's two paths joined, with, try and its
handlers, and for / while loops iterated until the state at their head settles.

The walk knows nothing of what a state holds. An analysis (an "evaluator") subclasses
`StatementInterpreter` and supplies:
- the state: `_snapshot` (a value later statements cannot change), `_restore`, and
  `_join_states` (where two paths meet; `None` is never passed);
- what one statement does: `_assign_statement` (Assign and AnnAssign),
  `_aug_assign_statement`, `_expression_statement`, `_return_statement`,
  `_delete_statement`, `_definition` (a nested def or class), `_test` (an if's or while's
  condition, and what an assert or a raise reads), `_known_test` (an if test whose truth
  is known, so one branch is walked), `_with_item`, `_handler_entry` (an except clause's type and name), `_loop_head`;
- `_unmodelled`, for any other statement;
- the policies where the analyses differ, as the class attributes and hooks of the loop and
  try sections below.
The users: statements.py (the caller analysis's kinds) and donation.py (donated reads).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class Jumps:
    """The states at a loop's `break` and `continue` statements in one pass of its body."""

    breaks: Any = None
    continues: Any = None


class StatementInterpreter:
    """The shared control flow; see the module docstring for the hooks an analysis supplies."""

    # -- policies -------------------------------------------------------------------------
    # Fixpoint rounds of one loop before `_unsettled` is raised.
    loop_rounds = 8
    # Walk a loop's first iteration apart (`_first_iteration`), then the later ones to the
    # fixpoint from where the first ended: an analysis whose findings on the first pass differ
    # from later ones (donation.py: a read a later iteration overwrites) needs it.
    peel_first_iteration = False
    # Record the states at `break` / `continue`: a continue joins the next iteration's start,
    # a break the state after the loop. Off: both statements do nothing.
    tracks_jumps = False
    # A try's handlers start from the join of the entry state and every state its body
    # reached (statement by statement, nested blocks too), and `finally` also runs from there
    # (a raise no handler caught). Off: handlers start from the entry state, and `finally`
    # from the end of the body or of a handler.
    handlers_from_any_raise = False

    # The walk's own bookkeeping. The defaults are empty: an analysis with tracks_jumps sets
    # `self.loops = []`, one with handlers_from_any_raise `self.collectors = []`.
    loops: list | tuple = ()  # the Jumps of the loops being walked, innermost last
    collectors: list | tuple = ()  # per try with handlers_from_any_raise: the states reached
    guarded = 0  # try / with bodies being walked: an exception may end them (and loops) early

    # -- statements -----------------------------------------------------------------------
    def _block(self, statements) -> None:
        for statement in statements:
            self._statement(statement)
            for collected in self.collectors:
                collected.append(self._snapshot())

    def _statement(self, s) -> None:
        if isinstance(s, (ast.Assign, ast.AnnAssign)):
            self._assign_statement(s)
        elif isinstance(s, ast.AugAssign):
            self._aug_assign_statement(s)
        elif isinstance(s, ast.Expr):
            self._expression_statement(s.value)
        elif isinstance(s, (ast.For, ast.While)):
            self._loop(s)
        elif isinstance(s, ast.If):
            self._if(s)
        elif isinstance(s, ast.With):
            for item in s.items:
                self._with_item(item)
            self.guarded += 1
            self._block(s.body)
            self.guarded -= 1
        elif isinstance(s, ast.Try):
            self._try(s)
        elif isinstance(s, ast.Return):
            self._return_statement(s)
        elif isinstance(s, (ast.Break, ast.Continue)):
            if self.tracks_jumps and self.loops:
                jumps = self.loops[-1]
                if isinstance(s, ast.Break):
                    jumps.breaks = self._join_optional(self._snapshot(), jumps.breaks, s)
                else:
                    jumps.continues = self._join_optional(self._snapshot(), jumps.continues, s)
        elif isinstance(s, ast.Delete):
            self._delete_statement(s)
        elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            self._definition(s)
        elif isinstance(s, (ast.Pass, ast.Import, ast.ImportFrom)):
            pass
        elif isinstance(s, (ast.Assert, ast.Raise)):
            # What an assert or a raise reads is read on the host, as an `if` test is
            # (`assert x[0] == jax.device_count()` after a barrier's psum).
            for part in ast.iter_child_nodes(s):
                self._test(part)
        else:
            self._unmodelled(s)

    def _delete_statement(self, s: ast.Delete) -> None:
        """By default a `del` is a statement the analysis does not model."""
        self._unmodelled(s)

    def _definition(self, s) -> None:
        """By default a nested def or class is a statement the analysis does not model."""
        self._unmodelled(s)

    def _join_optional(self, a, b, node):
        """`_join_states` where either side may be a path not taken (None)."""
        if a is None:
            return b
        if b is None:
            return a
        return self._join_states(a, b, node)

    def _known_test(self, test) -> bool | None:
        """The truth of an if's test where the analysis knows it (a branch that cannot run is
        not walked); None by default: both branches may run."""
        return None

    def _if(self, s: ast.If) -> None:
        known = self._known_test(s.test)
        if known is not None:
            self._block(s.body if known else s.orelse)
            return
        self._test(s.test)
        entry = self._snapshot()
        self._block(s.body)
        after_body = self._snapshot()
        self._restore(entry)
        self._block(s.orelse)
        self._restore(self._join_states(after_body, self._snapshot(), s))

    # -- try ------------------------------------------------------------------------------
    def _try(self, s: ast.Try) -> None:
        entry = self._snapshot()
        if self.handlers_from_any_raise:
            collected: list = []
            self.collectors.append(collected)
        self.guarded += 1
        self._block(s.body)
        raised = entry
        if self.handlers_from_any_raise:
            # This try's own list, the innermost (`remove` would take the first *equal* list,
            # which in nested trys may be an outer try's).
            assert self.collectors[-1] is collected
            self.collectors.pop()
            for state in collected:  # a handler starts from wherever the body raised
                raised = self._join_states(raised, state, s)
        self._block(s.orelse)
        after = self._snapshot()
        for handler in s.handlers:
            self._restore(raised)
            self._handler_entry(handler)
            self._block(handler.body)
            after = self._join_states(after, self._snapshot(), handler)
        self.guarded -= 1
        if self.handlers_from_any_raise:  # finally also runs on a raise no handler caught
            after = self._join_states(after, raised, s)
        self._restore(after)
        self._block(s.finalbody)

    def _handler_entry(self, handler: ast.ExceptHandler) -> None:
        """An except clause's type and `as` name, before its body; by default ignored."""

    # -- loops ----------------------------------------------------------------------------
    def _loop(self, s) -> None:
        """`_loop_head(s)` once; then (peeled, if the policy says so) the first iteration
        from the entry state; then iterations from where the one before ended, each joined
        with its start, until that join is the start (or `_unsettled` after loop_rounds).
        The loop exits from `_loop_exit`'s state, then runs its else block; a break's state
        joins the state after it."""
        head = self._loop_head(s)
        entry = self._snapshot()
        breaks = None
        if self.peel_first_iteration:
            first = self._first_iteration(s, head)
            self._restore(self._join_optional(self._snapshot(), first.continues, s))
            breaks = first.breaks
        for _ in range(self.loop_rounds):
            start = self._snapshot()
            self._round_start(s)
            later = self._iteration(s, head)
            breaks = self._join_optional(later.breaks, breaks, s)
            after = self._join_states(start, self._snapshot(), s)
            after = self._join_optional(after, later.continues, s)
            self._restore(after)
            if after == start:
                break
        else:
            raise self._unsettled(s)
        self._loop_exit(s, entry, start)
        self._block(s.orelse)
        if breaks is not None:
            self._restore(self._join_states(self._snapshot(), breaks, s))

    def _iteration(self, s, head: Callable[[], None]) -> Jumps:
        """One pass: the head, then the body; its break and continue states if tracked."""
        jumps = Jumps()
        if self.tracks_jumps:
            self.loops.append(jumps)
        head()
        self._block(s.body)
        if self.tracks_jumps:
            self.loops.pop()
        return jumps

    def _first_iteration(self, s, head: Callable[[], None]) -> Jumps:
        """The peeled first iteration; an analysis may treat it apart."""
        return self._iteration(s, head)

    def _round_start(self, s) -> None:
        """Before each fixpoint round (not the peeled first iteration): by default nothing."""

    def _loop_exit(self, s, entry, start) -> None:
        """The state after the loop, before its else block: by default the settled state
        (already current). `entry`: the state before the loop; `start`: the settled state as
        the last round started from it."""
