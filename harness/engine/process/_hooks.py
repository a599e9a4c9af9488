"""Near-side crash points found in an unchanged Python worker: every send and every commit.

A worker need not call ``boundary()`` for the harness to crash it where it matters: when the
harness asks (a system that ``discover``s), it patches, in every Python process of the
worker's tree, the calls through which a worker's effects leave it:

- HTTP: ``http.client.HTTPConnection.putrequest`` (``before_send``, before a byte of the
  request is written) and ``getresponse`` (``after_send``, once the status and headers are
  read: the provider has accepted), so ``requests``, ``urllib3`` and ``urllib``;
  ``httpx.Client.send`` / ``AsyncClient.send`` and ``aiohttp.ClientSession._request``
  where installed (around the whole call);
- SMTP: ``smtplib.SMTP.sendmail`` (``send_message`` goes through it), around the call;
- commits: ``sqlite3`` connections (``sqlite3.connect`` hands back a subclass whose
  ``commit`` and ``with conn:`` are hooked: the C type cannot be patched), SQLAlchemy
  (``Connection._commit_impl``: engines and sessions alike) and ``psycopg.Connection.commit``,
  as ``before_commit`` / ``after_commit``. A commit SQLAlchemy makes through a hooked driver
  is one commit, not two: the driver's hook meets the SQLAlchemy hook's frame (the harness's
  own) on its way out to the worker's, and stays quiet.

Each point is named ``KIND.WHERE`` with WHERE the worker's own call site, ``<file stem>.<line>``
of the first frame outside the standard library and site-packages, e.g.
``after_send.plain_worker.42``. A call the harness's own code makes (``harness/`` and
``fake_providers/``: ``jobs()`` reading its tables, a helper's send) is never a point, even
when a worker called that code; the harness's subjects (``harness.reference``,
``harness.mutants``) count as a worker's code. What a point talks to (``POST
127.0.0.1:8000/hooks/orders``, ``SMTP 127.0.0.1:2525 to ann@x``, ``sqlite:///ledger.db``) is
its hit's ``detail.target`` in the trace, not part of its name: a name must stay the same
from run to run. Hits are counted and armed exactly as named boundaries are
(``_boundary._Tracer.hit``): per point, over the worker's whole process tree.

Modules imported after ``install`` are patched as they are imported (a meta path finder), so
a worker that imports ``requests`` late still has its hooks. A disarmed process
(``_boundary._tracer`` is None) pays one global load per call. The harness process itself
never installs them: the supervisor does, in the forked worker, and an exec'd worker gets
them from ``sitecustomize`` in ``SITE_DIR``, which the environment puts first on
``PYTHONPATH`` for every Python process the worker starts (``child_env``).
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
import zlib
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType
from typing import Any

from harness.engine.process import _boundary, _framework_points
from harness.names import NEAR_SIDE_KINDS

#: the kinds of near-side point, in the order a send or a commit reaches them
KINDS = tuple(NEAR_SIDE_KINDS)
#: the directory whose ``sitecustomize`` installs the hooks in an exec'd Python process
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sitehook")

_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_ROOT = os.path.dirname(_HARNESS_DIR)
#: code the harness runs as a worker's (its subjects) is a worker's call site, as a user's is
_SUBJECT_DIRS = tuple(os.path.join(_HARNESS_DIR, d) + os.sep for d in ("reference", "mutants"))
_OWN_DIRS = (_HARNESS_DIR + os.sep, os.path.join(_ROOT, "fake_providers") + os.sep)

_LIBRARY, _OWN, _WORKER = 0, 1, 2
_kinds_by_file: dict[str, int] = {}
_installed = False


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    found.add(os.path.dirname(os.__file__))
    return tuple(os.path.join(os.path.realpath(p), "") for p in found)


_LIBRARY_DIRS = _library_dirs()


def _kind_of(filename: str) -> int:
    if filename.startswith("<"):  # ``python -c`` and stdin are a worker's; <frozen ...>,
        # code a library generates (SQLAlchemy's ``<sqlalchemy-generated ...>``) is not
        return _WORKER if filename in ("<string>", "<stdin>") else _LIBRARY
    path = os.path.realpath(filename)
    if path.startswith(_SUBJECT_DIRS):
        return _WORKER
    if path.startswith(_OWN_DIRS):
        return _OWN
    if os.sep + "site-packages" + os.sep in path or os.sep + "dist-packages" + os.sep in path:
        return _LIBRARY
    if path.startswith(_LIBRARY_DIRS):
        return _LIBRARY
    return _WORKER


def is_worker_file(filename: str) -> bool:
    """Whether ``filename`` is the worker's own code (not the standard library, an installed
    package or the harness): a warm start never imports it in the harness. Remembered, as
    a frame's kind is: a warm child asks of every loaded module, and the harness asked first."""
    return _kind_of_file(filename) == _WORKER


