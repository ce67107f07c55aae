"""Local functions a caller (or a helper it follows) defines and only calls: read at each call
as their body would run there. A def nested in a function, called by name and never passed on,
runs when called and reads its free names as they are then (a closure reads the enclosing
names at call time); its own names (parameters, stores) are its own. So walking its body at
the call, in the enclosing function's state, with its own names bound to the arguments and
restored afterwards, is what Python does. Stores it makes to enclosing values (a list's
`append`) are the enclosing function's, as they are here. flax's `prefetch_to_device` is
written this way (`enqueue(n)` topping up a deque from the iterator). A mixin of
`CallerAnalysis`."""

from __future__ import annotations

import ast

from transforms.codes.global_view import CONSUMER_UNKNOWN
from transforms.global_view.sites import Blocker
from transforms.global_view.values import SAME, Kind

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_MISSING = Kind("missing")


class LocalFunctionsMixin:
    """`_definition` (the interpreter's hook for a nested def) and `local_call`."""

    def _definition(self, s) -> None:
        if self.local_function(s) is None:
            self._unmodelled(s)

    def local_function(self, node) -> ast.FunctionDef | None:
        """The def nested in this function that `node` (a def statement, or a name it
        calls) is, where that def is only ever called: no decorator, plain positional
        parameters without defaults, no yield, nonlocal, global or scope of its own, bound
        once, and every read of its name in the function a call `name(a, b, ...)` that
        passes each parameter by position, outside the def itself (no recursion)."""
        name = node.name if isinstance(node, ast.FunctionDef) else (
            node.id if isinstance(node, ast.Name) else None)
        if name is None:
            return None
        found = self.__dict__.setdefault("_local_functions", {})
        if name not in found:
            found[name] = self._find_local_function(name)
        function = found[name]
        if isinstance(node, ast.FunctionDef) and function is not node:
            return None
        return function

    def _find_local_function(self, name: str) -> ast.FunctionDef | None:
        defs = [n for n in ast.walk(self.function) if isinstance(
            n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
            and n is not self.function]
        if len(defs) != 1 or not isinstance(defs[0], ast.FunctionDef) \
                or defs[0] not in self.function.body and not _nested_statement(
                    self.function, defs[0]):
            return None
        function = defs[0]
        arguments = function.args
        if function.decorator_list or arguments.vararg or arguments.kwarg \
                or arguments.kwonlyargs or arguments.posonlyargs or arguments.defaults \
                or function.returns is not None:
            return None
        inner = [n for s in function.body for n in ast.walk(s)]
        if any(isinstance(n, (*_SCOPES, ast.Yield, ast.YieldFrom, ast.Await, ast.Nonlocal,
                              ast.Global)) for n in inner):
            return None
        if any(isinstance(n, ast.Name) and n.id in self.sites or id(n) in self.inline
               for n in inner):
            return None  # a pmap called in it: the sites' callers are read elsewhere
        inside = {id(n) for n in inner}
        # Calls in another scope (a lambda, a def, a class) may run where the analysis does
        # not read them, and would not be checked against the rewrite of this one.
        scoped = {id(n) for scope in ast.walk(self.function) if isinstance(scope, _SCOPES)
                  and scope is not self.function for n in ast.walk(scope) if n is not scope}
        stores = [n for n in ast.walk(self.function) if isinstance(n, ast.Name)
                  and n.id == name and not isinstance(n.ctx, ast.Load)]
        if stores:
            return None  # bound again (`name = ...`, a loop target): not one function
        calls = {id(n.func): n for n in ast.walk(self.function) if isinstance(n, ast.Call)}
        loads = [n for n in ast.walk(self.function) if isinstance(n, ast.Name)
                 and n.id == name and isinstance(n.ctx, ast.Load)]
        count = len(arguments.args)
        for load in loads:
            call = calls.get(id(load))
            if id(load) in inside or id(load) in scoped or call is None or call.keywords \
                    or len(call.args) != count \
                    or any(isinstance(a, ast.Starred) for a in call.args):
                return None
        return function if loads else None

    def local_call(self, call: ast.Call, function: ast.FunctionDef) -> Kind:
        """The kind `function(...)` returns, its body walked here with its parameters bound
        to the arguments' kinds. Every call must ask the same edits of its body (one def
        serves them all), and its names are restored after it, as they were."""
        kinds = [self.eval(a) for a in call.args]
        own = {n.id for s in function.body for n in ast.walk(s) if isinstance(n, ast.Name)
               and not isinstance(n.ctx, ast.Load)} | {a.arg for a in function.args.args}
        saved = {name: self.kinds.get(name, _MISSING) for name in own}
        saved_returns, self.returns = self.returns, []
        span = self.module.span(function)
        inside = [k for k in self.edits if span[0] <= k[0] and k[1] <= span[1]]
        earlier = {k: self.edits.pop(k) for k in inside}  # an earlier call's: asked anew
        try:
            for parameter, kind in zip(function.args.args, kinds):
                self._assign(parameter.arg, kind, parameter)
            self._block(function.body)
            returns = self.returns
        finally:
            self.returns = saved_returns
            for name, kind in saved.items():
                if kind is _MISSING:
                    self.kinds.pop(name, None)
                else:
                    self.kinds[name] = kind
        edits = sorted((k, v) for k, v in self.edits.items()
                       if span[0] <= k[0] and k[1] <= span[1])
        asked = self.__dict__.setdefault("_local_edits", {})
        if asked.setdefault(function.name, edits) != edits or any(
                self.edits.get(k, v) != v for k, v in earlier.items()):
            raise Blocker(CONSUMER_UNKNOWN, call, f"`{function.name}` is called with values of "
                          "different layouts, and one rewritten function cannot serve them all")
        result = None
        for node, kind in returns:
            result = self._join(result, kind, f"the result of {function.name}", node)
        return result or SAME


def _nested_statement(function: ast.FunctionDef, node: ast.stmt) -> bool:
    """`node` is a statement of `function`'s own blocks (in an if, a loop, a with or a try),
    not of a def or class nested in it."""
    stack = list(function.body)
    while stack:
        statement = stack.pop()
        if statement is node:
            return True
        if isinstance(statement, _SCOPES):
            continue
        for field in ("body", "orelse", "finalbody"):
            stack.extend(getattr(statement, field, None) or [])
        for handler in getattr(statement, "handlers", []):
            stack.extend(handler.body)
    return False
