"""The wall: a worker runs where it cannot see or touch the judge.

The harness, its providers and its keepers run as the same user as the workers, on the same
machine. Without a wall a worker can attach a debugger to the provider and edit its audit,
read another case's ledger or the provider's log file under the scratch root, or move itself
out of its case's cgroup. So each worker is born (``clone3``, ``harness.engine.process._born``)
into:

- its own **PID namespace**: it sees, signals and traces only its case's processes. PID 1 of
  the namespace is a small init (the keeper of ``harness.engine.process._keeper``: it reaps orphans
  and
  reports the worker's wait status on a pipe), the worker below it, numbered from the
  init's pid on the host on (``_pids_go_on_from``: not 2 in every incarnation). When the init
  ends (the harness lets it go, or kills the cgroup) the kernel kills everything left in the
  namespace, so a daemon the worker double-forked dies with its case.
- its own **mount namespace**: a fresh ``/proc`` showing only the case's processes; an
  empty ``tmpfs`` over the campaign's work dir (other cases, the providers' logs), with only
  this case's own work dir bound back, and over every other run's work dir and the keepers'
  records in the scratch root; every cgroup file system read-only.
- fewer **capabilities** (a root worker too): every capability that could undo the above
  (``CAP_SYS_ADMIN`` for mount, umount, setns, unshare; ``CAP_SYS_PTRACE``,
  ``CAP_DAC_READ_SEARCH`` for ``open_by_handle_at``, ``CAP_SYS_MODULE``, ``CAP_SYS_RAWIO``,
  ``CAP_MKNOD``, ``CAP_SYS_BOOT``...) leaves its bounding, effective, permitted, inheritable
  and ambient sets; what an ordinary program needs stays (``KEPT_CAPS``: file access as root,
  ports below 1024, setuid to drop root).

Where the harness is not root it asks for a user namespace too (an identity map of its own
uid), which gives the init what it needs for the mounts. Where the kernel refuses any of it,
the worker runs as before (detection still applies) and ``describe`` says what is missing;
the reports' ``environment`` carries it. ``CRASH_HARNESS_ISOLATION=off`` switches the wall
off. Inside the wall a worker's pids (in its trace lines) are the namespace's: the harness
maps them where it compares them with its own (``outer_pids``, ``WorkerOutcome.ns_pid``).

The harness and its providers also set ``PR_SET_DUMPABLE`` to 0 (``not_dumpable``): a floor
that holds without namespaces, since a process of the same user may then not ptrace them or
read their memory, environment or open files without ``CAP_SYS_PTRACE``. A fork inherits it,
so the worker sets it back to 1 for itself (its own core dumps and ``/proc/self`` files),
while its init keeps 0 (the worker cannot trace the process that reports its status).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from harness.engine.process import _born, _keeper

#: set to ``off`` to run workers without the wall (a kernel that refuses namespaces does so)
ISOLATION_ENV = "CRASH_HARNESS_ISOLATION"

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_PARENT = 0x00008000

_MS_RDONLY = 0x1
_MS_NOSUID = 0x2
_MS_NODEV = 0x4
_MS_NOEXEC = 0x8
_MS_REMOUNT = 0x20
_MS_NOATIME = 0x400
_MS_NODIRATIME = 0x800
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_MS_RELATIME = 0x200000
_MS_STRICTATIME = 0x1000000
#: per-mount flags a bind remount must keep (a user namespace may not clear a locked one)
_MOUNT_FLAGS = {
    "nosuid": _MS_NOSUID,
    "nodev": _MS_NODEV,
    "noexec": _MS_NOEXEC,
    "noatime": _MS_NOATIME,
    "nodiratime": _MS_NODIRATIME,
    "relatime": _MS_RELATIME,
    "strictatime": _MS_STRICTATIME,
}

_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

#: capabilities a walled worker keeps: those a container runtime gives by default, less
#: ``CAP_MKNOD`` (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP,
#: NET_BIND_SERVICE, NET_RAW, SYS_CHROOT, AUDIT_WRITE, SETFCAP). ``CAP_KILL`` reaches only
#: the worker's own namespace.
KEPT_CAPS = frozenset({0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 29, 31})


def wanted() -> bool:
    """Whether the wall is asked for (it is, unless ``CRASH_HARNESS_ISOLATION=off``)."""
    return os.environ.get(ISOLATION_ENV, "on").strip().lower() not in ("off", "0", "no", "false")


#: why no worker of this process can be walled (the kernel refused; None: none refused)
_refused: str | None = None
#: how many workers this process started behind the wall
_walled = 0
#: how many it started without (a cgroup that could not take a clone), and the last reason
_unwalled = 0
_unwalled_why = ""


def describe() -> str:
    """What the reports' ``environment`` says of the wall, for workers of this process."""
    if not wanted():
        return f"off ({ISOLATION_ENV}=off): workers can reach the harness and its providers"
    if _refused is None and _walled == 0:
        _probe()  # no worker started here (the jobs of a parallel run start them): try one
    if _refused is not None:
        return f"missing: {_refused}; detection only"
    walled = "pid+mount namespaces, cgroup fs read-only, capabilities dropped"
    if _unwalled:
        return f"{walled}; {_unwalled} worker(s) without it ({_unwalled_why})"
    return walled


