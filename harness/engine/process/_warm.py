"""Warm starts: a Python program's framework imported once by the harness, not by every
incarnation.

A worker that is a program (``cmd:python -m app``) was exec'd for each incarnation, and each
paid the interpreter and its framework's imports again: LangGraph's are 1.8 s of a case's
2.3 s. The harness is already the parent every worker is forked from (behind the wall, born in
its cgroup, under its keeper), so it is the zygote: before the campaign's first case it
imports the *libraries* the program imports (the standard library and site-packages, found by
reading the program's source and its own modules' sources, never executing them), and each
incarnation is forked as every worker is, then runs the program in place of the exec, as
``python -m``/``python script.py`` would: the program's own environment, ``sys.argv``,
``sys.path`` (the one a fresh interpreter of this venv has, probed once), signal dispositions,
warnings, ``__main__``; none of the harness's modules of the user's code, logging handlers,
exit handlers or import hooks.

The program's own modules are never imported by the harness: they may read their settings
(a database URL, a token) at import, and those are the case's. A library that reads the
environment at import sees the harness's, which is the program's less what the harness adds.

When it cannot, the program is exec'd as before (a cold start) and the campaign says why
(``Warmth.why``): another interpreter than the harness's, a Python option or start-up
variable a fork cannot reproduce (``-X``, ``PYTHONHASHSEED``, a preload such as the fake
clock's), a library that starts a thread at import (a fork copies no thread), or
``CRASH_HARNESS_COLD_START=1``.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import contextlib
import functools
import importlib
import importlib.machinery
import json
import logging
import os
import runpy
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from harness.engine.process import _hooks

#: set to 1 to exec every program (a cold start), as before warm starts
COLD_ENV = "CRASH_HARNESS_COLD_START"
#: start-up variables a fork carries over as they are or reproduces itself
_HANDLED = frozenset(
    {"PYTHONPATH", "PYTHONFAULTHANDLER", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"}
)
#: the most source files of the program's own read to find its libraries
_MAX_FILES = 400


@dataclass(frozen=True)
class Launch:
    """What ``python [-u] -m MODULE ARGS`` or ``python [-u] SCRIPT ARGS`` runs."""

    module: str | None
    script: str | None
    args: tuple[str, ...]
    unbuffered: bool = False

    @property
    def key(self) -> str:
        return f"-m {self.module}" if self.module is not None else str(self.script)


def _first(launch: Launch) -> str:
    """``sys.path[0]`` of ``python -m`` (the directory it runs in) or of a script (its own)."""
    if launch.module is not None:
        return os.getcwd()
    return os.path.dirname(os.path.abspath(str(launch.script)))


def parse(argv: Sequence[str]) -> Launch | str:
    """The program ``argv`` starts, or why a fork of the harness cannot start it."""
    if not argv:
        return "no command"
    exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0])
    if exe is None or os.path.abspath(exe) != os.path.abspath(sys.executable):
        return f"{argv[0]} is not the harness's interpreter ({sys.executable})"
    unbuffered = False
    for i in range(1, len(argv)):
        word = argv[i]
        if word == "-u":
            unbuffered = True
        elif word == "-m" or (word.startswith("-m") and len(word) > 2):
            module = argv[i + 1] if word == "-m" and i + 1 < len(argv) else word[2:]
            rest = argv[i + 2 :] if word == "-m" else argv[i + 1 :]
            if not module:
                return "-m without a module"
            return Launch(module, None, tuple(rest), unbuffered)
        elif word.startswith("-"):
            return f"the Python option {word} (a warm start reproduces -u and -m only)"
        else:
            return Launch(None, word, tuple(argv[i + 1 :]), unbuffered)
    return "no program to run (an interactive interpreter)"


@dataclass
class Warmth:
    """How a program's incarnations start: warm (forked from the harness, its libraries
    imported here once) or cold (exec'd), and why."""

    warm: bool
    why: str = ""
    #: the libraries imported here, and how long that took (once)
    imported: tuple[str, ...] = ()
    seconds: float = 0.0
    #: what the fork must still match for the program to run warm (the child checks)
    cwd: str = ""
    pythonpath: tuple[str, ...] = ()
    startup_env: Mapping[str, str] = field(default_factory=dict)
    exit_funcs: tuple[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]], ...] = ()

    def to_json(self) -> dict[str, object]:
        if not self.warm:
            return {"warm": False, "why": self.why}
        return {"warm": True, "imported": len(self.imported), "import_s": round(self.seconds, 3)}

    def sentence(self) -> str:
        if not self.warm:
            return f"cold starts (each incarnation execs the program): {self.why}"
        return (
            f"warm starts: {len(self.imported)} libraries imported once in"
            f" {self.seconds:.2f} s, each incarnation forked"
        )