def point_where(filename: str, line: int) -> str:
    """``<file stem>.<line>``, the stem cut down to what a case id may hold. A package's
    ``__main__.py`` or ``__init__.py`` is named by its package (``python -m notifier``
    sends from ``notifier.37``, not from ``__main__.37``, which every package shares)."""
    stem = os.path.basename(filename)
    stem = stem[:-3] if stem.endswith(".py") else stem
    if stem in ("__main__", "__init__"):
        stem = os.path.basename(os.path.dirname(filename)) or stem
    return f"{re.sub(r'[^A-Za-z0-9_-]', '_', stem) or '_'}.{line}"


def _kind_of_file(filename: str) -> int:
    kind = _kinds_by_file.get(filename)
    if kind is None:
        kind = _kinds_by_file[filename] = _kind_of(filename)
    return kind


def _kind_of_frame(frame: FrameType) -> int:
    return _kind_of_file(frame.f_code.co_filename)


def _whose(frame: FrameType | None) -> tuple[int, str | None, str | None, str | None]:
    """Who made this call: ``(_WORKER, its call site, its caller's, the chain)`` for the
    worker's own frame nearest the call, the worker's frame that called into it (None: none
    above it) and a fingerprint of the library frames between that frame and the call;
    ``(_OWN, None, None, None)`` for the harness's own traffic (never a point); ``(_LIBRARY,
    None, None, None)`` when only libraries and the standard library are on the stack (a
    framework's own thread).

    The caller tells apart commits a worker makes through one helper: one point (the
    helper's line), many callers; certify crashes the first hit from each caller, so the
    gap after the helper's second use is tried, not only its first. The chain tells apart
    what a library does below one line of the worker: Huey's consumer, forked from one line,
    commits a dequeue and a schedule poll through two different paths; a sweep runs one
    case per class of hit (``harness.engine.search._classes``), not one per hit."""
    below: list[tuple[str, int]] = []  # formatted only once the worker's frame is found
    while frame is not None:
        kind = _kind_of_frame(frame)
        if kind == _WORKER:
            where = point_where(frame.f_code.co_filename, frame.f_lineno)
            return _WORKER, where, _caller_of(frame), _fingerprint(below)
        if kind == _OWN:  # the harness's own call (``jobs()`` reading its tables, a probe)
            return _OWN, None, None, None
        below.append((frame.f_code.co_qualname, frame.f_lineno))
        frame = frame.f_back
    return _LIBRARY, None, None, None


def _fingerprint(frames: list[tuple[str, int]]) -> str:
    """Eight hex digits naming a path through library code (function and line of each
    frame): the same from run to run, unlike the frames' addresses."""
    path = "\n".join(f"{name}:{line}" for name, line in frames)
    return f"{zlib.crc32(path.encode()):08x}"


def _caller_of(frame: FrameType) -> str | None:
    """The worker's next own frame above ``frame`` (through any library frames between), as
    ``file.line``; None when there is none or the harness's own code comes first."""
    up = frame.f_back
    while up is not None:
        kind = _kind_of_frame(up)
        if kind == _WORKER:
            return point_where(up.f_code.co_filename, up.f_lineno)
        if kind == _OWN:
            return None
        up = up.f_back
    return None


