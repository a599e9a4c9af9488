"""Every command block of the docs runs as written, and the output a doc shows is real.

The docs are the first thing a user runs; a command that no longer exists or an output that
changed is a bug of the docs. This test extracts the fenced blocks of README.md, docs/*.md,
reports/README.md and examples/*/README.md and runs the commands in them, in a fresh copy of
the repository, with the venv's bin on PATH and colour off.

Which blocks are commands:

- ```sh (or bash, shell): every line is a command (trailing ``# comments`` are shell
  comments); each must exit 0 unless the block says otherwise.
- ```console, and ```text or a bare fence whose first line starts with ``$ ``: lines starting
  with ``$ `` are commands, the lines after one are its output. The shown output must appear
  in the real output (stdout and stderr together), every shown line in order, after
  normalising what legitimately varies (durations, ports, temp paths, pids, secrets).
- ```text whose block says ``output-of CMD``: the whole block is the output of CMD.

Other blocks (python, toml, yaml, xml, plain output without a command) are not commands.

A block may be preceded (no blank line between) by HTML comments, one directive each, which
render as nothing but are visible in the markdown source::

    <!-- doc-test: skip (why it cannot run here) -->
    <!-- doc-test: skip-cmd make test (why) -->     one command of the block, by its prefix
    <!-- doc-test: cwd=examples/outbox -->          relative to the copy of the repository
    <!-- doc-test: env NAME=VALUE -->
    <!-- doc-test: setup COMMAND -->                 run first, output not compared
    <!-- doc-test: exit=1 -->                        every command's exit status (or 1,0,3)
    <!-- doc-test: background=2 -->                  the 2nd command is a server: run it in
                                                     the background, read its banner up to
                                                     "Ctrl-C to stop.", export P (its port)
    <!-- doc-test: free-port 8025 -->                the doc's port 8025 is, when run, a port
                                                     free right then (a fixed one fails when
                                                     anything else holds it: Mailpit, a
                                                     parallel run); every --port N a block
                                                     runs must be one (or 0)
    <!-- doc-test: output-of COMMAND -->
    <!-- doc-test: needs-pg -->                      skipped unless CRASH_HARNESS_PG_URL is set
    <!-- doc-test: slow -->                          runs only with --run-slow

A block with no ``skip`` that cannot run fails: the only way out is a visible reason.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"
DOC_FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "reports" / "README.md",
    *sorted((ROOT / "examples").glob("*/README.md")),
]
SHELL_LANGS = {"sh", "bash", "shell"}
NOT_COMMANDS = {"python", "toml", "yaml", "xml", "json", "html", "ini"}
DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^\s*```(\S*)\s*$")
COMMAND_TIMEOUT_S = 120
# What legitimately differs between the doc's run and this one.
NORMALISE: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"/dev/shm/[\w.-]+|/tmp/[\w./-]+|/var/folders/[\w./-]+"), "<TMP>"),
    (re.compile(r"\b(127\.0\.0\.1|localhost):\d+"), r"\1:<PORT>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|s|KB|MB|B)\b"), "<N>"),
    (re.compile(r"\bpid[ =:]?\d+"), "pid <PID>"),
    (re.compile(r"(Bearer |X-Admin-Token: |token=|password )(<[^>]*>|[\w.-]{16,})"), r"\1<SECRET>"),
]


@dataclass
class Block:
    """One fenced block of a doc, with the directives written right before it."""

    path: Path
    line: int
    lang: str
    body: list[str]
    directives: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def directive(self, name: str) -> list[str]:
        """The arguments of every directive called ``name`` (``name=ARG`` or ``name ARG``)."""
        out = []
        for d in self.directives:
            m = re.match(rf"^{re.escape(name)}(?:[= ]\s*(.*))?$", d)
            if m:
                out.append(m.group(1) or "")
        return out

    @property
    def kind(self) -> str | None:
        """``sh``, ``console``, ``output`` or None for a block that is not a command."""
        if self.lang in SHELL_LANGS:
            return "sh"
        if self.directive("output-of"):
            return "output"
        if self.lang in NOT_COMMANDS:
            return None
        first = next((ln for ln in self.body if ln.strip()), "")
        if self.lang == "console" or first.startswith("$ "):
            return "console"
        return None


def extract_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, with the ``doc-test`` comments right above it."""
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        directives = []
        j = start - 1
        while j >= 0 and (d := DIRECTIVE.match(lines[j])):
            directives.insert(0, d.group(1))
            j -= 1
        i += 1
        body = []
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append(lines[i])
            i += 1
        blocks.append(Block(path, start + 1, m.group(1), body, directives))
        i += 1
    return blocks