#: program key -> how it starts, decided in the harness before any worker is forked
_WARMTH: dict[str, Warmth] = {}
#: in a warm child: the harness's copies of the user's modules, out of ``sys.modules``
_PURGED: list[object] = []


def warm_up(argv: Sequence[str]) -> Warmth:
    """In the harness, before a campaign's workers: import the libraries the program
    ``argv`` imports, so each incarnation forked later has them. Once per program."""
    launch = parse(argv)
    if isinstance(launch, str):
        return Warmth(warm=False, why=launch)
    if launch.key in _WARMTH:
        return _WARMTH[launch.key]
    if os.environ.get(COLD_ENV, "") not in ("", "0"):
        found = Warmth(warm=False, why=f"{COLD_ENV} is set")
    else:
        try:
            found = _import_libraries(launch)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            found = Warmth(warm=False, why=f"cannot ask a fresh {sys.executable}: {exc}")
    _WARMTH[launch.key] = found
    return found


def _own_pythonpath(environ: Mapping[str, str]) -> tuple[str, ...]:
    parts = environ.get("PYTHONPATH", "").split(os.pathsep)
    return tuple(os.path.abspath(p) for p in parts if p and p != _hooks.SITE_DIR)


def _startup_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables an interpreter reads at start-up that a fork cannot reproduce."""
    return {
        k: v
        for k, v in environ.items()
        if (k.startswith("PYTHON") and k not in _HANDLED) or k in ("LD_PRELOAD", "LD_AUDIT")
    }


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _import_libraries(launch: Launch) -> Warmth:
    cwd = os.getcwd()
    pythonpath = _own_pythonpath(os.environ)
    first = _first(launch)
    search = [first, *pythonpath, *fresh_interpreter().path]
    names = library_imports(launch, search)
    if isinstance(names, str):
        return Warmth(warm=False, why=names)
    threads = _threads()
    handlers = {s: signal.getsignal(s) for s in signal.valid_signals()}
    recorded: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
    register = atexit.register

    def record(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        recorded.append((func, args, kwargs))
        return register(func, *args, **kwargs)

    imported: list[str] = []
    started = time.perf_counter()
    atexit.register = record  # type: ignore[assignment]
    try:
        for name in names:
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except (Exception, SystemExit):  # the program's own import will say it
                continue
            imported.append(name)
            if _threads() > threads:
                return Warmth(
                    warm=False,
                    why=f"importing {name} started a thread in the harness, and a fork copies no"
                    " thread",
                )
    finally:
        atexit.register = register
        for sig, handler in handlers.items():  # a library's handler is not the harness's
            if signal.getsignal(sig) is not handler and handler is not None:
                with contextlib.suppress(OSError, ValueError, TypeError):
                    signal.signal(sig, handler)
    for module in list(sys.modules.values()):  # each child asks: asked here once, for all
        filename = getattr(module, "__file__", None)
        if filename:
            _hooks.is_worker_file(filename)
    return Warmth(
        warm=True,
        imported=tuple(imported),
        seconds=time.perf_counter() - started,
        cwd=cwd,
        pythonpath=pythonpath,
        startup_env=_startup_env(os.environ),
        exit_funcs=tuple(recorded),
    )


# -- which libraries a program imports ----------------------------------------------------


def _locate(name: str, search: Sequence[str]) -> importlib.machinery.ModuleSpec | None:
    """The spec of module ``name`` along ``search``, its parents' code never run (a
    namespace package's portions gathered here: the import system's own would need its
    parent imported)."""
    spec = None
    parts = name.split(".")
    for i in range(len(parts)):
        where = search if spec is None else spec.submodule_search_locations
        if where is None:
            return None
        spec = _find_in(".".join(parts[: i + 1]), list(where))
        if spec is None:
            return None
    return spec


@functools.cache
def _loaders() -> list[tuple[Any, list[str]]]:
    from importlib._bootstrap_external import (  # type: ignore[attr-defined]
        _get_supported_file_loaders,
    )

    return list(_get_supported_file_loaders())


def _find_in(fullname: str, where: list[str]) -> importlib.machinery.ModuleSpec | None:
    portions: list[str] = []
    for entry in where:
        if not os.path.isdir(entry):
            continue
        try:
            spec = importlib.machinery.FileFinder(entry, *_loaders()).find_spec(fullname)
        except Exception:  # a directory it cannot read: not there, as far as this goes
            continue
        if spec is None:
            continue
        if spec.loader is not None:
            return spec
        portions.extend(spec.submodule_search_locations or ())
    if not portions:
        return None
    return _namespace(fullname, portions)


def _namespace(fullname: str, portions: list[str]) -> importlib.machinery.ModuleSpec:
    spec = importlib.machinery.ModuleSpec(fullname, None, is_package=True)
    spec.submodule_search_locations = portions
    return spec


def _imports_in(tree: ast.AST, package: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(module, names) of each import run when the module is (not in a function body)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            yield base, tuple(a.name for a in node.names if a.name != "*")
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def library_imports(launch: Launch, search: Sequence[str]) -> list[str] | str:
    """The library modules (standard library, site-packages, the harness's own) the program
    imports when it starts, in the order it meets them, found by reading its source and its
    own modules' (never by running them); or why the program cannot be found."""
    found: list[str] = []
    seen_files: set[str] = set()
    seen_names: set[str] = set()
    todo: list[tuple[str, str]] = []  # (file, its package)

    def visit(name: str) -> None:
        if not name or name in seen_names:
            return
        seen_names.add(name)
        spec = _locate(name, search)
        if spec is None:
            return
        origin = spec.origin if spec.has_location else None
        if origin is None or _hooks.is_worker_file(origin):
            if "." in name:  # a package's __init__ runs first
                visit(name.rsplit(".", 1)[0])
            if origin is not None and origin.endswith(".py"):
                package = (
                    name if spec.submodule_search_locations is not None else name.rpartition(".")[0]
                )
                todo.append((origin, package))
            return
        found.append(name)

    if launch.module is not None:
        spec = _locate(launch.module, search)
        if spec is None:
            return f"no module named {launch.module!r} on the program's path"
        if spec.submodule_search_locations is not None:  # python -m package: its __main__
            visit(launch.module)
            visit(f"{launch.module}.__main__")
        else:
            visit(launch.module)
    else:
        script = os.path.abspath(str(launch.script))
        if not os.path.isfile(script):
            return f"no script {launch.script!r}"
        todo.append((script, ""))
    while todo and len(seen_files) < _MAX_FILES:
        path, package = todo.pop(0)
        if path in seen_files:
            continue
        seen_files.add(path)
        try:
            with open(path, "rb") as source:
                tree = ast.parse(source.read(), path)
        except (OSError, SyntaxError, ValueError):
            continue
        for module, names in _imports_in(tree, package):
            visit(module)
            for each in names:
                visit(f"{module}.{each}")
    return found


# -- a fresh interpreter, as the program would have had it ---------------------------------


@dataclass(frozen=True)
class Fresh:
    """What a fresh interpreter of this venv starts with, that a fork must put back."""

    path: tuple[str, ...]
    meta_path: tuple[str, ...]
    warnings: tuple[tuple[str, str | None, str, str | None, int], ...]


_PROBE = """
import json, sys, warnings
print(json.dumps({
    "path": sys.path[1:],
    "meta_path": [type(f).__module__ + "." + type(f).__qualname__ if not isinstance(f, type)
                  else f.__module__ + "." + f.__qualname__ for f in sys.meta_path],
    "warnings": [[a, getattr(m, "pattern", m), c.__module__ + "." + c.__qualname__,
                  getattr(mod, "pattern", mod), n] for a, m, c, mod, n in warnings.filters],
}))
"""


@functools.cache
def fresh_interpreter() -> Fresh:
    """Asked of one fresh interpreter, once per harness process (about 20 ms)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CRASH_HARNESS_CONTROL")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    data = json.loads(out)
    return Fresh(
        path=tuple(data["path"]),
        meta_path=tuple(data["meta_path"]),
        warnings=tuple(tuple(w) for w in data["warnings"]),
    )


def _name_of(finder: object) -> str:
    kind = finder if isinstance(finder, type) else type(finder)
    return f"{kind.__module__}.{kind.__qualname__}"


# -- the child side --------------------------------------------------------------------------


def exec_or_run(args: list[str], env: dict[str, str]) -> NoReturn:  # pragma: no cover - child
    """In a forked worker: run the program ``args`` warm if the harness prepared it and
    nothing since forbids it, else exec it (a cold start)."""
    launch = parse(args)
    warmth = _WARMTH.get(launch.key) if isinstance(launch, Launch) else None
    why = None if warmth is None or not warmth.warm else _unfit(warmth, env)
    if warmth is not None and warmth.warm and why is not None:
        sys.stderr.write(f"crash-harness: a cold start of {args[0]}: {why}\n")
    if warmth is None or not warmth.warm or why is not None or not isinstance(launch, Launch):
        os.execvpe(args[0], args, env)
    _run(launch, env, warmth)


def _unfit(warmth: Warmth, env: Mapping[str, str]) -> str | None:
    """Why this incarnation cannot be the warm start prepared (None: it can)."""
    if os.getcwd() != warmth.cwd:
        return f"its directory {os.getcwd()} is not the one it was prepared in ({warmth.cwd})"
    if _own_pythonpath(env) != warmth.pythonpath:
        return "its PYTHONPATH is not the one its libraries were imported with"
    startup = _startup_env(env)
    if startup != warmth.startup_env:
        changed = sorted(set(startup.items()) ^ set(warmth.startup_env.items()))
        return f"{changed[0][0]} is set for it (read by an interpreter at start-up)"
    return None


def _run(launch: Launch, env: dict[str, str], warmth: Warmth) -> NoReturn:  # pragma: no cover
    """Become the program as a fresh ``python`` would have, run it, exit as it would."""
    fresh = fresh_interpreter()
    os.environ.clear()
    os.environ.update(env)
    first = _first(launch)
    pythonpath = [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = list(dict.fromkeys([first, *pythonpath, *fresh.path]))
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
    keep = set(fresh.meta_path)
    sys.meta_path[:] = [f for f in sys.meta_path if _name_of(f) in keep or _hooks.is_hook_finder(f)]
    for name, module in list(sys.modules.items()):  # the user's code, as the harness loaded it
        filename = getattr(module, "__file__", None)
        if filename and _hooks.is_worker_file(filename) and name != "__main__":
            # kept alive here: a module freed in the child would finalize what it holds (a
            # database connection's goodbye on a socket the harness shares)
            _PURGED.append(sys.modules.pop(name))
    _fresh_process_state(
        fresh, warmth, unbuffered=launch.unbuffered or bool(env.get("PYTHONUNBUFFERED"))
    )
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    code = 0
    try:
        if launch.module is not None:
            sys.argv = [launch.module, *launch.args]  # run_module puts the file in argv[0]
            runpy.run_module(launch.module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [str(launch.script), *launch.args]
            sys.path[0] = first
            runpy.run_path(str(launch.script), run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        code = 130
    except BaseException as exc:  # as the interpreter: its hook prints it, status 1
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    code = _finalize(code)
    os._exit(code)


def _exit_code(exc: SystemExit) -> int:  # pragma: no cover - child side
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    with contextlib.suppress(Exception):
        sys.stderr.write(f"{exc.code}\n")
    return 1


def _finalize(code: int) -> int:  # pragma: no cover - child side
    """What an interpreter does on its way out: wait for its non-daemon threads, run its
    exit handlers, flush."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:  # a thread's failure is said, not a harness crash
        traceback.print_exc()
    atexit._run_exitfuncs()
    _flush()
    return code


def _flush() -> None:  # pragma: no cover - child side
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _fresh_process_state(
    fresh: Fresh, warmth: Warmth, *, unbuffered: bool
) -> None:  # pragma: no cover
    """Signals, exit handlers, hooks, logging and warnings as a fresh interpreter has them."""
    signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, TypeError):
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for ignored in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(ignored, signal.SIG_IGN)
    # the harness's exit handlers and finalizers are not the program's: only what a fresh
    # interpreter would have registered by now (logging's, the libraries' at import)
    for finalizer in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        finalizer.atexit = False
    atexit._clear()
    if "logging" in sys.modules:
        atexit.register(logging.shutdown)
    for func, args, kwargs in warmth.exit_funcs:
        if func != weakref.finalize._exitfunc:  # type: ignore[attr-defined] # below, once
            atexit.register(func, *args, **kwargs)
    if weakref.finalize._registered_with_atexit:  # type: ignore[attr-defined]
        atexit.register(weakref.finalize._exitfunc)  # type: ignore[attr-defined]
    sys.excepthook = sys.__excepthook__
    threading.excepthook = threading.__excepthook__
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    logging.disable(logging.NOTSET)
    warnings.resetwarnings()
    for action, message, category, module, lineno in reversed(fresh.warnings):
        kind = _builtin_warning(category)
        if kind is not None:
            warnings.filterwarnings(action, message or "", kind, module or "", lineno)  # type: ignore[arg-type]
    import gc

    gc.enable()
    with contextlib.suppress(OSError):
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - fd 0 as the program's stdin
    if unbuffered:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.reconfigure(write_through=True)  # type: ignore[union-attr]


def _builtin_warning(qualified: str) -> type[Warning] | None:
    module, _, name = qualified.rpartition(".")
    if module != "builtins":
        return None
    kind = getattr(builtins, name, None)
    return kind if isinstance(kind, type) and issubclass(kind, Warning) else None