def _probe() -> None:
    """Fork a child into new namespaces that exits at once: what the kernel would refuse."""
    global _refused
    flags = CLONE_NEWPID | CLONE_NEWNS | (CLONE_NEWUSER if os.geteuid() != 0 else 0)
    try:
        pid = _born.fork_into(None, namespaces=flags)
    except OSError as exc:
        _refused = f"the kernel refused new PID/mount namespaces ({exc.strerror})"
        return
    if pid is None:
        return  # no clone3 here, or threads: the workers say for themselves
    if pid == 0:  # pragma: no cover - the probe
        os._exit(0)
    os.waitpid(pid, 0)


@dataclass(frozen=True)
class View:
    """What a walled worker sees of the file system: ``hide`` covered by an empty tmpfs,
    ``keep`` (under one of them) bound back."""

    hide: tuple[str, ...]
    keep: tuple[str, ...]
    #: files shown as /dev/null (the providers' logs in a work dir the user chose)
    blank: tuple[str, ...] = ()


def view_for(*, scratch: str | None, workdir: Path, own: Path) -> View:
    """Hide the campaign's ``workdir`` (other cases, the providers' logs) and the other runs
    in the scratch root: ``/dev/shm`` whole (one mount), elsewhere each other run's work dir
    and record (``crash-harness-*``, ``.crash-harness-*``: not the whole root, which may be a
    folder of the user's, ``CRASH_HARNESS_TMPDIR``); keep the case's ``own`` work dir."""
    keep = os.path.realpath(own)
    # a work dir the harness made is all its own; one the user chose (``workdir=`` in the
    # settings) may hold the user's files too: there only the providers' logs are blanked
    made = workdir.name.startswith(_SCRATCH_PREFIX)
    candidates = [str(workdir)] if made else []
    if scratch == _SHM:  # the system's scratch area, no folder of the user's: all of it
        candidates.append(scratch)  # (one mount; one per run's dir cost 8 ms at 140 runs)
        scratch = None
    blank: list[str] = []
    if not made:
        with contextlib.suppress(OSError):
            blank = [
                os.path.realpath(e.path)
                for e in os.scandir(workdir)
                if e.name.startswith(_PROVIDER_LOG) and e.is_file(follow_symlinks=False)
            ]
    if scratch is not None:
        with contextlib.suppress(OSError):
            candidates += [
                e.path
                for e in os.scandir(scratch)
                if e.name.lstrip(".").startswith(_SCRATCH_PREFIX)
                and e.is_dir(follow_symlinks=False)
            ]
    hide: list[str] = []
    for path in candidates:
        real = os.path.realpath(path)
        if not os.path.isdir(real) or real == "/" or _under(real, keep):
            continue  # never the case's own dir
        if any(_under(real, h) for h in hide):
            continue
        hide = [h for h in hide if not _under(h, real)] + [real]
    kept = (keep,) if any(_under(keep, h) for h in hide) else ()
    return View(tuple(hide), kept, tuple(b for b in blank if not any(_under(b, h) for h in hide)))