@dataclass
class Command:
    """One command of a block and the output the doc shows for it (console blocks)."""

    text: str
    shown: list[str] = field(default_factory=list)


def split_commands(block: Block) -> list[Command]:
    """The block's commands: continuation lines (``\\``) and heredocs stay with theirs."""
    cmds: list[Command] = []
    body = block.body
    console = block.kind == "console"
    i = 0
    while i < len(body):
        line = body[i]
        if console and not line.startswith("$ "):
            if cmds:
                cmds[-1].shown.append(line)
            i += 1
            continue
        text = line[2:] if console else line
        if not text.strip() or text.strip().startswith("#"):
            i += 1
            continue
        parts = [text]
        while parts[-1].endswith("\\") and i + 1 < len(body):
            i += 1
            parts.append(body[i])
        heredoc = re.search(r"<<-?\s*'?(\w+)'?", parts[-1])
        if heredoc:
            end = heredoc.group(1)
            while i + 1 < len(body):
                i += 1
                parts.append(body[i])
                if body[i].strip() == end:
                    break
        cmds.append(Command("\n".join(parts)))
        i += 1
    return cmds


def normalise(line: str) -> str:
    """The line with what varies between runs replaced by placeholders, spaces collapsed."""
    for pattern, repl in NORMALISE:
        line = pattern.sub(repl, line)
    return " ".join(line.split())


def line_pattern(shown: str) -> re.Pattern[str]:
    """A doc's line as a regex: ``...`` or ``…`` inside it stands for any text."""
    pieces = re.split(r"\.\.\.|…", normalise(shown))
    return re.compile(".*".join(re.escape(p) for p in pieces))


def missing_lines(shown: list[str], actual: str) -> list[str]:
    """The shown lines that do not appear in ``actual`` in order (empty: it matches).

    A line of just ``...`` means "any lines here"; since every shown line need only appear
    in order, it matches by being skipped. Blank lines are layout, not output.
    """
    real = [normalise(ln) for ln in actual.splitlines()]
    pos = 0
    for n, want in enumerate(shown):
        if want.strip() in ("", "...", "…"):
            continue
        pat = line_pattern(want)
        while pos < len(real) and not pat.fullmatch(real[pos]):
            pos += 1
        if pos == len(real):
            return [ln for ln in shown[n:] if ln.strip() not in ("", "...", "…")]
        pos += 1
    return []


def all_blocks() -> list[Block]:
    """Every command block of every doc, in file order."""
    return [b for p in DOC_FILES for b in extract_blocks(p) if b.kind is not None]


BLOCKS = all_blocks()


def _copy_repo(dest: Path) -> Path:
    """A copy of the repository (no venv, no git) with the venv linked in, as a user has it."""
    repo = dest / "repo"
    caches = shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache", ".pytest_cache"
    )
    reports = shutil.ignore_patterns("report.*")

    def ignore(folder: str, names: list[str]) -> set[str]:
        # written reports only (at the top and in reports/): harness/report.py is copied
        skipped = set(caches(folder, names))
        if Path(folder) in (ROOT, ROOT / "reports"):
            skipped |= set(reports(folder, names))
        return skipped

    shutil.copytree(ROOT, repo, ignore=ignore)
    (repo / ".venv").symlink_to(ROOT / ".venv")
    return repo


