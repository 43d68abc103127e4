"""fallback_grep.parallel: several processes give exactly search_paths' results, in its order."""
import os
import signal
from collections.abc import Iterator

import pytest
from fd_testing import fds_on, pipes

from fallback_grep import parallel
from fallback_grep.filesearch import Matcher, search_paths, walk


def _tree(root):
    """Many small directories (several batches), a binary file, a NUL past 64 KiB, a file over
    the read buffer, empty directories, a symlink, and files that match in different places."""
    for d in range(12):
        sub = root / f"d{d:02}" / ("deep" if d % 3 else "")
        sub.mkdir(parents=True, exist_ok=True)
        for f in range(7):
            text = f"line {d} {f}\n" + ("PM_RESUME here\n" if (d + f) % 4 == 0 else "") + \
                ("foo\nbar pm_resume\n" if f == 3 else "")
            (sub / f"f{f}.txt").write_text(text)
    (root / "empty").mkdir()
    (root / "d01" / "bin.dat").write_bytes(b"PM_RESUME\x00\n")
    (root / "d02" / "late.txt").write_bytes(b"PM_RESUME\n" + b"x" * 70_000 + b"\n\x00\nPM_RESUME\n")
    (root / "d03" / "huge.txt").write_bytes(b"y\n" * 600_000 + b"PM_RESUME at the end\n")
    os.symlink(root / "d00" / "f0.txt", root / "d04" / "link.txt")


def _rows(results):
    return [(r.path, r.matched, r.count, [(ln.number, ln.text, ln.is_match) for ln in r.lines], r.binary,
             r.stopped_at, r.error, r.truncated) for r in results]


@pytest.mark.parametrize("pattern", ["PM_RESUME", "(?i)pm_resume", "foo|bar", "x", "nothing at all"])
@pytest.mark.parametrize("mode", ["content", "files_with_matches", "count"])
def test_parallel_results_equal_the_serial_ones_in_order(tmp_path, monkeypatch, pattern, mode):
    _tree(tmp_path)
    monkeypatch.setattr(parallel, "BATCH_FILES", 5)  # many batches: order across them matters
    m = Matcher(pattern)
    want = _rows(search_paths(m, walk(str(tmp_path)), mode, 1, 1, max_count=3))
    assert len(want) == 12 * 7 + 3
    got = _rows(parallel.search_paths(m, walk(str(tmp_path)), mode, 1, 1, max_count=3, workers=3))
    assert got == want


def test_the_keep_filter_runs_in_the_parent_and_one_worker_or_a_file_root_stays_serial(tmp_path):
    _tree(tmp_path)
    seen = []

    def keep(path, is_dir):
        seen.append(path)  # a forked worker's append would not reach this list
        return not path.endswith("f3.txt")

    m = Matcher("PM_RESUME")
    got = [r.path for r in parallel.search_paths(m, walk(str(tmp_path), keep), "count", workers=2)]
    assert got == list(walk(str(tmp_path), keep)) and not any(p.endswith("f3.txt") for p in got)
    assert str(tmp_path / "d00" / "f3.txt") in seen
    one = tmp_path / "d00" / "f0.txt"
    assert [r.count for r in parallel.search_paths(m, walk(one), "count", workers=4)] == [1]
    assert parallel.default_workers() >= 1


def test_a_directory_gone_before_its_worker_reads_it_reports_each_file(tmp_path, monkeypatch):
    """The parent lists a directory, then it disappears: its files are reported unreadable
    (path and reason), the other directories are searched as usual."""
    _tree(tmp_path)
    listed = parallel._batches

    def batches_then_remove(w):
        for batch in listed(w):
            for directory, names in batch:
                if directory.endswith("d06"):
                    for name in names:
                        os.unlink(os.path.join(directory, name))
                    os.rmdir(directory)
            yield batch

    monkeypatch.setattr(parallel, "_batches", batches_then_remove)
    results = list(parallel.search_paths(Matcher("PM_RESUME"), walk(str(tmp_path)), "count", workers=2))
    gone = [r for r in results if r.error]
    assert [os.path.basename(r.path) for r in gone] == [f"f{f}.txt" for f in range(7)]
    assert gone[0].error == f"cannot read {tmp_path / 'd06' / 'f0.txt'}: No such file or directory"
    assert sum(r.count for r in results) > 0