def _call_site(frame: FrameType | None) -> str | None:
    """The worker's own frame that made this call, or None (only the harness and libraries
    are on the stack)."""
    return _whose(frame)[1]


def _hit(kind: str, target: str, changed: bool | None = None) -> None:  # noqa: FBT001
    """Trace (and count, and act on) one send or commit; ``changed=False`` marks a commit
    known to have written nothing (an idle loop's poll): it is still a point's hit, but
    never activity for a daemon's quiet window (``_daemon_watch``)."""
    tracer = _boundary._tracer
    if tracer is None:
        return
    frame = sys._getframe(2)
    whose, where, via, chain = _whose(frame)
    detail: dict[str, object] = {"target": target}
    if changed is False:
        detail["changed"] = False
    if where is None and whose == _LIBRARY:  # a framework's own thread: its own terms
        where = _framework_points.name_of(frame)
        if where is None:  # seen, and no point: coverage says so, never silent
            detail["by"] = _framework_points.described(frame)
            tracer.unnamed(kind, detail)
            return
    if where is not None:
        if via is not None:
            detail["via"] = via
        if chain is not None:
            detail["chain"] = chain
        tracer.hit(f"{kind}.{where}", detail)


# -- HTTP ---------------------------------------------------------------------------------------


def _patch_http_client(module: ModuleType) -> None:
    conn = module.HTTPConnection
    putrequest, getresponse = conn.putrequest, conn.getresponse

    @functools.wraps(putrequest)
    def hooked_putrequest(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if _boundary._tracer is not None:
            target = f"{method} {self.host}:{self.port}{url.split('?', 1)[0]}"
            self._crash_harness_target = target
            _hit("before_send", target)
        return putrequest(self, method, url, *args, **kwargs)

    @functools.wraps(getresponse)
    def hooked_getresponse(self: Any) -> Any:
        response = getresponse(self)
        if _boundary._tracer is not None:
            _hit("after_send", getattr(self, "_crash_harness_target", f"{self.host}:{self.port}"))
        return response

    conn.putrequest, conn.getresponse = hooked_putrequest, hooked_getresponse


def _target_of(describe: Callable[..., str], *args: Any, **kwargs: Any) -> str:
    """What a point talks to, for the trace; a call whose target cannot be read (a closed
    socket, a library's other shape) is still a point, with target ``?``: describing it
    must never break the worker's own call."""
    try:
        return describe(*args, **kwargs)
    except Exception:
        return "?"


def _around(kind: str, original: Callable[..., Any], target: Callable[..., str]) -> Any:
    """``original`` with ``before_KIND`` before it and ``after_KIND`` once it returned."""

    @functools.wraps(original)
    def hooked(*args: Any, **kwargs: Any) -> Any:
        if _boundary._tracer is None:
            return original(*args, **kwargs)
        what = _target_of(target, *args, **kwargs)
        _hit(f"before_{kind}", what)
        result = original(*args, **kwargs)
        _hit(f"after_{kind}", what)
        return result

    return hooked


def _around_async(kind: str, original: Callable[..., Any], target: Callable[..., str]) -> Any:
    @functools.wraps(original)
    async def hooked(*args: Any, **kwargs: Any) -> Any:
        if _boundary._tracer is None:
            return await original(*args, **kwargs)
        what = _target_of(target, *args, **kwargs)
        _hit(f"before_{kind}", what)
        result = await original(*args, **kwargs)
        _hit(f"after_{kind}", what)
        return result

    return hooked


def _httpx_target(_client: Any, request: Any, *_a: Any, **_k: Any) -> str:
    url = request.url
    return f"{request.method} {url.host}:{url.port or ''}{url.path}"


def _patch_httpx(module: ModuleType) -> None:
    module.Client.send = _around("send", module.Client.send, _httpx_target)
    module.AsyncClient.send = _around_async("send", module.AsyncClient.send, _httpx_target)


def _aiohttp_target(_session: Any, method: str, url: Any, *_a: Any, **_k: Any) -> str:
    return f"{method} {str(url).split('?', 1)[0]}"


def _patch_aiohttp(module: ModuleType) -> None:
    session = module.ClientSession
    session._request = _around_async("send", session._request, _aiohttp_target)


# -- SMTP ---------------------------------------------------------------------------------------


def _smtp_target(smtp: Any, _from: str, to_addrs: str | Sequence[str], *_a: Any, **_k: Any) -> str:
    to = [to_addrs] if isinstance(to_addrs, str) else list(to_addrs)
    host = getattr(smtp, "_host", "")
    port = smtp.sock.getpeername()[1] if getattr(smtp, "sock", None) is not None else ""
    return f"SMTP {host}:{port} to {', '.join(to)}"


def _patch_smtplib(module: ModuleType) -> None:
    module.SMTP.sendmail = _around("send", module.SMTP.sendmail, _smtp_target)


# -- commits ------------------------------------------------------------------------------------


def _sqlite_target(conn: Any, *_a: Any, **_k: Any) -> str:
    return f"sqlite:///{getattr(conn, '_crash_harness_db', '?')}"


_sqlite_classes: dict[Any, type] = {}


def _sqlite_changed(conn: Any) -> bool | None:
    """Whether this SQLite connection has changed a row since its last hooked commit (its
    ``total_changes`` moved: rows inserted, updated or deleted, rolled back or not), and
    remember where it stands; None when the connection cannot say (not SQLite). A poll
    that found nothing (``BEGIN``, ``SELECT``, ``COMMIT``) changed nothing."""
    total = getattr(conn, "total_changes", None)
    if not isinstance(total, int):
        return None
    last = getattr(conn, "_crash_harness_changes", 0)
    try:
        conn._crash_harness_changes = total
    except AttributeError:  # a connection type that takes no attribute: cannot remember
        return None
    return total != last


def _hooked_sqlite_class(factory: Any) -> type:
    if getattr(factory, "_crash_harness_hooked", False):
        return factory  # type: ignore[no-any-return]
    found = _sqlite_classes.get(factory)
    if found is not None:
        return found

    def commit(self: Any) -> None:
        if _boundary._tracer is None:
            return factory.commit(self)  # type: ignore[no-any-return]
        target, changed = _sqlite_target(self), _sqlite_changed(self)
        _hit("before_commit", target, changed)
        factory.commit(self)
        _hit("after_commit", target, changed)
        return None

    def __exit__(self: Any, exc_type: Any, exc: Any, tb: Any) -> Any:
        # the C ``__exit__`` commits without looking ``commit`` up: hook it here too
        if exc_type is not None or _boundary._tracer is None:
            return factory.__exit__(self, exc_type, exc, tb)
        target, changed = _sqlite_target(self), _sqlite_changed(self)
        _hit("before_commit", target, changed)
        result = factory.__exit__(self, exc_type, exc, tb)
        _hit("after_commit", target, changed)
        return result

    hooked = type(
        factory.__name__,
        (factory,),
        {
            "commit": commit,
            "__exit__": __exit__,
            "__module__": factory.__module__,
            "_crash_harness_hooked": True,
        },
    )
    _sqlite_classes[factory] = hooked
    return hooked


def _patch_sqlite3(module: ModuleType) -> None:
    dbapi2 = sys.modules.get("sqlite3.dbapi2")
    connect: Any = module.connect
    if getattr(connect, "_crash_harness_hooked", False):
        return

    @functools.wraps(connect)
    def hooked_connect(database: Any, *args: Any, **kwargs: Any) -> Any:
        if len(args) > 4:  # factory given by position (the 6th parameter)
            args = (*args[:4], _hooked_sqlite_class(args[4]), *args[5:])
        else:
            kwargs["factory"] = _hooked_sqlite_class(kwargs.get("factory", module.Connection))
        conn = connect(database, *args, **kwargs)
        conn._crash_harness_db = (
            os.fsdecode(database) if not isinstance(database, str) else database
        )
        return conn

    hooked_connect._crash_harness_hooked = True  # type: ignore[attr-defined]
    for holder in (module, dbapi2):  # ``sqlite3.connect`` and ``sqlite3.dbapi2.connect``
        if holder is not None:
            setattr(holder, "connect", hooked_connect)  # noqa: B010


def _sqlalchemy_target(conn: Any, *_a: Any, **_k: Any) -> str:
    return str(conn.engine.url.render_as_string(hide_password=True))


def _patch_sqlalchemy(module: ModuleType) -> None:
    conn = module.Connection
    original = conn._commit_impl

    @functools.wraps(original)
    def hooked(self: Any) -> Any:
        if _boundary._tracer is None:
            return original(self)
        target = _target_of(_sqlalchemy_target, self)
        fairy = getattr(self, "_dbapi_connection", None)  # the pool's proxy: its driver's
        changed = _sqlite_changed(getattr(fairy, "dbapi_connection", None))
        _hit("before_commit", target, changed)
        result = original(self)
        _hit("after_commit", target, changed)
        return result

    conn._commit_impl = hooked


def _psycopg_target(conn: Any, *_a: Any, **_k: Any) -> str:
    info = conn.info
    return f"postgresql://{info.host}:{info.port}/{info.dbname}"


def _patch_psycopg(module: ModuleType) -> None:
    conn = module.Connection
    original = conn.commit

    @functools.wraps(original)
    def hooked(self: Any) -> Any:
        if _boundary._tracer is None:
            return original(self)
        target = _target_of(_psycopg_target, self)
        _hit("before_commit", target)
        result = original(self)
        _hit("after_commit", target)
        return result

    conn.commit = hooked


#: module -> what patches it once it is imported
_PATCHERS: dict[str, Callable[[ModuleType], None]] = {
    "http.client": _patch_http_client,
    "smtplib": _patch_smtplib,
    "sqlite3": _patch_sqlite3,
    "sqlalchemy.engine.base": _patch_sqlalchemy,
    "psycopg": _patch_psycopg,
    "httpx": _patch_httpx,
    "aiohttp": _patch_aiohttp,
}
_patched: set[str] = set()


def _patch(name: str, module: ModuleType) -> None:
    if name in _patched:
        return
    _patched.add(name)
    try:
        _PATCHERS[name](module)
    except (AttributeError, TypeError) as exc:  # a version whose shape we do not know
        sys.stderr.write(
            f"crash-harness: no near-side hooks on {name} in pid {os.getpid()} ({exc});"
            " its sends or commits are no crash points\n"
        )


class _PatchingLoader:  # no importlib.abc base: that import costs every hooked process ~7 ms
    """The real loader, then the patch: a module imported after ``install`` is hooked too."""

    def __init__(self, loader: Any, name: str) -> None:
        self._loader = loader
        self._name = name

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        _patch(self._name, module)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._loader, attr)


