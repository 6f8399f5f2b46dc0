"""Every code example in README.md and docs/ runs here, so a changed API that
breaks a page fails the suite; and the site builds with `mkdocs build --strict`.

The blocks of a page run in order, as a reader would type them: Python blocks
share one namespace, shell blocks run in bash, and all of them in one fresh
directory per page. When a page talks to a server (port 7070, 7379 or 9092
in a block), a real `tidelog serve` runs on that directory's `tidelog.db` on free
ports, and the blocks' ports are rewritten to those. A PostgreSQL URL in a
block is rewritten to a schema of its own (skipped without PostgreSQL on a
laptop, failed under CI). A block that is deliberately not run carries
`<!-- not-tested: reason -->` on the line before it.

A small collector of our own rather than pytest-examples or phmdoctest: those
run Python only, and here shell blocks must run against a live server with
the Python blocks of the same page, in one directory. markdown-it-py finds
the blocks, so fences are read as a Markdown renderer reads them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from conftest import need_service

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LANGS = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
NOT_TESTED = re.compile(r"<!--\s*not-tested:(.*?)-->", re.S)
DOC_PG = "postgresql://postgres@127.0.0.1:5432/test?options=-csearch_path%3Dmylog"
REDIS_ERROR = re.compile(r"^(\(error\) )?(ERR|WRONGTYPE|NOGROUP|BUSYGROUP|NOAUTH|NOPERM)\b", re.M)
BLOCK_TIMEOUT = 60


@dataclass
class Block:
    page: Path
    line: int
    lang: str  # "python" or "sh"
    code: str
    not_tested: str | None  # the reason, when marked

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def collect(page: Path) -> list[Block]:
    """The runnable (python and shell) fenced blocks of a page, in order."""
    found = []
    previous = None
    for token in MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
        if token.type == "fence":
            lang = LANGS.get(token.info.split()[0].lower() if token.info.strip() else "")
            mark = None
            if previous is not None and previous.type == "html_block":
                matched = NOT_TESTED.fullmatch(previous.content.strip())
                mark = matched.group(1).strip() if matched else None
            if lang:
                found.append(Block(page, token.map[0] + 1, lang, token.content, mark))
            elif mark is not None:
                raise AssertionError(f"{page}:{token.map[0] + 1}: not-tested marks a block that never runs")
        previous = token
    return found


BLOCKS = [b for page in PAGES for b in collect(page)]
RUN = [b for b in BLOCKS if b.not_tested is None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TIDELOG_URL", "TIDELOG_TOKEN")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["NO_MKDOCS_2_WARNING"] = "1"
    env["DISABLE_MKDOCS_2_WARNING"] = "true"
    return env


@dataclass
class PageRun:
    """What the blocks of one page share: a directory, a namespace, maybe a server."""

    page: Path
    directory: Path
    namespace: dict[str, Any] = field(default_factory=dict)
    ports: dict[str, str] = field(default_factory=dict)
    pg_url: str | None = None
    ran: set[int] = field(default_factory=set)  # lines of the blocks run (or tried) so far
    server: subprocess.Popen | None = None
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start_server(self) -> None:
        try:
            import granian  # noqa: F401
            import hiredis  # noqa: F401
            import starlette  # noqa: F401
        except ImportError as e:
            need_service("the tidelog server", f"{e}; pip install 'tidelog[server]'")
        http, resp, kafka = free_port(), free_port(), free_port()
        self.ports.update({"7070": str(http), "7379": str(resp), "9092": str(kafka)})
        log = open(self.directory / "serve.log", "wb")  # noqa: SIM115 - closed in close()
        self.stack.callback(log.close)
        self.server = subprocess.Popen(
            [sys.executable, "-m", "tidelog", "serve", "--db", "tidelog.db", "--port", str(http)]
            + ["--resp-port", str(resp), "--kafka-port", str(kafka), "--clean-interval", "0"],
            cwd=self.directory,
            env=child_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/healthz", timeout=1):
                    return
            except OSError:
                if self.server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"tidelog serve did not start:\n{self.server_log()}") from None
                time.sleep(0.05)

    def server_log(self) -> str:
        path = self.directory / "serve.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def rewrite(self, code: str) -> str:
        for doc_port, port in self.ports.items():
            code = re.sub(rf"\b{doc_port}\b", port, code)
        if self.pg_url:
            code = code.replace(DOC_PG, self.pg_url)
        return code

    def close(self) -> None:
        import tidelog

        for value in self.namespace.values():
            if isinstance(value, tidelog.Log):
                with contextlib.suppress(Exception):
                    value.close()
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)
            try:
                self.server.wait(10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.stack.close()


class Pages:
    """One PageRun at a time: the blocks run in page order, so a page's run
    ends when the next page's first block comes."""

    def __init__(self, base: Path):
        self.base = base
        self.current: PageRun | None = None

    def run_for(self, page: Path) -> PageRun:
        if self.current is not None and self.current.page == page:
            return self.current
        self.close()
        directory = self.base / str(page.relative_to(ROOT)).replace("/", "_")
        directory.mkdir()
        # Servers a block starts itself (on a file of its page's own, or with TLS).
        run = PageRun(page, directory, ports={"7071": str(free_port()), "8443": str(free_port())})
        self.current = run
        blocks = [b for b in RUN if b.page == page]
        if any(re.search(r"\b(7070|7379|9092)\b", b.code) for b in blocks):
            run.start_server()
        if any(DOC_PG in b.code for b in blocks):
            from pgschema import postgres_schema

            run.pg_url = run.stack.enter_context(postgres_schema())
        return run

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    state = Pages(tmp_path_factory.mktemp("docs"))
    yield state
    state.close()


