"""search_paths over several processes: the same results in the same order, sooner on many cores.

The parent walks the tree (the caller's keep filter runs there, once) and hands out runs of whole
directories, in walk order, to forked workers.  Each worker searches its run with
filesearch.search_paths (one reused read buffer, files opened relative to their directory) and
sends back only the results that say something (a match, a binary or unreadable file, a NUL that
stopped the search); the parent yields a FileResult for every file, in walk order, exactly as
search_paths would.  Python threads would not help: the search holds the GIL.

Costs: a fork per worker, the walk in the parent, and a pickled result per matching file; on one
core it is slower than search_paths, so workers=1 (or a root that is a file) runs search_paths.
"""
import collections
import os
import pickle
import struct

from .filesearch import _DIR_FLAGS, FileResult, Walk, dir_prefix, in_directory
from .filesearch import search_paths as search_paths_serial

BATCH_FILES = 512    # files per task: enough that a task's IPC is small next to its search

_matcher = None      # the worker's Matcher, inherited through fork (a compiled DFA is not pickled)


def default_workers():
    """One worker per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def search_paths(matcher, walk, output_mode="files_with_matches", before=0, after=0,
                 max_count=None, workers=None):
    """Like filesearch.search_paths over walk (a filesearch.walk() result), with `workers`
    processes (default: one per core).  Yields one FileResult per file, in walk order."""
    workers = default_workers() if workers is None else workers
    if workers <= 1 or not isinstance(walk, Walk) or not os.path.isdir(walk.root):
        yield from search_paths_serial(matcher, walk, output_mode, before, after, max_count)
        return
    handed_out = collections.deque()   # the batches, in the order imap returns their results

    def tasks():
        for batch in _batches(walk):
            handed_out.append(batch)
            yield batch, output_mode, before, after, max_count

    import multiprocessing  # here: a one-process search does not pay for importing it
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, _init, (matcher,)) as pool:
        for said in pool.imap(_search, tasks()):
            batch = handed_out.popleft()
            yield from _results(batch, said)


def _batches(walk):
    """Runs of (directory, file names), about BATCH_FILES files each, in walk order."""
    batch, size = [], 0
    for directory, names in walk.directories():
        if names:
            batch.append((directory, names))
            size += len(names)
        if size >= BATCH_FILES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _results(batch, said):
    """Every file's result for a batch: the ones a worker sent, a bare FileResult otherwise."""
    said = dict(said)
    i = 0
    for directory, names in batch:
        prefix = dir_prefix(directory)
        for name in names:
            res = said.get(i)
            yield FileResult(prefix + name) if res is None else res
            i += 1


class _Run:
    """A worker's share of the walk, with the entries() that filesearch.search_paths opens
    relative to each directory's descriptor."""

    def __init__(self, batch):
        self.batch = batch

    def entries(self):
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


def _init(matcher):
    global _matcher
    _matcher = matcher


def _search(task):
    """In a worker: search one batch; return (index, FileResult) for results that say something."""
    batch, output_mode, before, after, max_count = task
    said = []
    for i, res in enumerate(search_paths_serial(_matcher, _Run(batch), output_mode, before, after,
                                                max_count)):
        if len(vars(res)) > 1:   # more than the path: see FileResult.__init__
            said.append((i, res))
    return said


# ---- fork_map: a function over a list of tasks, in forked children, results in task order ------

_HEADER = struct.Struct("<II")   # a frame: task index, length of the pickled result, the result


def fork_map(fn, tasks, workers):
    """Yield fn(task) for each task of the list `tasks`, in order, computed by `workers` forked
    children (task i in child i % workers).

    Nothing of fn or of the tasks is pickled: the children inherit both through fork, so fn may
    be a closure holding descriptors, compiled patterns or a confined opener.  Only results come
    back, pickled, one frame per task through a pipe per child.  A task whose result never comes
    back (its child raised, was killed or sent what cannot be unpickled) is run here, in this
    process, after the others: no result is lost, and an exception fn raises reaches the caller
    from that in-process run.  Closing the generator early kills and reaps the children.
    """
    # Imported before any fork (a child must import nothing: another thread of the parent may
    # have held the import lock), and here: a one-process search does not pay for them.
    import selectors
    import signal

    tasks = list(tasks)
    workers = min(workers, len(tasks))
    if workers <= 1:
        yield from map(fn, tasks)
        return
    children = {}            # read end -> [pid, bytearray of unread bytes]
    done = {}                # task index -> result
    try:
        for w in range(workers):
            r, wfd = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no process to be had: this child's tasks are run here
                os.close(r)
                os.close(wfd)
                break
            if pid == 0:     # the child: never returns into the caller's code
                os.close(r)  # pragma: no mutate (equivalent: the child never reads it, and soon exits)
                _child(fn, tasks, w, workers, wfd)
            os.close(wfd)
            children[r] = [pid, bytearray()]
        with selectors.DefaultSelector() as sel:
            for r in children:
                sel.register(r, selectors.EVENT_READ)
            nxt = 0
            while sel.get_map():
                for key, _ in sel.select():
                    chunk = os.read(key.fd, 1 << 16)  # pragma: no mutate (any read size works)
                    if chunk:
                        buf = children[key.fd][1]
                        buf += chunk
                        _unframe(buf, done)
                    else:
                        sel.unregister(key.fd)
                while nxt in done:
                    yield done.pop(nxt)
                    nxt += 1
        for i in range(nxt, len(tasks)):
            yield done.pop(i) if i in done else fn(tasks[i])
    finally:
        for r, (pid, _) in children.items():
            os.close(r)
            try:
                os.kill(pid, signal.SIGKILL)   # done by now, unless the caller stopped early
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):   # someone else reaped it
                pass


def _child(fn, tasks, w, workers, wfd):
    """A forked child: send (index, pickled fn(task)) for its share of the tasks, then _exit
    (no atexit handler, finally clause or buffered stream of the parent may run twice). The
    parent reads no exit status: what counts is which results arrived."""
    try:
        for i in range(w, len(tasks), workers):
            data = pickle.dumps(fn(tasks[i]), pickle.HIGHEST_PROTOCOL)
            view = memoryview(_HEADER.pack(i, len(data)) + data)
            while view:
                view = view[os.write(wfd, view):]
    except BaseException:   # the parent runs this child's missing tasks itself
        pass
    finally:
        os._exit(0)


def _unframe(buf, done):
    """Move every complete frame at the start of buf into done."""
    pos = 0
    while len(buf) - pos >= _HEADER.size:  # pragma: no mutate (> is equivalent: a bare header is no frame)
        i, size = _HEADER.unpack_from(buf, pos)
        start = pos + _HEADER.size
        if len(buf) - start < size:
            break
        try:
            done[i] = pickle.loads(buf[start:start + size])
        except Exception:   # noqa: BLE001 - the task is run again in the parent
            pass
        pos = start + size
    del buf[:pos]