def test_one_worker_stays_in_this_process_and_more_hand_out_batches(tmp_path, monkeypatch):
    """workers=1 (given, or as the default on one core) is filesearch.search_paths: no batches,
    no fork; more workers hand the walk out in batches; a root given with a trailing slash gives
    the same paths as without."""
    _tree(tmp_path)
    calls = []
    listed = parallel._batches
    monkeypatch.setattr(parallel, "_batches", lambda w: calls.append(w) or listed(w))
    m = Matcher("PM_RESUME")
    want = _rows(search_paths(m, walk(str(tmp_path)), "count"))
    monkeypatch.setattr(parallel, "default_workers", lambda: 1)
    assert _rows(parallel.search_paths(m, walk(str(tmp_path)), "count", workers=1)) == want
    assert _rows(parallel.search_paths(m, walk(str(tmp_path)), "count")) == want
    assert calls == []
    assert _rows(parallel.search_paths(m, walk(str(tmp_path) + "/"), "count", workers=2)) == want
    assert len(calls) == 1


def test_a_workers_run_closes_each_directory_descriptor(tmp_path):
    """What a worker iterates (in this process here, to count its descriptors)."""
    _tree(tmp_path)
    batch = [(str(tmp_path / "d00"), ["f0.txt", "f1.txt"]), (str(tmp_path / "d03") + "/", ["f2.txt"]),
             (str(tmp_path / "gone"), ["x.txt"])]
    got = [(dfd is None, name, path) for dfd, name, path in parallel._Run(batch).entries()]
    assert fds_on(tmp_path) == []
    assert got == [(False, "f0.txt", str(tmp_path / "d00" / "f0.txt")), (False, "f1.txt", str(tmp_path / "d00" / "f1.txt")),
                   (False, "f2.txt", str(tmp_path / "d03" / "f2.txt")),
                   (True, str(tmp_path / "gone" / "x.txt"), str(tmp_path / "gone" / "x.txt"))]


# ---- fork_map ------------------------------------------------------------------------------------

def _children() -> set[int]:
    """This process's children, running or unreaped (each thread's: a child is its forking thread's)."""
    found: set[int] = set()
    for name in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{name}/children") as f:
                found |= {int(pid) for pid in f.read().split()}
        except FileNotFoundError:
            pass  # a thread that ended meanwhile
    return found


@pytest.fixture(autouse=True)
def _children_before() -> Iterator[None]:
    """What another test in this worker process left (its own defect, found elsewhere) is not this one's."""
    global _BEFORE
    _BEFORE = _children()
    yield


_BEFORE: set[int] = set()


def _no_children_left():
    """No child of this process that the test made is left, running or unreaped."""
    return not (_children() - _BEFORE)


def test_fork_map_gives_every_result_in_task_order_from_forked_children():
    """Task i runs in child i % workers; a closure over something that cannot be pickled (a
    lock, an open descriptor) works, since the children inherit it; results come back in order."""
    import threading
    lock, parent = threading.Lock(), os.getpid()
    r, w = os.pipe()
    before = pipes()
    try:
        got = list(parallel.fork_map(lambda t: (t * t, os.getpid(), lock.locked(), os.fstat(r).st_mode > 0),
                                     (t for t in range(11)), 3))   # any iterable of tasks
    finally:
        os.close(r)
        os.close(w)
    assert pipes() - before == set(), "a pipe to a child was left open"
    assert [g[0] for g in got] == [t * t for t in range(11)]
    pids = [g[1] for g in got]
    assert parent not in pids and len(set(pids)) == 3
    assert all(pids[i] == pids[i % 3] for i in range(11))
    assert all(g[2] is False and g[3] for g in got)
    assert _no_children_left()


def test_fork_map_with_one_worker_or_one_task_runs_here():
    parent = os.getpid()
    assert list(parallel.fork_map(lambda t: (t, os.getpid()), [5], 4)) == [(5, parent)]
    assert list(parallel.fork_map(lambda t: (t, os.getpid()), [1, 2], 1)) == [(1, parent), (2, parent)]
    assert list(parallel.fork_map(lambda t: t, [], 4)) == []


def test_tasks_of_a_child_that_dies_are_run_here_and_none_is_lost():
    """A child killed in its third task (OOM killer, a crash) sent its first two results: those
    are used, and its remaining tasks run in this process; the order is the task order."""
    parent = os.getpid()

    def square(t):
        if t == 6 and os.getpid() != parent:
            os.kill(os.getpid(), 9)
        return t * t, os.getpid() == parent
    got = list(parallel.fork_map(square, range(10), 2))
    assert [g[0] for g in got] == [t * t for t in range(10)]
    assert [t for t, (_, here) in enumerate(got) if here] == [6, 8]   # child 0's tasks from 6 on
    assert _no_children_left()