class _Finder:
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _PATCHERS or fullname in _patched:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, fullname)  # type: ignore[assignment]
                return spec
        return None


def install() -> None:
    """Hook every send and commit of this process (and of the children it forks): modules
    already imported now, the others as they are imported. Idempotent."""
    global _installed
    if _installed:
        return
    _installed = True
    for name in _PATCHERS:
        module = sys.modules.get(name)
        if module is not None:
            _patch(name, module)
    sys.meta_path.insert(0, _Finder())


def is_hook_finder(finder: object) -> bool:
    """Whether ``finder`` (on ``sys.meta_path``) is the one ``install`` put there."""
    return isinstance(finder, _Finder)


def installed() -> bool:
    return _installed


def child_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """What a process of the worker must add to the environment of the programs it execs
    for them to be armed and hooked too: the plan (``handoff_env``) and ``SITE_DIR`` first on
    ``PYTHONPATH`` (what was there stays, after it)."""
    env = _boundary.handoff_env()
    if not env:
        return {}
    current = (os.environ if environ is None else environ).get("PYTHONPATH", "")
    parts = [p for p in current.split(os.pathsep) if p and p != SITE_DIR]
    env["PYTHONPATH"] = os.pathsep.join([SITE_DIR, *parts])
    return env


def install_in_worker() -> None:
    """In a forked worker, armed: hook it, and have every program it execs hooked too."""
    install()
    os.environ.update(child_env())
