"""search_paths over several processes: the same results in the same order, sooner on many cores.

The parent walks the tree (the caller's keep filter runs there, once) and hands out runs of whole
directories, in walk order, to forked workers.  Each worker searches its run with
filesearch.search_paths (one reused read buffer, files opened relative to their directory) and
sends back only the results that say something (a match, a binary or unreadable file, a NUL that
stopped the search); the parent yields a FileResult for every file, in walk order, exactly as
search_paths would.  Python threads would not help: the search holds the GIL.

Costs: a fork per run of SHARE_BATCHES batches, the walk in the parent, and a pickled result
per matching file; on one core it is slower than search_paths, so workers=1 (or a root that is
a file) runs search_paths.
"""
from __future__ import annotations

import collections
import os

from .filesearch import _DIR_FLAGS, FileResult, Walk, dir_prefix, in_directory
from .filesearch import search_paths as search_paths_serial

TYPE_CHECKING = False  # typing is not imported at run time: it would cost every search its import
if TYPE_CHECKING:
    import selectors
    from collections.abc import Callable, Generator, Iterable, Iterator
    from typing import Any, NoReturn, TypeVar

    from .filesearch import Entries, Entry, Matcher

    T = TypeVar("T")
    R = TypeVar("R")
    Batch = list[tuple[str, list[str]]]   # (directory, file names) runs, in walk order
    Said = list[tuple[int, FileResult]]   # (index in the batch, result) for results that say something
    Children = dict[int, tuple[int, bytearray, list[int]]]  # read end -> (pid, unread bytes, the run's indices)

BATCH_FILES = 512    # files per task: enough that a task's IPC is small next to its search
SHARE_BATCHES = 8    # batches per forked child: a fork per 4096 files is cheap next to their
#                      search, and a child that finishes early makes room for the next share.
#                      (At 4, with AHEAD 2, the CLI's wall clock on drivers/ was 15-20% longer:
#                      twice the forks, and the slack below ran out behind a slow share.)


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def search_paths(matcher: Matcher, walk: Entries | Iterable[str], output_mode: str = "files_with_matches", before: int = 0,
                 after: int = 0, max_count: int | None = None, workers: int | None = None,
                 every_file: bool = True) -> Generator[FileResult, None, None]:
    """Like filesearch.search_paths over walk (a filesearch.walk() result), with `workers`
    processes (default: one per core).  Yields one FileResult per file, in walk order, as soon
    as it and every file before it are searched; at most about AHEAD runs of SHARE_BATCHES
    batches per worker are walked and not yet yielded, so memory does not grow with the tree.
    every_file=False: only the results that say something (see filesearch.search_paths)."""
    workers = default_workers() if workers is None else workers
    if workers <= 1 or not isinstance(walk, Walk) or not os.path.isdir(walk.root):
        yield from search_paths_serial(matcher, walk, output_mode, before, after, max_count,
                                       every_file)
        return
    # the batches fork_map has taken and not yet answered
    handed_out: collections.deque[Batch] = collections.deque()

    def tasks() -> Iterator[Batch]:
        for batch in _batches(walk):  # (a Walk here: checked above)
            handed_out.append(batch)
            yield batch

    def search(batch: Batch) -> Said:   # inherited by the children through fork: the matcher is not pickled
        return _search(matcher, batch, output_mode, before, after, max_count)

    for said in fork_map(search, tasks(), workers, share=SHARE_BATCHES):
        batch = handed_out.popleft()
        if every_file:
            yield from _results(batch, said)
        else:
            for _, res in said:
                yield res


def _batches(walk: Walk) -> Iterator[Batch]:
    """Runs of (directory, file names), about BATCH_FILES files each, in walk order."""
    batch: Batch = []
    size = 0
    for directory, names in walk.directories():
        if names:
            batch.append((directory, names))
            size += len(names)
        if size >= BATCH_FILES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _results(batch: Batch, said: Said) -> Iterator[FileResult]:
    """Every file's result for a batch: the ones a worker sent, a bare FileResult otherwise."""
    by_index = dict(said)
    i = 0
    for directory, names in batch:
        prefix = dir_prefix(directory)
        for name in names:
            res = by_index.get(i)
            yield FileResult(prefix + name) if res is None else res
            i += 1


