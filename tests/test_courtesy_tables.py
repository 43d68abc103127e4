"""Every entry of the courtesy list's name tables, pinned one by one (mutation testing, issue 31).

tests/test_courtesy.py judges whole lines by their reasons; here each table entry is spelled out, so
a name dropped from a table (a reader, a wiper, a harmless device, a git global option) is a test
that fails, not a silent change of what a human is shown. The names are written out on purpose:
iterating over the module's own tables would pin nothing.
"""

from __future__ import annotations

import pytest

from abhed.gate.courtesy import commands_run, destructive, emptied, is_device, written
from abhed.gate.shellparse import Command, Redirect

READERS = ["cat", "head", "tail", "less", "more", "ls", "wc", "grep", "egrep", "fgrep", "rg", "stat", "file", "diff", "cmp",
           "md5sum", "sha1sum", "sha256sum", "sha512sum", "od", "xxd", "hexdump", "readlink", "realpath", "test",
           "[", "[[", "echo", "printf", "du", "tree", "which", "type", "basename", "dirname", "lsblk", "blkid"]
WIPERS = ["dd", "dcfldd", "dc3dd", "ddrescue", "shred", "wipe", "srm", "wipefs", "blkdiscard", "mkswap", "fdisk",
          "sfdisk", "cfdisk", "gdisk", "sgdisk", "cgdisk", "parted", "mke2fs", "mkdosfs", "mkntfs", "mkexfatfs",
          "mkfatfs", "mkreiserfs", "mkisofs", "hdparm", "nvme", "sg_format", "cryptsetup", "lvremove", "vgremove",
          "pvremove", "mdadm", "zpool", "truncate", "fallocate", "badblocks", "debugfs", "reboot", "shutdown",
          "poweroff", "halt", "mkfs.ext4", "fsck.vfat"]
SILENT = [":", "true", "false", "test", "[", "[[", "cd", "export", "unset", "shift", "wait", "umask", "readonly",
          "local", "declare", "typeset", "sleep"]
HARMLESS_DEVICES = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/stdin", "/dev/stdout",
                    "/dev/stderr", "/dev/tty", "/dev/fd/3", "/dev/pts/0", "/dev/shm/x"]
GIT_VALUE_OPTIONS = ["-C", "-c", "--git-dir", "--work-tree", "--namespace", "--config-env", "--super-prefix",
                     "--exec-path", "--list-cmds", "--attr-source", "--shallow-file"]
GIT_FLAGS = ["-p", "--paginate", "-P", "--no-pager", "--bare", "--no-replace-objects", "--no-lazy-fetch",
             "--no-optional-locks", "--no-advice", "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs",
             "--icase-pathspecs", "--html-path", "--man-path", "--info-path", "-v", "--version", "-h", "--help"]


@pytest.mark.parametrize("name", READERS)
def test_a_reader_may_name_a_device_or_a_protected_path(name):
    assert destructive(Command([name, "/dev/sda"])) is None
    assert destructive(Command([name, ".git/config"])) is None
    assert destructive(Command(["tee", "/dev/sda"])) == "tee names the block device /dev/sda"  # a writer may not


@pytest.mark.parametrize("name", WIPERS)
def test_every_wiper_is_on_the_list_whatever_its_options(name):
    assert destructive(Command([name, "x"])) == f"{name} destroys filesystems or data"


@pytest.mark.parametrize("name", SILENT)
def test_a_silent_command_with_a_truncating_redirect_empties_the_file(name):
    assert emptied([Command([name], redirects=[Redirect(">", "notes.md")])]) == \
        "`> notes.md` empties the file notes.md"
    assert emptied([Command(["date"], redirects=[Redirect(">", "notes.md")])]) is None  # a writer fills it


@pytest.mark.parametrize("operator", [">", ">|", "&>", ">&"])
def test_every_truncating_operator_empties(operator):
    assert emptied([Command([":"], redirects=[Redirect(operator, "f")])]) == "`> f` empties the file f"
    assert emptied([Command([":"], redirects=[Redirect(">>", "f")])]) is None


@pytest.mark.parametrize("device", HARMLESS_DEVICES)
def test_devices_that_are_not_disks_may_be_written(device):
    assert not is_device(device)
    assert is_device(device.replace("/dev/", "/proc/self/root/dev/")) is False
    assert written(Command(["echo"], redirects=[Redirect(">", device)])) is None
    assert is_device("/dev/sda") and is_device("/dev/fdx") and is_device("/dev/shmx")


@pytest.mark.parametrize("operator", ["<", "<<", "<<<", "<&", "<<-"])
def test_input_redirections_write_nothing(operator):
    assert written(Command(["cat"], redirects=[Redirect(operator, "/dev/sda")])) is None
    assert written(Command(["cat"], redirects=[Redirect(operator, ".git/config")])) is None
    assert written(Command(["cat"], redirects=[Redirect(">", "/dev/sda")])) == "writes to the block device /dev/sda"


@pytest.mark.parametrize("option", GIT_VALUE_OPTIONS)
def test_a_git_global_options_value_is_not_a_subcommand(option):
    assert destructive(Command(["git", option, "reset", "status"])) is None
    assert destructive(Command(["git", option, "x", "reset", "--hard"])) == "git reset --hard discards uncommitted work"


@pytest.mark.parametrize("flag", GIT_FLAGS)
def test_a_git_global_flag_takes_no_value(flag):
    """Were it taken for an option with a value, `status` would be that value and `reset` judged."""
    assert destructive(Command(["git", flag, "status", "reset"])) is None
    assert destructive(Command(["git", flag, "reset", "--hard"])) == "git reset --hard discards uncommitted work"