def _env(tmp: Path, repo: Path, block: Block) -> dict[str, str]:
    """PATH with the venv's bin first, PYTHONPATH the copy, colour off, scratch and home in tmp."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "PYTEST_ADDOPTS")}
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    scratch = tmp / "scratch"
    scratch.mkdir(exist_ok=True)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=str(repo),
        NO_COLOR="1",
        HOME=str(home),
        CRASH_HARNESS_TMPDIR=str(scratch),
        COLUMNS="200",
    )
    for assignment in block.directive("env"):
        name, _, value = assignment.partition("=")
        env[name] = value
    return env


BEGIN = "__DOC_TEST_BEGIN_{}__"
END = "__DOC_TEST_END_{}_"


def _script(cmds: list[Command], skipped: set[int], background: set[int], setup: list[str]) -> str:
    """One bash script running the block's commands in order, marking where each one's
    output starts and ends and its exit status, so shell state (cd, export) carries over."""
    out = [*setup, "__doc_bg=''"]
    for n, cmd in enumerate(cmds):
        if n in skipped:
            continue
        out.append(f"printf '\\n{BEGIN.format(n)}\\n'")
        if n in background:
            out += [
                f"__fifo=$(mktemp -u); mkfifo $__fifo; {cmd.text} >$__fifo 2>&1 &",
                "__doc_bg=$!; exec 4<$__fifo; rm $__fifo; __rc=0",
                'while IFS= read -r __l <&4; do printf "%s\\n" "$__l"',
                "  [[ $__l =~ listening\\ on\\ http://127\\.0\\.0\\.1:([0-9]+) ]] &&"
                " export P=${BASH_REMATCH[1]}",
                "  [[ $__l =~ Bearer\\ ([A-Za-z0-9_-]{16,}) ]] && export S=${BASH_REMATCH[1]}",
                "  [[ $__l =~ password\\ ([A-Za-z0-9_-]{16,}) ]] && export S=${BASH_REMATCH[1]}",
                '  [[ $__l == "Ctrl-C to stop." ]] && break; done',
                "cat <&4 >/dev/null 2>&1 &",
            ]
        else:
            out += [cmd.text, "__rc=$?"]
        out.append(f"printf '\\n{END.format(n)}%s__\\n' $__rc")
    # SIGTERM, not the Ctrl-C of the doc: a background job of a script ignores SIGINT.
    out.append('[ -n "$__doc_bg" ] && { kill -TERM $__doc_bg; wait $__doc_bg; }; exit 0')
    return "\n".join(out) + "\n"


#: an option that makes a command listen on a port (``--port 8711``, ``--smtp-port=2525``)
BINDS = re.compile(r"--(?:smtp-)?port[= ](\d+)\b")


def _free_ports(block: Block) -> dict[str, str]:
    """Each port a ``free-port`` directive names -> a loopback port free right now (all held
    open together until chosen, so two are never the same)."""
    wanted = [p for d in block.directive("free-port") for p in d.split()]
    with contextlib.ExitStack() as stack:
        chosen = {}
        for port in wanted:
            sock = stack.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            chosen[port] = str(sock.getsockname()[1])
    return chosen


def _with_ports(text: str, ports: dict[str, str]) -> str:
    for doc_port, free in ports.items():
        text = re.sub(rf"\b{doc_port}\b", free, text)
    return text


def _skip_reason(block: Block) -> str | None:
    reasons = block.directive("skip")
    if reasons:
        return reasons[0].strip("() ") or "no reason given"
    if block.directive("needs-pg") and not os.environ.get("CRASH_HARNESS_PG_URL"):
        return "needs PostgreSQL: set CRASH_HARNESS_PG_URL"
    return None


def _params() -> list[object]:
    marks = []
    for b in BLOCKS:
        m = [pytest.mark.slow] if b.directive("slow") else []
        marks.append(pytest.param(b, id=b.id, marks=m))
    return marks


@pytest.mark.parametrize("block", _params())
def test_doc_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    """The block's commands exit as expected and print every line the doc shows, in order."""
    reason = _skip_reason(block)
    if reason:
        pytest.skip(reason)
    repo = _copy_repo(tmp_path)
    cwd = repo / (block.directive("cwd") or ["."])[0]
    if block.kind == "output":
        cmds = [Command(block.directive("output-of")[0], block.body)]
    else:
        cmds = split_commands(block)
    assert cmds, f"{block.id}: a command block with no command"
    skip_prefixes = [re.match(r"^(.*?)\s*(\(.*\))?$", s) for s in block.directive("skip-cmd")]
    prefixes = [m.group(1) for m in skip_prefixes if m]
    skipped = {n for n, c in enumerate(cmds) if any(c.text.startswith(p) for p in prefixes)}
    assert len(skipped) == len(prefixes), f"{block.id}: a skip-cmd names no command"
    background = {int(x) - 1 for x in block.directive("background")}
    exits = [int(x) for e in block.directive("exit") for x in e.split(",")]
    ports = _free_ports(block)
    run = [Command(_with_ports(c.text, ports), c.shown) for c in cmds]
    setup = [_with_ports(c, ports) for c in block.directive("setup")]
    script = _script(run, skipped, background, setup)
    proc = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd,
        env=_env(tmp_path, repo, block),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=COMMAND_TIMEOUT_S * max(1, len(cmds)),
        check=False,
    )
    output = proc.stdout
    for n, cmd in enumerate(cmds):
        if n in skipped:
            continue
        m = re.search(
            re.escape(BEGIN.format(n)) + r"\n(.*?)\n" + re.escape(END.format(n)) + r"(\d+)__",
            output,
            re.S,
        )
        assert m, f"{block.id}: `{cmd.text}` never finished; output:\n{output}"
        got, rc = m.group(1), int(m.group(2))
        want_rc = exits[n] if n < len(exits) else (exits[-1] if exits else 0)
        assert rc == want_rc, f"{block.id}: `{cmd.text}` exited {rc}, not {want_rc}:\n{got}"
        missing = missing_lines(cmd.shown, got)
        assert not missing, (
            f"{block.id}: `{cmd.text}` did not print (in order):\n"
            + "\n".join(missing)
            + f"\n--- it printed:\n{got}"
        )