def test_an_exception_in_a_child_reaches_the_caller_from_the_rerun_here():
    """A task that raises in its child is run again here, where its exception reaches the caller;
    the tasks before it were yielded, and no child is left behind."""
    def fail_on_3(t):
        if t == 3:
            raise ValueError("task 3 cannot be done")
        return t
    gen = parallel.fork_map(fail_on_3, range(6), 2)
    assert [next(gen) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="task 3 cannot be done"):
        next(gen)
    assert _no_children_left()


def test_a_result_that_cannot_be_pickled_is_computed_here():
    import threading
    parent = os.getpid()
    got = list(parallel.fork_map(lambda t: threading.Lock() if t == 2 else (t, os.getpid() == parent), range(4), 2))
    assert got[0] == (0, False) and got[1] == (1, False) and got[3] == (3, False)
    assert type(got[2]).__name__ == "lock"
    assert _no_children_left()


def test_closing_fork_map_early_kills_and_reaps_its_children(tmp_path):
    """The caller stops after the first result (a cancelled tool call): the children still
    working are killed, none is left as a zombie, and none writes after that (judged by the files
    they would have created)."""
    import time

    def slow(t):
        if t > 1:
            time.sleep(0.2)
            (tmp_path / f"done{t}").write_text("x")
        return t
    gen = parallel.fork_map(slow, range(40), 2)
    assert next(gen) == 0
    gen.close()
    assert _no_children_left()
    written = sorted(tmp_path.iterdir())
    time.sleep(0.5)   # what a surviving child would write meanwhile
    assert sorted(tmp_path.iterdir()) == written and len(written) < 38


class _CtrlCAfter:
    """parallel's os, with a Ctrl-C (SIGINT to this process) right after each call of `name`
    (`times` of them), and the pids it sent a signal recorded."""
    def __init__(self, name, times):
        self.name, self.times, self.killed = name, times, []

    def __getattr__(self, name):
        real = getattr(os, name)
        if name not in (self.name, "kill"):
            return real

        def call(*args):
            if name == "kill":
                self.killed.append(args[0])
            result = real(*args)
            if name == self.name and self.times:
                self.times -= 1
                os.kill(os.getpid(), signal.SIGINT)
            return result
        return call


def test_a_ctrl_c_while_a_finished_child_is_ended_still_reaps_it(monkeypatch):
    """The Ctrl-C comes between the kill and the reap of the first child to finish: the search
    stops with the KeyboardInterrupt, and that child is reaped too (before, it was left a zombie
    that outlived the command, as the CLI's Ctrl-C test once saw on CI)."""
    monkeypatch.setattr(parallel, "os", _CtrlCAfter("kill", 1))
    with pytest.raises(KeyboardInterrupt):
        list(parallel.fork_map(lambda t: t, range(40), 2, share=2))
    assert _no_children_left()


def test_a_ctrl_c_at_each_kill_of_the_cleanup_leaves_no_child(monkeypatch):
    import time
    gen = parallel.fork_map(lambda t: time.sleep(t and 30), range(40), 3)
    assert next(gen) is None
    monkeypatch.setattr(parallel, "os", _CtrlCAfter("kill", 99))
    with pytest.raises(KeyboardInterrupt):
        gen.close()
    assert _no_children_left()


def test_a_ctrl_c_just_after_a_reap_sends_that_pid_nothing_more(monkeypatch):
    """Once reaped, a child's pid may be another process's: ending the children again after the
    Ctrl-C must not signal it."""
    import time
    gen = parallel.fork_map(lambda t: time.sleep(t and 30), range(40), 3)
    assert next(gen) is None
    fake = _CtrlCAfter("waitpid", 99)
    monkeypatch.setattr(parallel, "os", fake)
    with pytest.raises(KeyboardInterrupt):
        gen.close()
    assert _no_children_left()
    assert len(fake.killed) == len(set(fake.killed)) == 3


def test_when_no_process_can_be_forked_everything_runs_here(monkeypatch):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(os, "fork", no_fork)
    parent = os.getpid()
    before = pipes()
    assert list(parallel.fork_map(lambda t: (t, os.getpid() == parent), range(5), 3)) == [(t, True) for t in range(5)]
    assert pipes() - before == set()


def test_large_results_arrive_whole_from_the_children():
    """Results far larger than one read of the pipe (frames split across reads, several frames in
    one read) all come from the children, none recomputed here."""
    parent = os.getpid()
    sizes = [300_000, 5, 70_000, 1, 200_000, 3, 65_536, 0, 131_072]
    got = list(parallel.fork_map(lambda n: (bytes([n % 251]) * n, os.getpid() == parent), sizes, 2))
    assert [len(data) for data, _ in got] == sizes
    assert all(data == bytes([n % 251]) * n for (data, _), n in zip(got, sizes))
    assert not any(here for _, here in got), "a result was lost on the way and recomputed here"