class _Run:
    """A worker's share of the walk, with the entries() that filesearch.search_paths opens
    relative to each directory's descriptor."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def entries(self) -> Iterator[Entry]:
        for directory, names in self.batch:
            prefix = dir_prefix(directory)
            try:
                dfd = os.open(directory, _DIR_FLAGS)
            except OSError:
                # Gone since the parent listed it: each file then reports why it cannot be read.
                for name in names:
                    yield None, prefix + name, prefix + name
                continue
            yield from in_directory(dfd, prefix, names)


def _search(matcher: Matcher, batch: Batch, output_mode: str, before: int, after: int,
            max_count: int | None) -> Said:
    """In a worker: search one batch; return (index, FileResult) for results that say something."""
    said: Said = []
    for i, res in enumerate(search_paths_serial(matcher, _Run(batch), output_mode, before, after,
                                                max_count)):
        if len(vars(res)) > 1:   # more than the path: see FileResult.__init__
            said.append((i, res))
    return said


# ---- fork_map: a function over tasks, in forked children, results in task order -----------------

# A frame: the task index and the length of the pickled result (4 bytes each, little-endian),
# then the result.
_HEADER_SIZE = 8
AHEAD = 4            # share mode: runs per worker taken from the tasks and not yet yielded.
#                      Results are yielded in order, so one slow run (a share of
#                      drivers/gpu/drm/amd/include, 378 of drivers/' 900 MB in register headers)
#                      holds back the runs after it; while it works, the other workers go on
#                      only as far as this slack lets them.


def fork_map(fn: Callable[[T], R], tasks: Iterable[T], workers: int, share: int | None = None) -> Iterator[R]:
    """A generator of fn(task) for each of `tasks`, in order, computed by forked children.

    share=None: `tasks` is listed first and dealt round-robin to `workers` children forked at
    once (task i in child i % workers).  share=N: `tasks` (any iterable, e.g. a walk) is taken
    lazily, N consecutive tasks at a time, each run of N by a child forked for it; at most
    `workers` children run at once, and at most AHEAD * workers runs are taken and not yet
    yielded, so memory stays bounded however many tasks there are, and a child that finishes
    early makes room for the next run while a slow one still works.

    Nothing of fn or of the tasks is pickled: the children inherit both through fork, so fn may
    be a closure holding descriptors, compiled patterns or a confined opener.  Only results come
    back, pickled, one frame per task through a pipe per child.  A task whose result never comes
    back (its child raised, was killed or sent what cannot be unpickled) is run here, in this
    process, when its turn comes: no result is lost, and an exception fn raises reaches the caller
    from that in-process run.  Closing the generator early (or an exception in it, such as the
    KeyboardInterrupt of a Ctrl-C) kills and reaps the children.
    """
    if share is None:
        listed = list(tasks)
        workers = min(workers, len(listed))
        if workers <= 1:
            return _here(fn, listed)
        runs = ([(i, listed[i]) for i in range(w, len(listed), workers)] for w in range(workers))
        return _fork_runs(fn, runs, workers, None)
    if workers <= 1:
        return _here(fn, tasks)
    return _fork_runs(fn, _runs_of(tasks, share), workers, AHEAD * workers * share)


def _here(fn: Callable[[T], R], tasks: Iterable[T]) -> Iterator[R]:
    """fork_map in this process: a generator too, so that callers may close() it either way."""
    for task in tasks:
        yield fn(task)


def _runs_of(tasks: Iterable[T], share: int) -> Iterator[list[tuple[int, T]]]:
    """(index, task) lists of `share` consecutive tasks, taken lazily."""
    run: list[tuple[int, T]] = []
    for i, task in enumerate(tasks):
        run.append((i, task))
        if len(run) == share:
            yield run
            run = []
    if run:
        yield run


def _fork_runs(fn: Callable[[T], R], runs: Iterable[list[tuple[int, T]]], workers: int,
               limit: int | None) -> Iterator[R]:
    """fork_map's engine: a child per run of (index, task), at most `workers` at a time and at
    most `limit` tasks (None: no limit) taken and not yet yielded; results in index order (the
    runs' indices together are 0, 1, 2, ...)."""
    # Imported before any fork (a child must import nothing: another thread of the parent may
    # have held the import lock), and here: a one-process search does not pay for them.
    import pickle  # noqa: F401 - for _child and _unframe
    import selectors
    import signal  # noqa: F401 - for _start, _end and the children

    pending: dict[int, T] = {}      # index -> task, for tasks taken and not yet yielded
    done: dict[int, Any] = {}       # index -> result that came back (unpickled)
    lost: set[int] = set()          # indices whose child ended without sending their result
    children: Children = {}
    run_iter = iter(runs)
    more, nxt = True, 0
    sel = selectors.DefaultSelector()
    try:
        while True:
            while more and len(children) < workers and (limit is None or len(pending) < limit):
                run = next(run_iter, None)
                if run is None:
                    more = False
                    break
                pending.update(run)
                r = _start(fn, run, children, lost)
                if r is not None:
                    sel.register(r, selectors.EVENT_READ)
            ready = False
            while nxt in done or nxt in lost:
                if nxt in done:
                    result = done.pop(nxt)
                else:
                    lost.discard(nxt)
                    result = fn(pending[nxt])
                del pending[nxt]
                nxt += 1
                ready = True
                yield result
            if not more and not pending:
                return
            if ready or not children:
                continue   # room for more runs, or (no child) only lost tasks are left
            for key, _ in sel.select():
                _receive(key.fd, children, sel, done, lost)
    finally:
        sel.close()
        _end_all(children, done, lost)


def _start(fn: Callable[[T], R], run: list[tuple[int, T]], children: Children, lost: set[int]) -> int | None:
    """Fork a child for run and return the read end of its pipe; if none can be had, its tasks
    are run here (marked lost) and None is returned."""
    try:
        r, wfd = os.pipe()
    except OSError:      # out of descriptors
        lost.update(i for i, _ in run)
        return None
    import signal
    # Ctrl-C between the fork and the bookkeeping below would leave a child nobody kills: the
    # signal waits until the child is in `children`.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        try:
            pid = os.fork()
        except OSError:      # no process to be had
            os.close(r)
            os.close(wfd)
            lost.update(i for i, _ in run)
            return None
        if pid == 0:         # the child: never returns into the caller's code
            os.close(r)      # pragma: no mutate (equivalent: the child never reads it, and soon exits)
            _child(fn, run, wfd, mask)
        os.close(wfd)
        children[r] = (pid, bytearray(), [i for i, _ in run])
        return r
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _receive(r: int, children: Children, sel: selectors.BaseSelector, done: dict[int, Any], lost: set[int]) -> None:
    """Read what child r sent; at its end of file (it finished, or died), end it."""
    chunk = os.read(r, 1 << 16)  # pragma: no mutate (any read size works)
    if chunk:
        buf = children[r][1]
        buf += chunk
        _unframe(buf, done)
    else:
        sel.unregister(r)
        _end(r, children, done, lost)


def _end_all(children: Children, done: dict[int, Any], lost: set[int]) -> None:
    """End every child. A Ctrl-C (KeyboardInterrupt, or the CLI's SystemExit on SIGTERM) that
    comes meanwhile, a second one included, is raised once none is left: it may come between any
    two bytecodes, whichever thread the signal was sent to, so blocking signals here would not do."""
    interrupted: BaseException | None = None
    while children:
        try:
            for r in list(children):
                _end(r, children, done, lost)
        except (KeyboardInterrupt, SystemExit) as exc:
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted


def _end(r: int, children: Children, done: dict[int, Any], lost: set[int]) -> None:
    """Kill and reap child r (it has exited, unless the caller stopped early), then forget it and
    close its pipe, and mark the tasks of its run that sent no result as lost.  In that order: a
    Ctrl-C at any point leaves the child in `children` until it is reaped (for _end_all to end),
    and a pipe is never closed twice (its number may be another file's by then)."""
    pid, _, indices = children[r]
    _reap(pid)
    del children[r]
    os.close(r)
    lost.update(i for i in indices if i not in done)


def _reap(pid: int) -> None:
    """Kill and reap our child pid, unless it was reaped already: an unreaped child's pid cannot
    be another process's, a reaped one's can."""
    import signal   # loaded by _fork_runs before any fork
    try:
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    except (ChildProcessError, ProcessLookupError):   # reaped (by us before a Ctrl-C, or by someone else)
        pass


def _child(fn: Callable[[T], R], run: list[tuple[int, T]], wfd: int, mask: Iterable[int]) -> NoReturn:
    """A forked child: send (index, pickled fn(task)) for each task of its run, then _exit
    (no atexit handler, finally clause or buffered stream of the parent may run twice). The
    parent reads no exit status: what counts is which results arrived."""
    import pickle   # loaded by _fork_runs: the child imports nothing
    import signal
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)   # a Ctrl-C that came meanwhile ends it
        for i, task in run:
            data = pickle.dumps(fn(task), pickle.HIGHEST_PROTOCOL)
            view = memoryview(i.to_bytes(4, "little") + len(data).to_bytes(4, "little") + data)
            while view:
                view = view[os.write(wfd, view):]
    except BaseException:   # the parent runs this child's missing tasks itself
        pass
    finally:
        os._exit(0)


def _unframe(buf: bytearray, done: dict[int, Any]) -> None:
    """Move every complete frame at the start of buf into done."""
    import pickle   # loaded by _fork_runs
    pos = 0
    while len(buf) - pos >= _HEADER_SIZE:  # pragma: no mutate (> is equivalent: a bare header is no frame)
        i = int.from_bytes(buf[pos:pos + 4], "little")
        size = int.from_bytes(buf[pos + 4:pos + 8], "little")
        start = pos + _HEADER_SIZE
        if len(buf) - start < size:
            break
        try:
            done[i] = pickle.loads(buf[start:start + size])
        except Exception:   # noqa: BLE001 - the task is run again in the parent
            pass
        pos = start + size
    del buf[:pos]