def run_python(run: PageRun, block: Block) -> None:
    code = compile(run.rewrite(block.code), block.id, "exec")
    cwd = os.getcwd()
    os.chdir(run.directory)
    before = set(threading.enumerate())
    try:
        exec(code, run.namespace)
    finally:
        os.chdir(cwd)
    # A reader runs the block as a script: one that leaves a thread running that is
    # not a daemon would not exit when it is done (a threading.Timer left waiting).
    left = [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]
    for t in left:
        t.join(timeout=1)
    left = [t.name for t in left if t.is_alive()]
    assert not left, f"{block.id} leaves non-daemon threads running, so a script would not exit: {left}"


def run_shell(run: PageRun, block: Block) -> None:
    for tool, package in (("curl", "curl"), ("redis-cli", "redis-tools"), ("openssl", "openssl")):
        if re.search(rf"(^|[\s|(]){tool} ", block.code, re.M) and shutil.which(tool) is None:
            need_service(tool, f"{block.id} runs it: apt-get install {package}")
    code = run.rewrite(block.code)
    # A reader's .venv/bin is this interpreter's. curl fails on an HTTP error status here,
    # unless the line prints the status itself (-w) to show an error.
    code = code.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
    code = "\n".join(
        line if " -w " in line else re.sub(r"(^|[\s(|$])curl ", r"\1curl --fail-with-body -sS ", line)
        for line in code.split("\n")
    )
    process = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", "-c", code],
        cwd=run.directory,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # so a server the block starts in the background goes with it
    )
    try:
        out, _ = process.communicate(timeout=BLOCK_TIMEOUT)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait()
    text = out.decode(errors="replace")
    assert process.returncode == 0, f"{block.id} exited {process.returncode}:\n{text}\n{run.server_log()}"
    assert not REDIS_ERROR.search(text), f"{block.id}: a Redis command failed:\n{text}"


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_snippet(block: Block, pages: Pages) -> None:
    run = pages.run_for(block.page)
    # A block builds on the page's earlier ones: run those first when they were not
    # (a test selected with -k), and each block once.
    for earlier in [b for b in RUN if b.page == block.page and b.line <= block.line]:
        if earlier.line not in run.ran:
            run.ran.add(earlier.line)
            (run_python if earlier.lang == "python" else run_shell)(run, earlier)