#: what every work dir and record the harness makes under the scratch root is named after
_SCRATCH_PREFIX = "crash-harness-"
#: the default scratch root (``harness.engine.store._scratch``): hidden whole
_SHM = "/dev/shm"
#: what a provider's effect log (and its -wal, -shm, .stderr) in a campaign's work dir is named
_PROVIDER_LOG = "provider-effects"


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _libc() -> Any:
    """libc, looked up once in the harness so every init and worker finds it ready."""
    return _keeper.libc()


@functools.cache
def _cap_last() -> int:
    try:
        return int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        return 40


def prepare() -> None:
    """Look up, in the harness, what every init and worker would otherwise look up again."""
    _libc()
    _cap_last()
    _cgroup_plan()


def spawn(
    run_worker: Callable[[int], NoReturn], *, cgroup: str | None, view: View
) -> tuple[_keeper.Keeper, int] | None:
    """Fork an init into new PID and mount namespaces (born in ``cgroup``), which walls
    itself in and forks the worker below it. Returns (the keeper, the worker's pid inside),
    the keeper's ``root`` being the worker's pid as the harness sees it; None when the wall
    cannot be built here (``describe`` says why; nothing was forked).

    ``clone3`` is used only while this process has one thread (``harness.engine.process._born``);
    with more (a far-side watcher, a user's own), a go-between is forked first, which has
    one, and it clones the init with ``CLONE_PARENT``: the init is this process's child all
    the same, and the go-between is gone at once."""
    global _refused, _walled, _unwalled, _unwalled_why
    if _refused is not None:
        return None  # refused once: not tried per worker
    report_r, report_w = os.pipe()
    hold_r, hold_w = os.pipe()
    userns = os.geteuid() != 0
    flags = CLONE_NEWPID | CLONE_NEWNS | (CLONE_NEWUSER if userns else 0)
    uid, gid = os.geteuid(), os.getegid()

    def closing() -> None:
        for fd in (report_r, report_w, hold_r, hold_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    def init() -> NoReturn:  # pragma: no cover - the init, which never returns
        code = 1
        try:
            os.close(report_r)
            os.close(hold_w)
            _init(run_worker, view, report_w, hold_r, userns=userns, uid=uid, gid=gid)
            code = 0
        finally:
            os._exit(code)

    pid: int | None = None
    try:
        if _born.single_threaded():
            pid = _born.fork_into(cgroup, namespaces=flags)
            if pid == 0:
                init()
        else:
            _go_between(cgroup, flags, init, report_w)
    except _born.NamespacesRefused as exc:
        closing()
        _refused = f"the kernel refused new PID/mount namespaces ({exc.strerror})"
        return None
    except OSError:
        closing()
        raise
    if pid is None and _born._refused:
        closing()
        _refused = "no clone3 here (a kernel before 5.7, or a policy against it)"
        return None
    os.close(report_w)
    os.close(hold_r)
    keeper = _keeper.Keeper(pid or 0, 0, report_r, hold_w)
    inner: int | None = None
    said = "no answer"
    # both lines are needed; with a go-between, the init's "pid" may come before the
    # go-between's "init" (two writers on one pipe)
    while inner is None or keeper.pid <= 0:
        line = keeper._line()
        if line is not None and line.startswith(b"refused "):
            why = line[8:].decode(errors="replace").partition(" ")[2]
            keeper.release(wait=False)
            _refused = f"the kernel refused new PID/mount namespaces ({why})"
            return None
        if line is None or line.startswith(b"error "):
            said = said if line is None else line[6:].decode(errors="replace")
            break
        if line.startswith(b"init "):
            keeper.pid = int(line.split()[1])
        elif line.startswith(b"pid "):
            inner = int(line.split()[1])
    if inner is None or keeper.pid <= 0:
        keeper.release(wait=keeper.pid > 0)
        if keeper.pid > 0 and not said.startswith("cgroup:"):
            _refused = f"the worker's namespaces could not be set up ({said})"
        else:  # this cgroup could not take it, or no init was made: this worker only
            _unwalled += 1
            _unwalled_why = said
        return None
    outer = _outer_pid(keeper.pid, inner)
    if outer is None:
        keeper.release()
        raise OSError(f"the wall's init {keeper.pid} forked no worker it could name")
    keeper.root = outer
    _walled += 1
    return keeper, inner


def _go_between(
    cgroup: str | None, flags: int, init: Callable[[], NoReturn], report_fd: int
) -> None:
    """Fork a process with one thread that clones the init as this process's child and
    says its pid on ``report_fd`` (or what went wrong), then exits; reap it."""
    via = os.fork()
    if via == 0:  # pragma: no cover - the go-between
        try:
            pid = _born.fork_into(cgroup, namespaces=flags | CLONE_PARENT)
            if pid == 0:
                init()
            said = f"init {pid}" if pid else "error cgroup: clone3 refused it here"
        except _born.NamespacesRefused as exc:  # the harness says so once, as for one thread
            said = f"refused {exc.errno} {exc.strerror}"
        except OSError as exc:
            said = f"error {exc}"
        with contextlib.suppress(OSError):
            os.write(report_fd, f"{said}\n".encode())
        os._exit(0)
    os.waitpid(via, 0)


def _outer_pid(init: int, inner: int) -> int | None:
    """The pid (as this process sees it) of the init's child whose pid inside is ``inner``."""
    try:
        children = Path(f"/proc/{init}/task/{init}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        if _ns_pids(int(child))[-1:] == [inner]:
            return int(child)
    return None


def _ns_pids(pid: int) -> list[int]:
    """``NSpid`` of ``pid``: its pid in each namespace from ours down to its own."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return [int(p) for p in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


def outer_pids(members: Iterable[int], inner: set[int]) -> set[int]:
    """Those of ``members`` (pids as this process sees them) whose pid inside their own
    namespace is in ``inner``: a walled worker's trace names its processes so."""
    return {pid for pid in members if _ns_pids(pid)[-1:] and _ns_pids(pid)[-1] in inner}


# -- inside: the init ------------------------------------------------------------------------


def _init(
    run_worker: Callable[[int], NoReturn],
    view: View,
    report_fd: int,
    hold_fd: int,
    *,
    userns: bool,
    uid: int,
    gid: int,
) -> None:  # pragma: no cover - runs in the init
    libc = _libc()
    try:
        if userns:
            # a non-dumpable process's /proc/self files are root's: it could not write its
            # own maps. For these three writes it is dumpable (no worker runs yet).
            libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
            _map_identity(uid, gid)
        libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # the worker may not trace who reports on it
        outer = int(os.readlink("/proc/self"))  # the host's /proc, still: its pid there
        _seal_fds(view, keep={report_fd, hold_fd})
        _mount_view(libc, view)
    except (OSError, ValueError) as exc:
        os.write(report_fd, f"error {exc}\n".encode())
        return
    _pids_go_on_from(outer)

    def worker(init: int) -> NoReturn:
        _harden_worker(libc)
        run_worker(init)

    _keeper._keeper(worker, report_fd, hold_fd, [report_fd, hold_fd])


def _pids_go_on_from(outer: int) -> None:  # pragma: no cover - runs in the init
    """Number the namespace's processes from ``outer`` (the init's pid on the host) on, not
    from 2: every incarnation's worker would otherwise be PID 2, and a system that decides
    "my predecessor is gone" by its recorded pid (a lock file, RQ's worker registry, the
    rq_worker example's requeue of abandoned jobs) would find itself under its predecessor's
    pid and think it alive. On a host pids are not reused that soon; here neither."""
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        start = outer if outer < pid_max - 1000 else 300
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(start))
    except (OSError, ValueError):
        pass  # the worker is PID 2: a pid check across incarnations may mislead it


def _map_identity(uid: int, gid: int) -> None:  # pragma: no cover - runs in the init
    """In a new user namespace: the harness's own uid and gid, mapped to themselves."""
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _seal_fds(view: View, *, keep: set[int]) -> None:  # pragma: no cover - runs in the init
    """Point every inherited descriptor of a hidden file (the harness's open provider log, a
    ledger of another case) at /dev/null: a descriptor would reach through any mount. Not
    closed: a harness object in the worker's memory may still close its number one day."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd <= 2 or fd in keep or fd == null:
                continue
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            hidden = any(_under(target, h) for h in view.hide) or target in view.blank
            if hidden and not any(_under(target, k) for k in view.keep):
                os.dup2(null, fd)
    finally:
        os.close(null)


def _mount(
    libc: Any, source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:  # pragma: no cover
    def enc(text: str | None) -> bytes | None:
        return None if text is None else os.fsencode(text)

    if libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype or source} on {target}: {os.strerror(err)}")


def _mount_view(libc: Any, view: View) -> None:  # pragma: no cover - runs in the init
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE, None)  # nothing leaks out of here
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in view.keep]
    for path in view.hide:
        mode = os.stat(path).st_mode & 0o7777
        _mount(libc, "tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode={mode:o}")
    for path, fd in kept:
        os.makedirs(path, exist_ok=True)
        _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC, None)
        os.close(fd)
    for path in view.blank:
        _mount(libc, os.devnull, path, None, _MS_BIND, None)
    _cgroups_read_only(libc)
    _mount(libc, "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)


class _MountAttr(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")
    ]


_SYS_MOUNT_SETATTR = 442  # the unified syscall table: one number on every architecture
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1


def _cgroups_read_only(libc: Any) -> None:  # pragma: no cover - runs in the init
    """Every cgroup file system read-only: one recursive ``mount_setattr`` over the mount
    that holds them all (``/sys/fs/cgroup``: 0.2 ms where eleven remounts took 8), else a
    bind remount of each (a kernel before 5.12)."""
    tops, mounts = _cgroup_plan()
    attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    size = ctypes.sizeof(attr)
    for top in tops:
        path = os.fsencode(top)
        if (
            libc.syscall(
                _SYS_MOUNT_SETATTR, _AT_FDCWD, path, _AT_RECURSIVE, ctypes.byref(attr), size
            )
            == 0
        ):
            continue
        for point, flags in mounts:
            if _under(point, top):
                _mount(libc, None, point, None, flags, None)


@functools.cache
def _cgroup_plan() -> tuple[list[str], list[tuple[str, int]]]:
    """Where to make the cgroup file systems read-only: the mount(s) to set recursively, and
    each cgroup mount with the flags of its bind remount. Read once, in the harness (parsing
    ``mountinfo`` in every init cost 2 ms: an import of a codec per process)."""
    points: set[str] = set()
    mounts: list[tuple[str, int]] = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                head, _, tail = line.partition(" - ")
                fields = head.split()
                if len(fields) < 6:
                    continue
                point = fields[4].encode().decode("unicode_escape")
                points.add(point)
                if tail.split()[:1] in (["cgroup"], ["cgroup2"]):
                    options = set(fields[5].split(","))
                    flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
                    flags |= sum(bit for name, bit in _MOUNT_FLAGS.items() if name in options)
                    mounts.append((point, flags))
    except OSError:
        return [], []
    if not mounts:
        return [], []
    common = os.path.commonpath([p for p, _ in mounts])
    if common in points and common not in ("/", "/sys"):
        return [common], mounts
    return [p for p, _ in mounts], mounts


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _harden_worker(libc: Any) -> None:  # pragma: no cover - runs in the worker
    """Drop every capability but ``KEPT_CAPS`` from every set; the worker's own process is
    dumpable again (its core dumps, its /proc/self files)."""
    for cap in range(_cap_last() + 1):
        if cap not in KEPT_CAPS:
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) == 0:
        for i, word in enumerate(data):
            mask = sum(1 << (cap - 32 * i) for cap in KEPT_CAPS if 32 * i <= cap < 32 * (i + 1))
            word.effective &= mask
            word.permitted &= mask
            word.inheritable &= mask
        if libc.capset(ctypes.byref(header), data) != 0:
            os._exit(71)  # never run the worker with the capabilities that undo the wall
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