# ---- fork_map with share=N: tasks taken lazily, a child per run of N -----------------------------

def test_a_share_takes_tasks_lazily_and_forks_a_child_per_run_of_n():
    """share=2: tasks come from a generator, no more of them taken ahead of the results than the
    bound says; each run of two consecutive tasks is done by its own child; results in order."""
    taken = []

    def tasks():
        for t in range(23):
            taken.append(t)
            yield t
    parent = os.getpid()
    got, ahead = [], []
    for k, res in enumerate(parallel.fork_map(lambda t: (t * t, os.getpid()), tasks(), 2, share=2)):
        ahead.append(len(taken) - k)
        got.append(res)
    assert [g[0] for g in got] == [t * t for t in range(23)]
    pids = [g[1] for g in got]
    assert parent not in pids
    assert all(pids[i] == pids[i - i % 2] for i in range(23)) and len(set(pids)) == 12
    assert max(ahead) <= parallel.AHEAD * 2 * 2 + 1, "more tasks were taken than the bound lets"
    assert _no_children_left()


def test_a_share_reruns_here_the_run_of_a_child_that_died_and_goes_on_forking():
    """The child of run [4, 5] is killed in task 5: task 4's result is used, 5 is run here when its
    turn comes, and the runs after it still get their own children."""
    parent = os.getpid()

    def square(t):
        if t == 5 and os.getpid() != parent:
            os.kill(os.getpid(), 9)
        return t * t, os.getpid() == parent
    got = list(parallel.fork_map(square, iter(range(12)), 2, share=2))
    assert [g[0] for g in got] == [t * t for t in range(12)]
    assert [t for t, (_, here) in enumerate(got) if here] == [5]
    assert _no_children_left()


def test_a_share_with_one_worker_runs_here_lazily():
    parent = os.getpid()
    gen = parallel.fork_map(lambda t: (t, os.getpid() == parent), iter(range(3)), 1, share=4)
    assert next(gen) == (0, True)
    gen.close()   # a generator whether it forks or not
    gen = parallel.fork_map(lambda t: (t, os.getpid() == parent), iter(range(3)), 1, share=4)
    assert list(gen) == [(0, True), (1, True), (2, True)]


def test_closing_a_share_early_kills_and_reaps_its_children(tmp_path):
    import time

    def slow(t):
        if t > 1:
            time.sleep(0.2)
            (tmp_path / f"done{t}").write_text("x")
        return t
    gen = parallel.fork_map(slow, iter(range(400)), 2, share=3)
    assert next(gen) == 0
    gen.close()
    assert _no_children_left()
    written = sorted(tmp_path.iterdir())
    time.sleep(0.5)   # what a surviving child would write meanwhile
    assert sorted(tmp_path.iterdir()) == written and len(written) < 12


def test_search_paths_yields_results_before_the_walk_is_done(tmp_path, monkeypatch):
    """The parent does not walk the whole tree before the first result: memory does not grow
    with the tree (the CLI prints each file's result as it comes)."""
    _tree(tmp_path)
    monkeypatch.setattr(parallel, "BATCH_FILES", 2)
    monkeypatch.setattr(parallel, "SHARE_BATCHES", 1)
    listed = parallel._batches
    handed = []

    def counted(w):
        for batch in listed(w):
            handed.append(batch)
            yield batch
    monkeypatch.setattr(parallel, "_batches", counted)
    results = parallel.search_paths(Matcher("PM_RESUME"), walk(str(tmp_path)), "count", workers=2)
    next(results)
    assert len(handed) <= parallel.AHEAD * 2 + 1 < 12
    rest = list(results)
    assert len(rest) + 1 == 12 * 7 + 3 and len(handed) == 12   # a batch per directory here


@pytest.mark.parametrize("pattern", ["PM_RESUME", "(?i)pm_resume", "foo|bar"])
def test_every_file_false_leaves_out_only_files_that_say_nothing(tmp_path, monkeypatch, pattern):
    """What the CLI asks for: every match, binary, unreadable or cut-short file, in walk order,
    serial or forked, without an object per file the prefilter ruled out."""
    _tree(tmp_path)
    monkeypatch.setattr(parallel, "BATCH_FILES", 5)
    m = Matcher(pattern)

    def says(rows):
        return [r for r in rows if r[1] or r[4] or r[5] is not None or r[6]]
    every = _rows(search_paths(m, walk(str(tmp_path)), "content", 1, 1))
    for workers in (1, 3):
        quiet = _rows(parallel.search_paths(m, walk(str(tmp_path)), "content", 1, 1, workers=workers,
                                            every_file=False))
        assert says(quiet) == says(every) != []
        assert len(quiet) < len(every) / 2