def test_the_job_guides_followed_in_one_folder_meet_none_of_each_others_records(tmp_path, caplog) -> None:
    # A reader follows the job-queue guide, then the periodic-jobs guide, in one folder:
    # the second guide's runner must not take the first one's records (it dead-letters
    # each as "not a job record"), and its job ids are the ones the guide shows.
    runs = []
    for name in ("job-queue.md", "periodic-jobs.md"):
        run = PageRun(ROOT / "docs/guides" / name, tmp_path)
        try:
            for block in RUN:
                if block.page == run.page and block.lang == "python":
                    run_python(run, block)
        finally:
            run.close()
        runs.append(run)
    assert runs[1].namespace["ok"].id == "0-1"
    assert [r.getMessage() for r in caplog.records if "not a job record" in r.getMessage()] == []


def test_blocks_not_run_say_why() -> None:
    skipped = [b for b in BLOCKS if b.not_tested is not None]
    for b in skipped:
        assert len(b.not_tested) > 10, f"{b.id}: say why the block is not run"
    # Most examples run: a page full of marks would be a page nobody checks.
    assert len(skipped) * 4 < len(BLOCKS), [b.id for b in skipped]


def test_every_redis_command_has_a_summary() -> None:
    # The generated command table (and COMMAND DOCS) reads them; a command without one is a blank row.
    from tidelog.server.resp.commands import COMMANDS, SUMMARIES

    assert set(SUMMARIES) == set(COMMANDS)
    assert all(SUMMARIES.values())


def test_python_reference_names_every_public_name() -> None:
    import tidelog

    page = (ROOT / "docs/reference/python.md").read_text(encoding="utf-8")
    missing = [
        name
        for name in tidelog.__all__
        if f"::: tidelog.{name}\n" not in page
        # the exceptions are documented together, as the module that holds them
        and not (isinstance(getattr(tidelog, name), type) and issubclass(getattr(tidelog, name), Exception))
    ]
    assert "::: tidelog.errors\n" in page
    assert not missing, f"add these to docs/reference/python.md: {missing}"


def test_readme_links_resolve() -> None:
    # mkdocs checks the site's links; the README is read on its own (GitHub, PyPI).
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    broken = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert targets and not broken, broken


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 160, f"README.md has {lines} lines; move detail into docs/"


# A page for users names no issue, no branch and no path on a machine of ours; the history
# of how a figure moved belongs in commit messages.
INTERNAL = re.compile(r"\bissues? #?\d+|/(?:work|root|home)/|\bbranch", re.I)


def test_benchmarks_page_names_no_issues_branches_or_machine_paths() -> None:
    text = (ROOT / "docs/benchmarks.md").read_text(encoding="utf-8")
    found = [
        f"line {n}: {m.group(0)!r}"
        for n, line in enumerate(text.splitlines(), 1)
        for m in INTERNAL.finditer(line)
    ]
    assert not found, f"docs/benchmarks.md is for users; take these out: {found}"


def test_site_builds_strict(tmp_path) -> None:
    try:
        import mkdocs  # noqa: F401
        import mkdocs_click  # noqa: F401
        import mkdocs_gen_files  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError as e:
        need_service("the docs toolchain", f"{e}; pip install 'tidelog[docs]'")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    built = tmp_path / "site"
    for page in ("reference/http/index.html", "reference/redis/index.html", "reference/cli/index.html"):
        assert (built / page).is_file(), page
    assert "tidelog_group_lag" in (built / "operations/metrics/index.html").read_text()
    assert "XREADGROUP" in (built / "reference/redis/index.html").read_text()


def test_make_run_installs_only_what_serving_needs() -> None:
    # `make run` installs the server extra, not every extra (pyspark is large); `make test` does.
    if shutil.which("make") is None:
        need_service("make", "apt-get install make")
    # What a fresh `make` plans: not the variables of a `make test VAR=...` running this.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    plan = subprocess.run(
        ["make", "-n", "-B", "run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    ).stdout
    installs = [line for line in plan.splitlines() if "pip install" in line and " -e " in line]
    assert installs == [line for line in installs if line.rstrip().endswith("-e '.[server]'")] and installs, (
        plan
    )
    everything = subprocess.run(
        ["make", "-n", "-B", ".venv/.installed"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert "spark" in everything and "dev" in everything
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "tidelog[server] only" in readme and "DESIGN.md" not in readme