def test_doc_blocks_census() -> None:
    """Lists how many command blocks run and which are skipped, and why (``-s`` shows it)."""
    skipped = [(b.id, r) for b in BLOCKS if (r := _skip_reason(b))]
    skipped_cmds = [
        (b.id, s) for b in BLOCKS if not _skip_reason(b) for s in b.directive("skip-cmd")
    ]
    ran = len(BLOCKS) - len(skipped)
    print(f"\ndoc command blocks: {len(BLOCKS)}, run {ran}, skipped {len(skipped)}")
    for bid, r in skipped:
        print(f"  skip {bid}: {r}")
    for bid, s in skipped_cmds:
        print(f"  skip one command of {bid}: {s}")
    assert len(BLOCKS) > 20, "the extractor found too few command blocks"
    for b in BLOCKS:
        for d in b.directives:
            name = re.match(r"[\w-]+", d)
            assert name, f"{b.id}: empty doc-test directive"
            assert name.group(0) in KNOWN, f"{b.id}: unknown doc-test directive {d!r}"


#: Every directive the runner understands; a misspelt one fails rather than being ignored.
KNOWN = {"skip", "skip-cmd", "cwd", "env", "setup", "exit", "background", "output-of"}
KNOWN |= {"needs-pg", "slow", "free-port"}


def test_no_doc_block_binds_a_fixed_port() -> None:
    """A server a doc block starts listens on a port free when the test runs: every
    ``--port N`` / ``--smtp-port N`` (N not 0) it runs is named by a ``free-port`` directive.
    (8025 and 2525 failed whenever Mailpit or another run held them.)"""
    fixed = []
    for b in BLOCKS:
        if _skip_reason(b):
            continue
        freed = {p for d in b.directive("free-port") for p in d.split()}
        texts = [c.text for c in split_commands(b)] + b.directive("setup")
        for text in texts:
            fixed += [
                f"{b.id}: {m.group(0)}"
                for m in BINDS.finditer(text)
                if m.group(1) not in {"0", *freed}
            ]
    assert not fixed, "bind a free port (doc-test: free-port N):\n" + "\n".join(fixed)
    assert BINDS.search("serve --port 8711")
    assert not BINDS.search("--ports 1")


def test_matcher_refuses_a_false_line() -> None:
    """A shown line that the output does not contain, or out of order, is reported missing."""
    out = "a 1\n  ok   baseline   0.42s  [ 1/12]\nb 2\n"
    assert missing_lines(["  ok   baseline   0.15s  [ 1/12]", "..."], out) == []
    assert missing_lines(["b 2", "a 1"], out) == ["a 1"]
    assert missing_lines(["  FAIL baseline  0.15s  [ 1/12]"], out) != []
    assert missing_lines(["a …", "b 2"], out) == []


def test_shell_split_keeps_heredocs_and_continuations() -> None:
    """A heredoc or a ``\\`` continuation is part of its command, not a command of its own."""
    b = Block(ROOT, 1, "console", ["$ cat <<'EOF'", "$ x", "EOF", "$ a \\", "  b", "out"])
    cmds = split_commands(b)
    assert [c.text for c in cmds] == ["cat <<'EOF'\n$ x\nEOF", "a \\\n  b"]
    assert cmds[1].shown == ["out"]