@pytest.mark.parametrize("line", [["bash", "-o", "errexit", "/dev/stdin"], ["bash", "+o", "errexit", "/dev/stdin"],
                                  ["bash", "-O", "extglob", "/dev/stdin"], ["bash", "+O", "extglob", "/dev/stdin"],
                                  ["bash", "--rcfile", "rc", "/dev/stdin"], ["bash", "--init-file", "rc", "/dev/stdin"],
                                  ["python3", "-W", "ignore", "/dev/stdin"], ["python3", "-X", "dev", "/dev/stdin"],
                                  ["ruby", "-r", "json", "/dev/stdin"], ["ruby", "-I", "lib", "/dev/stdin"]])
def test_an_option_value_is_not_taken_for_the_script(line):
    reason = destructive(Command(line))
    assert reason == f"{line[0]} runs a script read from /dev/stdin (its input), which nobody has read", line
    assert destructive(Command(line[:2] + ["/dev/stdin"])) is None  # the value itself is not a script on stdin


@pytest.mark.parametrize("option", ["-ex", "-eval-command", "-x", "--command=f", "-iex", "-init-eval-command",
                                    "-ix", "-init-command"])
def test_every_gdb_option_that_runs_commands(option):
    assert destructive(Command(["gdb", option, "c"])) == "gdb -ex/-x runs debugger commands, which can run a shell"


@pytest.mark.parametrize("keyword", ["ProxyCommand", "LocalCommand", "KnownHostsCommand", "PKCS11Provider",
                                     "SecurityKeyProvider", "Include", "Match"])
def test_every_ssh_keyword_that_runs_or_reads_more(keyword):
    assert destructive(Command(["ssh", "-o", f"{keyword}=x", "h"])) == f"ssh -o {keyword.lower()} runs a local command"


# -- the parts a table does not show ----------------------------------------------------------------


def test_the_extra_wrappers_budget_is_shared_by_the_whole_command():
    """Two extra wrappers under one find, 9 starts each: 18 calls of wrappers.candidates, over EXTRA_CALLS."""
    argv = ["find", ".", "-exec", "perf"] + ["w"] * 9 + [";", "-exec", "gdb"] + ["v"] * 9 + [";"]
    assert commands_run(argv)[1] == "gdb runs a command this check cannot find among its many words"
    assert commands_run(["find", ".", "-exec", "perf"] + ["w"] * 9 + [";"])[1] is None  # perf's 9 alone are within it


@pytest.mark.parametrize("argv, shell", [(["perf", "stat", "bash", "x.sh"], "bash"), (["ssh-agent", "bash"], "bash"),
                                         (["gdb", "--args", "sh", "-e"], "sh")])
def test_an_extra_wrapper_running_a_shell_without_a_string_is_not_on_the_list(argv, shell):
    assert destructive(Command(argv)) is None
    assert destructive(Command(argv + ["-c", "x"])) == f"{argv[0]} runs a {shell} -c script, which this check does not read"


def test_ssh_options_end_at_the_first_operand_and_values_are_consumed():
    assert destructive(Command(["ssh", "aFb", "uptime"])) is None  # a host name, not -F
    assert destructive(Command(["ssh", None, "uptime"])) is None
    assert destructive(Command(["ssh", "-l", "-Fx", "host"])) is None  # -l's value
    assert destructive(Command(["ssh", "-p", "22", "-F", "cfg", "host"])) == \
        "ssh -F names a program, library or configuration that runs local commands"


@pytest.mark.parametrize("argv", [["python3", "+x", "/dev/stdin"], ["python3", "-c", "pass", "/dev/stdin"],
                                  ["bash", "-c", "echo", "/dev/stdin"], ["perl", "-e", "1", "/dev/stdin"],
                                  ["sh", "script.sh", "/dev/stdin"]])
def test_a_script_named_before_dev_stdin_or_a_code_string_is_not_read_from_the_input(argv):
    """`python3 +x /dev/stdin` runs the file +x; after -c or -e, /dev/stdin is only an argument."""
    assert destructive(Command(argv)) is None


def test_ssh_option_values_attached_or_next_are_no_options():
    assert destructive(Command(["ssh", "-p22", "-F", "cfg", "host"])) == \
        "ssh -F names a program, library or configuration that runs local commands"
    assert destructive(Command(["ssh", "-oForwardX11=yes", "host"])) is None  # -o's value, not -F
    assert destructive(Command(["ssh", "-l"])) is None  # a value letter at the end: nothing more to read


@pytest.mark.parametrize("line", [["git", "reflog"], ["git", "reflog", "show", "HEAD"], ["git", "stash", "list"],
                                  ["git", "bisect", "start"], ["git", "submodule", "status"],
                                  ["git", "worktree", "remove", "x"]])
def test_gits_subcommands_that_only_read_or_keep_work_are_not_on_the_list(line):
    assert destructive(Command(line)) is None


@pytest.mark.parametrize("argv", [["python3", "-c", "/dev/stdin"], ["bash", "-c", "/dev/stdin"],
                                  ["perl", "-e", "/dev/stdin"], ["sh", "-ec", "/dev/stdin"]])
def test_a_code_string_that_names_dev_stdin_is_code_not_a_script_read_from_the_input(argv):
    assert destructive(Command(argv)) is None
